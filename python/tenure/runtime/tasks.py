"""The task worker: leases due tasks and runs the application's processors on them.

A processor takes a :class:`Task` and returns what happens next: :class:`Complete`,
:class:`Next` (a new state that runs at once, under the same lease, if this worker
has a processor for it), :class:`Release` (due again later, "check again in a
minute"), or :class:`Fail` (raising does the same). Each outcome may carry
``writes``: the application's own writes for that step, run in the same
transaction as the task's transition, so that a step's writes are accepted exactly
once however often the step runs.

One dispatcher talks to the database for the whole worker: each round trip
(``task_cycle``) reports the outcomes that finished since the last one and leases
due tasks for the free slots, in one call and one commit, so the cost per task
falls as the load rises. An outcome with ``writes``, and a :class:`Next`, is
recorded on its own, in its own transaction, by the processor's runner.

:class:`TaskWorker` runs processors on ``concurrency`` threads; :class:`AsyncTaskWorker`
runs ``async def`` processors as tasks of the application's event loop, with no thread
(its ``writes`` are async and get the outcome's ``psycopg.AsyncConnection``). Both are
thin shells around :class:`TaskLogic`, where every decision is written once.

Every task in flight has its lease extended in the background, all in one call.
When an extension is refused, or none succeeded within the safe window (2/3 of the
lease after the last one was sent), the task is lost: ``task.lost`` is set (and an
async processor is cancelled), its outcome is discarded, and nothing more of it
reaches the database.

Every call is bounded by the safe window (a call on a frozen server has its socket
abandoned), a call that failed because the connection no longer reaches a writable
primary, or that the server rolled back to break a deadlock, is retried at once on
another connection while the lease allows, pooled
connections idle for a while are checked before use, and stopping takes at most
``shutdown_grace`` seconds even while the database is away: a failover costs at
most the tasks whose leases it outlasts.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import inspect
import json
import logging
import math
import queue
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Self, TypeVar

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from tenure.connect import (
    AsyncDeadlines,
    Deadlines,
    acheck_start,
    aconfigure,
    adurable_transaction,
    alisten,
    check_start,
    configure,
    connection_options,
    durable_transaction,
    instance_name,
    listen,
    lost_server,
)
from tenure.driver import OPS, AsyncDriver, Driver, Op, TaskCycled, TaskRow
from tenure.errors import InvalidArgument, InvalidConfiguration, LeaseLost, TenureError
from tenure.metrics import Metrics
from tenure.runtime.loop import AsyncRuntime, Runtime, capped, close_pool_by

log = logging.getLogger(__name__)

# What an outcome's ``writes`` takes: the connection of the outcome's transaction, a
# psycopg.Connection for TaskWorker, a psycopg.AsyncConnection (and returning an awaitable)
# for AsyncTaskWorker.
Writes = Callable[[Any], object]
R = TypeVar("R")
_LAST_USED = "_tenure_last_used"
# A pooled connection idle for longer than this is checked before it is handed out.
CHECK_AFTER_IDLE = 1.0
# While tasks run and fewer than half the slots are free, a finished outcome waits up to
# this long (seconds) for others to share its round trip: each lookup of due tasks walks
# past the index entries of the tasks leased before it until VACUUM removes them, so a
# call that leases many tasks costs far less per task than many calls that lease few.
LINGER = 0.002
# How long looking up the rows of refused tasks may take (seconds): past it, they count as lost.
LOOK_UP_FOR = 2.0
# SQLSTATEs of a call the server rolled back whole (deadlock_detected, serialization_failure):
# tried again at once, rather than leaving the outcomes it carried to their leases.
ROLLED_BACK = frozenset({"40P01", "40001"})
# The shortest wait (seconds) for a rate-limited kind's capacity, doubled for each answer in a row
# that leased nothing and was throttled again (up to the poll interval): a server clock this
# worker misjudges costs a few round trips, never a busy loop.
THROTTLE_FLOOR = 0.01

# The young generation of Python's garbage collector that tune_gc gives a worker, per slot of
# its concurrency: a task in flight holds about this many container objects, and they should
# die (most when its outcome is reported) before a collection looks at them.
GC_YOUNG_PER_SLOT = 20


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
AsyncProcessor = Callable[["Task"], Awaitable[Outcome]]


# Guards every _LostFlag's flag and the making of its condition (held for a few instructions).
_FLAGS = threading.Lock()


class _LostFlag(threading.Event):
    """A task's ``lost``: a ``threading.Event`` whose condition is made at the first ``wait()``.
    Every task gets one, few are ever waited on, and a plain Event costs a lock and a
    condition to make (a tenth of what a no-op task costs the worker)."""

    def __init__(self) -> None:  # no super().__init__(): the condition comes with the first wait
        self._flag = False
        self._cond: threading.Condition | None = None

    def _at_fork_reinit(self) -> None:
        if self._cond is not None:
            self._cond._at_fork_reinit()  # type: ignore[attr-defined]

    def is_set(self) -> bool:
        return self._flag

    def set(self) -> None:
        with _FLAGS:
            self._flag = True
            condition = self._cond
        if condition is not None:
            with condition:
                condition.notify_all()

    def clear(self) -> None:
        with _FLAGS:
            self._flag = False

    def wait(self, timeout: float | None = None) -> bool:
        with _FLAGS:
            if self._flag:
                return True
            if self._cond is None:
                self._cond = threading.Condition(threading.Lock())
            condition = self._cond
        # set() takes the condition after it sets the flag: a set() that comes between the
        # check above and the wait below still wakes it.
        with condition:
            return condition.wait_for(lambda: self._flag, timeout)


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
    lost: threading.Event = field(default_factory=_LostFlag)
    valid_until: float = 0.0  # monotonic: sent time of the last successful lease grant + safe window
    # What the processor (or a handler it runs) recorded itself in this epoch, found when an
    # extension was refused: counted once the processor ends. See TaskLogic._settle_refused.
    recorded: Outcome | None = None
    # Set (with ``lost``) when the worker found the task cancelled (task_cancel) while it held it.
    cancelled: bool = False

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
    # Tasks cancelled (task_cancel) while this worker held them: not counted as lost.
    cancelled: int = 0
    discarded: int = 0
    # Of the completed, released and failed: those the processor recorded itself, in its
    # own transaction, before the worker reported (or extended) them.
    already_recorded: int = 0


class TaskLogic:
    """What a task worker decides, whichever way it runs: on threads (:class:`TaskWorker`)
    or as asyncio tasks (:class:`AsyncTaskWorker`). Configuration, routing, the outcomes'
    checks, the bookkeeping of the tasks in flight, the linger decision, the round trip's
    statements and the handling of its rows, the extensions and the safe window are
    written here once; the two shells only wait, call and run processors their own way.
    Everything it holds is guarded by ``_lock``, which the async shell holds only between
    awaits (never contended there)."""

    def __init__(
        self,
        conninfo: str,
        processors: Mapping[str | tuple[str, str], Any],
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
        for key, processor in processors.items():
            self._check_processor(key, processor)
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
        self._lock = threading.Lock()
        self._in_flight: dict[uuid.UUID, Task] = {}  # every task this worker holds
        self._running = 0  # of those, how many a processor has (or is about to have)
        self._finished: list[tuple[Task, Outcome]] = []  # outcomes for the dispatcher's next round trip
        self._finished_at = 0.0  # when the oldest of them finished (monotonic)
        # Tasks whose outcome is being recorded: a refused extension of one of these may
        # only mean the outcome committed first; the outcome's own transaction tells.
        self._recording: set[uuid.UUID] = set()
        self._due = True  # whether tasks may be due: until an acquisition comes back short
        # When a rate-limited kind lets its next lease through (monotonic; inf: none held back),
        # and how many answers in a row leased nothing because of it.
        self._throttled_until = math.inf
        self._throttled_in_a_row = 0
        # A moment of the server's clock and the monotonic time it was seen at: the rate limit's
        # times are the server's (None until an answer tells; the wall clock stands in).
        self._server_clock: tuple[datetime, float] | None = None
        self._stop_requested = False  # no more new tasks
        self._closed = False  # no more leases kept either
        self._metric_children: dict[tuple[int, str], Any] = {}
        self._followers: list[Callable[[], None]] = []

    def follow(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` whenever a lease was extended or lost (on the thread that found
        out, without the worker's lock): a supervisor of processes run for tasks moves its
        deadlines, or stops a process, at once."""
        self._followers.append(callback)

    def _tell_followers(self) -> None:
        for follow in list(self._followers):
            follow()

    def _check_processor(self, key: str | tuple[str, str], processor: Any) -> None:
        """Refuse a processor this shell cannot run (the async worker takes coroutines only)."""
        if not callable(processor):
            raise InvalidConfiguration(f"the processor for {key!r} is not callable: {processor!r}")

    def _connection_options(self) -> dict[str, Any]:
        return connection_options(application_name=f"tenure tasks {self.name}", deadline=self.safe_window)

    def _check_start(self) -> None:
        check_start(
            self.conninfo,
            application_name=f"tenure tasks {self.name}",
            listener="a task worker that listens for new tasks" if self.listen else None,
        )

    @staticmethod
    def _idle(connection: psycopg.BaseConnection[Any]) -> bool:
        """Whether a pooled connection sat idle long enough to be checked before use."""
        return time.monotonic() - getattr(connection, _LAST_USED, 0.0) >= CHECK_AFTER_IDLE

    def _release_bound(self) -> float:
        """How long the release of the unfinished tasks on stop may take: the safe window,
        at most 2 s."""
        return min(self.safe_window, 2.0)

    def _retry(self, error: psycopg.Error, until: float) -> bool:
        """Whether a call that failed with ``error`` is tried again at once on another connection:
        the server is lost (a failover, a stale pooled connection), or the server rolled the call
        back to break a deadlock or a serialization failure (nothing of it took effect), and
        ``until`` is ahead."""
        rolled_back = getattr(error, "sqlstate", None) in ROLLED_BACK
        if not (rolled_back or lost_server(error)) or time.monotonic() + 0.05 >= until or self._closed:
            return False
        why = "the database rolled the call back" if rolled_back else "the database connection failed"
        log.info("%s: %s, trying again: %s", self.name, why, error)
        return True

    def in_flight(self) -> int:
        with self._lock:
            return len(self._in_flight)

    def _held(self) -> list[Task]:
        with self._lock:
            return list(self._in_flight.values())

    def processor_for(self, kind: str, state: str) -> Any:
        return self.processors.get((kind, state)) or self.processors.get(kind)

    # -- the dispatcher's decisions -------------------------------------------------------

    def _take_finished(self, now: float) -> tuple[list[tuple[Task, Outcome]], int, float]:
        """The outcomes to report now, the free slots, and, when the outcomes should rather
        linger for others to share their round trip, until when (else 0)."""
        with self._lock:
            stopping = self._stop_requested
            free = 0 if stopping else self.concurrency - self._running
            linger_until = self._finished_at + LINGER if self._finished else 0.0
            if not stopping and self._running and 2 * free < self.concurrency and now < linger_until:
                return [], free, linger_until  # share the round trip with outcomes soon to come
            finished, self._finished = self._finished, []
            self._recording.update(task.id for task, _ in finished)  # see _unfinished()
            return finished, free, 0.0

    def _lease_limit(self, free: int, now: float, poll_at: float) -> int:
        """How many tasks to ask for: the free slots while tasks may be due (or a poll is due, or
        a rate-limited kind's capacity returned)."""
        if free > 0 and (now >= poll_at or now >= self._throttled_until):
            self._due = True
        return free if self._due else 0

    def _idle_wait(self, free: int, now: float, poll_at: float) -> float | None:
        """How long the dispatcher sleeps with nothing to do (unless woken): until the next poll
        or the moment a rate-limited kind lets a lease through, whichever comes first; with no
        free slot, until woken."""
        if free <= 0:
            return None
        return max(0.0, min(poll_at, self._throttled_until) - now)

    def _reported_elsewhere(self, finished: list[tuple[Task, Outcome]]) -> None:
        """The dispatcher is done with ``finished`` (reported, refused, or failed)."""
        with self._lock:
            self._recording.difference_update(task.id for task, _ in finished)

    def _to_report(self, finished: list[tuple[Task, Outcome]]) -> list[tuple[Task, Outcome]]:
        """Of ``finished``, those still held; the others are discarded."""
        reported = []
        now = time.monotonic()
        for task, outcome in finished:
            if task.recorded is not None:
                self._settled(task)
                continue
            if task.lost.is_set() or now >= task.valid_until:  # task.is_lost(), with one clock read
                self._discard(task, _lost_before_recorded(task))
                self._finish(task)
            else:
                reported.append((task, outcome))
        return reported

    def _report_until(self, reported: list[tuple[Task, Outcome]], sent: float) -> float:
        return min((task.valid_until for task, _ in reported), default=sent + self.safe_window)

    def _cycle_op(self, reported: list[tuple[Task, Outcome]], limit: int) -> Op[list[TaskCycled]]:
        """The round trip: report ``reported`` and lease up to ``limit`` tasks, in one call."""
        return OPS.task_cycle(
            self.instance_id,
            lease=self.lease,
            limit=limit,
            kinds=self.kinds,
            outcomes=[_outcome_json(task, outcome) for task, outcome in reported],
            wait=self._wait if limit else None,
        )

    def _reporting(self, reported: list[tuple[Task, Outcome]]) -> None:
        with self._lock:
            self._recording.update(task.id for task, _ in reported)

    def _report_failed(self, reported: list[tuple[Task, Outcome]]) -> None:
        """The round trip failed: the leases run out unless the outcomes did commit."""
        for task, _ in reported:
            self._finish(task)

    def _reported(
        self, reported: list[tuple[Task, Outcome]], rows: list[TaskCycled]
    ) -> list[tuple[Task, str]]:
        """The applied outcomes are counted and their tasks let go; the refused ones (and why)
        are returned, for the shell to look them up and :meth:`_settle_refused` them."""
        refused = []
        applied = []
        for (task, outcome), row in zip(reported, rows, strict=False):
            if row.refused is None:
                applied.append((task, outcome))
            else:
                refused.append((task, row.refused))
        if applied:
            self._count_all(applied)
            self._finish_all([task for task, _ in applied])
        return refused

    def _leased(self, rows: list[TaskCycled], limit: int, sent: float) -> list[Task]:
        """The tasks the round trip leased, now in flight, for the processors to run."""
        self._saw_server_clock(rows)
        leases = [row for row in rows if row.outcome == "lease"]
        if limit:
            self._due = len(leases) == limit  # a short answer: nothing more is due for now
            self._throttle([row for row in rows if row.outcome == "throttled"], leased=bool(leases))
        tasks = []
        valid_until = sent + self.safe_window
        for row in leases:
            assert row.id is not None and row.epoch is not None  # a lease names its task and epoch
            tasks.append(
                Task(
                    id=row.id,
                    kind=row.kind or "",
                    state=row.state or "",
                    data=row.data,
                    epoch=row.epoch,
                    attempts=row.attempts or 0,
                    owner=self.instance_id,
                    valid_until=valid_until,
                )
            )
        if tasks:
            with self._lock:
                for task in tasks:
                    self._in_flight[task.id] = task
                self._running += len(tasks)
                self.stats.acquired += len(tasks)
            self._count_kinds(self.metrics.tasks_acquired, tasks)
            self.metrics.tasks_in_flight.inc(len(tasks))
        return tasks

    def _saw_server_clock(self, rows: list[TaskCycled]) -> None:
        """Note the server's clock from an answer just received: a new lease or an extension
        ends ``lease`` seconds after the server's now."""
        for row in reversed(rows):  # from the end: the leases follow the outcomes
            if row.outcome in ("lease", "extend") and row.refused is None and row.next_action is not None:
                self._server_clock = (row.next_action - timedelta(seconds=self.lease), time.monotonic())
                return

    def _seconds_until(self, moment: datetime) -> float:
        """Seconds from now until ``moment`` of the server's clock, as far as this worker can tell."""
        if self._server_clock is None:
            return (moment - datetime.now(UTC)).total_seconds()
        server_now, seen_at = self._server_clock
        return (moment - server_now).total_seconds() - (time.monotonic() - seen_at)

    def _throttle(self, throttled: list[TaskCycled], *, leased: bool) -> None:
        """A lease-taking answer's 'throttled' rows (rate-limited kinds it held back, each with
        when its next lease may go through): the dispatcher looks again at the earliest of them,
        not before (unless a notification or its poll comes first)."""
        moments = [row.next_action for row in throttled if row.next_action is not None]
        if not moments:
            self._throttled_until = math.inf
            self._throttled_in_a_row = 0
            return
        self._throttled_in_a_row = 0 if leased else self._throttled_in_a_row + 1
        floor = min(self.poll_interval, THROTTLE_FLOOR * 2 ** min(self._throttled_in_a_row, 16))
        self._throttled_until = time.monotonic() + max(floor, self._seconds_until(min(moments)))

    def _notified(self, payload: str | None) -> bool:
        """A notification (None: LISTEN (re)connected): whether to wake the dispatcher."""
        if payload is None or payload in self.kinds:
            self._due = True
            return True
        return False

    # -- keeping leases --------------------------------------------------------------------

    def _to_extend(self) -> list[Task]:
        """The tasks whose leases to extend; those past their safe window are lost."""
        held = []
        for task in self._held():
            if task.is_lost():
                self._lose(task, "no lease extension within the safe window")
            elif task.recorded is None:  # one its processor finished has nothing to extend
                held.append(task)
        return held

    def _extend_op(self, held: list[Task]) -> Op[list[TaskCycled]]:
        extensions = [{"id": task.id, "epoch": task.epoch, "outcome": "extend"} for task in held]
        return OPS.task_cycle(
            self.instance_id, lease=self.lease, limit=0, kinds=self.kinds, outcomes=extensions
        )

    def _extended(self, held: list[Task], rows: list[TaskCycled], sent: float) -> list[tuple[Task, str]]:
        """The extensions' results: the refused ones (and why), for the shell to look them up
        and :meth:`_settle_refused` them, except those whose outcome is being recorded."""
        self._saw_server_clock(rows)
        refused = []
        for task, row in zip(held, rows, strict=False):
            if row.refused is None:
                task.valid_until = sent + self.safe_window
                continue
            with self._lock:
                recording = task.id in self._recording
            if not recording:
                refused.append((task, row.refused))
        self._tell_followers()
        return refused

    def _lose(self, task: Task, reason: str, *, cancelled: bool = False) -> None:
        """The task is no longer ours (``cancelled``: task_cancel ended its epoch): its processor
        is stopped, or left to end, and whatever it produces is discarded."""
        with self._lock:
            if task.id not in self._in_flight:
                return  # it finished while the extender was at it
        if task.lost.is_set():
            return
        task.cancelled = cancelled
        task.lost.set()
        self._interrupt(task)
        if cancelled:
            with self._lock:
                self.stats.cancelled += 1
            self.metrics.tasks_cancelled.labels(task.kind).inc()
            log.warning(
                "%s: task %s (epoch %d) was cancelled while this worker held it: %s; %s",
                self.name,
                task.id,
                task.epoch,
                self._ON_CANCEL,
                reason,
            )
        elif task.recorded is not None:
            # Not a lost lease: its processor finished the task itself, then overstayed the
            # safe window it was given for ending; it is stopped, and counted as it recorded.
            log.info(
                "%s: stopped the processor of task %s (epoch %d): it finished the task itself but did "
                "not end within a safe window after",
                self.name,
                task.id,
                task.epoch,
            )
        else:
            with self._lock:
                self.stats.lost += 1
            self.metrics.task_leases_lost.labels(task.kind).inc()
            log.warning(
                "%s: lost the lease of task %s (epoch %d): %s", self.name, task.id, task.epoch, reason
            )
        self._tell_followers()

    # What happens to the processor of a task cancelled while held, as the log says it.
    _ON_CANCEL = "its processor is stopped and its outcome discarded"

    def _interrupt(self, task: Task) -> None:
        """The task is lost: stop its processor if this shell can (the async one cancels it)."""

    def _expire_leases(self) -> float:
        """Lose every task past its safe window; the seconds until the next one ends (at most
        the safe window; an extension only moves an end on, but a lease answered late ends
        sooner than that: the shells wake their watchdog at each new lease)."""
        now = time.monotonic()
        earliest = now + self.safe_window
        for task in self._held():
            if task.valid_until <= now:
                self._lose(task, "no lease extension within the safe window")
            elif task.valid_until < earliest:
                earliest = task.valid_until
        return earliest - now

    # -- stopping ----------------------------------------------------------------------------

    def _unfinished(self) -> list[Task]:
        """On stop, past the grace: the tasks whose processors did not finish, let go (whatever
        they still produce is discarded), for one round trip to release them."""
        with self._lock:
            reported = {task.id for task, _ in self._finished} | self._recording
            unfinished = [task for task in self._in_flight.values() if task.id not in reported]
        for task in unfinished:
            task.lost.set()
            self._interrupt(task)
        if unfinished:
            self._tell_followers()
        return unfinished

    # -- an outcome the processor recorded itself ------------------------------------------------
    #
    # A processor (or a handler in another language that it runs) may fence its writes with
    # the task's epoch and record the task's transition itself (task_complete, task_release,
    # task_fail) in the same transaction, so that the step's writes apply exactly once. The
    # worker's own report, or its next extension, is then refused: when the database refuses
    # one (rarely), the worker looks at the task's row, and a task that nobody owns in the
    # worker's epoch was finished by that epoch's holder, that is, by its processor: it is
    # counted as recorded, never as a lost lease.

    def _lookup_op(self, tasks: list[Task]) -> Op[list[TaskRow]]:
        return OPS.tasks_by_id([task.id for task in tasks])

    @staticmethod
    def _recorded_in_epoch(task: Task, row: TaskRow | None) -> Outcome | None:
        """What the task's ``row`` says was recorded in ``task``'s epoch, or None when the
        lease was lost (the task is another epoch's, or ours still, or gone, or cancelled)."""
        if row is None or row.owner is not None or row.epoch != task.epoch or row.status == "cancelled":
            return None
        if row.status == "done":
            return Complete(state=row.state)
        if row.status == "dead" or row.attempts > task.attempts:
            return Fail(row.last_error or "failed")
        return Release()

    def _settle_refused(
        self, refused: list[tuple[Task, str]], rows: list[TaskRow] | None, *, reported: bool
    ) -> None:
        """Outcomes (``reported``) or extensions the database refused, with the rows of their
        tasks (None: they could not be read). A task its processor finished in our epoch is
        counted: at once for an outcome; for an extension, when its processor ends, which
        is given one more safe window to do so before it is stopped (nothing is extended any
        more, and whatever it writes after its own transition is refused by the fence). The
        others were lost."""
        found = {row.id: row for row in rows or ()}
        for task, reason in refused:
            row = found.get(task.id)
            recorded = self._recorded_in_epoch(task, row)
            if recorded is None:
                self._lose(task, reason, cancelled=row is not None and row.status == "cancelled")
                if reported:
                    self._discard(task, "the database refused the outcome")
                    self._finish(task)
                continue
            log.info(
                "%s: task %s was finished in epoch %d by its processor itself (%s), "
                "found when %s was refused",
                self.name,
                task.id,
                task.epoch,
                type(recorded).__name__.lower(),
                "its outcome" if reported else "an extension",
            )
            task.recorded = recorded
            if reported:
                self._settled(task)
            else:
                task.valid_until = max(task.valid_until, time.monotonic() + self.safe_window)
        if not reported:
            self._tell_followers()

    def _settled(self, task: Task) -> bool:
        """If the task's processor recorded its outcome itself, count that and let it go."""
        if task.recorded is None:
            return False
        with self._lock:
            self.stats.already_recorded += 1
        self._count(task, task.recorded)
        self._finish(task)
        return True

    # -- running processors --------------------------------------------------------------------

    def _routed_processor(self, task: Task) -> Any:
        """The processor for the task's state; when no processor here takes it, None, and the
        task is handed back (released at once, for a worker that has one)."""
        processor = self.processor_for(task.kind, task.state)
        if processor is None:
            self._hand_over(task, _ROUTED_AWAY)
        return processor

    def _checked(self, task: Task, outcome: object) -> Outcome:
        """What a processor returned, checked: anything but a sound outcome becomes a Fail."""
        if not isinstance(outcome, Complete | Next | Release | Fail):
            return self._processor_failed(
                task, TypeError(f"the processor returned {outcome!r}, not Complete, Next, Release or Fail")
            )
        try:
            data = getattr(outcome, "data", None)
            if data is not None:
                json.dumps(data)  # data the round trip cannot send fails here
        except Exception as error:
            return self._processor_failed(task, error)
        return outcome

    def _processor_failed(self, task: Task, error: BaseException) -> Fail:
        log.error("%s: processor failed on task %s", self.name, task.id, exc_info=error)
        return Fail(f"{error.__class__.__name__}: {error}")

    def _handed_over(self, task: Task, outcome: Outcome) -> bool:
        """An outcome without writes (and not a Next) rides in the dispatcher's next round trip;
        the others are recorded on their own (False)."""
        if isinstance(outcome, Next) or getattr(outcome, "writes", None) is not None:
            return False
        self._hand_over(task, outcome)
        return True

    def _hand_over(self, task: Task, outcome: Outcome) -> None:
        """Leave ``outcome`` for the dispatcher's next round trip."""
        with self._lock:
            if not self._finished:
                self._finished_at = time.monotonic()
            self._finished.append((task, outcome))
        self._wake_dispatcher()

    def _wake_dispatcher(self) -> None:
        raise NotImplementedError

    def _routed(self, task: Task, outcome: Next) -> None:
        """A Next was recorded: its state runs at once, under the same lease."""
        task.state = outcome.state
        if outcome.data is not None:
            task.data = outcome.data
        with self._lock:
            self.stats.routed += 1

    def _abandoned(self, task: Task) -> None:
        """The task was lost before its outcome was recorded."""
        if self._settled(task):
            return
        self._discard(task, _lost_before_recorded(task))
        self._finish(task)

    def _processor_done(self) -> None:
        with self._lock:
            self._running -= 1
        self._wake_dispatcher()

    def _finish(self, task: Task) -> None:
        """The task is no longer this worker's (once, however often it is called)."""
        with self._lock:
            if self._in_flight.pop(task.id, None) is not None:
                self.metrics.tasks_in_flight.dec()

    def _finish_all(self, tasks: list[Task]) -> None:
        """:meth:`_finish` for many tasks at once."""
        finished = 0
        with self._lock:
            for task in tasks:
                if self._in_flight.pop(task.id, None) is not None:
                    finished += 1
        if finished:
            self.metrics.tasks_in_flight.dec(finished)

    def _count_all(self, counted: list[tuple[Task, Outcome]]) -> None:
        """:meth:`_count` for many outcomes at once (the metrics moved once per kind)."""
        completed: list[Task] = []
        failed: list[Task] = []
        released = 0
        for task, outcome in counted:
            if isinstance(outcome, Complete):
                completed.append(task)
            elif isinstance(outcome, Fail):
                failed.append(task)
            elif isinstance(outcome, Release) and outcome is not _ROUTED_AWAY:
                released += 1
        with self._lock:
            self.stats.completed += len(completed)
            self.stats.failed += len(failed)
            self.stats.released += released
        self._count_kinds(self.metrics.tasks_completed, completed)
        self._count_kinds(self.metrics.tasks_failed, failed)

    def _count_kinds(self, family: Any, tasks: list[Task]) -> None:
        """``family.labels(kind).inc(n)`` for the ``n`` tasks of each kind in ``tasks``."""
        if not tasks:
            return
        kind = tasks[0].kind
        if all(task.kind == kind for task in tasks):  # the usual case: one kind
            self._metric(family, kind).inc(len(tasks))
            return
        counts: dict[str, int] = {}
        for task in tasks:
            counts[task.kind] = counts.get(task.kind, 0) + 1
        for kind, count in counts.items():
            self._metric(family, kind).inc(count)

    def _count(self, task: Task, outcome: Outcome) -> None:
        with self._lock:
            if isinstance(outcome, Complete):
                self.stats.completed += 1
            elif isinstance(outcome, Release) and outcome is not _ROUTED_AWAY:
                self.stats.released += 1
            elif isinstance(outcome, Fail):
                self.stats.failed += 1
        if isinstance(outcome, Complete):
            self._metric(self.metrics.tasks_completed, task.kind).inc()
        elif isinstance(outcome, Fail):
            self._metric(self.metrics.tasks_failed, task.kind).inc()

    def _metric(self, family: Any, kind: str) -> Any:
        """``family.labels(kind)``, looked up once per kind (it costs microseconds per task)."""
        key = (id(family), kind)
        child = self._metric_children.get(key)
        if child is None:
            child = self._metric_children[key] = family.labels(kind)
        return child

    def _discard(self, task: Task, why: str) -> None:
        with self._lock:
            self.stats.discarded += 1
        log.warning("%s: discarded the result of task %s (epoch %d): %s", self.name, task.id, task.epoch, why)

    # -- recording an outcome in a transaction of its own ------------------------------------------

    def _start_recording(self, task: Task) -> bool:
        """Before an outcome with writes (or a Next) is recorded: False when the lease is lost."""
        if task.is_lost() or task.recorded is not None:
            self._abandoned(task)
            return False
        with self._lock:
            self._recording.add(task.id)
        return True

    def _stop_recording(self, task: Task) -> None:
        with self._lock:
            self._recording.discard(task.id)

    def _transition(self, task: Task, outcome: Outcome) -> Op[None]:
        """The outcome's fenced transition (its writes follow in the same transaction)."""
        if task.is_lost():
            raise LeaseLost(f"the lease of task {task.id} ran out before its outcome was recorded")
        if isinstance(outcome, Complete):
            yield from OPS.task_complete(
                task.id, task.owner, task.epoch, state=outcome.state, data=outcome.data
            )
        elif isinstance(outcome, Next):
            yield from OPS.task_update(
                task.id, task.owner, task.epoch, state=outcome.state, data=outcome.data
            )
        elif isinstance(outcome, Release):
            yield from OPS.task_release(
                task.id, task.owner, task.epoch, delay=outcome.delay, state=outcome.state, data=outcome.data
            )

    def _recorded(self, task: Task, outcome: Outcome) -> bool:
        """The outcome committed: True when it was a Next (its next state runs now)."""
        if isinstance(outcome, Next):
            return True
        self._finish(task)  # before the extender can find it held and be told it is done
        self._count(task, outcome)
        return False

    def _not_recorded(self, task: Task, error: Exception, rows: list[TaskRow] | None = None) -> None:
        """Recording the outcome failed with ``error`` (for a LeaseLost, ``rows`` has the
        task's row): the task is let go (or fails)."""
        if isinstance(error, LeaseLost):
            self._settle_refused([(task, error.detail or error.message)], rows, reported=True)
        elif isinstance(error, psycopg.Error | TenureError):
            log.warning("%s: recording the outcome of task %s failed: %s", self.name, task.id, error)
            self._finish(task)  # its fate is unknown (or the database refused it): the lease tells
        else:
            # The application's writes raised: they were rolled back with the transition, and
            # the step failed like a processor that raised.
            self._hand_over(task, self._processor_failed(task, error))


