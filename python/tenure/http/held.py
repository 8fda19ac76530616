"""What this instance holds, for a program beside the shim that runs its own loop:
``HeldVersions`` numbers each change of what a runtime holds and lets a request wait
for the next one (a long-poll), and ``HeldEndpoint`` serves it as ``GET /held``
(``?wait=SECONDS&version=N``) beside ``/health/live`` and ``/metrics``.

A waiting request is answered as soon as the version differs from N, when the wait
passes, and at the latest near the end of the safe window of what was held when it
arrived, so a program that asks again at once always has a fresh ``valid_for_s``
before the one it acts on runs out. The answer is read at the moment it is sent: it
never names a grant past its safe window, whether or not the runtime's watchdog has
noticed yet.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any, Protocol
from uuid import UUID

from tenure.http.endpoint import JsonEndpoint
from tenure.metrics import Metrics, send_metrics

MAX_WAIT = 60.0  # seconds a long-poll may ask to be held

Read = Callable[[], tuple[Any, float | None]]  # (what is held, end of its safe window or None)


class Followed(Protocol):
    """What an endpoint needs of its runtime (an elector or a claimer, threaded or asyncio)."""

    @property
    def instance_id(self) -> UUID: ...

    def follow(self, callback: Callable[[], None]) -> None: ...


class BadRequest(ValueError):
    """A request's parameters are wrong: answered 400 with the message."""


class HeldVersions:
    """Numbers the changes of what a runtime holds.

    ``read()`` returns what is held now (a term, a dict of keys with epochs; something
    falsy when nothing) with the monotonic end of its safe window (None when nothing is
    held), as the runtime answers it: empty once the window has passed. The version
    grows when that value differs from the last one seen (a gain, a loss, a new term or
    epoch), not at a renewal, which only moves the window. It starts at the wall clock
    in milliseconds, so a restarted shim does not hand out its predecessor's numbers.
    """

    def __init__(self, read: Read, *, headroom: float) -> None:
        self._read = read
        self.headroom = headroom
        self._changed = threading.Condition()
        self._version = int(time.time() * 1000)
        self._held, self._deadline = read()
        # Reads are numbered when they start; the answer of an earlier one that lands after a
        # later one is stale (a demotion between the two) and is dropped for the later one's.
        self._reads = 0
        self._applied = 0
        self._closed = False
        self._answering = 0  # long-polls between their arrival and their answer's sending

    def refresh(self) -> tuple[int, Any, float | None]:
        """Read what is held now: (version, what, end of its safe window). Called by the
        runtime at every change (``follow``) and by every answer."""
        with self._changed:
            self._reads += 1
            ticket = self._reads
        held, deadline = self._read()  # without _changed: a read may need the thread of the followers
        with self._changed:
            if ticket > self._applied:
                self._applied = ticket
                if held != self._held:
                    self._version += 1
                    self._changed.notify_all()
                self._held, self._deadline = held, deadline
            return self._version, self._held, self._deadline if self._held else None

    def wait(self, version: int | None, wait: float) -> tuple[int, Any, float | None]:
        """``refresh()`` once the version differs from ``version``, ``wait`` seconds have
        passed, or what was held at the call is about to leave its safe window (within
        ``headroom`` of its end; when less than that is left, at its end), whichever is
        first. ``version`` None: at once."""
        now = time.monotonic()
        current, held, deadline = self.refresh()
        if version is None or wait <= 0:
            return current, held, deadline
        until = now + wait
        if deadline is not None:
            until = min(until, deadline - self.headroom if deadline - self.headroom > now else deadline)
        while True:
            current, held, deadline = self.refresh()
            left = until - time.monotonic()
            if current != version or left <= 0 or self._closed:
                return current, held, deadline
            with self._changed:
                if self._version == current and not self._closed:
                    self._changed.wait(left)

    @contextlib.contextmanager
    def answering(self) -> Iterator[None]:
        """Around a long-poll's wait and the sending of its answer, which ``close`` waits for."""
        with self._changed:
            self._answering += 1
        try:
            yield
        finally:
            with self._changed:
                self._answering -= 1
                self._changed.notify_all()

    def close(self, *, grace: float) -> None:
        """End every wait now with what is held then, and give their answers up to ``grace``
        seconds to be sent: a program waiting on a shim that stops hears how it ended (its
        runtime stopped first: nothing held) rather than a dropped connection."""
        end = time.monotonic() + grace
        with self._changed:
            self._closed = True
            self._changed.notify_all()
            while self._answering and (left := end - time.monotonic()) > 0:
                self._changed.wait(left)


