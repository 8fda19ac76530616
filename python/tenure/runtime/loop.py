"""What the elector and the claimer share: a loop that runs one cycle every ``period``
seconds on a connection of its own, and a watchdog that steps down when the safe
window since the last successful cycle has passed, even while the loop is stuck in
a call to the database. A call that overruns the safe window has its socket
abandoned, so the loop reconnects (through every host of the conninfo) instead of
waiting on a frozen server."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from types import TracebackType
from typing import Any, Self

import psycopg
from psycopg_pool import ConnectionPool

from tenure.connect import AsyncDeadlines, Deadlines, aconnect, connect
from tenure.driver import AsyncDriver, Driver, Op
from tenure.metrics import Metrics

log = logging.getLogger(__name__)


def wait_until(
    ready: Callable[[], bool],
    wait: Callable[[float | None], object],
    timeout: float | None,
    *,
    look_every: float | Callable[[], float | None] | None = None,
) -> bool:
    """Call ``wait(seconds)`` (a Condition's or an Event's) until ``ready()`` (True) or ``timeout``
    seconds pass (False; None: no timeout). ``look_every`` bounds each wait, in seconds or as a
    function that gives them (None: unbounded), for a change that comes without a notice: the
    end of a safe window, a signal that runs its handler only when the main thread wakes."""
    end = None if timeout is None else time.monotonic() + timeout
    while not ready():
        seconds = _next_wait(end, look_every)
        if seconds is not None and seconds <= 0:
            return False
        wait(seconds)
    return True


async def await_until(
    ready: Callable[[], bool],
    wait: Callable[[float | None], Awaitable[object]],
    timeout: float | None,
    *,
    look_every: float | Callable[[], float | None] | None = None,
) -> bool:
    """:func:`wait_until` for asyncio: ``await wait(seconds)`` (an :class:`AsyncCondition`'s)."""
    end = None if timeout is None else time.monotonic() + timeout
    while not ready():
        seconds = _next_wait(end, look_every)
        if seconds is not None and seconds <= 0:
            return False
        await wait(seconds)
    return True


def capped(seconds: float, cap: float | None) -> float:
    """``seconds``, or ``cap`` when it is given and shorter."""
    return seconds if cap is None else min(seconds, cap)


def close_pool_by(pool: ConnectionPool[Any], end: float) -> None:
    """Close ``pool`` by the monotonic ``end``, even while the database is away: psycopg_pool
    joins each of its threads (its workers, one maybe connecting into a partition, and its
    scheduler) for the whole timeout given, one after the other, so each gets its share."""
    pool.close(timeout=max(0.0, end - time.monotonic()) / (pool.num_workers + 1))


def _next_wait(end: float | None, look_every: float | Callable[[], float | None] | None) -> float | None:
    """How long the next wait of :func:`wait_until` may last (<= 0: the timeout has passed)."""
    left = None if end is None else end - time.monotonic()
    if left is not None and left <= 0:
        return left
    bound = look_every() if callable(look_every) else look_every
    if bound is None:
        return left
    return bound if left is None else min(left, bound)


class Runtime:
    """A runtime as a ``with`` block: entering starts it, leaving stops it (resigns, releases,
    or finishes the work in hand, as each runtime's ``stop`` says)."""

    def start(self) -> Self:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class AsyncRuntime:
    """:class:`Runtime` for asyncio, an ``async with`` block: entering starts it; leaving, or
    the cancellation of the task in it, stops it. The stop is shielded, so a second
    cancellation of that task does not cut a resignation or a release short."""

    async def start(self) -> Self:
        raise NotImplementedError

    async def stop(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await asyncio.shield(self.stop())


class LoopLogic:
    """What a loop decides, whichever way it runs: on threads (:class:`CycleLoop`) or as
    asyncio tasks (:class:`AsyncCycleLoop`). Subclasses implement ``_cycle``,
    ``_cycle_failed``, ``_holding``, ``_expire``, ``_stopped`` and ``_leave``; ``_cycle``
    and ``_leave`` are operations (see :mod:`tenure.driver`), so each is written once."""

    _state: threading.Condition | AsyncCondition  # guards what the subclass holds and _deadline

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
        self._deadline = 0.0  # monotonic; what is held is valid until then
        self._closing = False  # stop() began: nothing is taken up any more (set with _state held)
        self._watch_ended = False  # the watchdog's end, at the very end of stop() (with _state held)
        self._stranded = False  # stop() went on without the loop, which closes its connection itself
        self._followers: list[Callable[[], None]] = []  # told of every change (AsyncCycleLoop._while_held)

    # -- to implement ------------------------------------------------------------------

    def _cycle(self) -> Op[None]:
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

    def _leave(self) -> Op[None]:
        """Give up in the database (resign, release) on a clean stop."""
        raise NotImplementedError

    # -- shared by both shells ------------------------------------------------------------

    def follow(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` at every change of what is held, renewals included (on the thread
        that made the change, without the runtime's lock): a supervisor that must move its own
        deadlines with each renewal follows the runtime this way."""
        self._followers.append(callback)

    def _tell_followers(self) -> None:
        """What is held changed (called without _state)."""
        for follow in list(self._followers):
            follow()

    def _call(self, callback: Callable[[Any], object] | None, argument: object) -> None:
        """Run an application's callback; its failure is logged, never the loop's."""
        if callback is None:
            return
        try:
            result = callback(argument)
            if inspect.isawaitable(result):
                self._schedule(result)
        except Exception:
            log.exception("%s: callback %r failed", self.label, callback)

    def _schedule(self, awaitable: Awaitable[object]) -> None:
        """Run what a callback returned (the async shell runs it as a task)."""
        if inspect.iscoroutine(awaitable):
            awaitable.close()  # never awaited: say why instead of a RuntimeWarning
        raise TypeError(f"{self.label}: a callback returned an awaitable, which only async runtimes run")

    def _failed(self, error: Exception) -> None:
        """A cycle raised ``error``."""
        self._cycle_failures.inc()
        if isinstance(error, psycopg.Error):
            log.warning("%s: cycle failed: %s", self.label, error)
            self._cycle_failed(error.__class__.__name__)
        else:
            log.error("%s: cycle failed", self.label, exc_info=error)
            self._cycle_failed(repr(error))

    def _left(self, error: psycopg.Error, end: float) -> bool:
        """A leave failed with ``error``: whether to give up (too late to try again)."""
        if time.monotonic() + 0.2 < end:
            return False
        log.warning("%s: could not leave cleanly: %s", self.label, error)
        return True

    def _overdue(self) -> float | None:
        """Seconds until what is held expires (<= 0: it has), None when nothing is held
        (called with _state held)."""
        return self._deadline - time.monotonic() if self._holding() else None


class CycleLoop(LoopLogic, Runtime):
    """A :class:`LoopLogic` on two threads: the loop and its watchdog."""

    _state: threading.Condition

    def __init__(self, conninfo: str, **loop: Any) -> None:
        super().__init__(conninfo, **loop)
        self._state = threading.Condition()
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._connection: psycopg.Connection[Any] | None = None
        self._deadlines = Deadlines(self.label)
        self._loop_done = False  # the loop thread ended (set with _state held)

    # -- life cycle ----------------------------------------------------------------------

    def start(self) -> Self:
        for target, role in ((self._run, "loop"), (self._watch_deadline, "watchdog")):
            thread = threading.Thread(target=target, name=f"tenure-{role}-{self.label}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self, *, leave: bool = True, grace: float | None = None) -> None:
        """Stop the loop and give up locally; with ``leave``, in the database too.

        Returns within ``grace`` seconds (default: the safe window) even while the
        database is away: a call in flight is cut at once; a loop that does not come
        back in time (a connection attempt into a partition) is left to end by itself;
        a leave that fails is tried again until then, so that a successor need not wait
        for the grant to expire when the database returns in time, and is abandoned
        there. The watchdog goes on until stop() returns: what is held is given up by
        the end of its safe window, during a stop too.
        """
        end = time.monotonic() + (self.safe_window if grace is None else grace)
        with self._state:
            self._closing = True
            self._state.notify_all()
        self._stopping.set()
        self._deadlines.cut()  # a call in flight ends now; what it held is given up below
        loop, watchdogs = self._threads[:1], self._threads[1:]
        for thread in loop:
            thread.join(max(0.0, end - time.monotonic()))
        with self._state:
            came_back = not loop or self._loop_done
            self._stranded = not came_back
        self._stopped()
        if leave and came_back:
            self._leave_by(end)
        elif leave:
            log.warning("%s: stopped without leaving: the loop was not back within the grace", self.label)
        with self._state:
            self._watch_ended = True
            self._state.notify_all()
        for thread in watchdogs:
            thread.join(max(0.0, end - time.monotonic()))
        self._threads.clear()
        if came_back:
            self._close()
        self._deadlines.close()

    def _leave_by(self, end: float) -> None:
        """Leave in the database by the monotonic ``end``, on a connection whose timeouts are
        capped by the time left. It runs on a thread of its own that is abandoned at ``end``:
        libpq's connect timeout is never below 2 s, longer than what may be left."""
        connection, self._connection = self._connection, None
        abandoned = threading.Event()

        def attempt() -> None:
            nonlocal connection
            try:
                while not abandoned.is_set():
                    try:
                        if connection is None or connection.closed or connection.broken:
                            if connection is not None:
                                connection.close()
                            connection = None
                            connection = self._connect(deadline=max(0.1, end - time.monotonic()))
                            if abandoned.is_set():
                                return
                        with self._deadlines.bounded(connection, max(0.1, end - time.monotonic())):
                            Driver(connection).run(self._leave())
                        return
                    except psycopg.Error as error:
                        if self._left(error, end):
                            return
                        abandoned.wait(0.2)
            finally:
                if connection is not None:
                    connection.close()

        thread = threading.Thread(target=attempt, name=f"tenure-leave-{self.label}", daemon=True)
        thread.start()
        thread.join(max(0.0, end - time.monotonic()))
        if thread.is_alive():
            abandoned.set()
            self._deadlines.cut()
            log.warning("%s: could not leave within the grace: the database did not answer", self.label)

    # -- the loop --------------------------------------------------------------------------

    def _open(self) -> psycopg.Connection[Any]:
        """The loop's connection, (re)connected when needed."""
        if self._connection is None or self._connection.closed or self._connection.broken:
            self._close()
            self._connection = self._connect()
        return self._connection

    def _connect(self, *, deadline: float | None = None) -> psycopg.Connection[Any]:
        """A new connection whose waits end within the safe window, or ``deadline`` if sooner."""
        bound = capped(self.safe_window, deadline)
        return connect(self.conninfo, application_name=f"tenure {self.label}", deadline=bound)

    def _close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def _turn(self) -> contextlib.AbstractContextManager[object]:
        """Held around each cycle: a runtime whose connection the application uses too (the
        replica's lock connection) makes the two take turns."""
        return contextlib.nullcontext()

    def _run(self) -> None:
        try:
            next_cycle = time.monotonic()
            while not self._stopping.is_set():
                try:
                    with self._cycle_seconds.time(), self._turn():
                        connection = self._open()
                        if self._stopping.is_set():
                            break
                        with self._deadlines.bounded(connection, self.safe_window):
                            Driver(connection).run(self._cycle())
                except Exception as error:
                    if isinstance(error, psycopg.Error):
                        self._close()
                    if self._stopping.is_set():
                        break  # cut short by stop(), which gives up what was held
                    self._failed(error)
                next_cycle = max(next_cycle + self.period, time.monotonic())
                self._stopping.wait(next_cycle - time.monotonic())
        finally:
            with self._state:
                self._loop_done = True
                stranded = self._stranded
            if stranded:
                self._close()

    def _watch_deadline(self) -> None:
        with self._state:
            while not self._watch_ended:
                left = self._overdue()
                if left is None or left > 0:
                    self._state.wait(left)
                    continue
                self._state.release()
                try:
                    self._expire()
                finally:
                    self._state.acquire()


class GrantLogic(LoopLogic):
    """A loop that holds at most one numbered grant at a time, a term or a lock epoch,
    valid until a deadline on the monotonic clock: the Elector and the ReplicaManager.

    ``on_gained(grant)`` and ``on_lost(reason)`` run once per grant; subclasses implement
    ``_gained`` and ``_lost_grant`` for what else goes with a change (log, metrics).
    """

    grant_name = "grant"  # what a grant is called in reasons: "term", "epoch"

    def __init__(
        self,
        conninfo: str,
        *,
        on_gained: Callable[[int], object] | None,
        on_lost: Callable[[str], object] | None,
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

    def grant_until(self) -> tuple[int, float] | None:
        """The grant with the end of its safe window (monotonic), or None when none is held."""
        with self._state:
            grant = self._grant
            return (grant, self._deadline) if grant is not None and self._granted() else None

    def remaining(self) -> float:
        """Seconds left of the safe window of the grant (0 without one)."""
        with self._state:
            if self._grant is None:
                return 0.0
            return max(0.0, self._deadline - time.monotonic())

    def _granted(self) -> bool:
        """Whether a grant is held and valid (called with _state held)."""
        return self._grant is not None and time.monotonic() < self._deadline

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
            if self._closing:
                return  # stop() began: a late answer takes nothing up
            previous = self._grant
            self._grant, self._deadline = grant, deadline
            if previous != grant:
                self._since = time.monotonic()
            self._state.notify_all()
        self._tell_followers()
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
        self._tell_followers()
        self._lost_grant(previous, reason)
        self._call(self._on_lost, reason)


class GrantLoop(GrantLogic, CycleLoop):
    """A :class:`GrantLogic` on threads."""

    def _wait_for_grant(self, timeout: float | None) -> bool:
        with self._state:
            return wait_until(self._granted, self._state.wait, timeout)


class AsyncCondition:
    """What ``threading.Condition`` is to the threaded loops, for one event loop: a lock
    (held only between awaits, so never contended) and waiters woken by ``notify_all``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._changed = asyncio.Event()

    def __enter__(self) -> Self:
        self._lock.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self._lock.release()

    def notify_all(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait(self, timeout: float | None = None) -> None:
        """Until the next ``notify_all`` or ``timeout`` seconds (called without the lock)."""
        changed = self._changed
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await changed.wait()


class AsyncCycleLoop(LoopLogic, AsyncRuntime):
    """A :class:`LoopLogic` on two asyncio tasks, the loop and its watchdog: the same
    decisions as :class:`CycleLoop`, without a thread. Use as ``async with``; leaving the
    block, or the cancellation of the task in it, stops it as ``stop()`` does.

    Its watchdog runs on the event loop, so it notices an expiry late while the loop is
    blocked; what the application asks (``term``, ``is_primary()``) reads the clock and
    is never late, and ``leading()`` cancels at the deadline itself.
    """

    _state: AsyncCondition

    def __init__(self, conninfo: str, **loop: Any) -> None:
        super().__init__(conninfo, **loop)
        self._state = AsyncCondition()
        self._stopping = False
        self._tasks: list[asyncio.Task[None]] = []
        self._background: set[asyncio.Future[object]] = set()  # callbacks' coroutines
        self._connection: psycopg.AsyncConnection[Any] | None = None
        self._deadlines = AsyncDeadlines(self.label)

    async def start(self) -> Self:
        for work, role in ((self._run(), "loop"), (self._watch_deadline(), "watchdog")):
            self._tasks.append(asyncio.create_task(work, name=f"tenure-{role}-{self.label}"))
        return self

    async def stop(self, *, leave: bool = True, grace: float | None = None) -> None:
        """Stop the loop and give up locally; with ``leave``, in the database too.

        Bounded by ``grace`` seconds (default: the safe window) even while the database
        is away, as :meth:`CycleLoop.stop`.
        """
        end = time.monotonic() + (self.safe_window if grace is None else grace)
        with self._state:
            self._closing = True
            self._stopping = True
            self._state.notify_all()
        loop, watchdogs = self._tasks[:1], self._tasks[1:]
        # A call in flight is cut (its socket abandoned), never cancelled: psycopg would
        # wait up to 10 s for a cancel request that cannot reach the server. Anything else
        # the loop awaits (a connection attempt, its turn) is cancelled.
        if loop and loop[0] not in self._deadlines.cut():
            loop[0].cancel()
        if loop:
            await asyncio.wait(loop, timeout=max(0.0, end - time.monotonic()))
        came_back = not loop or loop[0].done()
        self._stranded = not came_back
        self._stopped()
        if came_back and self._connection is not None and not self._connection.closed:
            await self._close()  # the cut call may have left it mid-statement
        if leave and came_back:
            await self._leave_by(end)
        elif leave:
            log.warning("%s: stopped without leaving: the loop was not back within the grace", self.label)
        with self._state:
            self._watch_ended = True
            self._state.notify_all()
        for task in watchdogs:
            task.cancel()
        await asyncio.gather(*watchdogs, return_exceptions=True)
        self._tasks.clear()
        if came_back:
            await self._close()

    async def _leave_by(self, end: float) -> None:
        """Leave in the database by the monotonic ``end``, on connections whose timeouts are
        capped by the time left; a connection attempt still in progress then is cancelled."""
        while True:
            left = max(0.1, end - time.monotonic())
            try:
                async with asyncio.timeout(left):
                    connection = await self._open(deadline=left)
                with self._deadlines.bounded(connection, max(0.1, end - time.monotonic())):
                    await AsyncDriver(connection).run(self._leave())
                return
            except TimeoutError:
                log.warning("%s: could not leave within the grace: the database did not answer", self.label)
                return
            except psycopg.Error as error:
                await self._close()
                if self._left(error, end):
                    return
                await asyncio.sleep(0.2)

    @contextlib.asynccontextmanager
    async def _while_held(
        self,
        deadline: float,
        still: Callable[[], float | str],
        lost: Callable[[str], Exception],
        *,
        expired: str,
    ) -> AsyncIterator[None]:
        """Run the body until the monotonic ``deadline`` at most. At every change of what is
        held, ``still()`` (called with _state held) gives the new deadline, or why the hold
        ended; then, or when the deadline passes (``expired``), the body is cancelled and
        ``lost(reason)`` raised in its place. (A step the event loop had already made ready
        may still run once.)"""
        loop = asyncio.get_running_loop()
        reason = expired
        window = asyncio.timeout_at(loop.time() + deadline - time.monotonic())

        def follow() -> None:  # moves the cancellation with each renewal, or to now
            nonlocal reason
            if window.expired():
                return  # cancelled already; the body may still await its clean-up
            with self._state:
                answer = still()
            if isinstance(answer, str):
                reason = answer
                window.reschedule(loop.time())
            else:
                window.reschedule(loop.time() + answer - time.monotonic())

        try:
            async with window:
                self._followers.append(follow)
                yield
        except TimeoutError as error:
            if window.expired():
                raise lost(reason) from error
            raise
        finally:
            if follow in self._followers:
                self._followers.remove(follow)

    def _schedule(self, awaitable: Awaitable[object]) -> None:
        future = asyncio.ensure_future(awaitable)
        self._background.add(future)
        future.add_done_callback(self._background.discard)

    # -- the loop --------------------------------------------------------------------------

    async def _open(self, *, deadline: float | None = None) -> psycopg.AsyncConnection[Any]:
        if self._connection is None or self._connection.closed or self._connection.broken:
            await self._close()
            self._connection = await self._connect(deadline=deadline)
        return self._connection

    async def _connect(self, *, deadline: float | None = None) -> psycopg.AsyncConnection[Any]:
        """:meth:`CycleLoop._connect` for asyncio."""
        bound = capped(self.safe_window, deadline)
        return await aconnect(self.conninfo, application_name=f"tenure {self.label}", deadline=bound)

    async def _close(self) -> None:
        if self._connection is not None:
            await self._connection.close()
            self._connection = None

    def _turn(self) -> contextlib.AbstractAsyncContextManager[object]:
        """:meth:`CycleLoop._turn` for asyncio."""
        return contextlib.nullcontext()

    async def _run(self) -> None:
        try:
            next_cycle = time.monotonic()
            while not self._stopping:
                try:
                    with self._cycle_seconds.time():
                        async with self._turn():
                            connection = await self._open()
                            if self._stopping:
                                break
                            with self._deadlines.bounded(connection, self.safe_window):
                                await AsyncDriver(connection).run(self._cycle())
                except Exception as error:
                    if isinstance(error, psycopg.Error):
                        await self._close()
                    if self._stopping:
                        break  # cut short by stop(), which gives up what was held
                    self._failed(error)
                next_cycle = max(next_cycle + self.period, time.monotonic())
                await await_until(lambda: self._stopping, self._state.wait, next_cycle - time.monotonic())
        finally:
            if self._stranded:
                await self._close()

    async def _watch_deadline(self) -> None:
        while not self._watch_ended:
            with self._state:
                left = self._overdue()
            if left is None or left > 0:
                await self._state.wait(left)
                continue
            self._expire()


class AsyncGrantLoop(GrantLogic, AsyncCycleLoop):
    """A :class:`GrantLogic` on asyncio tasks."""

    async def _wait_for_grant(self, timeout: float | None) -> bool:
        def granted() -> bool:
            with self._state:
                return self._granted()

        return await await_until(granted, self._state.wait, timeout)

    @contextlib.asynccontextmanager
    async def _holding_grant(
        self, timeout: float | None, lost: Callable[[int, str], Exception]
    ) -> AsyncIterator[int]:
        """Wait for the grant, then run the body only while it lasts: at the end of its safe
        window, or as soon as it is given up, the body is cancelled and ``lost(grant, reason)``
        raised in its place."""
        if not await self._wait_for_grant(timeout):
            raise TimeoutError(f"{self.label}: no {self.grant_name} within {timeout} s")
        with self._state:
            grant, deadline = self._grant, self._deadline
        assert grant is not None

        def still() -> float | str:
            return self._deadline if self._grant == grant else f"{self.grant_name} {grant} ended"

        async with self._while_held(
            deadline,
            still,
            lambda reason: lost(grant, reason),
            expired=f"the safe window of {self.grant_name} {grant} passed",
        ):
            yield grant
