"""The task worker: leases due tasks and runs the application's processors on them.

A processor takes a :class:`Task` and returns what happens next: :class:`Complete`,
:class:`Next` (a new state that runs at once, under the same lease, if this worker
has a processor for it), :class:`Release` (due again later, "check again in a
minute"), or :class:`Fail` (raising does the same). Each outcome may carry
``writes``: the application's own writes for that step, run in the same
transaction as the task's transition, so that a step's writes are accepted exactly
once however often the step runs.

Every task in flight has its lease extended in the background. When an extension
is refused, or none succeeded within the safe window (2/3 of the lease after the
last one was sent), the task is lost: ``task.lost`` is set, its outcome is
discarded, and nothing more of it reaches the database.

Every call is bounded by the safe window (a call on a frozen server has its socket
abandoned), a call that failed because the connection no longer reaches a writable
primary is retried at once on another connection while the lease allows, pooled
connections idle for a while are checked before use, and stopping takes at most
``shutdown_grace`` seconds even while the database is away: a failover costs at
most the tasks whose leases it outlasts.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, TypeVar

import psycopg
from psycopg_pool import ConnectionPool

from tenure.connect import (
    Deadlines,
    check_start,
    connection_options,
    durable_transaction,
    instance_name,
    listen,
    lost_server,
    watch_commits,
)
from tenure.driver import Driver, TaskLease
from tenure.errors import InvalidConfiguration, LeaseLost
from tenure.metrics import Metrics

log = logging.getLogger(__name__)

Writes = Callable[[psycopg.Connection[Any]], object]
R = TypeVar("R")
_LAST_USED = "_tenure_last_used"
# A pooled connection idle for longer than this is checked before it is handed out.
CHECK_AFTER_IDLE = 1.0


@dataclass(frozen=True)
class Complete:
    state: str = "done"
    data: Any = None
    writes: Writes | None = None


@dataclass(frozen=True)
class Next:
    state: str
    data: Any = None
    writes: Writes | None = None


@dataclass(frozen=True)
class Release:
    delay: float = 0.0
    state: str | None = None
    data: Any = None
    writes: Writes | None = None


@dataclass(frozen=True)
class Fail:
    error: str
    retry_delay: float | None = None


Outcome = Complete | Next | Release | Fail
Processor = Callable[["Task"], Outcome]


@dataclass
class Task:
    """A task as a processor sees it, under this worker's lease."""

    id: uuid.UUID
    kind: str
    state: str
    data: Any
    epoch: int
    attempts: int
    owner: uuid.UUID
    lost: threading.Event = field(default_factory=threading.Event)
    valid_until: float = 0.0  # monotonic: sent time of the last successful lease grant + safe window

    def is_lost(self) -> bool:
        return self.lost.is_set() or time.monotonic() >= self.valid_until


@dataclass
class WorkerStats:
    acquired: int = 0
    completed: int = 0
    released: int = 0
    failed: int = 0
    routed: int = 0
    lost: int = 0
    discarded: int = 0


