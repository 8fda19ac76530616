"""A runtime that is stopped while cut off from the database (test_partition_stop).

Run as ``python stop_app.py CONNINFO NAME LOG KIND FLAVOUR``: KIND ``elector`` (service
type NAME, I = 0.5 s, T = 2 s), ``maintainer`` (the same elector, ticking every 0.5 s),
``claimer`` (keyspace NAME, cycle 0.5 s, expiry 2 s), ``replica`` (sync only: interval
0.5 s, idle timeout 1.5 s), ``tasks`` (a task worker of kind NAME, lease 4.5 s, shutdown
grace 3 s, whose one processor runs until its task is lost), ``release`` (the same with a
shutdown grace of 0.5 s: its task is released on stop, into the cut) or ``queue`` (a submission pool
of keyspace NAME, cycle 0.5 s, expiry 2 s), FLAVOUR ``sync`` or ``async``; each has a safe
window of 1.5 s, but the task worker's is 3 s: longer than its release bound on stop (2 s).
For ``tasks`` and ``release``, ``gained`` and ``lost`` are the processor's start and its task found lost
(``task.lost`` set, or the async processor cancelled).
It logs JSON lines to LOG, each with ``at`` on the monotonic clock, which every process of
the machine shares: ``window`` (the end of the safe window after each renewal), ``gained``,
``lost`` (the callbacks), ``stopping`` (SIGTERM handled) and ``stopped``
(``stop()`` returned).
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from tenure import Claimer, Elector, Maintainer, ReplicaManager, SubmissionPool, Task, TaskWorker
from tenure.aio import AsyncClaimer, AsyncElector, AsyncMaintainer, AsyncSubmissionPool, AsyncTaskWorker

PERIOD, EXPIRY = 0.5, 2.0
LEASE = 4.5  # a task's safe window: 2/3 of the lease, 3 s
SHUTDOWN_GRACE = {"tasks": 3.0, "release": 0.5}

Note = Callable[..., None]
Threaded = Elector | Claimer | Maintainer | ReplicaManager | TaskWorker | SubmissionPool
Async = AsyncElector | AsyncClaimer | AsyncMaintainer | AsyncTaskWorker | AsyncSubmissionPool
Runtime = Threaded | Async


def main(conninfo: str, name: str, path: str, kind: str, flavour: str) -> None:
    lock = threading.Lock()
    with open(path, "a", buffering=1) as log:

        def note(event: str, **fields: Any) -> None:
            with lock:
                log.write(json.dumps({"event": event, "at": time.monotonic(), **fields}) + "\n")

        runtime = make(conninfo, name, kind, flavour, note)
        if not isinstance(runtime, TaskWorker | AsyncTaskWorker):
            follow_windows(runtime, note)
        if isinstance(runtime, Threaded):
            run_threaded(runtime, note)
        else:
            asyncio.run(run_async(runtime, note))


def make(conninfo: str, name: str, kind: str, flavour: str, note: Note) -> Runtime:
    def gained(what: object) -> None:
        note("gained", what=str(what))

    def lost(what: object) -> None:
        note("lost", what=str(what))

    if kind == "elector":
        elector = Elector if flavour == "sync" else AsyncElector
        return elector(conninfo, name, interval=PERIOD, timeout=EXPIRY, on_elected=gained, on_demoted=lost)
    if kind == "replica":  # sync only here
        return ReplicaManager(
            conninfo,
            name=name,
            interval=PERIOD,
            idle_timeout=EXPIRY - PERIOD,
            on_active=gained,
            on_passive=lost,
        )
    if kind in SHUTDOWN_GRACE:
        return task_worker(conninfo, name, flavour, note, shutdown_grace=SHUTDOWN_GRACE[kind])
    if kind == "queue":
        return submission_pool(conninfo, name, flavour, gained, lost)
    if kind == "maintainer":
        maintainer = Maintainer if flavour == "sync" else AsyncMaintainer
        return maintainer(
            conninfo, tick_every=PERIOD, interval=PERIOD, timeout=EXPIRY, on_elected=gained, on_demoted=lost
        )
    claimer = Claimer if flavour == "sync" else AsyncClaimer
    return claimer(conninfo, name, cycle=PERIOD, expiry=EXPIRY, on_gained=gained, on_lost=lost)


def task_worker(
    conninfo: str, kind: str, flavour: str, note: Note, *, shutdown_grace: float
) -> TaskWorker | AsyncTaskWorker:
    """A worker whose processor holds its task until it is lost; every lease extension
    logs the end of the task's safe window."""
    held: list[Task] = []

    def window() -> None:
        for task in held:
            if not task.lost.is_set():
                note("window", until=task.valid_until)

    def started(task: Task) -> None:
        held.append(task)
        note("gained", what=str(task.id))
        note("window", until=task.valid_until)

    options: dict[str, Any] = {"lease": LEASE, "poll_interval": PERIOD, "shutdown_grace": shutdown_grace}
    if flavour == "sync":

        def hold(task: Task) -> Any:
            started(task)
            task.lost.wait()
            note("lost", what=str(task.id))
            return None  # discarded: the task is lost

        worker: TaskWorker | AsyncTaskWorker = TaskWorker(conninfo, {kind: hold}, concurrency=1, **options)
    else:

        async def ahold(task: Task) -> Any:
            started(task)
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                note("lost", what=str(task.id))
                raise

        worker = AsyncTaskWorker(conninfo, {kind: ahold}, concurrency=1, **options)
    worker.follow(window)
    return worker


def submission_pool(
    conninfo: str, keyspace: str, flavour: str, gained: Note, lost: Note
) -> SubmissionPool | AsyncSubmissionPool:
    """A pool with nothing to submit: its selections and its monitor poll into the cut."""
    options: dict[str, Any] = {"submitters": 2, "cycle": PERIOD, "expiry": EXPIRY, "poll_interval": PERIOD}
    pool: SubmissionPool | AsyncSubmissionPool
    if flavour == "sync":
        pool = SubmissionPool(conninfo, keyspace, submit=lambda _: None, status=lambda _: None, **options)
    else:
        pool = AsyncSubmissionPool(
            conninfo, keyspace, submit=lambda _: None, status=lambda _: None, **options
        )
    # The pool's claimer tells the pool; these tell the log too.
    tell_pool = pool.claimer._on_lost

    def on_lost(keys: Any) -> None:
        lost(keys)
        if tell_pool is not None:
            tell_pool(keys)

    pool.claimer._on_gained, pool.claimer._on_lost = gained, on_lost
    return pool


def follow_windows(runtime: Runtime, note: Note) -> None:
    if isinstance(runtime, Maintainer | AsyncMaintainer):
        elector: Any = runtime.elector
    elif isinstance(runtime, SubmissionPool | AsyncSubmissionPool):
        elector = runtime.claimer
    else:
        elector = runtime

    def window() -> None:
        if isinstance(elector, Elector | AsyncElector | ReplicaManager):
            granted = elector.grant_until()
            if granted is not None:
                note("window", until=granted[1])
        else:
            keys, until = elector.held_until()
            if keys:
                note("window", until=until)

    elector.follow(window)


def run_threaded(runtime: Threaded, note: Note) -> None:
    terminated = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: terminated.set())
    runtime.start()
    while not terminated.wait(0.05):
        pass
    note("stopping")
    runtime.stop()
    note("stopped")


async def run_async(runtime: Async, note: Note) -> None:
    terminated = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, terminated.set)
    await runtime.start()
    await terminated.wait()
    note("stopping")
    await runtime.stop()
    note("stopped")


if __name__ == "__main__":
    main(*sys.argv[1:6])
