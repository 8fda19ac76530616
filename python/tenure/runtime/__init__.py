"""The runtimes: the loops that call the driver on a schedule and decide, on this
process's monotonic clock, when it may act as a holder.

One module per area, each a context manager that starts on entry and resigns or
releases on exit:

- ``heartbeat``: ``Elector``, one primary per service type.
- ``claims``: ``Claimer``, a fair share of a keyspace's keys per instance.
- ``tasks``: ``TaskWorker``, leases on due tasks, processors, outcomes.
- ``batches``: ``SubmissionPool``, a per-key ordered queue served to a ledger.
- ``replicas``: ``ReplicaManager``, one active replica behind a load balancer.

What they share (``loop``):

**The trust window.** A grant (term, claim, lease) is valid in the database until an
expiry the server computes from its own clock. The runtime cannot read that clock,
so it counts from when it *sent* the request that was granted: a renewal sent at s
and granted for T is trusted only until s + T - I on the monotonic clock (for a
claim: s + expiry - cycle). Whatever delay the answer had, the server granted no
later than s, so the runtime stops acting before the database could give the grant
to someone else, with one interval of margin for clock rate differences and the
scheduler.

**Why T > 2I.** The holder renews every I. With T > 2I a single lost or slow renewal
leaves time for the next one before the window closes, so one network hiccup does
not cost a term; with T <= 2I it would, and the constructors refuse it.

**The watchdog.** A thread per runtime (``connect.Deadlines``) bounds every call to
the database by the safe window. A loop stuck in a call (a frozen server, a lost
network, a wait for a synchronous standby) is stepped down when the window passes,
whether or not the call ever returns, and its socket is shut down so the loop
reconnects through the host list instead of waiting on a dead server. A demoted
holder never takes the same term or epoch up again: it bids anew.

**Stopping.** Leaving the ``with`` block resigns (elector), releases (claimer,
replica) or finishes the work in hand within a grace period (task worker), bounded
even while the database is away, so a successor does not wait out a timeout.
"""