def long_poll(query: str) -> tuple[float, int | None]:
    """``wait`` and ``version`` of a query string; BadRequest names what is wrong."""
    try:
        params = urllib.parse.parse_qs(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError as error:
        raise BadRequest(f"cannot read the query string {query!r}: {error}") from None
    unknown = sorted(set(params) - {"wait", "version"})
    if unknown:
        raise BadRequest(f"unknown parameter {unknown[0]!r}: only wait and version are understood")
    for name, values in params.items():
        if len(values) > 1:
            raise BadRequest(f"parameter {name!r} given {len(values)} times: give it once")
    wait = 0.0
    if "wait" in params:
        text = params["wait"][0]
        try:
            wait = float(text)
        except ValueError:
            raise BadRequest(f"wait must be a number of seconds, got {text!r}") from None
        if not math.isfinite(wait) or not 0 <= wait <= MAX_WAIT:
            raise BadRequest(f"wait must be from 0 to {MAX_WAIT:g} seconds, got {text!r}")
    version = None
    if "version" in params:
        text = params["version"][0]
        if not (text.isascii() and text.isdigit()) or len(text) > 19:
            raise BadRequest(f"version must be a non-negative integer from an earlier answer, got {text!r}")
        version = int(text)
    if wait > 0 and version is None:
        raise BadRequest(
            "wait needs version: pass the version of the last answer, and the request waits until it changes"
        )
    return wait, version


class HeldEndpoint(JsonEndpoint):
    """A runtime's endpoint with ``GET /held`` (and its long-poll), ``GET /health/live``
    and ``GET /metrics``. Subclasses give ``_held_body`` and may serve more paths in
    ``_other``."""

    def __init__(
        self,
        runtime: Followed,
        read: Read,
        *,
        host: str,
        port: int,
        thread_name: str,
        headroom: float,
        metrics: Metrics,
    ) -> None:
        self.held = HeldVersions(read, headroom=headroom)
        self._metrics = metrics
        self._instance_id = str(runtime.instance_id)
        runtime.follow(self._changed)
        super().__init__(host=host, port=port, thread_name=thread_name)

    def _changed(self) -> None:
        self.held.refresh()

    def _held_body(self, held: Any) -> dict[str, object]:
        raise NotImplementedError

    def _other(self, request: BaseHTTPRequestHandler, method: str, path: str) -> bool:
        """Answer another path; False when there is none of that name."""
        return False

    def held_answer(self, version: int, held: Any, deadline: float | None) -> dict[str, object]:
        valid_for = 0.0 if deadline is None else max(0.0, deadline - time.monotonic())
        return {**self._held_body(held), "valid_for_s": round(valid_for, 3), "version": version}

    def _answer(self, request: BaseHTTPRequestHandler, method: str) -> None:
        path, _, query = request.path.partition("?")
        if method == "GET" and path == "/held":
            try:
                wait, version = long_poll(query)
            except BadRequest as error:
                self._reply(request, 400, {"error": str(error)})
                return
            with self.held.answering():
                self._reply(request, 200, self.held_answer(*self.held.wait(version, wait)))
        elif method == "GET" and path == "/health/live":
            self._reply(request, 200, {"live": True, "instance_id": self._instance_id})
        elif method == "GET" and path == "/metrics":
            send_metrics(request, self._metrics)
        elif not self._other(request, method, path):
            self._reply(request, 404, {"error": f"no such path {method} {path!r}; try {self.paths()}"})

    def paths(self) -> str:
        return "GET /held[?wait=SECONDS&version=N], /health/live or /metrics"

    def stop(self) -> None:
        self.held.close(grace=1.0)
        super().stop()
