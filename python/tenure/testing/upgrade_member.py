"""One instance of the rolling upgrade's fleet: an elector, a claimer and a task worker in
one process, with a fenced writer for the term and one for the claims, run by the
package of either release.

Run by path with ``python -P`` (so that the ``tenure`` it imports is the one installed in
that interpreter's environment, not this checkout's), it uses only what both the
v0.1.0 package and today's have: ``Elector``, ``Claimer``, ``TaskWorker`` with the same
options, ``Complete`` and ``Driver.heartbeat_fence``/``claim_fence`` (v0.1.0 had the
claimer and the worker in ``tenure.claimer`` and ``tenure.tasks``).

It prints one JSON line per event to stdout, each with ``wall`` (``time.time()``, one
clock for every process of the host): ``started`` (package version, instance ids),
``elected``/``demoted`` (term), ``term_write`` after each acknowledged fenced write of
the primary, ``claimed``/``unclaimed`` (key: epoch), ``claim_write`` after each
acknowledged fenced write under a claim, ``leased`` when a processor starts on
(task, epoch), ``outcome`` when the database acknowledged its completion, ``refused``
when a fence refused, ``warning`` for each warning the package logged (a failed call),
``crash`` for an exception that escaped a thread, ``stopped`` last (on SIGTERM).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import json
import logging
import signal
import sys
import threading
import time
from types import FrameType
from typing import Any

import psycopg

UTYPE = "rolling"
KEYSPACE = "rolling"
KIND = "rolling"
# Small timings, so that a lock the deploy holds longer than a safe window shows up.
INTERVAL, TIMEOUT = 0.25, 1.0  # the elector: steps down 0.75 s after its last renewal was sent
CYCLE, EXPIRY = 0.3, 1.2  # the claimer
LEASE, POLL = 2.0, 0.2  # the worker
WRITE_EVERY = 0.1

_print_lock = threading.Lock()


def emit(event: str, **fields: object) -> None:
    line = json.dumps({"event": event, "wall": time.time(), **fields}, default=str)
    with _print_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


class EventHandler(logging.Handler):
    """The package's warnings (a failed cycle, a failed call) as events."""

    def emit(self, record: logging.LogRecord) -> None:
        emit("warning", logger=record.name, message=record.getMessage()[:300])


def runtimes() -> tuple[Any, Any, Any, Any]:
    """Elector, Claimer, TaskWorker and Complete of the installed package, whichever release."""
    import tenure

    if hasattr(tenure, "TaskWorker"):
        return tenure.Elector, tenure.Claimer, tenure.TaskWorker, tenure.Complete
    claimer = importlib.import_module("tenure.claimer")  # v0.1.0
    tasks = importlib.import_module("tenure.tasks")
    return tenure.Elector, claimer.Claimer, tasks.TaskWorker, tasks.Complete


def acknowledging(worker_class: Any) -> Any:
    """The worker with a hook where the database has acknowledged an outcome: v0.1.0's
    ``_apply`` returns True then; today's worker calls ``_count`` for each committed outcome
    (alone or in a batched round trip)."""

    class AcknowledgingWorker(worker_class):  # type: ignore[misc]
        def _apply(self, task: Any, outcome: Any, **options: Any) -> bool:
            recorded = bool(super()._apply(task, outcome, **options))
            if recorded and not hasattr(worker_class, "_count"):
                emit("outcome", task=str(task.id), epoch=task.epoch, state=getattr(outcome, "state", None))
            return recorded

        def _count(self, task: Any, outcome: Any) -> None:
            super()._count(task, outcome)
            emit("outcome", task=str(task.id), epoch=task.epoch, state=getattr(outcome, "state", None))

    return AcknowledgingWorker


