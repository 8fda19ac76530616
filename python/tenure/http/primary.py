"""The local primary API: the seed's CheckPrimary over HTTP on the elector's host.

``PrimaryEndpoint`` serves an elector's view: ``GET /primary`` answers 200 on the
primary and 503 otherwise, ``GET /held`` the term held (null when none) with a version
and a long-poll (see :mod:`tenure.http.held`), ``GET /health/live`` 200 while the
process serves, and ``GET /metrics`` the elector's Prometheus metrics.
``PrimaryWatch`` is the other side, for a service on the same host that must only
work while its local elector is primary: it polls the endpoint and counts an answer
only for T - I after the request was sent.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler
from typing import Self

from tenure.http.held import HeldEndpoint
from tenure.runtime.heartbeat import Elector
from tenure.runtime.loop import Runtime


class PrimaryEndpoint(HeldEndpoint):
    """Serves ``/primary``, ``/held`` (with its long-poll), ``/health/live`` and ``/metrics``
    for an elector, on a background thread."""

    def __init__(self, elector: Elector, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.elector = elector

        def read() -> tuple[int | None, float | None]:
            grant = elector.grant_until()
            return (None, None) if grant is None else grant

        window = elector.timing.safe_window
        super().__init__(
            elector,
            read,
            host=host,
            port=port,
            thread_name="tenure-http",
            headroom=min(elector.timing.interval / 2, window / 4),
            metrics=elector.metrics,
        )

    def _held_body(self, held: int | None) -> dict[str, object]:
        return {
            "instance_id": str(self.elector.instance_id),
            "name": self.elector.name,
            "type": self.elector.utype,
            "term": held,
        }

    def _other(self, request: BaseHTTPRequestHandler, method: str, path: str) -> bool:
        if (method, path) != ("GET", "/primary"):
            return False
        version, term, deadline = self.held.refresh()
        valid_for = 0.0 if deadline is None else max(0.0, deadline - time.monotonic())
        body = {
            "primary": term is not None,
            "utype": self.elector.utype,
            "instance_id": str(self.elector.instance_id),
            "name": self.elector.name,
            "term": term,
            "valid_for_s": round(valid_for, 3),
            "version": version,
        }
        self._reply(request, 200 if term is not None and valid_for > 0 else 503, body)
        return True

    def paths(self) -> str:
        return f"GET /primary, {super().paths()}"


def ask_primary(url: str, *, timeout: float) -> float:
    """One CheckPrimary over HTTP: how many seconds the answer stays valid, 0 for "no".

    Network errors raise OSError.
    """
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            body = json.loads(response.read())
            return float(body["valid_for_s"]) if response.status == 200 else 0.0
    except urllib.error.HTTPError as error:
        if error.code == 503:
            return 0.0
        raise


class PrimaryWatch(Runtime):
    """Polls a local ``/primary`` endpoint every ``interval`` seconds.

    ``is_primary()`` is True only while the last "yes" answered a request sent less
    than ``window`` seconds ago (use T - I), and never past the elector's own safe
    window that the answer reports; a "no", an error or silence ends it.
    """

    def __init__(self, url: str, *, interval: float, window: float) -> None:
        if not 0 < interval < window:
            raise ValueError(f"need 0 < interval < window, got interval={interval}, window={window}")
        self.url = url
        self.interval = interval
        self.window = window
        self._valid_until = 0.0
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def is_primary(self) -> bool:
        with self._lock:
            return time.monotonic() < self._valid_until

    def check(self) -> bool:
        """Ask once and update the state; returns the answer (False on any error)."""
        sent = time.monotonic()
        try:
            valid_for = min(self.window, ask_primary(self.url, timeout=self.window))
        except (OSError, ValueError, KeyError):
            valid_for = 0.0
        with self._lock:
            self._valid_until = sent + valid_for
        return valid_for > 0

    def _run(self) -> None:
        while not self._stopping.is_set():
            self.check()
            self._stopping.wait(self.interval)

    def start(self) -> Self:
        self._thread = threading.Thread(target=self._run, name="tenure-primary-watch", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()
