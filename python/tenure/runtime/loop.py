"""What the elector and the claimer share: a loop that runs one cycle every ``period``
seconds on a connection of its own, and a watchdog that steps down when the safe
window since the last successful cycle has passed, even while the loop is stuck in
a call to the database. A call that overruns the safe window has its socket
abandoned, so the loop reconnects (through every host of the conninfo) instead of
waiting on a frozen server."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any, Self

import psycopg

from tenure.connect import Deadlines, connect
from tenure.driver import Driver
from tenure.metrics import Metrics

log = logging.getLogger(__name__)


class CycleLoop:
    """Subclasses implement ``_cycle``, ``_cycle_failed``, ``_holding``, ``_expire`` and ``_leave``."""

    def __init__(
        self,
        conninfo: str,
        *,
        period: float,
        safe_window: float,
        label: str,
        metrics: Metrics | None,
        runtime: str,
        metric_name: str,
    ) -> None:
        self.conninfo = conninfo
        self.metrics = metrics or Metrics()
        self._cycle_seconds = self.metrics.cycle_seconds.labels(runtime, metric_name)
        self._cycle_failures = self.metrics.cycle_failures.labels(runtime, metric_name)
        self.period = period
        self.safe_window = safe_window
        self.label = label
        self._state = threading.Condition()  # guards what the subclass holds and _deadline
        self._deadline = 0.0  # monotonic; what is held is valid until then
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._connection: psycopg.Connection[Any] | None = None
        self._deadlines = Deadlines(label)

    # -- to implement ------------------------------------------------------------------

    def _cycle(self, driver: Driver) -> None:
        raise NotImplementedError

    def _cycle_failed(self, reason: str) -> None:
        """A cycle raised: step down now, or leave it to the watchdog."""

    def _holding(self) -> bool:
        """Whether anything is held (called with _state held)."""
        raise NotImplementedError

    def _expire(self) -> None:
        """The safe window passed: give up locally (called without _state)."""
        raise NotImplementedError

    def _stopped(self) -> None:
        """The loop stopped: give up locally."""
        raise NotImplementedError

    def _leave(self, driver: Driver) -> None:
        """Give up in the database (resign, release) on a clean stop."""
        raise NotImplementedError

    # -- life cycle ----------------------------------------------------------------------

    def start(self) -> Self:
        for target, role in ((self._run, "loop"), (self._watch_deadline, "watchdog")):
            thread = threading.Thread(target=target, name=f"tenure-{role}-{self.label}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self, *, leave: bool = True, grace: float | None = None) -> None:
        """Stop the loop and give up locally; with ``leave``, in the database too.

        Bounded by ``grace`` seconds (default: the safe window) even while the
        database is away: a leave that fails is tried again until then, so that a
        successor need not wait for the grant to expire when the database returns
        in time.
        """
        end = time.monotonic() + (self.safe_window if grace is None else grace)
        self._stopping.set()
        with self._state:
            self._state.notify_all()
        for thread in self._threads:
            thread.join()  # a cycle in progress ends within the safe window (see _run)
        self._threads.clear()
        self._stopped()
        while leave:
            try:
                connection = self._open()
                with self._deadlines.bounded(connection, max(0.1, end - time.monotonic())):
                    self._leave(Driver(connection))
                break
            except psycopg.Error as error:
                self._close()
                if time.monotonic() + 0.2 >= end:
                    log.warning("%s: could not leave cleanly: %s", self.label, error)
                    break
                time.sleep(0.2)
        self._close()
        self._deadlines.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- the loop --------------------------------------------------------------------------

    def _open(self) -> psycopg.Connection[Any]:
        """The loop's connection, (re)connected when needed."""
        if self._connection is None or self._connection.closed or self._connection.broken:
            self._close()
            self._connection = self._connect()
        return self._connection

    def _connect(self) -> psycopg.Connection[Any]:
        return connect(self.conninfo, application_name=f"tenure {self.label}", deadline=self.safe_window)

    def _driver(self) -> Driver:
        return Driver(self._open())

    def _close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def _run(self) -> None:
        next_cycle = time.monotonic()
        while not self._stopping.is_set():
            try:
                with self._cycle_seconds.time():
                    connection = self._open()
                    with self._deadlines.bounded(connection, self.safe_window):
                        self._cycle(Driver(connection))
            except psycopg.Error as error:
                log.warning("%s: cycle failed: %s", self.label, error)
                self._cycle_failures.inc()
                self._close()
                self._cycle_failed(error.__class__.__name__)
            except Exception as error:
                log.exception("%s: cycle failed", self.label)
                self._cycle_failures.inc()
                self._cycle_failed(repr(error))
            next_cycle = max(next_cycle + self.period, time.monotonic())
            self._stopping.wait(next_cycle - time.monotonic())

    def _watch_deadline(self) -> None:
        with self._state:
            while not self._stopping.is_set():
                if not self._holding():
                    self._state.wait()
                    continue
                left = self._deadline - time.monotonic()
                if left > 0:
                    self._state.wait(left)
                    continue
                self._state.release()
                try:
                    self._expire()
                finally:
                    self._state.acquire()