def fenced_writes(conninfo: str, stopping: threading.Event, elector: Any, claimer: Any) -> None:
    """While primary, a row per WRITE_EVERY fenced by the term; for each held key, one fenced by its epoch."""
    from tenure import Driver

    connection: psycopg.Connection[Any] | None = None
    seq = 0
    while not stopping.wait(WRITE_EVERY):
        try:
            if connection is None or connection.closed:
                connection = psycopg.connect(conninfo, connect_timeout=2, options="-c statement_timeout=2000")
            term = elector.term
            if term is not None:
                seq += 1
                with connection.transaction():
                    Driver(connection).heartbeat_fence(elector.instance_id, UTYPE, term)
                    connection.execute(
                        "INSERT INTO rolling.term_writes (term, instance_id, seq) VALUES (%s, %s, %s)",
                        (term, elector.instance_id, seq),
                    )
                emit("term_write", term=term, seq=seq)
            for key, epoch in sorted(claimer.held().items()):
                seq += 1
                with connection.transaction():
                    Driver(connection).claim_fence(KEYSPACE, claimer.instance_id, key, epoch)
                    connection.execute(
                        "INSERT INTO rolling.claim_writes (key, epoch, instance_id, seq) "
                        "VALUES (%s, %s, %s, %s)",
                        (key, epoch, claimer.instance_id, seq),
                    )
                emit("claim_write", key=key, epoch=epoch, seq=seq)
        except psycopg.Error as error:
            emit(
                "refused" if (error.sqlstate or "").startswith("TN") else "write_failed",
                error=str(error)[:200],
            )
            if connection is not None and connection.broken:
                connection = None
        except Exception as error:  # the package's own errors (NotPrimary, ClaimLost) are refusals
            emit("refused", error=f"{error.__class__.__name__}: {error}"[:200])
    if connection is not None:
        connection.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", required=True, help="conninfo of a tenure_worker login role")
    parser.add_argument("--name", required=True)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    logging.getLogger().addHandler(EventHandler(logging.WARNING))
    threading.excepthook = lambda hook: emit(
        "crash", thread=hook.thread.name if hook.thread else None, error=repr(hook.exc_value)
    )
    stopping = threading.Event()

    def on_term(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, on_term)
    elector_class, claimer_class, worker_class, complete = runtimes()

    def work(task: Any) -> Any:
        emit("leased", task=str(task.id), epoch=task.epoch, owner=str(task.owner))
        time.sleep(0.05)

        def write(connection: psycopg.Connection[Any]) -> None:
            connection.execute(
                "INSERT INTO rolling.task_effects (task_id, epoch, owner) VALUES (%s, %s, %s)",
                (task.id, task.epoch, task.owner),
            )

        return complete(writes=write)

    elector = elector_class(
        args.db,
        UTYPE,
        interval=INTERVAL,
        timeout=TIMEOUT,
        name=args.name,
        on_elected=lambda term: emit("elected", term=term),
        on_demoted=lambda reason: emit("demoted", reason=reason),
    )
    claimer = claimer_class(
        args.db,
        KEYSPACE,
        cycle=CYCLE,
        expiry=EXPIRY,
        name=args.name,
        on_gained=lambda keys: emit("claimed", keys=keys),
        on_lost=lambda keys: emit("unclaimed", keys=keys),
    )
    worker = acknowledging(worker_class)(
        args.db,
        {KIND: work},
        concurrency=4,
        lease=LEASE,
        poll_interval=POLL,
        name=args.name,
        shutdown_grace=2.0,
    )
    with elector, claimer, worker:
        emit(
            "started",
            version=importlib.metadata.version("tenure"),
            name=args.name,
            elector=str(elector.instance_id),
            claimer=str(claimer.instance_id),
            worker=str(worker.instance_id),
        )
        writer = threading.Thread(
            target=fenced_writes, args=(args.db, stopping, elector, claimer), name="fenced-writes"
        )
        writer.start()
        # Polled: a SIGTERM the kernel hands to another thread runs its handler only when the
        # main thread next runs Python code (one wait without a timeout missed it once).
        while not stopping.wait(0.1):
            pass
        writer.join()
    emit("stopped")


if __name__ == "__main__":
    main()