class TaskWorker(TaskLogic, Runtime):
    """Runs processors on leased tasks with at most ``concurrency`` in flight, on threads.

    ``processors`` maps a kind, or a (kind, state) pair, to a processor; the pair
    wins. Use as a context manager: leaving waits up to ``shutdown_grace`` seconds
    for tasks in flight, then releases the rest so another instance takes them at once.
    """

    processors: dict[str | tuple[str, str], Processor]
    _ON_CANCEL = "its processor runs on (a thread cannot be stopped) and its outcome is discarded"

    def __init__(
        self, conninfo: str, processors: Mapping[str | tuple[str, str], Processor], **options: Any
    ) -> None:
        super().__init__(conninfo, processors, **options)
        self._ready: queue.SimpleQueue[Task | None] = queue.SimpleQueue()  # leased, for the processor threads
        self._wake = threading.Event()
        self._stopping = threading.Event()  # no more new tasks (the listener's flag)
        self._closing = threading.Event()  # no more leases kept either (wakes waits)
        self._watch_ended = threading.Event()  # the lease watchdog's end, at the very end of stop()
        self._new_leases = threading.Event()  # wakes the lease watchdog: a new lease may end sooner
        self._threads: dict[str, threading.Thread] = {}
        self._deadlines = Deadlines(f"tasks {self.name}")
        self._pool = ConnectionPool(
            conninfo,
            min_size=1,
            max_size=self.concurrency + 2,
            kwargs=self._connection_options(),
            configure=configure,
            check=self._check,
            timeout=self.safe_window,
            reconnect_timeout=max(60.0, 10 * self.lease),
            open=False,
            name=f"tenure-tasks-{self.name}",
        )

    def _check(self, connection: psycopg.Connection[Any]) -> None:
        """A connection idle for a while may lead to a server that failed over: ask it first."""
        if not self._idle(connection):
            return
        with self._deadlines.bounded(connection, min(self.safe_window, 2.0)):
            connection.execute("")

    @contextmanager
    def _connection(self, bound: float | None = None) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection for one call, bounded by the safe window (or ``bound`` seconds,
        if shorter); a connection that no longer reaches a writable primary is closed, so the
        pool replaces it."""
        seconds = capped(self.safe_window, bound)
        with self._pool.connection(timeout=seconds) as connection:
            try:
                with self._deadlines.bounded(connection, seconds):
                    yield connection
            except BaseException as error:
                if lost_server(error, connection):
                    connection.close()
                raise
            finally:
                setattr(connection, _LAST_USED, time.monotonic())

    def _call(
        self, call: Callable[[psycopg.Connection[Any]], R], *, until: float, bound: float | None = None
    ) -> R:
        """``call`` on a pooled connection, tried again at once on another one while the
        server is lost (a failover, a stale pooled connection) and ``until`` is ahead; with
        ``bound``, the tries together take at most that many seconds."""
        end = None if bound is None else time.monotonic() + bound
        while True:
            try:
                with self._connection(_left(end)) as connection:
                    return call(connection)
            except psycopg.Error as error:
                if not self._retry(error, until):
                    raise
                time.sleep(0.05)

    def _run_op(self, make: Callable[[], Op[R]], *, until: float, bound: float | None = None) -> R:
        return self._call(lambda connection: Driver(connection).run(make()), until=until, bound=bound)

    # -- life cycle ---------------------------------------------------------------

    def start(self) -> Self:
        self._check_start()
        self._pool.open(wait=True, timeout=30)
        loops: list[tuple[Callable[[], None], str]] = [
            (self._dispatch, "dispatch"),
            (self._extend, "extend"),
            (self._watch_leases, "watchdog"),
        ]
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
        2 s), even while the database is away: the release's call is cut at that bound, a
        task that could not be released is left to its lease, and a thread still waiting
        for the database then is left to end by itself. The lease watchdog goes on until
        stop() returns: a task whose safe window ends meanwhile is lost then, as always.
        """
        deadline = time.monotonic() + self.shutdown_grace
        self._stop_requested = True
        self._stopping.set()
        self._wake.set()
        while self._held() and time.monotonic() < deadline:
            time.sleep(0.02)  # the dispatcher keeps reporting what finishes meanwhile
        release_by = max(deadline, time.monotonic()) + self._release_bound()
        unfinished = self._unfinished()
        if unfinished and release_by > time.monotonic():
            released: list[tuple[Task, Outcome]] = [(task, Release()) for task in unfinished]
            try:
                self._report(released, until=release_by, bound=release_by - time.monotonic())
            except psycopg.Error as error:
                log.info("%s: could not release %d tasks: %s", self.name, len(unfinished), error)
        while self._held() and time.monotonic() < release_by:
            time.sleep(0.02)  # outcomes that finished in time are still on their way
        self._closed = True
        self._closing.set()
        self._wake.set()
        self._deadlines.cut()  # a call still in flight (an extension, a round trip) ends now
        for _ in range(self.concurrency):
            self._ready.put(None)
        for role, thread in self._threads.items():
            if not role.startswith("processor") and role != "watchdog":
                thread.join(max(0.0, release_by - time.monotonic()))
        close_pool_by(self._pool, release_by)
        self._watch_ended.set()
        self._new_leases.set()
        self._threads["watchdog"].join(max(0.0, release_by - time.monotonic()))
        self._threads.clear()
        self._deadlines.close()

    def _wake_dispatcher(self) -> None:
        # Each processor wakes the dispatcher twice per task: an Event already set needs no
        # set() (the dispatcher clears it before it looks at what changed).
        if not self._wake.is_set():
            self._wake.set()

    # -- the dispatcher: one round trip reports what finished and leases what fits ------

    def _dispatch(self) -> None:
        poll_at = time.monotonic()
        while not self._closed:
            now = time.monotonic()
            finished, free, linger_until = self._take_finished(now)
            if linger_until:
                self._wake.wait(linger_until - now)
                self._wake.clear()
                continue
            limit = self._lease_limit(free, now, poll_at)
            if finished or limit:
                if limit:
                    poll_at = time.monotonic() + self.poll_interval
                try:
                    self._cycle(finished, limit)
                except (psycopg.Error, TenureError) as error:
                    log.warning("%s: a round trip to the database failed: %s", self.name, error)
                    self._closing.wait(min(self.poll_interval, 0.5))
                except Exception:
                    log.exception("%s: a round trip to the database failed", self.name)
                    self._closing.wait(min(self.poll_interval, 0.5))
                finally:
                    self._reported_elsewhere(finished)
                continue
            self._wake.wait(self._idle_wait(free, time.monotonic(), poll_at))
            self._wake.clear()

    def _cycle(self, finished: list[tuple[Task, Outcome]], limit: int) -> None:
        """Report ``finished`` and lease up to ``limit`` tasks, in one call."""
        reported = self._to_report(finished)
        if not reported and not limit:
            return
        sent = time.monotonic()
        rows = self._report(reported, until=self._report_until(reported, sent), limit=limit, taken=True)
        leased = self._leased(rows, limit, sent)
        if leased:
            self._new_leases.set()
        for task in leased:
            self._ready.put(task)

    def _report(
        self,
        reported: list[tuple[Task, Outcome]],
        *,
        until: float,
        limit: int = 0,
        bound: float | None = None,
        taken: bool = False,
    ) -> list[TaskCycled]:
        """One ``task_cycle`` call (at most ``bound`` seconds, when given): the outcomes' results
        are counted and their tasks let go. ``taken``: the dispatcher's outcomes, which
        :meth:`_take_finished` marked as being recorded until the dispatcher is done with them."""
        if not taken:
            self._reporting(reported)
        try:
            rows = self._run_op(lambda: self._cycle_op(reported, limit), until=until, bound=bound)
        except BaseException:
            self._report_failed(reported)
            raise
        finally:
            if not taken:
                self._reported_elsewhere(reported)
        refused = self._reported(reported, rows)
        if refused:
            self._settle_refused(refused, self._look_up([task for task, _ in refused]), reported=True)
        return rows

    def _look_up(self, tasks: list[Task]) -> list[TaskRow] | None:
        """The rows of ``tasks``, whose outcomes or extensions were refused; None when the
        database cannot tell now (they count as lost)."""
        try:
            return self._run_op(lambda: self._lookup_op(tasks), until=time.monotonic() + LOOK_UP_FOR)
        except (psycopg.Error, TenureError) as error:
            log.warning("%s: could not look up %d refused tasks: %s", self.name, len(tasks), error)
            return None

    def _listen(self) -> None:
        """Wake the dispatcher when a task of our kinds becomes due (or LISTEN reconnected)."""

        def on_notify(payload: str | None) -> None:
            if self._notified(payload):
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
        while not self._closing.wait(self.extend_every):
            held = self._to_extend()
            if not held:
                continue
            sent = time.monotonic()
            try:
                rows = self._run_op(
                    lambda held=held: self._extend_op(held),  # type: ignore[misc]
                    until=min(task.valid_until for task in held),
                )
            except psycopg.Error as error:
                log.warning("%s: extending %d leases failed: %s", self.name, len(held), error)
                continue
            refused = self._extended(held, rows, sent)
            if refused:
                self._settle_refused(refused, self._look_up([task for task, _ in refused]), reported=False)

    def _watch_leases(self) -> None:
        """At the end of each task's safe window, if no extension moved it on, the task is lost
        (``task.lost`` set, followers told) then, not at the extender's next round."""
        while not self._watch_ended.is_set():
            self._new_leases.clear()
            self._new_leases.wait(self._expire_leases())

    # -- running processors ------------------------------------------------------------

    def _process(self) -> None:
        while (task := self._ready.get()) is not None:
            try:
                self._run(task)
            finally:
                self._processor_done()

    def _run(self, task: Task) -> None:
        while not task.is_lost():
            processor = self._routed_processor(task)
            if processor is None:
                return
            try:
                outcome = self._checked(task, processor(task))
            except Exception as error:
                outcome = self._processor_failed(task, error)
            if self._handed_over(task, outcome) or not self._apply(task, outcome):
                return
            assert isinstance(outcome, Next)
            self._routed(task, outcome)
        self._abandoned(task)

    def _apply(self, task: Task, outcome: Outcome) -> bool:
        """Record an outcome that carries writes, or a Next, on its own: True when it was a
        Next that committed (its next state runs now)."""
        if not self._start_recording(task):
            return False
        failed: Exception | None = None
        try:
            self._call(lambda connection: self._record(connection, task, outcome), until=task.valid_until)
        except Exception as error:
            failed = error
        finally:
            self._stop_recording(task)
        if failed is not None:
            self._not_recorded(task, failed, self._look_up([task]) if isinstance(failed, LeaseLost) else None)
            return False
        return self._recorded(task, outcome)

    def _record(self, connection: psycopg.Connection[Any], task: Task, outcome: Outcome) -> None:
        """The outcome's transition and its writes in one transaction, confirmed by the cluster."""
        writes = getattr(outcome, "writes", None)
        with durable_transaction(connection) if writes is not None else nullcontext(connection):
            Driver(connection).run(self._transition(task, outcome))
            if writes is not None:
                writes(connection)


