"""The elector: heartbeat leader election for one service type, as in HPC Pack.

Every I it polls ``get_primary``; when the entry is empty or expired it bids with
``update_heartbeat`` and becomes primary only when the database says it won. As
primary it renews every I and steps down as soon as a renewal fails, names someone
else, or has not succeeded within T - I of when it was *sent* (monotonic clock),
whichever comes first, whatever the database says later.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tenure.connect import instance_name
from tenure.driver import Driver
from tenure.errors import InvalidArgument, InvalidConfiguration
from tenure.loop import CycleLoop
from tenure.metrics import Metrics

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ElectionTiming:
    """Heartbeat interval I and timeout T, in seconds; T must exceed 2I."""

    interval: float
    timeout: float

    def __post_init__(self) -> None:
        if not self.interval > 0:
            raise InvalidConfiguration(f"heartbeat interval must be positive, got {self.interval!r} s")
        if not self.timeout > 2 * self.interval:
            raise InvalidConfiguration(
                f"timeout T must be longer than twice the interval I: "
                f"T={self.timeout} s, I={self.interval} s",
                hint="Choose T > 2I, for example T = 3I: a primary steps down after T - I without a "
                "successful renewal, which must leave room for more than one renewal.",
            )

    @property
    def safe_window(self) -> float:
        """How long after sending its last successful renewal a primary may act: T - I."""
        return self.timeout - self.interval


class Elector(CycleLoop):
    """Runs the election loop for one service type in a background thread.

    ``on_elected(term)`` runs on the election thread when the database confirms this
    instance as primary; ``on_demoted(reason)`` runs once per term when it stops
    being primary, on whichever thread noticed first. Use as a context manager:
    leaving it stops the loop and resigns, so another instance takes over at once.
    """

    def __init__(
        self,
        conninfo: str,
        utype: str,
        *,
        interval: float,
        timeout: float,
        name: str | None = None,
        on_elected: Callable[[int], None] | None = None,
        on_demoted: Callable[[str], None] | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.timing = ElectionTiming(interval=interval, timeout=timeout)
        if not utype or not utype.strip() or len(utype) > 200:
            raise InvalidArgument(
                f"service type must be a non-empty name of at most 200 characters: {utype!r}"
            )
        self.utype = utype
        self.instance_id = uuid.uuid4()
        self.name = instance_name(name)
        super().__init__(
            conninfo,
            period=interval,
            safe_window=self.timing.safe_window,
            label=f"elector {utype} {self.name}",
            metrics=metrics,
            runtime="heartbeat",
            metric_name=utype,
        )
        self._on_elected = on_elected
        self._on_demoted = on_demoted
        self._term: int | None = None

    # -- what the application asks -------------------------------------------------

    @property
    def term(self) -> int | None:
        """The term this instance is primary in, or None when it is not primary."""
        with self._state:
            return self._term if time.monotonic() < self._deadline else None

    def remaining(self) -> float:
        """Seconds left of the safe window as primary (0 when not primary)."""
        with self._state:
            if self._term is None:
                return 0.0
            return max(0.0, self._deadline - time.monotonic())

    def is_primary(self) -> bool:
        """True only while the last renewal, counted from when it was sent, is within T - I."""
        return self.term is not None

    def wait_until_primary(self, timeout: float | None = None) -> bool:
        """Block until this instance is primary (True) or ``timeout`` passes (False)."""
        end = None if timeout is None else time.monotonic() + timeout
        with self._state:
            while not (self._term is not None and time.monotonic() < self._deadline):
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._state.wait(left)
            return True

    def stop(self, *, resign: bool = True) -> None:  # type: ignore[override]
        """Stop the loop; with ``resign``, give primacy up in the database at once."""
        super().stop(leave=resign)

    # -- the cycle ------------------------------------------------------------------

    def _cycle(self, driver: Driver) -> None:
        with self._state:
            primary = self._term is not None
        if not primary:
            current = driver.get_primary(self.utype)
            if current is not None and current.instance_id != self.instance_id:
                return
        sent = time.monotonic()
        entry = driver.update_heartbeat(
            self.instance_id, self.utype, timeout=self.timing.timeout, interval=self.timing.interval
        )
        if entry.instance_id != self.instance_id:
            self._demote(f"overtaken by {entry.instance_id} in term {entry.term}")
            return
        self._confirm(entry.term, sent + self.timing.safe_window)

    def _cycle_failed(self, reason: str) -> None:
        self._demote(f"heartbeat failed: {reason}")

    def _holding(self) -> bool:
        return self._term is not None

    def _expire(self) -> None:
        self._demote("no successful renewal within T - I", only_if_expired=True)

    def _stopped(self) -> None:
        self._demote("stopped")

    def _leave(self, driver: Driver) -> None:
        # Even when not primary locally, the entry may still name us: vacate it.
        driver.heartbeat_resign(self.instance_id, self.utype)

    def _confirm(self, term: int, deadline: float) -> None:
        if time.monotonic() >= deadline:
            # The answer came back after the safe window of its own request.
            self._demote("renewal answered too late")
            return
        with self._state:
            previous = self._term
            self._term, self._deadline = term, deadline
            self._state.notify_all()
        if previous == term:
            return
        if previous is not None:
            self.metrics.demotions.labels(self.utype).inc()
            self._call(self._on_demoted, f"term {previous} ended")
        self.metrics.primary.labels(self.utype).set(1)
        self.metrics.term.labels(self.utype).set(term)
        self.metrics.elections.labels(self.utype).inc()
        log.info("%s: primary of %s in term %d", self.name, self.utype, term)
        self._call(self._on_elected, term)

    def _demote(self, reason: str, *, only_if_expired: bool = False) -> None:
        with self._state:
            if self._term is None or (only_if_expired and time.monotonic() < self._deadline):
                return
            self._term = None
            self._deadline = 0.0
            self._state.notify_all()
        self.metrics.primary.labels(self.utype).set(0)
        self.metrics.term.labels(self.utype).set(0)
        self.metrics.demotions.labels(self.utype).inc()
        log.info("%s: no longer primary of %s: %s", self.name, self.utype, reason)
        self._call(self._on_demoted, reason)

    def _call(self, callback: Callable[[Any], None] | None, argument: object) -> None:
        if callback is None:
            return
        try:
            callback(argument)
        except Exception:
            log.exception("%s: callback %r failed", self.name, callback)
