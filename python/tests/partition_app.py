"""One client of the partition test (test_partition), run in a network namespace of its own.

Run as ``python partition_app.py ROLE NAME CONNINFO [LEDGER_URL]``. ROLE is

- ``elector``: an elector of the failover fleet's service type doing fenced writes
  while it believes it is primary (:func:`tenure.testing.failover.fenced_writes`);
- ``claimer``: a claimer of the fleet's keyspace doing claim-fenced writes on its keys;
- ``worker``: a task worker of the fleet's kind, each task held for a while (so a cut
  finds one in hand), completed with its effect row in the completion's transaction;
- ``pool``: a submission pool of keyspace ``pt`` sending batches to the ledger at LEDGER_URL;
- ``replica``: a replica manager that, while active, writes rows through ``manager.write()``.

Electors, claimers and workers log the failover fleet's records (:class:`ClientLog`
JSON lines: terms, demotions, claim spans, leases, acknowledged writes and outcomes).
Every role also prints event lines (``emit``, monotonic ``mono``): ``contact`` after
every cycle that reached the database and came back, ``window`` (the end of the safe
window of what it holds, after each renewal; for a worker, of each task), ``lost`` when its grant, keys or
a task were lost (the demotion, loss or passive callback, or ``task.lost``), ``gained``
when it gained one, ``lease`` for each task handed to it and ``done`` when a hold ended
without a loss, ``replica_write`` for each
acknowledged replica write. It runs until SIGTERM.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import uuid
from collections.abc import Callable, Generator
from typing import Any

import psycopg

from tenure import (
    Claimer,
    Complete,
    Elector,
    NotPrimary,
    Outcome,
    ReplicaManager,
    SubmissionPool,
    Task,
    TenureError,
)
from tenure.runtime.shutdown import wait_for_shutdown
from tenure.testing import failover, procs
from tenure.testing.ledger import LedgerClient

POOL_KEYSPACE, POOL_CYCLE, POOL_EXPIRY = "pt", 0.5, 2.0
REPLICA_INTERVAL, REPLICA_IDLE = 0.5, 1.5
HOLD = 2.5  # how long a worker holds each task: longer than its safe window (2 s), so a cut finds it
# Event lines and the ClientLog's records share stdout: each is written whole, under one lock.
OUTPUT = threading.Lock()


def emit(event: str, **fields: object) -> None:
    line = json.dumps({"event": event, "mono": round(time.monotonic(), 4), **fields}, default=str)
    with OUTPUT:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def probe(loop: Any) -> None:
    """Emit ``contact`` after each of ``loop``'s cycles that came back from the database."""
    cycle = loop._cycle

    def probed() -> Generator[Any, Any, None]:
        yield from cycle()
        emit("contact")

    loop._cycle = probed


def follow_windows(loop: Any) -> None:
    """Emit ``window`` (the end of the safe window of what ``loop`` holds) at each renewal."""

    def window() -> None:
        if isinstance(loop, Claimer):
            keys, until = loop.held_until()
            if keys:
                emit("window", until=until)
        else:
            granted = loop.grant_until()
            if granted is not None:
                emit("window", until=granted[1])

    loop.follow(window)


