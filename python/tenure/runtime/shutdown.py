"""Waiting for SIGTERM or SIGINT in a service's main thread."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType


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


def wait_for_shutdown(*, timeout: float | None = None) -> bool:
    """Block until SIGTERM or SIGINT arrives (True) or ``timeout`` passes (False)."""
    with shutdown_signals() as stop:
        return stop.wait(timeout)
