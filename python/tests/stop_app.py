"""A runtime that is stopped while cut off from the database (test_partition_stop).

Run as ``python stop_app.py CONNINFO NAME LOG KIND FLAVOUR``: KIND ``elector`` (service
type NAME, I = 0.5 s, T = 2 s), ``maintainer`` (the same elector, ticking every 0.5 s),
``claimer`` (keyspace NAME, cycle 0.5 s, expiry 2 s) or ``replica`` (sync only: interval
0.5 s, idle timeout 1.5 s), FLAVOUR ``sync`` or ``async``; each has a safe window of 1.5 s.
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

from tenure import Claimer, Elector, Maintainer, ReplicaManager
from tenure.aio import AsyncClaimer, AsyncElector, AsyncMaintainer

PERIOD, EXPIRY = 0.5, 2.0

Note = Callable[..., None]
Runtime = Elector | Claimer | Maintainer | ReplicaManager | AsyncElector | AsyncClaimer | AsyncMaintainer


def main(conninfo: str, name: str, path: str, kind: str, flavour: str) -> None:
    lock = threading.Lock()
    with open(path, "a", buffering=1) as log:

        def note(event: str, **fields: Any) -> None:
            with lock:
                log.write(json.dumps({"event": event, "at": time.monotonic(), **fields}) + "\n")

        runtime = make(conninfo, name, kind, flavour, note)
        follow_windows(runtime, note)
        if isinstance(runtime, Elector | Claimer | Maintainer | ReplicaManager):
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
    if kind == "maintainer":
        maintainer = Maintainer if flavour == "sync" else AsyncMaintainer
        return maintainer(
            conninfo, tick_every=PERIOD, interval=PERIOD, timeout=EXPIRY, on_elected=gained, on_demoted=lost
        )
    claimer = Claimer if flavour == "sync" else AsyncClaimer
    return claimer(conninfo, name, cycle=PERIOD, expiry=EXPIRY, on_gained=gained, on_lost=lost)


def follow_windows(runtime: Runtime, note: Note) -> None:
    elector = runtime.elector if isinstance(runtime, Maintainer | AsyncMaintainer) else runtime

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


def run_threaded(runtime: Elector | Claimer | Maintainer | ReplicaManager, note: Note) -> None:
    terminated = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: terminated.set())
    runtime.start()
    while not terminated.wait(0.05):
        pass
    note("stopping")
    runtime.stop()
    note("stopped")


async def run_async(runtime: AsyncElector | AsyncClaimer | AsyncMaintainer, note: Note) -> None:
    terminated = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, terminated.set)
    await runtime.start()
    await terminated.wait()
    note("stopping")
    await runtime.stop()
    note("stopped")


if __name__ == "__main__":
    main(*sys.argv[1:6])
