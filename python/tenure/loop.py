"""What the elector and the claimer share: a loop that runs one cycle every ``period``
seconds on a connection of its own, and a watchdog that steps down when the safe
window since the last successful cycle has passed, even while the loop is stuck in
a call to the database."""

from __future__ import annotations

import logging
import threading
import time
from types import TracebackType
from typing import Any, Self

import psycopg

from tenure.connect import connect
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

    def stop(self, *, leave: bool = True) -> None:
        """Stop the loop and give up locally; with ``leave``, in the database too."""
        self._stopping.set()
        with self._state:
            self._state.notify_all()
        for thread in self._threads:
            thread.join()
        self._threads.clear()
        self._stopped()
        if leave:
            try:
                self._leave(self._driver())
            except psycopg.Error as error:
                log.warning("%s: could not leave cleanly: %s", self.label, error)
        self._close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- the loop --------------------------------------------------------------------------

    def _driver(self) -> Driver:
        if self._connection is None or self._connection.closed:
            self._connection = connect(
                self.conninfo, application_name=f"tenure {self.label}", deadline=self.safe_window
            )
        return Driver(self._connection)

    def _close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def _run(self) -> None:
        next_cycle = time.monotonic()
        while not self._stopping.is_set():
            try:
                with self._cycle_seconds.time():
                    self._cycle(self._driver())
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
