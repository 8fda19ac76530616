"""Waiting for SIGTERM or SIGINT in a service's main thread."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from tenure.runtime.loop import wait_until


@contextmanager
def shutdown_signals() -> Iterator[threading.Event]:
    """An event set when SIGTERM or SIGINT arrives while the block runs, whatever the main
    thread is doing at that moment (a loop that waits between steps catches a signal that
    lands during a step too). The previous handlers are restored on leaving the block, so
    leaving the caller's ``with Elector(...)`` block afterwards resigns cleanly."""
    stop = threading.Event()

    def handler(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield stop
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


# A signal the kernel hands to another thread than the main one (it may, when the main thread
# is running, as right after SIGCONT) does not wake a main thread blocked on a lock: Python
# runs the handler at the main thread's next wake-up. So the wait wakes this often.
SIGNAL_CHECK = 0.2


def wait_for_shutdown(*, timeout: float | None = None) -> bool:
    """Block until SIGTERM or SIGINT arrives (True) or ``timeout`` passes (False)."""
    with shutdown_signals() as stop:
        return wait_until(stop.is_set, stop.wait, timeout, look_every=SIGNAL_CHECK)
