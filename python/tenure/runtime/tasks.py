"""The task worker: leases due tasks and runs the application's processors on them.

A processor takes a :class:`Task` and returns what happens next: :class:`Complete`,
:class:`Next` (a new state that runs at once, under the same lease, if this worker
has a processor for it), :class:`Release` (due again later, "check again in a
minute"), or :class:`Fail` (raising does the same). Each outcome may carry
``writes``: the application's own writes for that step, run in the same
transaction as the task's transition, so that a step's writes are accepted exactly
once however often the step runs.

One dispatcher thread talks to the database for the whole worker: each round trip
(``task_cycle``) reports the outcomes that finished since the last one and leases
due tasks for the free slots, in one call and one commit, so the cost per task
falls as the load rises. An outcome with ``writes``, and a :class:`Next`, is
recorded on its own, in its own transaction, by the thread that ran the processor.
Processors run on ``concurrency`` threads.

Every task in flight has its lease extended in the background, all in one call.
When an extension is refused, or none succeeded within the safe window (2/3 of the
lease after the last one was sent), the task is lost: ``task.lost`` is set, its
outcome is discarded, and nothing more of it reaches the database.

Every call is bounded by the safe window (a call on a frozen server has its socket
abandoned), a call that failed because the connection no longer reaches a writable
primary is retried at once on another connection while the lease allows, pooled
connections idle for a while are checked before use, and stopping takes at most
``shutdown_grace`` seconds even while the database is away: a failover costs at
most the tasks whose leases it outlasts.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, nullcontext
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
from tenure.driver import Driver, TaskCycled
from tenure.errors import InvalidArgument, InvalidConfiguration, LeaseLost, TenureError
from tenure.metrics import Metrics

log = logging.getLogger(__name__)

Writes = Callable[[psycopg.Connection[Any]], object]
R = TypeVar("R")
_LAST_USED = "_tenure_last_used"
# A pooled connection idle for longer than this is checked before it is handed out.
CHECK_AFTER_IDLE = 1.0
# While tasks run and fewer than half the slots are free, a finished outcome waits up to
# this long (seconds) for others to share its round trip: each lookup of due tasks walks
# past the index entries of the tasks leased before it until VACUUM removes them, so a
# call that leases many tasks costs far less per task than many calls that lease few.
LINGER = 0.002


MAX_DELAY = 100 * 365.25 * 86400  # seconds: the database refuses delays past 100 years


def _check_state(outcome: str, state: str | None) -> None:
    if state is not None and (not isinstance(state, str) or not state.strip() or len(state) > 200):
        raise InvalidArgument(
            f"{outcome}: the state must be a non-empty string of at most 200 characters, got {state!r}"
        )


def _check_delay(outcome: str, name: str, delay: float | None) -> None:
    if delay is not None and not 0 <= delay <= MAX_DELAY:
        raise InvalidArgument(f"{outcome}: {name} must be from 0 seconds to 100 years, got {delay!r}")


# An outcome is checked when it is made, so that a bad one fails in the processor that
# made it (and becomes a Fail) instead of in the round trip that reports many.
@dataclass(frozen=True)
class Complete:
    state: str = "done"
    data: Any = None
    writes: Writes | None = None

    def __post_init__(self) -> None:
        _check_state("Complete", self.state)


@dataclass(frozen=True)
class Next:
    state: str
    data: Any = None
    writes: Writes | None = None

    def __post_init__(self) -> None:
        _check_state("Next", self.state)


@dataclass(frozen=True)
class Release:
    delay: float = 0.0
    state: str | None = None
    data: Any = None
    writes: Writes | None = None

    def __post_init__(self) -> None:
        _check_state("Release", self.state)
        _check_delay("Release", "delay", self.delay)


@dataclass(frozen=True)
class Fail:
    error: str
    retry_delay: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.error, str) or not self.error.strip():
            raise InvalidArgument(f"Fail: the error must describe the failure, got {self.error!r}")
        _check_delay("Fail", "retry_delay", self.retry_delay)


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
        if concurrency < 1 or concurrency > 10000:
            raise InvalidConfiguration(f"concurrency must be between 1 and 10000, got {concurrency}")
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
        # How long an idle worker stays registered for notifications: past its next poll,
        # which registers it again. None: not listening, so not registered.
        self._wait = min(2 * poll_interval + 1.0, 86400.0) if listen else None
        self.shutdown_grace = shutdown_grace
        self.instance_id = uuid.uuid4()
        self.name = instance_name(name)
        self.stats = WorkerStats()
        self.metrics = metrics or Metrics()
        self._in_flight: dict[uuid.UUID, Task] = {}  # every task this worker holds
        self._running = 0  # of those, how many a processor thread has (or is about to have)
        self._ready: queue.SimpleQueue[Task | None] = queue.SimpleQueue()  # leased, for the processor threads
        self._finished: list[tuple[Task, Outcome]] = []  # outcomes for the dispatcher's next round trip
        self._finished_at = 0.0  # when the oldest of them finished (monotonic)
        # Tasks whose outcome is being recorded: a refused extension of one of these may
        # only mean the outcome committed first; the outcome's own transaction tells.
        self._recording: set[uuid.UUID] = set()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._due = True  # whether tasks may be due: until an acquisition comes back short
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
        loops: list[tuple[Callable[[], None], str]] = [(self._dispatch, "dispatch"), (self._extend, "extend")]
        if self.listen:
            loops.append((self._listen, "listen"))
        loops += [(self._process, f"processor-{n}") for n in range(self.concurrency)]
        for target, role in loops:
            # Daemon threads: a processor that hangs must not keep the process from
            # exiting once its task was released.
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
        while self._held() and time.monotonic() < deadline:
            time.sleep(0.02)  # the dispatcher keeps reporting what finishes meanwhile
        release_by = max(deadline, time.monotonic()) + min(self.safe_window, 2.0)
        with self._lock:
            reported = {task.id for task, _ in self._finished} | self._recording
            unfinished = [task for task in self._in_flight.values() if task.id not in reported]
        for task in unfinished:
            task.lost.set()  # whatever it still produces is discarded
        if unfinished and release_by > time.monotonic():
            try:
                self._report([(task, Release()) for task in unfinished], until=release_by)
            except psycopg.Error as error:
                log.info("%s: could not release %d tasks: %s", self.name, len(unfinished), error)
        while self._held() and time.monotonic() < release_by:
            time.sleep(0.02)  # outcomes that finished in time are still on their way
        self._closed.set()
        self._wake.set()
        for _ in range(self.concurrency):
            self._ready.put(None)
        for role, thread in self._threads.items():
            if not role.startswith("processor"):
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

    # -- the dispatcher: one round trip reports what finished and leases what fits ------

    def _dispatch(self) -> None:
        poll_at = time.monotonic()
        while not self._closed.is_set():
            now = time.monotonic()
            with self._lock:
                stopping = self._stopping.is_set()
                free = 0 if stopping else self.concurrency - self._running
                linger_until = self._finished_at + LINGER if self._finished else 0.0
                if not stopping and self._running and 2 * free < self.concurrency and now < linger_until:
                    finished = []  # share the round trip with outcomes soon to come
                else:
                    finished, self._finished, linger_until = self._finished, [], 0.0
                    self._recording.update(task.id for task, _ in finished)  # see stop()
            if linger_until:
                self._wake.wait(linger_until - now)
                self._wake.clear()
                continue
            if free > 0 and now >= poll_at:
                self._due = True
            limit = free if self._due else 0
            if finished or limit:
                if limit:
                    poll_at = time.monotonic() + self.poll_interval
                try:
                    self._cycle(finished, limit)
                except (psycopg.Error, TenureError) as error:
                    log.warning("%s: a round trip to the database failed: %s", self.name, error)
                    self._closed.wait(min(self.poll_interval, 0.5))
                except Exception:
                    log.exception("%s: a round trip to the database failed", self.name)
                    self._closed.wait(min(self.poll_interval, 0.5))
                finally:
                    with self._lock:
                        self._recording.difference_update(task.id for task, _ in finished)
                continue
            self._wake.wait(max(0.0, poll_at - time.monotonic()) if free > 0 else None)
            self._wake.clear()

    def _cycle(self, finished: list[tuple[Task, Outcome]], limit: int) -> None:
        """Report ``finished`` and lease up to ``limit`` tasks, in one call."""
        reported = []
        for task, outcome in finished:
            if task.is_lost():
                self._discard(task, "the lease was lost before the outcome was recorded")
                self._finish(task)
            else:
                reported.append((task, outcome))
        if not reported and not limit:
            return
        sent = time.monotonic()
        until = min((task.valid_until for task, _ in reported), default=sent + self.safe_window)
        try:
            rows = self._report(reported, until=until, limit=limit)
        except BaseException:
            for task, _ in reported:  # the lease runs out unless the outcome did commit
                self._finish(task)
            raise
        leases = [row for row in rows if row.outcome == "lease"]
        if limit:
            self._due = len(leases) == limit  # a short answer: nothing more is due for now
        for row in leases:
            task = Task(
                id=row.id,
                kind=row.kind or "",
                state=row.state or "",
                data=row.data,
                epoch=row.epoch,
                attempts=row.attempts or 0,
                owner=self.instance_id,
                valid_until=sent + self.safe_window,
            )
            with self._lock:
                self._in_flight[task.id] = task
                self._running += 1
                self.stats.acquired += 1
            self.metrics.tasks_acquired.labels(task.kind).inc()
            self.metrics.tasks_in_flight.inc()
            self._ready.put(task)

    def _report(
        self, reported: list[tuple[Task, Outcome]], *, until: float, limit: int = 0
    ) -> list[TaskCycled]:
        """One ``task_cycle`` call: the outcomes' results are counted and their tasks let go."""
        with self._lock:
            self._recording.update(task.id for task, _ in reported)
        try:
            rows = self._call(
                lambda connection: Driver(connection).task_cycle(
                    self.instance_id,
                    lease=self.lease,
                    limit=limit,
                    kinds=self.kinds,
                    outcomes=[_outcome_json(task, outcome) for task, outcome in reported],
                    wait=self._wait if limit else None,
                ),
                until=until,
            )
        finally:
            with self._lock:
                self._recording.difference_update(task.id for task, _ in reported)
        for (task, outcome), row in zip(reported, rows, strict=False):
            if row.refused is None:
                self._count(task, outcome)
            else:
                self._lose(task, row.refused)
                self._discard(task, "the database refused the outcome")
            self._finish(task)
        return rows

    def _listen(self) -> None:
        """Wake the dispatcher when a task of our kinds becomes due (or LISTEN reconnected)."""

        def on_notify(payload: str | None) -> None:
            if payload is None or payload in self.kinds:
                self._due = True
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
            held = []
            for task in self._held():
                if task.is_lost():
                    self._lose(task, "no lease extension within the safe window")
                else:
                    held.append(task)
            if not held:
                continue
            extensions = [{"id": task.id, "epoch": task.epoch, "outcome": "extend"} for task in held]
            sent = time.monotonic()
            try:
                rows = self._call(
                    lambda connection, extensions=extensions: Driver(connection).task_cycle(  # type: ignore[misc]
                        self.instance_id, lease=self.lease, limit=0, kinds=self.kinds, outcomes=extensions
                    ),
                    until=min(task.valid_until for task in held),
                )
            except psycopg.Error as error:
                log.warning("%s: extending %d leases failed: %s", self.name, len(held), error)
                continue
            for task, row in zip(held, rows, strict=False):
                if row.refused is None:
                    task.valid_until = sent + self.safe_window
                    continue
                with self._lock:
                    recording = task.id in self._recording
                if not recording:
                    self._lose(task, row.refused)

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

    def _process(self) -> None:
        while (task := self._ready.get()) is not None:
            try:
                self._run(task)
            finally:
                with self._lock:
                    self._running -= 1
                self._wake.set()

    def _run(self, task: Task) -> None:
        while not task.is_lost():
            processor = self.processor_for(task.kind, task.state)
            if processor is None:
                self._hand_over(task, _ROUTED_AWAY)
                return
            try:
                outcome = processor(task)
                if not isinstance(outcome, Complete | Next | Release | Fail):
                    raise TypeError(
                        f"the processor returned {outcome!r}, not Complete, Next, Release or Fail"
                    )
                json.dumps(getattr(outcome, "data", None))  # data the round trip cannot send fails here
            except Exception as error:
                log.exception("%s: processor failed on task %s", self.name, task.id)
                outcome = Fail(f"{error.__class__.__name__}: {error}")
            if not isinstance(outcome, Next) and getattr(outcome, "writes", None) is None:
                self._hand_over(task, outcome)
                return
            if not self._apply(task, outcome) or not isinstance(outcome, Next):
                return
            task.state = outcome.state
            if outcome.data is not None:
                task.data = outcome.data
            with self._lock:
                self.stats.routed += 1
        self._discard(task, "the lease was lost before the outcome was recorded")
        self._finish(task)

    def _hand_over(self, task: Task, outcome: Outcome) -> None:
        """Leave ``outcome`` for the dispatcher's next round trip."""
        with self._lock:
            if not self._finished:
                self._finished_at = time.monotonic()
            self._finished.append((task, outcome))
        self._wake.set()

    def _finish(self, task: Task) -> None:
        """The task is no longer this worker's (once, however often it is called)."""
        with self._lock:
            if self._in_flight.pop(task.id, None) is not None:
                self.metrics.tasks_in_flight.dec()

    def _count(self, task: Task, outcome: Outcome) -> None:
        with self._lock:
            if isinstance(outcome, Complete):
                self.stats.completed += 1
            elif isinstance(outcome, Release) and outcome is not _ROUTED_AWAY:
                self.stats.released += 1
            elif isinstance(outcome, Fail):
                self.stats.failed += 1
        if isinstance(outcome, Complete):
            self.metrics.tasks_completed.labels(task.kind).inc()
        elif isinstance(outcome, Fail):
            self.metrics.tasks_failed.labels(task.kind).inc()

    def _apply(self, task: Task, outcome: Outcome) -> bool:
        """Record an outcome that carries writes, or a Next, on its own; False when it was
        discarded or its fate is unknown (the task is let go then)."""
        if task.is_lost():
            self._discard(task, "the lease was lost before the outcome was recorded")
            self._finish(task)
            return False
        with self._lock:
            self._recording.add(task.id)
        try:
            self._call(lambda connection: self._record(connection, task, outcome), until=task.valid_until)
        except LeaseLost as error:
            self._lose(task, error.detail or error.message)
            self._discard(task, "the database refused the outcome")
            self._finish(task)
            return False
        except psycopg.Error as error:
            log.warning("%s: recording the outcome of task %s failed: %s", self.name, task.id, error)
            self._finish(task)
            return False
        finally:
            with self._lock:
                self._recording.discard(task.id)
        if not isinstance(outcome, Next):
            self._finish(task)  # before the extender can find it held and be told it is done
            self._count(task, outcome)
        return True

    def _record(self, connection: psycopg.Connection[Any], task: Task, outcome: Outcome) -> None:
        """The outcome's transition and its writes in one transaction, confirmed by the cluster."""
        if task.is_lost():
            raise LeaseLost(f"the lease of task {task.id} ran out before its outcome was recorded")
        writes = getattr(outcome, "writes", None)
        with durable_transaction(connection) if writes is not None else nullcontext(connection):
            driver = Driver(connection)
            if isinstance(outcome, Complete):
                driver.task_complete(task.id, task.owner, task.epoch, state=outcome.state, data=outcome.data)
            elif isinstance(outcome, Next):
                driver.task_update(task.id, task.owner, task.epoch, state=outcome.state, data=outcome.data)
            elif isinstance(outcome, Release):
                driver.task_release(
                    task.id,
                    task.owner,
                    task.epoch,
                    delay=outcome.delay,
                    state=outcome.state,
                    data=outcome.data,
                )
            if writes is not None:
                writes(connection)

    def _discard(self, task: Task, why: str) -> None:
        with self._lock:
            self.stats.discarded += 1
        log.warning("%s: discarded the result of task %s (epoch %d): %s", self.name, task.id, task.epoch, why)


# What a processor thread hands the dispatcher when no processor takes the task's state:
# released at once for a worker that has one, counted as neither released nor routed.
_ROUTED_AWAY = Release()


def _outcome_json(task: Task, outcome: Outcome) -> dict[str, Any]:
    """``outcome`` of ``task`` as ``task_cycle`` takes it."""
    given = {"id": task.id, "epoch": task.epoch}
    if isinstance(outcome, Complete):
        given |= {"outcome": "complete", "state": outcome.state, "data": outcome.data}
    elif isinstance(outcome, Release):
        given |= {"outcome": "release", "delay": outcome.delay, "state": outcome.state, "data": outcome.data}
    elif isinstance(outcome, Fail):
        given |= {"outcome": "fail", "error": outcome.error, "retry_delay": outcome.retry_delay}
    else:
        raise TypeError(f"not an outcome to report in a round trip: {outcome!r}")
    return {key: value for key, value in given.items() if value is not None}