class HoldingWorker(failover.AckingWorker):
    """The fleet's worker, holding each task ``HOLD`` seconds, or until it is lost; emits
    ``window`` with the task's id at each extension, ``done`` or ``lost`` at the end of the hold."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.in_hand: dict[uuid.UUID, Task] = {}
        self.follow(self._windows)

    def _windows(self) -> None:
        for task in list(self.in_hand.values()):
            if not task.lost.is_set():
                emit("window", until=task.valid_until, task=str(task.id))

    def _work(self, task: Task) -> Outcome:
        self.log.add("leases", task.id, task.epoch, self.instance_id)
        emit("lease", task=str(task.id), epoch=task.epoch)
        emit("window", until=task.valid_until, task=str(task.id))
        self.in_hand[task.id] = task
        if task.lost.wait(HOLD):
            emit("lost", what=f"task {task.id}", task=str(task.id))
        else:
            emit("done", task=str(task.id))
        self.in_hand.pop(task.id, None)
        return Complete(
            writes=lambda db: db.execute("INSERT INTO fo_effects VALUES (%s, %s)", (task.id, task.epoch))
        )


def replica_writes(manager: ReplicaManager, stopping: threading.Event) -> None:
    while not stopping.wait(0.05):
        if not manager.is_active():
            continue
        request_id = str(uuid.uuid4())
        try:
            with manager.write() as connection:
                row = connection.execute(
                    "INSERT INTO tenure_demo.replica_writes (request_id, replica, epoch, pid) "
                    "VALUES (%s, %s, tenure.replica_guard(), pg_backend_pid()) RETURNING epoch",
                    (request_id, manager.name),
                ).fetchone()
        except (psycopg.Error, TenureError, NotPrimary):
            continue
        assert row is not None
        emit("replica_write", request_id=request_id, replica=manager.name, epoch=row[0])


def run(role: str, name: str, conninfo: str, ledger_url: str | None) -> None:
    log = failover.ClientLog(sink=sys.stdout, lock=OUTPUT)
    stopping = threading.Event()
    threads: list[threading.Thread] = []

    def beside(target: Callable[..., None], *args: Any) -> None:
        thread = threading.Thread(target=target, args=(*args, stopping), daemon=True)
        thread.start()
        threads.append(thread)

    runtime: Any
    if role == "elector":

        def elected(term: int) -> None:
            log.add("elected", name, term, time.monotonic())
            emit("gained", what=term)

        def demoted(reason: str) -> None:
            log.add("demoted", name, time.monotonic())
            emit("lost", what=reason)

        runtime = Elector(
            conninfo,
            failover.UTYPE,
            interval=failover.INTERVAL,
            timeout=failover.TIMEOUT,
            name=name,
            on_elected=elected,
            on_demoted=demoted,
        )
        probe(runtime)
        follow_windows(runtime)
        runtime.start()
        beside(failover.fenced_writes, runtime, conninfo, log)
    elif role == "claimer":
        runtime = failover.AckingClaimer(conninfo, log, name)
        record_gained, record_lost = runtime._gained, runtime._lost

        def claims_gained(keys: dict[str, int]) -> None:
            record_gained(keys)
            emit("gained", what=sorted(keys))

        def claims_lost(keys: dict[str, int]) -> None:
            record_lost(keys)
            emit("lost", what=sorted(keys))

        runtime._on_gained, runtime._on_lost = claims_gained, claims_lost
        probe(runtime)
        follow_windows(runtime)
        runtime.start()
        beside(failover.claim_writes, runtime, conninfo, log)
    elif role == "worker":
        runtime = HoldingWorker(conninfo, log, name).start()
    elif role == "pool":
        assert ledger_url is not None, "a pool needs the ledger's URL"
        ledger = LedgerClient(ledger_url, timeout=2.0)
        runtime = SubmissionPool(
            conninfo,
            POOL_KEYSPACE,
            submit=ledger.submit,
            status=ledger.status,
            submitters=2,
            cycle=POOL_CYCLE,
            expiry=POOL_EXPIRY,
            name=name,
        )
        claimer: Claimer = runtime.claimer
        tell_pool = claimer._on_lost

        def lost(keys: Any) -> None:
            emit("lost", what=sorted(keys))
            if tell_pool is not None:
                tell_pool(keys)

        claimer._on_gained = lambda keys: emit("gained", what=sorted(keys))
        claimer._on_lost = lost
        probe(claimer)
        follow_windows(claimer)
        runtime.start()
    elif role == "replica":
        runtime = ReplicaManager(
            conninfo,
            name=name,
            interval=REPLICA_INTERVAL,
            idle_timeout=REPLICA_IDLE,
            on_active=lambda epoch: emit("gained", what=epoch),
            on_passive=lambda reason: emit("lost", what=reason),
        )
        probe(runtime)
        follow_windows(runtime)
        runtime.start()
        beside(replica_writes, runtime)
    else:
        raise SystemExit(f"partition_app: no role {role!r}")
    emit(
        "started",
        role=role,
        name=getattr(runtime, "name", name),
        instance_id=str(getattr(runtime, "instance_id", "")),
    )
    wait_for_shutdown()
    stopping.set()
    for thread in threads:
        thread.join()
    runtime.stop()
    emit("stopped")


if __name__ == "__main__":
    procs.die_with_parent()
    run(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else None)
