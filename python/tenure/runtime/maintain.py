"""The maintainer: one elected instance per database that ticks the schedules and runs
retention.

``Maintainer`` stands in tenure's own heartbeat election (an ``Elector`` of the service
type ``tenure.maintain``). Only while it is primary, and each call bounded by what is
left of the safe window (T - I since its last renewal was sent), it calls
``schedule_tick()`` every ``tick_every`` seconds and, every ``retention_every``
seconds, each prune function the database has, in bounded batches until one removes
fewer rows than the limit. Ticks and retention run on threads and connections of their
own, so a long backlog of history never delays a tick.

Exactly one task per slot does not rest on the election: ``schedule_tick`` is
idempotent per (schedule, slot) whoever calls it, however many at once. The election
keeps the work in one place, and a standby takes over within T + I of a crash; with
the catch-up policy ``'all'`` the slots missed meanwhile are created then.

While elected it also reads ``tenure.task_status``, ``tenure.task_kinds`` and
``tenure.table_vacuum`` every ``gauges_every`` seconds into its metrics' database gauges
(tasks per kind and status, each kind's settings against its use, each table's rows and
dead rows against autovacuum's count): one instance per database exports them, and a
standby removes its own.

The schedules themselves are declared in Python with :mod:`tenure.runtime.schedules`.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any, Self

import psycopg

from tenure.connect import AsyncDeadlines, Deadlines, aconnect, connect
from tenure.driver import (
    OPS,
    PRUNE_HISTORIES,
    AsyncDriver,
    Driver,
    Op,
    ScheduleSlot,
    TableVacuum,
    TaskKind,
    TaskStatus,
)
from tenure.errors import InvalidConfiguration
from tenure.metrics import Metrics
from tenure.runtime.heartbeat import AsyncElector, Elector
from tenure.runtime.loop import AsyncRuntime, Runtime

log = logging.getLogger(__name__)

MAINTAIN_TYPE = "tenure.maintain"
DAY = timedelta(days=1)


# -- retention settings -------------------------------------------------------------------


@dataclass(frozen=True)
class Retention:
    """How old finished history must be before the maintainer removes it, and the batch size.

    ``task``: finished tasks and their lease log; ``batch``: committed and skipped
    batches; ``heartbeat``, ``claim``, ``replica``: ended terms, the claim log and
    replica terms. Live state is never removed, whatever the age (the prune functions
    decide what is finished).
    """

    task: timedelta = 7 * DAY
    batch: timedelta = 7 * DAY
    heartbeat: timedelta = 30 * DAY
    claim: timedelta = 30 * DAY
    replica: timedelta = 30 * DAY
    limit: int = 10_000

    def __post_init__(self) -> None:
        for history in PRUNE_HISTORIES:
            if self.age(history) < timedelta(0):
                raise InvalidConfiguration(f"retention age of {history} must not be negative")
        if not 1 <= self.limit <= 1_000_000:
            raise InvalidConfiguration(f"retention batch limit must be 1 to 1,000,000, got {self.limit}")

    def age(self, history: str) -> timedelta:
        value: timedelta = getattr(self, history)
        return value


@dataclass
class MaintainerStats:
    """What this maintainer did (also in its metrics)."""

    ticks: int = 0
    tasks_created: int = 0
    pruned: dict[str, int] = field(default_factory=dict)
    retention_runs: int = 0
    failures: int = 0


# -- the runtime ----------------------------------------------------------------------------


class MaintainLogic:
    """What a maintainer decides, on threads (:class:`Maintainer`) or on asyncio
    (:class:`AsyncMaintainer`): its settings, its election, and each job as a series of
    operations, every one run under what is left of the safe window."""

    elector: Elector | AsyncElector

    def __init__(
        self,
        conninfo: str,
        *,
        tick_every: float = 1.0,
        retention_every: float = 60.0,
        retention: Retention | None = None,
        gauges_every: float = 15.0,
        interval: float = 1.0,
        timeout: float = 3.0,
        name: str | None = None,
        utype: str = MAINTAIN_TYPE,
        metrics: Metrics | None = None,
        on_elected: Callable[[int], object] | None = None,
        on_demoted: Callable[[str], object] | None = None,
        elector: type[Elector] | type[AsyncElector] = Elector,
    ) -> None:
        if not tick_every > 0 or not retention_every > 0:
            raise InvalidConfiguration(
                f"tick_every and retention_every must be positive: {tick_every!r}, {retention_every!r}"
            )
        if not gauges_every >= 0:
            raise InvalidConfiguration(
                f"gauges_every must be positive, or 0 for no database gauges: {gauges_every!r}"
            )
        self.conninfo = conninfo
        self.tick_every = tick_every
        self.gauges_every = gauges_every
        self.retention_every = retention_every
        self.retention = retention or Retention()
        self.metrics = metrics or Metrics()
        self.elector = elector(
            conninfo,
            utype,
            interval=interval,
            timeout=timeout,
            name=name,
            on_elected=on_elected,
            on_demoted=on_demoted,
            metrics=self.metrics,
        )
        self.name = self.elector.name
        self.instance_id = self.elector.instance_id
        self.stats = MaintainerStats()
        self.prunable: list[str] | None = None  # detected once, at the first retention run
        self._lock = threading.Lock()  # guards stats
        self._stopped = False

    # -- what the application asks ---------------------------------------------------------

    def is_primary(self) -> bool:
        return self.elector.is_primary()

    def snapshot(self) -> MaintainerStats:
        with self._lock:
            return replace(self.stats, pruned=dict(self.stats.pruned))

    # -- the jobs, written once ------------------------------------------------------------

    def _jobs(self) -> tuple[tuple[str, float], ...]:
        gauges = (("gauges", self.gauges_every),) if self.gauges_every else ()
        return (("tick", self.tick_every), ("retention", self.retention_every), *gauges)

    def _connection_name(self, job: str) -> str:
        return f"tenure maintain {job} {self.name}"

    def _steps(self, job: str) -> Steps:
        """The job as operations: the shell runs each one bounded by what is left of the safe
        window, sends its result back, and stops at once when no longer primary."""
        return {"tick": self._tick, "retention": self._retain, "gauges": self._gauges}[job]()

    def _tick(self) -> Steps:
        created: list[ScheduleSlot] = yield OPS.schedule_tick()
        self.metrics.schedule_ticks.inc()
        for slot in created:
            self.metrics.schedule_tasks.labels(slot.name).inc()
            log.info("%s: schedule %s slot %s -> task %s", self.name, slot.name, slot.slot, slot.task_id)
        with self._lock:
            self.stats.ticks += 1
            self.stats.tasks_created += len(created)

    def _retain(self) -> Steps:
        if self.prunable is None:
            found: list[str] = yield OPS.prunable_histories()
            for history in PRUNE_HISTORIES:
                if history not in found:
                    log.warning(
                        "%s: no tenure.%s_prune(interval, integer) this role may execute: "
                        "the %s history is not pruned",
                        self.name,
                        history,
                        history,
                    )
            self.prunable = found
        for history in self.prunable:
            age = self.retention.age(history)
            while True:
                removed: int = yield OPS.prune(history, older_than=age, limit=self.retention.limit)
                if removed:
                    self.metrics.rows_pruned.labels(history).inc(removed)
                with self._lock:
                    self.stats.pruned[history] = self.stats.pruned.get(history, 0) + removed
                if removed < self.retention.limit:
                    break
        with self._lock:
            self.stats.retention_runs += 1

    def _gauges(self) -> Steps:
        statuses: list[TaskStatus] = yield OPS.task_status()
        kinds: list[TaskKind] = yield OPS.task_kinds()
        tables: list[TableVacuum] = yield OPS.table_vacuum()
        self.metrics.table_gauges(tables)
        self.metrics.task_gauges(statuses, kinds)

    def _standby(self, job: str) -> None:
        """Not the maintainer (any more): the database's gauges are another instance's to export."""
        if job == "gauges":
            self.metrics.clear_database_gauges()

    def _left(self) -> float | None:
        """Seconds left of the safe window for the next call, None when not primary."""
        left = self.elector.remaining()
        return None if left <= 0 or self._stopped else left

    def _failed(self, job: str, error: Exception) -> None:
        if isinstance(error, psycopg.Error):
            log.warning("%s: %s failed: %s", self.name, job, error)
        else:
            log.error("%s: %s failed", self.name, job, exc_info=error)
        self.metrics.maintain_failures.labels(job).inc()
        with self._lock:
            self.stats.failures += 1


# A job: a generator of operations that receives each one's result.
Steps = Generator[Op[Any], Any, None]


class Maintainer(MaintainLogic, Runtime):
    """Ticks schedules and runs retention while elected; use as a context manager.

    ``interval`` and ``timeout`` are the election's I and T (T > 2I). Leaving the
    ``with`` block stops both jobs, then resigns, so a standby takes over at once.
    """

    elector: Elector

    def __init__(self, conninfo: str, **options: Any) -> None:
        super().__init__(conninfo, **options, elector=Elector)
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._deadlines = Deadlines(f"maintain {self.name}")

    def wait_until_primary(self, timeout: float | None = None) -> bool:
        return self.elector.wait_until_primary(timeout)

    def start(self) -> Self:
        self.elector.start()
        for job, every in self._jobs():
            thread = threading.Thread(
                target=self._run, args=(job, every), name=f"tenure-maintain-{job}-{self.name}", daemon=True
            )
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self, *, grace: float | None = None) -> None:
        """Stop both jobs (a call in progress ends within the safe window), then resign.

        Returns within ``grace`` seconds (default T - I) even while the database is away: a
        call in progress is cut at once, and a job stuck connecting ends by itself later.
        Stopping a stopped maintainer does nothing."""
        if self._stopped:
            return
        self._stopped = True
        end = time.monotonic() + (self.elector.timing.safe_window if grace is None else grace)
        self._stopping.set()
        self._deadlines.cut()
        for thread in self._threads:
            thread.join(max(0.0, end - time.monotonic()))
        self._threads.clear()
        self.elector.stop(resign=True, grace=max(0.0, end - time.monotonic()))
        self._deadlines.close()
        self.metrics.clear_database_gauges()

    def _run(self, job: str, every: float) -> None:
        connection: psycopg.Connection[Any] | None = None
        next_run = time.monotonic()
        try:
            while not self._stopping.is_set():
                if self.elector.remaining() <= 0:
                    # Standby: wait to be elected (or stopped), then run at once.
                    self._standby(job)
                    self.elector.wait_until_primary(timeout=min(every, 0.5))
                    next_run = min(next_run, time.monotonic())
                    continue
                if time.monotonic() < next_run:
                    self._stopping.wait(min(next_run - time.monotonic(), 0.5))
                    continue
                try:
                    if connection is None or connection.closed or connection.broken:
                        if connection is not None:
                            connection.close()
                        connection = connect(
                            self.conninfo,
                            application_name=self._connection_name(job),
                            deadline=self.elector.timing.safe_window,
                        )
                    self._run_steps(connection, self._steps(job))
                except Exception as error:
                    if self._stopping.is_set():
                        break  # cut short by stop()
                    self._failed(job, error)
                    if isinstance(error, psycopg.Error) and connection is not None:
                        connection.close()
                        connection = None
                next_run = max(next_run + every, time.monotonic())
        finally:
            if connection is not None:
                connection.close()

    def _run_steps(self, connection: psycopg.Connection[Any], steps: Steps) -> None:
        result: Any = None
        while (operation := _next_step(steps, result)) is not None:
            left = self._left()
            if left is None:
                return  # no longer primary: the next run goes on
            with self._deadlines.bounded(connection, left):
                result = Driver(connection).run(operation)


class AsyncMaintainer(MaintainLogic, AsyncRuntime):
    """:class:`Maintainer` for asyncio: the same jobs, with an :class:`AsyncElector`, as tasks
    of the running event loop. Use as ``async with``; leaving the block, or the cancellation
    of the task in it, stops both jobs and resigns."""

    elector: AsyncElector

    def __init__(self, conninfo: str, **options: Any) -> None:
        super().__init__(conninfo, **options, elector=AsyncElector)
        self._tasks: list[asyncio.Task[None]] = []
        self._deadlines = AsyncDeadlines(f"maintain {self.name}")

    async def wait_until_primary(self, timeout: float | None = None) -> bool:
        return await self.elector.wait_until_primary(timeout)

    async def start(self) -> Self:
        await self.elector.start()
        for job, every in self._jobs():
            self._tasks.append(asyncio.create_task(self._run(job, every), name=f"tenure-maintain-{job}"))
        return self

    async def stop(self, *, grace: float | None = None) -> None:
        """Stop both jobs (a call in progress is abandoned), then resign, within ``grace``
        seconds (default T - I) as :meth:`Maintainer.stop`."""
        if self._stopped:
            return
        self._stopped = True
        end = time.monotonic() + (self.elector.timing.safe_window if grace is None else grace)
        cut = self._deadlines.cut()  # a cut call ends its task's run (see _run): no cancel request
        for task in self._tasks:
            if task not in cut:
                task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=max(0.0, end - time.monotonic()))
        self._tasks.clear()
        await self.elector.stop(resign=True, grace=max(0.0, end - time.monotonic()))
        self.metrics.clear_database_gauges()

    async def _run(self, job: str, every: float) -> None:
        connection: psycopg.AsyncConnection[Any] | None = None
        next_run = time.monotonic()
        try:
            while not self._stopped:
                if self.elector.remaining() <= 0:
                    self._standby(job)
                    await self.elector.wait_until_primary(timeout=min(every, 0.5))
                    next_run = min(next_run, time.monotonic())
                    continue
                if time.monotonic() < next_run:
                    await asyncio.sleep(min(next_run - time.monotonic(), 0.5))
                    continue
                try:
                    if connection is None or connection.closed or connection.broken:
                        if connection is not None:
                            await connection.close()
                        connection = await aconnect(
                            self.conninfo,
                            application_name=self._connection_name(job),
                            deadline=self.elector.timing.safe_window,
                        )
                    await self._run_steps(connection, self._steps(job))
                except Exception as error:
                    if self._stopped:
                        break  # cut short by stop()
                    self._failed(job, error)
                    if isinstance(error, psycopg.Error) and connection is not None:
                        await connection.close()
                        connection = None
                next_run = max(next_run + every, time.monotonic())
        finally:
            if connection is not None:
                await connection.close()

    async def _run_steps(self, connection: psycopg.AsyncConnection[Any], steps: Steps) -> None:
        result: Any = None
        while (operation := _next_step(steps, result)) is not None:
            left = self._left()
            if left is None:
                return  # no longer primary: the next run goes on
            with self._deadlines.bounded(connection, left):
                result = await AsyncDriver(connection).run(operation)


def _next_step(steps: Steps, result: Any) -> Op[Any] | None:
    try:
        return steps.send(result)
    except StopIteration:
        return None
