"""What tenure's own tests, demos and bench run on: real processes, real servers and
checks of what clients were told against what the database kept.

- ``database``: the application role and tables the demo services write to.
- ``child``: child processes with a log file and one JSON line per event.
- ``heartbeat``, ``tasks``, ``claims``, ``batches``, ``replicas``: a demo service per
  area, runnable as ``python -m tenure.testing.<area>``, and its process wrapper.
- ``history``: terms and fenced writes read back and checked (no two primaries, terms
  only grow, every write inside its writer's term).
- ``supervise``: ``tenure elect --exec`` and ``tenure claim run --exec`` shims as
  processes, a watch of when their commands die, the faults and the checks of the
  commands' own logs; ``fenced_child``: the command they run (a script of psycopg and the
  standard library that fences a write with the grant in its environment).
- ``ledger``: the simulated gossip ledger the batch queue submits to.
- ``procs``: the process bookkeeping of the harnesses (process trees, a reaper, a
  watchdog); ``patroni``: a real 3-node Patroni cluster on loopback; ``pgbouncer``: a
  real pgbouncer; ``haproxy``: Debian's HAProxy in front of replicas.
- ``failover``: the fleet that runs through database failovers, its client logs and
  the checks of them against the final database (the failover test and demo).
- ``plots``: the PNG timelines of the demo and the bench.
- ``sqldocs``: docs/sql-reference.md generated from the COMMENT ON texts.
- ``upgrade``: the rolling upgrade of a live fleet from one release's package and schema to
  today's and back, and its checks; ``upgrade_member``: a member of that fleet, a script
  either release's package runs.

None of this is imported by the library; it imports the library. pytest is not
needed at run time: the demo uses the harnesses too.
"""