class GrantLoop(CycleLoop):
    """A CycleLoop that holds at most one numbered grant at a time, a term or a lock epoch,
    valid until a deadline on the monotonic clock: the Elector and the ReplicaManager.

    ``on_gained(grant)`` and ``on_lost(reason)`` run once per grant; subclasses implement
    ``_gained`` and ``_lost_grant`` for what else goes with a change (log, metrics).
    """

    grant_name = "grant"  # what a grant is called in reasons: "term", "epoch"

    def __init__(
        self,
        conninfo: str,
        *,
        on_gained: Callable[[int], None] | None,
        on_lost: Callable[[str], None] | None,
        **loop: Any,
    ) -> None:
        super().__init__(conninfo, **loop)
        self._on_gained = on_gained
        self._on_lost = on_lost
        self._grant: int | None = None
        self._since = time.monotonic()  # when the grant last changed
        self._last_lost: int | None = None  # the last grant given up locally

    def _gained(self, grant: int) -> None:
        """A new grant (called without _state)."""

    def _lost_grant(self, grant: int, reason: str) -> None:
        """The grant ended (called without _state)."""

    # -- what the application asks -------------------------------------------------

    def _current(self) -> int | None:
        with self._state:
            return self._grant if time.monotonic() < self._deadline else None

    def remaining(self) -> float:
        """Seconds left of the safe window of the grant (0 without one)."""
        with self._state:
            if self._grant is None:
                return 0.0
            return max(0.0, self._deadline - time.monotonic())

    def _wait_for_grant(self, timeout: float | None) -> bool:
        end = None if timeout is None else time.monotonic() + timeout
        with self._state:
            while not (self._grant is not None and time.monotonic() < self._deadline):
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._state.wait(left)
            return True

    # -- changes -------------------------------------------------------------------

    def _holding(self) -> bool:
        return self._grant is not None

    def _given_up(self, grant: int) -> bool:
        """Whether ``grant`` was already given up here: it must never be taken up again
        (``on_gained`` twice for one term), even if the database still names us."""
        with self._state:
            return self._grant is None and self._last_lost is not None and grant <= self._last_lost

    def _confirm(self, grant: int, deadline: float, *, too_late: str) -> None:
        """The database confirmed ``grant`` for an answer to a request sent at deadline - window."""
        if time.monotonic() >= deadline:
            self._demote(too_late)  # the answer came back after the safe window of its request
            return
        with self._state:
            previous = self._grant
            self._grant, self._deadline = grant, deadline
            if previous != grant:
                self._since = time.monotonic()
            self._state.notify_all()
        if previous == grant:
            return
        if previous is not None:
            reason = f"{self.grant_name} {previous} ended"
            self._lost_grant(previous, reason)
            self._call(self._on_lost, reason)
        self._gained(grant)
        self._call(self._on_gained, grant)

    def _demote(self, reason: str, *, only_if_expired: bool = False) -> None:
        with self._state:
            previous = self._grant
            if previous is None or (only_if_expired and time.monotonic() < self._deadline):
                return
            self._grant = None
            self._deadline = 0.0
            self._since = time.monotonic()
            self._last_lost = previous
            self._state.notify_all()
        self._lost_grant(previous, reason)
        self._call(self._on_lost, reason)

    def _call(self, callback: Callable[[Any], None] | None, argument: object) -> None:
        if callback is None:
            return
        try:
            callback(argument)
        except Exception:
            log.exception("%s: callback %r failed", self.label, callback)