class AsyncTaskWorker(TaskLogic, AsyncRuntime):
    """:class:`TaskWorker` for asyncio: the same worker as tasks of the running event loop,
    without a thread.

    Processors are coroutine functions (``async def processor(task) -> Outcome``); a plain
    function is refused, since it would block the loop. An outcome's ``writes`` is an async
    callable that takes the ``psycopg.AsyncConnection`` of the outcome's transaction. When a
    task's lease is lost (an extension refused, or the end of its safe window reached: a
    watchdog task of the loop looks then), its processor is cancelled and its outcome discarded: a processor
    acts only while the lease is held (it is stopped at its next await).

    Use as ``async with``: leaving the block, or the cancellation of the task in it, waits up
    to ``shutdown_grace`` seconds for the tasks in flight, then releases the rest.
    """

    processors: dict[str | tuple[str, str], AsyncProcessor]
    _ON_CANCEL = "its processor is cancelled and its outcome discarded"

    def __init__(
        self, conninfo: str, processors: Mapping[str | tuple[str, str], AsyncProcessor], **options: Any
    ) -> None:
        super().__init__(conninfo, processors, **options)
        self._wake = asyncio.Event()
        self._new_leases = asyncio.Event()  # wakes the lease watchdog: a new lease may end sooner
        self._loops: dict[str, asyncio.Task[None]] = {}
        self._runners: set[asyncio.Task[None]] = set()
        # Runners inside their processor, by id() of their Task (a UUID hashes in Python code).
        self._processing: dict[int, asyncio.Task[None]] = {}
        self._deadlines = AsyncDeadlines(f"tasks {self.name}")
        self._pool = AsyncConnectionPool(
            conninfo,
            min_size=1,
            max_size=self.concurrency + 2,
            kwargs=self._connection_options(),
            configure=aconfigure,
            check=self._check,
            timeout=self.safe_window,
            reconnect_timeout=max(60.0, 10 * self.lease),
            open=False,
            name=f"tenure-tasks-{self.name}",
        )

    def _check_processor(self, key: str | tuple[str, str], processor: Any) -> None:
        if not (
            inspect.iscoroutinefunction(processor)
            or inspect.iscoroutinefunction(getattr(processor, "__call__", None))  # noqa: B004
        ):
            name = getattr(processor, "__qualname__", repr(processor))
            raise InvalidConfiguration(
                f"the processor {name} for {key!r} is not a coroutine function: an AsyncTaskWorker "
                "runs its processors on the event loop, where a plain function would block it",
                hint="Declare it with async def, or use TaskWorker for blocking processors.",
            )

    async def _check(self, connection: psycopg.AsyncConnection[Any]) -> None:
        """A connection idle for a while may lead to a server that failed over: ask it first."""
        if not self._idle(connection):
            return
        with self._deadlines.bounded(connection, min(self.safe_window, 2.0)):
            await connection.execute("")

    @asynccontextmanager
    async def _connection(self, bound: float | None = None) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """:meth:`TaskWorker._connection` on the event loop."""
        seconds = capped(self.safe_window, bound)
        async with self._pool.connection(timeout=seconds) as connection:
            try:
                with self._deadlines.bounded(connection, seconds):
                    yield connection
            except BaseException as error:
                if lost_server(error, connection) or isinstance(error, asyncio.CancelledError):
                    await connection.close()  # a cancelled call may have left it mid-statement
                raise
            finally:
                setattr(connection, _LAST_USED, time.monotonic())

    async def _call(
        self,
        call: Callable[[psycopg.AsyncConnection[Any]], Awaitable[R]],
        *,
        until: float,
        bound: float | None = None,
    ) -> R:
        end = None if bound is None else time.monotonic() + bound
        while True:
            try:
                async with self._connection(_left(end)) as connection:
                    return await call(connection)
            except psycopg.Error as error:
                if not self._retry(error, until):
                    raise
                await asyncio.sleep(0.05)

    async def _run_op(self, make: Callable[[], Op[R]], *, until: float, bound: float | None = None) -> R:
        return await self._call(
            lambda connection: AsyncDriver(connection).run(make()), until=until, bound=bound
        )

    # -- life cycle ---------------------------------------------------------------

    async def start(self) -> AsyncTaskWorker:
        await acheck_start(
            self.conninfo,
            application_name=f"tenure tasks {self.name}",
            listener="a task worker that listens for new tasks" if self.listen else None,
        )
        await self._pool.open(wait=True, timeout=30)
        loops = [
            (self._dispatch(), "dispatch"),
            (self._extend(), "extend"),
            (self._watch_leases(), "watchdog"),
        ]
        if self.listen:
            loops.append((self._listen(), "listen"))
        for work, role in loops:
            self._loops[role] = asyncio.create_task(work, name=f"tenure-tasks-{role}-{self.name}")
        return self

    async def stop(self) -> None:
        """:meth:`TaskWorker.stop`: finish for ``shutdown_grace``, then release the rest."""
        deadline = time.monotonic() + self.shutdown_grace
        self._stop_requested = True
        self._wake.set()
        while self._held() and time.monotonic() < deadline:
            await asyncio.sleep(0.02)  # the dispatcher keeps reporting what finishes meanwhile
        release_by = max(deadline, time.monotonic()) + self._release_bound()
        unfinished = self._unfinished()  # their processors are cancelled
        if unfinished and release_by > time.monotonic():
            released: list[tuple[Task, Outcome]] = [(task, Release()) for task in unfinished]
            try:
                await self._report(released, until=release_by, bound=release_by - time.monotonic())
            except psycopg.Error as error:
                log.info("%s: could not release %d tasks: %s", self.name, len(unfinished), error)
        while self._held() and time.monotonic() < release_by:
            await asyncio.sleep(0.02)  # outcomes that finished in time are still on their way
        self._closed = True
        self._wake.set()
        dispatcher = self._loops.get("dispatch")
        if dispatcher is not None:  # it ends its round trip in progress, within the bound
            await asyncio.wait([dispatcher], timeout=max(0.1, release_by - time.monotonic()))
        # A call in flight is cut (its socket abandoned), never cancelled: psycopg would wait
        # for a cancel request that cannot reach the server. The lease watchdog ends last.
        self._deadlines.cut()
        watchdog = self._loops.pop("watchdog", None)
        rest = [*self._loops.values(), *self._runners]
        for task in rest:
            task.cancel()
        if rest:
            await asyncio.wait(rest, timeout=max(0.0, release_by - time.monotonic()))
        self._loops.clear()
        await self._pool.close(timeout=max(0.0, release_by - time.monotonic()))
        if watchdog is not None:
            watchdog.cancel()
            await asyncio.gather(watchdog, return_exceptions=True)

    def _wake_dispatcher(self) -> None:
        self._wake.set()

    async def _woken(self, timeout: float | None) -> None:
        """Until the dispatcher is woken or ``timeout`` seconds pass."""
        if not self._wake.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._wake.wait()
        self._wake.clear()

    # -- the dispatcher --------------------------------------------------------------------

    async def _dispatch(self) -> None:
        poll_at = time.monotonic()
        while not self._closed:
            now = time.monotonic()
            finished, free, linger_until = self._take_finished(now)
            if linger_until:
                await self._woken(linger_until - now)
                continue
            limit = self._lease_limit(free, now, poll_at)
            if finished or limit:
                if limit:
                    poll_at = time.monotonic() + self.poll_interval
                try:
                    await self._cycle(finished, limit)
                except (psycopg.Error, TenureError) as error:
                    log.warning("%s: a round trip to the database failed: %s", self.name, error)
                    await asyncio.sleep(min(self.poll_interval, 0.5))
                except Exception:
                    log.exception("%s: a round trip to the database failed", self.name)
                    await asyncio.sleep(min(self.poll_interval, 0.5))
                finally:
                    self._reported_elsewhere(finished)
                continue
            await self._woken(self._idle_wait(free, time.monotonic(), poll_at))

    async def _cycle(self, finished: list[tuple[Task, Outcome]], limit: int) -> None:
        reported = self._to_report(finished)
        if not reported and not limit:
            return
        sent = time.monotonic()
        rows = await self._report(reported, until=self._report_until(reported, sent), limit=limit, taken=True)
        leased = self._leased(rows, limit, sent)
        if leased:
            self._new_leases.set()
        for task in leased:
            runner = asyncio.create_task(self._process(task), name=f"tenure-task-{task.id}")
            self._runners.add(runner)
            runner.add_done_callback(self._runners.discard)

    async def _report(
        self,
        reported: list[tuple[Task, Outcome]],
        *,
        until: float,
        limit: int = 0,
        bound: float | None = None,
        taken: bool = False,
    ) -> list[TaskCycled]:
        if not taken:
            self._reporting(reported)
        try:
            rows = await self._run_op(lambda: self._cycle_op(reported, limit), until=until, bound=bound)
        except BaseException:
            self._report_failed(reported)
            raise
        finally:
            if not taken:
                self._reported_elsewhere(reported)
        refused = self._reported(reported, rows)
        if refused:
            self._settle_refused(refused, await self._look_up([task for task, _ in refused]), reported=True)
        return rows

    async def _look_up(self, tasks: list[Task]) -> list[TaskRow] | None:
        """:meth:`TaskWorker._look_up` on the event loop."""
        try:
            return await self._run_op(lambda: self._lookup_op(tasks), until=time.monotonic() + LOOK_UP_FOR)
        except (psycopg.Error, TenureError) as error:
            log.warning("%s: could not look up %d refused tasks: %s", self.name, len(tasks), error)
            return None

    async def _listen(self) -> None:
        """Wake the dispatcher when a task of our kinds becomes due (or LISTEN reconnected),
        until the task running it is cancelled at the end of stop()."""

        def on_notify(payload: str | None) -> None:
            if self._notified(payload):
                self._wake.set()

        await alisten(
            self.conninfo, "tenure_task", name=self.name, retry=self.poll_interval, on_notify=on_notify
        )

    # -- keeping leases --------------------------------------------------------------------

    async def _extend(self) -> None:
        while not self._closed:
            await asyncio.sleep(self.extend_every)
            held = self._to_extend()
            if not held:
                continue
            sent = time.monotonic()
            try:
                rows = await self._run_op(
                    lambda held=held: self._extend_op(held),  # type: ignore[misc]
                    until=min(task.valid_until for task in held),
                )
            except psycopg.Error as error:
                log.warning("%s: extending %d leases failed: %s", self.name, len(held), error)
                continue
            refused = self._extended(held, rows, sent)
            if refused:
                rows_found = await self._look_up([task for task, _ in refused])
                self._settle_refused(refused, rows_found, reported=False)

    def _interrupt(self, task: Task) -> None:
        runner = self._processing.get(id(task))
        if runner is not None:
            runner.cancel()

    async def _watch_leases(self) -> None:
        """At the end of each task's safe window, if no extension moved it on, the task is lost
        and its processor cancelled then, not at the extender's next round; until the end of
        stop(), which cancels it last."""
        while True:
            self._new_leases.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._new_leases.wait(), self._expire_leases())

    # -- running processors ------------------------------------------------------------------

    async def _process(self, task: Task) -> None:
        try:
            await self._run(task)
        finally:
            self._processor_done()

    async def _run(self, task: Task) -> None:
        while not task.is_lost():
            processor = self._routed_processor(task)
            if processor is None:
                return
            runner = asyncio.current_task()
            assert runner is not None
            self._processing[id(task)] = runner
            try:
                outcome = self._checked(task, await processor(task))
            except asyncio.CancelledError:
                if not task.lost.is_set():
                    raise  # not ours: the worker's own tasks are cancelled on stop
                runner.uncancel()
                break
            except Exception as error:
                outcome = self._processor_failed(task, error)
            finally:
                del self._processing[id(task)]
            if self._handed_over(task, outcome) or not await self._apply(task, outcome):
                return
            assert isinstance(outcome, Next)
            self._routed(task, outcome)
        self._abandoned(task)

    async def _apply(self, task: Task, outcome: Outcome) -> bool:
        if not self._start_recording(task):
            return False
        failed: Exception | None = None
        try:
            await self._call(
                lambda connection: self._record(connection, task, outcome), until=task.valid_until
            )
        except Exception as error:
            failed = error
        finally:
            self._stop_recording(task)
        if failed is not None:
            rows = await self._look_up([task]) if isinstance(failed, LeaseLost) else None
            self._not_recorded(task, failed, rows)
            return False
        return self._recorded(task, outcome)

    async def _record(self, connection: psycopg.AsyncConnection[Any], task: Task, outcome: Outcome) -> None:
        writes = getattr(outcome, "writes", None)
        if writes is None:
            await AsyncDriver(connection).run(self._transition(task, outcome))
            return
        async with adurable_transaction(connection):
            await AsyncDriver(connection).run(self._transition(task, outcome))
            written = writes(connection)
            if not inspect.isawaitable(written):
                raise TypeError(
                    f"the writes {getattr(writes, '__qualname__', writes)!r} of an AsyncTaskWorker's outcome "
                    "must be async (take the AsyncConnection and return an awaitable)"
                )
            await written