class TaskWorker:
    """Runs processors on leased tasks with at most ``concurrency`` in flight.

    ``processors`` maps a kind, or a (kind, state) pair, to a processor; the pair
    wins. Use as a context manager: leaving waits up to ``shutdown_grace`` seconds
    for tasks in flight, then releases the rest so another instance takes them at once.
    """

    def __init__(
        self,
        conninfo: str,
        processors: Mapping[str | tuple[str, str], Processor],
        *,
        concurrency: int = 4,
        lease: float = 30.0,
        poll_interval: float = 1.0,
        listen: bool = True,
        shutdown_grace: float = 5.0,
        name: str | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        if concurrency < 1:
            raise InvalidConfiguration(f"concurrency must be at least 1, got {concurrency}")
        if not lease > 0 or not poll_interval > 0:
            raise InvalidConfiguration(f"lease and poll_interval must be positive: {lease}, {poll_interval}")
        if not processors:
            raise InvalidConfiguration("register at least one processor")
        self.conninfo = conninfo
        self.processors = dict(processors)
        self.kinds = sorted({key[0] if isinstance(key, tuple) else key for key in self.processors})
        self.concurrency = concurrency
        self.lease = lease
        self.extend_every = lease / 3
        self.safe_window = lease - self.extend_every
        self.poll_interval = poll_interval
        self.listen = listen
        self.shutdown_grace = shutdown_grace
        self.instance_id = uuid.uuid4()
        self.name = instance_name(name)
        self.stats = WorkerStats()
        self.metrics = metrics or Metrics()
        self._in_flight: dict[uuid.UUID, Task] = {}
        # Tasks whose outcome is being recorded: a refused extension of one of these may
        # only mean the outcome committed first; the outcome's own transaction tells.
        self._recording: set[uuid.UUID] = set()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()  # no more new tasks
        self._closed = threading.Event()  # no more leases kept either
        self._threads: dict[str, threading.Thread] = {}
        self._deadlines = Deadlines(f"tasks {self.name}")
        self._pool = ConnectionPool(
            conninfo,
            min_size=1,
            max_size=concurrency + 2,
            kwargs=self._connection_options(),
            configure=watch_commits,
            check=self._check,
            timeout=self.safe_window,
            reconnect_timeout=max(60.0, 10 * lease),
            open=False,
            name=f"tenure-tasks-{self.name}",
        )

    def _connection_options(self) -> dict[str, Any]:
        return connection_options(application_name=f"tenure tasks {self.name}", deadline=self.safe_window)

    def _check(self, connection: psycopg.Connection[Any]) -> None:
        """A connection idle for a while may lead to a server that failed over: ask it first."""
        if time.monotonic() - getattr(connection, _LAST_USED, 0.0) < CHECK_AFTER_IDLE:
            return
        with self._deadlines.bounded(connection, min(self.safe_window, 2.0)):
            connection.execute("")

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection for one call, bounded by the safe window; a connection that
        no longer reaches a writable primary is closed, so the pool replaces it."""
        with self._pool.connection(timeout=self.safe_window) as connection:
            try:
                with self._deadlines.bounded(connection, self.safe_window):
                    yield connection
            except BaseException as error:
                if lost_server(error, connection):
                    connection.close()
                raise
            finally:
                setattr(connection, _LAST_USED, time.monotonic())

    def _call(self, call: Callable[[psycopg.Connection[Any]], R], *, until: float) -> R:
        """``call`` on a pooled connection, tried again at once on another one while the
        server is lost (a failover, a stale pooled connection) and ``until`` is ahead."""
        while True:
            try:
                with self._connection() as connection:
                    return call(connection)
            except psycopg.Error as error:
                if not lost_server(error) or time.monotonic() + 0.05 >= until or self._closed.is_set():
                    raise
                log.info("%s: the database connection failed, trying again: %s", self.name, error)
                time.sleep(0.05)

    # -- life cycle ---------------------------------------------------------------

    def start(self) -> TaskWorker:
        check_start(
            self.conninfo,
            application_name=f"tenure tasks {self.name}",
            listener="a task worker that listens for new tasks" if self.listen else None,
        )
        self._pool.open(wait=True, timeout=30)
        loops: list[tuple[Callable[[], None], str]] = [(self._poll, "poll"), (self._extend, "extend")]
        if self.listen:
            loops.append((self._listen, "listen"))
        for target, role in loops:
            self._threads[role] = threading.Thread(target=target, name=f"tenure-tasks-{role}", daemon=True)
            self._threads[role].start()
        return self

    def stop(self) -> None:
        """Stop taking tasks, let those in flight finish for ``shutdown_grace``, release the rest.

        Takes at most ``shutdown_grace`` plus a release bound (the safe window, at most
        2 s), even while the database is away: a task that could not be released is left
        to its lease.
        """
        deadline = time.monotonic() + self.shutdown_grace
        self._stopping.set()
        self._wake.set()
        self._threads["poll"].join()  # an acquisition in progress ends within the safe window
        while self._held() and time.monotonic() < deadline:
            time.sleep(0.02)
        release_by = max(deadline, time.monotonic()) + min(self.safe_window, 2.0)
        for task in self._held():
            task.lost.set()  # whatever it still produces is discarded
            left = release_by - time.monotonic()
            if left <= 0:
                continue  # its lease runs out by itself
            try:
                with (
                    self._pool.connection(timeout=left) as connection,
                    self._deadlines.bounded(connection, left),
                ):
                    Driver(connection).task_release(task.id, task.owner, task.epoch)
            except (LeaseLost, psycopg.Error) as error:
                log.info("%s: could not release %s: %s", self.name, task.id, error)
        self._closed.set()
        for thread in self._threads.values():
            thread.join()
        self._threads.clear()
        self._pool.close(timeout=max(0.1, release_by - time.monotonic()))
        self._deadlines.close()

    def __enter__(self) -> TaskWorker:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def in_flight(self) -> int:
        with self._lock:
            return len(self._in_flight)

    def _held(self) -> list[Task]:
        with self._lock:
            return list(self._in_flight.values())

    # -- taking tasks --------------------------------------------------------------

    def _poll(self) -> None:
        while not self._stopping.is_set():
            free = self.concurrency - self.in_flight()
            got = 0
            if free > 0:
                try:
                    got = self._acquire(free)
                except psycopg.Error as error:
                    log.warning("%s: acquire failed: %s", self.name, error)
            if got and got == free:
                continue  # there may be more: ask again as soon as a slot frees
            self._wake.wait(self.poll_interval)
            self._wake.clear()

    def _acquire(self, limit: int) -> int:
        sent = time.monotonic()
        with self._connection() as connection:
            leases = Driver(connection).task_acquire(
                self.instance_id, lease=self.lease, limit=limit, kinds=self.kinds
            )
        for lease in leases:
            task = self._task(lease, sent)
            with self._lock:
                self._in_flight[task.id] = task
                self.stats.acquired += 1
            self.metrics.tasks_acquired.labels(task.kind).inc()
            self.metrics.tasks_in_flight.inc()
            # A daemon thread per task (at most `concurrency` at once): a processor that
            # hangs must not keep the process from exiting once its task was released.
            threading.Thread(
                target=self._run, args=(task,), name=f"tenure-task-{task.id}", daemon=True
            ).start()
        return len(leases)

    def _task(self, lease: TaskLease, sent: float) -> Task:
        return Task(
            id=lease.id,
            kind=lease.kind,
            state=lease.state,
            data=lease.data,
            epoch=lease.epoch,
            attempts=lease.attempts,
            owner=self.instance_id,
            valid_until=sent + self.safe_window,
        )

    def _listen(self) -> None:
        """Wake the poller when a task of our kinds becomes due (or LISTEN reconnected)."""

        def on_notify(payload: str | None) -> None:
            if payload is None or payload in self.kinds:
                self._wake.set()

        listen(
            self.conninfo,
            "tenure_task",
            name=self.name,
            stopping=self._stopping,
            retry=self.poll_interval,
            on_notify=on_notify,
        )

    # -- keeping leases --------------------------------------------------------------

    def _extend(self) -> None:
        while not self._closed.wait(self.extend_every):
            for task in self._held():
                if task.is_lost():
                    self._lose(task, "no lease extension within the safe window")
                    continue
                sent = time.monotonic()
                try:
                    self._call(
                        lambda connection, task=task: Driver(connection).task_extend(  # type: ignore[misc]
                            task.id, task.owner, task.epoch, lease=self.lease
                        ),
                        until=task.valid_until,
                    )
                    task.valid_until = sent + self.safe_window
                except LeaseLost as error:
                    with self._lock:
                        recording = task.id in self._recording
                    if not recording:
                        self._lose(task, error.detail or error.message)
                except psycopg.Error as error:
                    log.warning("%s: extending %s failed: %s", self.name, task.id, error)

    def _lose(self, task: Task, reason: str) -> None:
        with self._lock:
            if task.id not in self._in_flight:
                return  # it finished while the extender was at it
        if not task.lost.is_set():
            task.lost.set()
            with self._lock:
                self.stats.lost += 1
            self.metrics.task_leases_lost.labels(task.kind).inc()
            log.warning(
                "%s: lost the lease of task %s (epoch %d): %s", self.name, task.id, task.epoch, reason
            )

    # -- running processors ------------------------------------------------------------

    def processor_for(self, kind: str, state: str) -> Processor | None:
        return self.processors.get((kind, state)) or self.processors.get(kind)

    def _run(self, task: Task) -> None:
        try:
            while not task.is_lost():
                processor = self.processor_for(task.kind, task.state)
                if processor is None:
                    self._apply(task, Release(), routed_away=True)
                    return
                try:
                    outcome = processor(task)
                except Exception as error:
                    log.exception("%s: processor failed on task %s", self.name, task.id)
                    outcome = Fail(f"{error.__class__.__name__}: {error}")
                if not self._apply(task, outcome):
                    return
                if not isinstance(outcome, Next):
                    return
                task.state = outcome.state
                if outcome.data is not None:
                    task.data = outcome.data
                with self._lock:
                    self.stats.routed += 1
        finally:
            self._finish(task)
            self._wake.set()

    def _finish(self, task: Task) -> None:
        """The task is no longer this worker's (once, however often it is called)."""
        with self._lock:
            if self._in_flight.pop(task.id, None) is not None:
                self.metrics.tasks_in_flight.dec()

    def _apply(self, task: Task, outcome: Outcome, *, routed_away: bool = False) -> bool:
        """Record the outcome with its writes in one transaction; False when it was discarded."""
        if task.is_lost():
            self._discard(task, "the lease was lost before the outcome was recorded")
            return False
        with self._lock:
            self._recording.add(task.id)
        try:
            self._call(lambda connection: self._record(connection, task, outcome), until=task.valid_until)
        except LeaseLost as error:
            self._lose(task, error.detail or error.message)
            self._discard(task, "the database refused the outcome")
            return False
        except psycopg.Error as error:
            log.warning("%s: recording the outcome of task %s failed: %s", self.name, task.id, error)
            return False
        finally:
            with self._lock:
                self._recording.discard(task.id)
        if not isinstance(outcome, Next):
            self._finish(task)  # before the extender can find it held and be told it is done
        with self._lock:
            if isinstance(outcome, Complete):
                self.stats.completed += 1
            elif isinstance(outcome, Release) and not routed_away:
                self.stats.released += 1
            elif isinstance(outcome, Fail):
                self.stats.failed += 1
        if isinstance(outcome, Complete):
            self.metrics.tasks_completed.labels(task.kind).inc()
        elif isinstance(outcome, Fail):
            self.metrics.tasks_failed.labels(task.kind).inc()
        return True

    def _record(self, connection: psycopg.Connection[Any], task: Task, outcome: Outcome) -> None:
        """The outcome's transition and its writes in one transaction, confirmed by the cluster."""
        if task.is_lost():
            raise LeaseLost(f"the lease of task {task.id} ran out before its outcome was recorded")
        with durable_transaction(connection):
            driver = Driver(connection)
            writes: Writes | None = None
            if isinstance(outcome, Complete):
                driver.task_complete(task.id, task.owner, task.epoch, state=outcome.state, data=outcome.data)
                writes = outcome.writes
            elif isinstance(outcome, Next):
                driver.task_update(task.id, task.owner, task.epoch, state=outcome.state, data=outcome.data)
                writes = outcome.writes
            elif isinstance(outcome, Release):
                driver.task_release(
                    task.id,
                    task.owner,
                    task.epoch,
                    delay=outcome.delay,
                    state=outcome.state,
                    data=outcome.data,
                )
                writes = outcome.writes
            else:
                driver.task_fail(
                    task.id, task.owner, task.epoch, error=outcome.error, retry_delay=outcome.retry_delay
                )
            if writes is not None:
                writes(connection)

    def _discard(self, task: Task, why: str) -> None:
        with self._lock:
            self.stats.discarded += 1
        log.warning("%s: discarded the result of task %s (epoch %d): %s", self.name, task.id, task.epoch, why)
