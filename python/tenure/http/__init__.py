"""tenure's HTTP endpoints, beside the runtimes they serve.

- ``primary``: the elector's endpoint (``GET /primary`` 200 only on the primary, with
  how long the answer stays valid; ``GET /held``, the term with a long-poll;
  ``/health/live``; ``/metrics``) and
  ``PrimaryWatch``, which lets a process on the same host act only while its local
  elector is primary. An answer counts only for T - I after the request was sent.
- ``replica``: the replica's endpoint for a load balancer's health check
  (``/health/active``) and the application's routes, guarded by ``active_only``.
- ``claims``: the claimer's endpoint (``GET /held``: the keys held with their epochs,
  with a long-poll), for ``tenure claim run --http``.
- ``held``: what both answer at ``GET /held``: a version that grows at every change of
  what is held, and a long-poll (``?wait=SECONDS&version=N``) that never outlasts the
  safe window of what it last reported.
- ``endpoint``: the JSON server they are built on (standard library only: a health
  check must not depend on a web framework's event loop being healthy).

HTTP imports the runtimes, never the other way round.
"""