# What a processor's runner hands the dispatcher when no processor takes the task's state:
# released at once for a worker that has one, counted as neither released nor routed.
_ROUTED_AWAY = Release()


def tune_gc(concurrency: int) -> None:
    """Make Python's cyclic garbage collector cheap in a process whose main job is a task
    worker of up to ``concurrency`` tasks at once; call it once the worker has started.

    At Python's defaults a busy worker spends a quarter of its CPU in the collector and frees
    almost nothing: each task's few objects outlive a young collection (every 700 new
    objects, a few hundred tasks) while they wait for their round trip, reach the old
    generation, and make it collect in full, walking every object of the process (its
    modules, every thread's frames), every second or so. Here what exists now is frozen
    (never collected: it lives as long as the process) and the young generation holds
    :data:`GC_YOUNG_PER_SLOT` objects per slot. Reference cycles are still collected, only
    less often. ``tenure task worker`` calls it; an application that runs a worker among
    other work decides for itself."""
    young, middle, old = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(max(young, GC_YOUNG_PER_SLOT * concurrency), middle, old)


def _lost_before_recorded(task: Task) -> str:
    if task.cancelled:
        return "the task was cancelled before the outcome was recorded"
    return "the lease was lost before the outcome was recorded"


def _left(end: float | None) -> float | None:
    """Seconds left until the monotonic ``end`` (at least 50 ms), None without one."""
    return None if end is None else max(0.05, end - time.monotonic())


def _outcome_json(task: Task, outcome: Outcome) -> dict[str, Any]:
    """``outcome`` of ``task`` as ``task_cycle`` takes it."""
    if type(outcome) is Complete:  # the usual one, made at the least cost
        given: dict[str, Any] = {"id": str(task.id), "epoch": task.epoch, "outcome": "complete"}
        if outcome.state != "done":  # task_cycle's default state for complete
            given["state"] = outcome.state
        if outcome.data is not None:
            given["data"] = outcome.data
        return given
    given = {"id": str(task.id), "epoch": task.epoch}
    if isinstance(outcome, Complete):
        given |= {"outcome": "complete", "state": outcome.state, "data": outcome.data}
    elif isinstance(outcome, Release):
        given |= {"outcome": "release", "delay": outcome.delay, "state": outcome.state, "data": outcome.data}
    elif isinstance(outcome, Fail):
        given |= {"outcome": "fail", "error": outcome.error, "retry_delay": outcome.retry_delay}
    else:
        raise TypeError(f"not an outcome to report in a round trip: {outcome!r}")
    return {key: value for key, value in given.items() if value is not None}
