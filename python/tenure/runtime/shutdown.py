"""Waiting for SIGTERM or SIGINT in a service's main thread."""

from __future__ import annotations

import signal
import threading
from types import FrameType


def wait_for_shutdown(*, timeout: float | None = None) -> bool:
    """Block until SIGTERM or SIGINT arrives (True) or ``timeout`` passes (False).

    The previous handlers are restored before returning, so leaving the caller's
    ``with Elector(...)`` block then resigns cleanly.
    """
    stop = threading.Event()

    def handler(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        return stop.wait(timeout)
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
