"""``tenure demo``: each area shown under a fault, on a throwaway database.

This is demonstration code, not production code: it is here to show what tenure
guarantees and to draw pictures of it, and it is fenced off from the library (the
library never imports it; the CLI imports it only inside ``tenure demo``).

The parts, in order, each in its own module and each returning True when every
check of its own log against the database held:

- ``heartbeat``: three service instances elect a primary that does fenced writes;
  the primary is killed with SIGKILL and a follower takes over within T + I.
- ``supervise``: three ``tenure elect --exec`` shims run a small program that makes
  fenced writes with its term; the primary's shim is killed with SIGKILL, its warden
  stops the child at once and a standby's child takes over.
- ``tasks``: a two-step order workflow on task workers; a worker is killed with a
  task in hand and another finishes it, exactly once.
- ``claims``: three instances share twelve keys, doing fenced work on those they
  hold; one is killed and the others take its keys once its claims expire.
- ``batches``: purchase orders submitted to a simulated ledger, serially per key; a
  rejected batch halts its key until skipped; one of two instances is killed.
- ``replicas``: three replicas behind HAProxy; the active one is killed and a
  passive one takes over the clients.
- ``failover``: the database itself fails over (a 3-node Patroni cluster: a
  switchover, a SIGKILL and a SIGSTOP of the primary node) under electors and task
  workers; the clients' logs are checked against the final database.

Then, in a terminal and not in CI (:func:`interactive`), ``live`` keeps the dashboard up
over a small fleet of the demo's services until Ctrl-C (imported only then: it needs the
``dashboard`` extra).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import IO

from tenure.demo.batches import run_queue_demo
from tenure.demo.claims import run_claims_demo
from tenure.demo.failover import run_failover_demo
from tenure.demo.heartbeat import run_demo
from tenure.demo.replicas import run_replica_demo
from tenure.demo.supervise import run_supervise_demo
from tenure.demo.tasks import run_task_demo
from tenure.testing.procs import under_ci


def interactive() -> bool:
    """Someone is watching: stdin is a terminal and CI is not set."""
    return sys.stdin is not None and sys.stdin.isatty() and not under_ci()


def run_all(
    admin_conninfo: str,
    *,
    workdir: Path,
    instances: int = 3,
    interval: float = 0.5,
    timeout: float = 1.5,
    out: IO[str] | None = None,
) -> bool:
    """Every part in turn, each even when an earlier one failed; True when all held."""
    out = out or sys.stdout
    results = [
        run_demo(
            admin_conninfo, instances=instances, interval=interval, timeout=timeout, workdir=workdir, out=out
        ),
        run_supervise_demo(admin_conninfo, workdir=workdir, out=out),
        run_task_demo(admin_conninfo, workdir=workdir, out=out),
        run_claims_demo(admin_conninfo, workdir=workdir, out=out),
        run_queue_demo(admin_conninfo, workdir=workdir, out=out),
        run_replica_demo(admin_conninfo, workdir=workdir, out=out),
        run_failover_demo(workdir=workdir, out=out),
    ]
    return all(results)
