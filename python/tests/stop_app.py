"""A primary that is stopped while cut off from the database (test_partition_stop).

Run as ``python stop_app.py CONNINFO UTYPE LOG sync|async``: an Elector (or AsyncElector)
with I = 0.5 s, T = 2 s that logs JSON lines to LOG, each with ``at`` on the monotonic
clock, which every process of the machine shares: ``window`` (the end of the safe window
after each renewal), ``elected``, ``demoted``, ``stopping`` (SIGTERM handled) and ``stopped``
(``stop()`` returned).
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import threading
import time
from typing import Any

from tenure import Elector
from tenure.aio import AsyncElector

INTERVAL, TIMEOUT = 0.5, 2.0


def main(conninfo: str, utype: str, path: str, flavour: str) -> None:
    lock = threading.Lock()
    with open(path, "a", buffering=1) as log:

        def note(event: str, **fields: Any) -> None:
            with lock:
                log.write(json.dumps({"event": event, "at": time.monotonic(), **fields}) + "\n")

        options: dict[str, Any] = {
            "interval": INTERVAL,
            "timeout": TIMEOUT,
            "on_elected": lambda term: note("elected", term=term),
            "on_demoted": lambda reason: note("demoted", reason=reason),
        }
        if flavour == "sync":
            run_threaded(Elector(conninfo, utype, **options), note)
        else:
            asyncio.run(run_async(AsyncElector(conninfo, utype, **options), note))


def follow_windows(elector: Elector | AsyncElector, note: Any) -> None:
    def window() -> None:
        held = elector.grant_until()
        if held is not None:
            note("window", term=held[0], until=held[1])

    elector.follow(window)


def run_threaded(elector: Elector, note: Any) -> None:
    terminated = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: terminated.set())
    follow_windows(elector, note)
    elector.start()
    while not terminated.wait(0.05):
        pass
    note("stopping")
    elector.stop()
    note("stopped")


async def run_async(elector: AsyncElector, note: Any) -> None:
    terminated = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, terminated.set)
    follow_windows(elector, note)
    await elector.start()
    await terminated.wait()
    note("stopping")
    await elector.stop()
    note("stopped")


if __name__ == "__main__":
    main(*sys.argv[1:5])
