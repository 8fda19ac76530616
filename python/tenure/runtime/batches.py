"""The submission queue's runtime: a queuer with the seed's ``next()``, a pool of
submitters calling the application's ``submit``, and a monitor calling its
``status`` for pending batches. An instance serves only the keys it holds claims on
(a :class:`~tenure.runtime.claims.Claimer` runs inside).

Per key, batches reach ``submit`` in sequence order even with many submitters: a
submitter holding a later batch of a key waits until the earlier ones selected
with it were submitted. Just before submitting, a submitter checks that the key's
claim is still held in the epoch the batch was selected under, locally and in the
database (submitters checking at the same time share one call); otherwise the
batch is left pending for the key's next holder, whose monitor will learn what
became of it.

Every call of the pool's own to the database runs under a deadline watchdog (:class:`Calls`)
and is cut at ``call_bound``, the claimer's safe window, as every runtime's call is.

The decisions (when to select, whose turn it is, when to skip, what to resolve, how
soon to ask again) are written once, in :class:`Selection`, :class:`ClaimCheck` and
:class:`Submissions`; :class:`SubmissionPool` runs them on threads with a blocking
``submit`` and ``status``, :class:`AsyncSubmissionPool` on asyncio tasks with coroutine
ones.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import inspect
import logging
import threading
import time
from collections import defaultdict, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Self, TypeVar
from uuid import UUID

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from tenure.connect import (
    AsyncDeadlines,
    Deadlines,
    acheck_start,
    aconfigure,
    alisten,
    check_start,
    configure,
    connection_options,
    instance_name,
    listen,
)
from tenure.driver import OPS, AsyncDriver, BatchGrant, Driver, Op, Resolution
from tenure.errors import ClaimLost, InvalidConfiguration, InvalidTransition
from tenure.metrics import Metrics
from tenure.runtime.claims import AsyncClaimer, Claimer, Keys
from tenure.runtime.loop import AsyncCondition, AsyncRuntime, Runtime, await_until, close_pool_by, wait_until

log = logging.getLogger(__name__)
R = TypeVar("R")

MONITOR_FIRST_RETRY = 0.005  # seconds: the first re-ask after a submission, doubling up to the poll interval

Submit = Callable[[BatchGrant], None]
Status = Callable[[BatchGrant], str | None]  # 'committed', 'invalid', 'unknown', or None: still pending
AsyncSubmit = Callable[[BatchGrant], Awaitable[None] | None]
AsyncStatus = Callable[[BatchGrant], Awaitable[str | None] | str | None]


async def _resolved(value: Awaitable[Any] | Any) -> Any:
    """The value of an async callback: awaited when it is awaitable."""
    return await value if inspect.isawaitable(value) else value


async def _rest(event: asyncio.Event, timeout: float) -> bool:
    """``threading.Event.wait(timeout)`` then ``clear()``, for asyncio: whether it was set."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout):
            await event.wait()
    was_set = event.is_set()
    event.clear()
    return was_set


# -- calling the database ---------------------------------------------------------------


class Calls:
    """How the pool calls the database: each call (a selection, a check, the monitor's
    reads and resolutions) on a pooled connection, cut by a deadline watchdog when it
    overruns ``bound`` seconds, as every runtime's call is: its socket is abandoned, so a
    database that stops answering (a frozen server, a pause the network still acknowledges,
    which no connection option ends) costs the caller at most the bound and an error that
    says so, and the pool replaces the connection."""

    def __init__(self, label: str, bound: float) -> None:
        self.label = label
        self.bound = bound

    def _left(self, began: float) -> float:
        """Seconds left of the bound of a call that began (asked for a connection) at ``began``."""
        return max(0.05, began + self.bound - time.monotonic())

    def _overran(
        self, connection: psycopg.BaseConnection[Any], began: float
    ) -> psycopg.OperationalError | None:
        """The error to raise in place of what a call that began at ``began`` failed with, when
        the watchdog cut it."""
        if not connection.broken or time.monotonic() < began + self.bound:
            return None
        return psycopg.OperationalError(
            f"{self.label}: the database did not answer within {self.bound:g} s; the call was cut"
        )


class PoolCalls(Calls):
    """:class:`Calls` on threads."""

    def __init__(self, pool: ConnectionPool[Any], label: str, bound: float) -> None:
        super().__init__(label, bound)
        self.pool = pool
        self.deadlines = Deadlines(label)

    def run(self, op: Op[R]) -> R:
        began = time.monotonic()
        with self.pool.connection(timeout=self.bound) as connection:
            try:
                with self.deadlines.bounded(connection, self._left(began)):
                    return Driver(connection).run(op)
            except psycopg.OperationalError as error:
                overran = self._overran(connection, began)
                if overran is None:
                    raise
                raise overran from error


class AsyncPoolCalls(Calls):
    """:class:`Calls` for asyncio (a timer on the event loop per call)."""

    def __init__(self, pool: AsyncConnectionPool[Any], label: str, bound: float) -> None:
        super().__init__(label, bound)
        self.pool = pool
        self.deadlines = AsyncDeadlines(label)

    async def run(self, op: Op[R]) -> R:
        began = time.monotonic()
        async with self.pool.connection(timeout=self.bound) as connection:
            try:
                with self.deadlines.bounded(connection, self._left(began)):
                    return await AsyncDriver(connection).run(op)
            except psycopg.OperationalError as error:
                overran = self._overran(connection, began)
                if overran is None:
                    raise
                raise overran from error
            except asyncio.CancelledError:
                await connection.close()  # a cancelled call may have left it mid-statement
                raise


# -- selecting ----------------------------------------------------------------------------


class Selection:
    """What the queuer decides: when to ask the database for batches of the held keys
    (nothing buffered, something held, and not within ``idle_interval`` of a selection
    that found nothing, unless poked since), and which batch to hand out next. The
    shells (:class:`Queuer`, :class:`AsyncQueuer`) hold a lock from the decision to the
    hand-over, so a selection is registered (``on_selected``) before anyone asks again."""

    def __init__(
        self,
        claimer: Claimer | AsyncClaimer,
        *,
        depth: int,
        limit: int,
        idle_interval: float,
        on_selected: Callable[[list[BatchGrant]], None] = lambda batches: None,
    ) -> None:
        self.on_selected = on_selected
        self.claimer = claimer
        self.depth = depth
        self.limit = limit
        self.idle_interval = idle_interval
        self._buffer: deque[BatchGrant] = deque()
        self._idle_since: float | None = None  # when a selection last found nothing
        self._pokes = 0  # how many times something may have become eligible (no lock: a counter)
        self._pokes_seen = 0  # ... as counted when the last selection was sent: idle only if unchanged

    def poke(self) -> None:
        """Something may have become eligible (a batch resolved): select at the next call,
        even if a selection in flight finds nothing."""
        self._pokes += 1

    def _wants_selection(self) -> bool:
        idle = (
            self._idle_since is not None
            and self._pokes == self._pokes_seen
            and time.monotonic() - self._idle_since < self.idle_interval
        )
        return not self._buffer and not idle and bool(self.claimer.held())

    def _select(self) -> Op[list[BatchGrant]]:
        self._pokes_seen = self._pokes
        return OPS.batch_select(
            self.claimer.keyspace, self.claimer.instance_id, limit=self.limit, depth=self.depth
        )

    def _take(self, selected: list[BatchGrant]) -> None:
        self.on_selected(selected)
        self._buffer.extend(selected)
        self._idle_since = None if self._buffer else time.monotonic()

    def _hand_out(self) -> BatchGrant | None:
        return self._buffer.popleft() if self._buffer else None


class Queuer(Selection):
    """The seed's queuer: ``next()`` returns one batch of a held key at a time, or None."""

    def __init__(self, calls: PoolCalls, claimer: Claimer, **selection: Any) -> None:
        super().__init__(claimer, **selection)
        self.database = calls
        self._lock = threading.Lock()

    def settle(self) -> None:
        """Return once every selection that committed before this call was handed to
        ``on_selected`` (a selection holds the lock from its call until then)."""
        with self._lock:
            pass

    def next(self) -> BatchGrant | None:
        with self._lock:
            if self._wants_selection():
                self._take(self.database.run(self._select()))
            return self._hand_out()


class AsyncQueuer(Selection):
    """:class:`Queuer` for asyncio: ``await next()``."""

    def __init__(self, calls: AsyncPoolCalls, claimer: AsyncClaimer, **selection: Any) -> None:
        super().__init__(claimer, **selection)
        self.database = calls
        self._lock = asyncio.Lock()

    async def settle(self) -> None:
        """:meth:`Queuer.settle`."""
        async with self._lock:
            pass

    async def next(self) -> BatchGrant | None:
        async with self._lock:
            if self._wants_selection():
                self._take(await self.database.run(self._select()))
            return self._hand_out()


# -- the last check before submitting ------------------------------------------------------


@dataclass(eq=False)
class Ask:
    """One submitter's question to :class:`ClaimCheck`, and the answer once a call gave it."""

    key: str
    epoch: int
    held: bool | None = None  # None: not answered yet


class ClaimCheck:
    """The submitters' last check, in the database, that a key's claim is still held in
    the epoch a batch was selected under. Concurrent checks share one ``batch_check`` call,
    as a group commit does: a check asked while a call is in flight waits for the next
    call, so every batch is still checked by a call sent after its submitter asked, and is
    submitted only if that call said the claim was held. A call that fails says no to
    every check it carried."""

    def __init__(self, keyspace: str, instance_id: UUID, failure_level: Callable[[], int]) -> None:
        self.keyspace = keyspace
        self.instance_id = instance_id
        self.failure_level = failure_level  # the pool's: a call its stop cut is not a failure
        self._asked: list[Ask] = []
        self._calling = False
        self.calls = 0

    def _ask(self, key: str, epoch: int) -> Ask:
        ask = Ask(key, epoch)
        self._asked.append(ask)
        return ask

    def _waits(self, ask: Ask) -> bool:
        """Whether ``ask`` must wait for the call in flight (or the next one's answer)."""
        return ask.held is None and self._calling

    def _begin(self) -> list[Ask]:
        """This caller asks for every check waiting now."""
        self._calling = True
        asked, self._asked = self._asked, []
        self.calls += 1
        return asked

    def _call(self, asked: list[Ask]) -> Op[list[bool]]:
        return OPS.batch_check(self.keyspace, self.instance_id, [(a.key, a.epoch) for a in asked])

    def _failed(self, error: psycopg.Error) -> None:
        log.log(
            self.failure_level(), "%s: checking claims before submitting failed: %s", self.keyspace, error
        )

    def _answer(self, asked: list[Ask], answers: list[bool]) -> None:
        for n, a in enumerate(asked):
            a.held = answers[n] if n < len(answers) else False
        self._calling = False


class HeldCheck(ClaimCheck):
    """:class:`ClaimCheck` for threads."""

    def __init__(
        self, calls: PoolCalls, keyspace: str, instance_id: UUID, failure_level: Callable[[], int]
    ) -> None:
        super().__init__(keyspace, instance_id, failure_level)
        self.database = calls
        self._changed = threading.Condition()

    def held(self, key: str, epoch: int) -> bool:
        with self._changed:
            ask = self._ask(key, epoch)
            while self._waits(ask):
                self._changed.wait()
            if ask.held is not None:
                return ask.held
            asked = self._begin()
        answers: list[bool] = []
        try:
            answers = self.database.run(self._call(asked))
        except psycopg.Error as error:
            self._failed(error)
        finally:
            with self._changed:
                self._answer(asked, answers)
                self._changed.notify_all()
        return bool(ask.held)


class AsyncHeldCheck(ClaimCheck):
    """:class:`ClaimCheck` for asyncio (one event loop: no lock between its awaits)."""

    def __init__(
        self, calls: AsyncPoolCalls, keyspace: str, instance_id: UUID, failure_level: Callable[[], int]
    ) -> None:
        super().__init__(keyspace, instance_id, failure_level)
        self.database = calls
        self._changed = AsyncCondition()

    async def held(self, key: str, epoch: int) -> bool:
        ask = self._ask(key, epoch)
        while self._waits(ask):
            await self._changed.wait()
        if ask.held is not None:
            return ask.held
        asked = self._begin()
        answers: list[bool] = []
        try:
            answers = await self.database.run(self._call(asked))
        except psycopg.Error as error:
            self._failed(error)
        finally:  # also when cancelled: the checks it carried are answered no
            self._answer(asked, answers)
            self._changed.notify_all()
        return bool(ask.held)


# -- the pool -------------------------------------------------------------------------------

# A selection asks for PREFETCH batches per submitter: its cost is mostly per call (about 3 ms
# of server CPU on the development machine whether it takes 4 batches or 16), so taking a few
# rounds of the submitters' work at once is what lets one instance's queue keep up with a
# plain FIFO queue (docs/batches.md, "What the queue costs with 1,000 keys").
PREFETCH = 4
MAX_SELECTION = 10_000  # batch_select's largest p_limit


class Submissions:
    """What a submission pool decides, on threads (:class:`SubmissionPool`) or on asyncio
    tasks (:class:`AsyncSubmissionPool`): per-key order among the submitters, the checks
    before submitting, what to count, what to ask the external system and how to resolve
    it, and how soon to ask again. The shells only wait and call."""

    _order_changed: threading.Condition | AsyncCondition
    _wake: threading.Event | asyncio.Event  # submitters: something may have become eligible
    _resolve_soon: threading.Event | asyncio.Event  # monitor: something was submitted
    queuer: Queuer | AsyncQueuer

    def __init__(
        self,
        conninfo: str,
        keyspace: str,
        *,
        submitters: int,
        depth: int,
        prefetch: int,
        cycle: float,
        expiry: float,
        poll_interval: float,
        listen: bool,
        name: str | None,
        metrics: Metrics | None,
        claimer: type[Claimer] | type[AsyncClaimer],
    ) -> None:
        if submitters < 1 or depth < 1:
            raise InvalidConfiguration(f"need at least one submitter and depth 1: {submitters}, {depth}")
        if not 1 <= prefetch <= MAX_SELECTION // submitters:
            raise InvalidConfiguration(
                f"prefetch must be between 1 and {MAX_SELECTION // submitters} with {submitters} submitters"
                f" (a selection takes at most {MAX_SELECTION:,} batches), got {prefetch!r}"
            )
        if not poll_interval > 0:
            raise InvalidConfiguration(f"poll interval must be positive, got {poll_interval!r} s")
        self.keyspace = keyspace
        self.submitters = submitters
        self.depth = depth
        self.prefetch = prefetch
        self.expiry = expiry
        self.poll_interval = poll_interval
        self.listen = listen
        self.conninfo = conninfo
        self.metrics = metrics or Metrics()
        self.claimer = claimer(
            conninfo,
            keyspace,
            cycle=cycle,
            expiry=expiry,
            name=name,
            on_lost=self._lost,
            metrics=self.metrics,
        )
        self._application_name = f"tenure queue {instance_name(name)}"
        self._order: dict[str, list[int]] = defaultdict(
            list
        )  # per key, sorted: selected seqs not yet submitted
        # Selected (so pending in the database) but not yet handed to submit(): the
        # monitor must not ask the external system about these.
        self._unsubmitted: set[UUID] = set()
        self._stopping = False
        self._in_submit = 0  # submit() calls in progress: stop() lets them return first
        self.submitted = 0
        self.skipped = 0

    @property
    def call_bound(self) -> float:
        """Seconds a call of the pool's own to the database may take, waiting for a pooled
        connection included: the claimer's safe window (``expiry - cycle``), past which a
        check of the claim would be stale anyway. The deadline watchdog cuts a call there."""
        return self.claimer.safe_window

    def _calls_label(self) -> str:
        return f"queue {self.keyspace} {self.claimer.name}"

    def _pool_options(self) -> dict[str, Any]:
        return {
            "min_size": 1,
            "max_size": self.submitters + 2,
            "kwargs": connection_options(application_name=self._application_name, deadline=self.call_bound),
            "timeout": self.call_bound,
            "open": False,
        }

    def _queuer_options(self) -> dict[str, Any]:
        # Idle submitters ask the database at most once per poll interval between them.
        return {
            "depth": self.depth,
            "limit": self.submitters * self.prefetch,
            "idle_interval": self.poll_interval,
            "on_selected": self._selected,
        }

    def _start_options(self) -> dict[str, Any]:
        return {
            "application_name": "tenure queue probe",
            "listener": "a queue that listens for new batches" if self.listen else None,
        }

    # -- submitters ------------------------------------------------------------------

    def _lost(self, keys: Keys) -> None:
        with self._order_changed:
            for key in keys:
                self._order.pop(key, None)
            self._order_changed.notify_all()

    def _selected(self, batches: list[BatchGrant]) -> None:
        # Every batch of a selection is registered before any is handed out, so a later
        # batch of a key cannot overtake an earlier one.
        with self._order_changed:
            for batch in batches:
                # sorted: a batch the ledger lost comes back before later ones still waiting
                bisect.insort(self._order[batch.key], batch.seq)
                self._unsubmitted.add(batch.id)
            self.metrics.queue_unsubmitted.labels(self.keyspace).set(len(self._unsubmitted))
        self.metrics.batches_selected.labels(self.keyspace).inc(len(batches))

    def _failure_level(self) -> int:
        # stop cuts a call still in flight: that is the stop, not a failure
        return logging.DEBUG if self._stopping else logging.WARNING

    def _selection_failed(self, error: psycopg.Error) -> None:
        log.log(self._failure_level(), "%s: selecting batches failed: %s", self.keyspace, error)

    def _turn(self, batch: BatchGrant) -> bool | None:
        """Whether ``batch`` may go now (True), never (False: the key was lost meanwhile,
        or the pool stops), or must wait for earlier batches of its key (None); called
        with _order_changed held."""
        if self._stopping:
            return False
        queue = self._order.get(batch.key)
        if queue is None or batch.seq not in queue:
            return False
        return True if queue[0] == batch.seq else None

    def _fenced_locally(self, batch: BatchGrant) -> bool:
        """The claim of the batch's key is no longer held here in the epoch it was selected
        under (the database check follows when it still is)."""
        return self.claimer.epoch(batch.key) != batch.claim_epoch

    def _may_submit(self) -> bool:
        """Whether a submission may begin (never once stop() began); it counts as in progress
        until :meth:`_submitted`."""
        with self._order_changed:
            if self._stopping:
                return False
            self._in_submit += 1
            return True

    def _submissions_returned(self) -> bool:
        """Whether no ``submit`` call is in progress (called with _order_changed held)."""
        return not self._in_submit

    def _skip(self) -> None:
        """Left pending for the key's next holder."""
        with self._order_changed:
            self.skipped += 1
        self.metrics.batches_skipped.labels(self.keyspace).inc()

    def _submit_failed(self, batch: BatchGrant) -> None:
        log.exception(
            "%s: submitting batch %s of %s failed; the monitor will ask", self.keyspace, batch.seq, batch.key
        )

    def _submitted(self, batch: BatchGrant) -> None:
        """``submit`` returned, raised or was cancelled: counted out (stop() waits for that),
        and only now may the monitor ask about it: asked before it reached the external
        system, it would read as lost (unknown) and go again."""
        with self._order_changed:
            self._in_submit -= 1
            self._unsubmitted.discard(batch.id)
            self.submitted += 1
            self.metrics.queue_unsubmitted.labels(self.keyspace).set(len(self._unsubmitted))
            self._order_changed.notify_all()
        self.metrics.batches_submitted.labels(self.keyspace).inc()
        self._resolve_soon.set()

    def _finished(self, batch: BatchGrant) -> None:
        """The batch's submitter is done with it (submitted, skipped or given up)."""
        with self._order_changed:
            queue = self._order.get(batch.key)
            if queue is not None and batch.seq in queue:
                queue.remove(batch.seq)
            self._unsubmitted.discard(batch.id)
            self._order_changed.notify_all()

    def _poke(self) -> None:
        """Something may have become eligible: wake the submitters, select again."""
        self.queuer.poke()
        self._wake.set()

    def _notified(self, payload: str | None) -> None:
        """A notification of the channel (None: after the listener (re)connected)."""
        if payload is None or payload == self.keyspace:
            self._poke()

    def _stop_waiting(self) -> None:
        """Stop: every wait of the submitters and the monitor ends now, no submission begins."""
        with self._order_changed:
            self._stopping = True
            self._order_changed.notify_all()
        self._wake.set()
        self._resolve_soon.set()

    # -- monitor ------------------------------------------------------------------------

    def _pending(self) -> Op[list[BatchGrant]]:
        return OPS.batch_pending(self.keyspace, self.claimer.instance_id)

    def _to_ask(self, pending: list[BatchGrant]) -> list[BatchGrant]:
        """The pending batches to ask the external system about: those already submitted.
        (A batch selected just before batch_pending read may not be registered as
        unsubmitted yet: the shell settles the queuer first.)"""
        self.metrics.queue_pending.labels(self.keyspace).set(len(pending))
        with self._order_changed:
            return [batch for batch in pending if batch.id not in self._unsubmitted]

    def _answers(
        self, submitted: list[BatchGrant], outcomes: list[str | None]
    ) -> tuple[list[Resolution], bool]:
        """What the external system said of each submitted batch: the resolutions to record
        (under the epoch each batch's key has now, about the attempt that was asked about), and
        whether any batch is still in flight."""
        resolutions = [
            Resolution(batch.id, batch.claim_epoch, outcome, attempt=batch.attempts)
            for batch, outcome in zip(submitted, outcomes, strict=True)
            if outcome is not None
        ]
        return resolutions, len(resolutions) < len(submitted)

    def _resolve(self, resolutions: list[Resolution]) -> Op[int]:
        """Resolve what the external system said, in one call; when a key changed hands
        meanwhile, or a batch was selected again since it was asked about (an earlier
        resolution of it landed late: it is not resolved again from a stale answer), one by
        one what is still ours. Returns how many were resolved."""
        if not resolutions:
            return 0
        instance = self.claimer.instance_id
        try:
            yield from OPS.batch_resolve_many(self.keyspace, instance, resolutions)
            done = resolutions
        except (ClaimLost, InvalidTransition) as error:
            log.info("%s: resolving one by one: %s", self.keyspace, error.message)
            done = []
            for r in resolutions:
                try:
                    yield from OPS.batch_resolve_many(self.keyspace, instance, [r])
                    done.append(r)
                except (ClaimLost, InvalidTransition) as error:
                    log.info("%s: could not resolve %s: %s", self.keyspace, r.id, error.message)
        for r in done:
            self.metrics.batches_resolved.labels(self.keyspace, r.status).inc()
        return len(done)

    def _after_monitoring(self, delay: float, resolved: int | None, in_flight: bool) -> float:
        """After a round of the monitor (``resolved`` None: it failed): wake the submitters
        when something was resolved; ask again soon, backing off to the poll interval, while
        submitted batches are still in flight. Returns the next delay."""
        if resolved:
            self._poke()
        return min(delay * 2, self.poll_interval) if in_flight else self.poll_interval

    def _monitor_failed(self, error: Exception) -> None:
        if isinstance(error, psycopg.Error):
            log.log(self._failure_level(), "%s: monitoring failed: %s", self.keyspace, error)
        else:
            log.error("%s: the status function failed", self.keyspace, exc_info=error)


class SubmissionPool(Submissions, Runtime):
    """Submitters and a monitor for one queue (claims keyspace), on threads. Use as a
    context manager: leaving it lets the submissions in progress finish, then releases
    the claims (the keys' next holders take over at once)."""

    _order_changed: threading.Condition
    _wake: threading.Event
    _resolve_soon: threading.Event

    def __init__(
        self,
        conninfo: str,
        keyspace: str,
        *,
        submit: Submit,
        status: Status,
        submitters: int = 8,
        depth: int = 1,
        prefetch: int = PREFETCH,
        cycle: float = 1.0,
        expiry: float = 3.0,
        poll_interval: float = 0.2,
        listen: bool = True,
        name: str | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        super().__init__(
            conninfo,
            keyspace,
            submitters=submitters,
            depth=depth,
            prefetch=prefetch,
            cycle=cycle,
            expiry=expiry,
            poll_interval=poll_interval,
            listen=listen,
            name=name,
            metrics=metrics,
            claimer=Claimer,
        )
        self.submit = submit
        self.status = status
        self.claimer: Claimer
        self.pool: ConnectionPool[Any] = ConnectionPool(conninfo, configure=configure, **self._pool_options())
        self._calls = PoolCalls(self.pool, self._calls_label(), self.call_bound)
        self.queuer: Queuer = Queuer(self._calls, self.claimer, **self._queuer_options())
        self._check = HeldCheck(
            self._calls, keyspace, self.claimer.instance_id, failure_level=self._failure_level
        )
        self._order_changed = threading.Condition()
        self._listening = threading.Event()  # set: the listener stops
        self._wake = threading.Event()
        self._resolve_soon = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> Self:
        check_start(self.conninfo, **self._start_options())
        self.pool.open(wait=True, timeout=30)
        self.claimer.start()
        targets = [self._submitter] * self.submitters + [self._monitor]
        if self.listen:
            targets.append(self._listen)
        for n, target in enumerate(targets):
            thread = threading.Thread(target=target, name=f"tenure-queue-{n}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        """Let the submissions in progress finish, stop, and release the claims.

        Once the ``submit`` calls in progress returned, it takes at most the claimer's safe
        window (expiry - cycle), even while the database is away: the claimer stops within it
        (see :meth:`Claimer.stop`), a call still in flight then is cut, and a thread still
        waiting for the database at the end is left to end by itself (its pooled connection
        is closed when it comes back).
        """
        self._stop_waiting()
        self._listening.set()
        with self._order_changed:
            wait_until(self._submissions_returned, self._order_changed.wait, None)
        end = time.monotonic() + self.claimer.safe_window
        self.claimer.stop(grace=self.claimer.safe_window)
        self._calls.deadlines.cut()  # a call still in flight ends now
        for thread in self._threads:
            thread.join(max(0.0, end - time.monotonic()))
        self._threads.clear()
        close_pool_by(self.pool, end)
        self._calls.deadlines.close()

    def _submitter(self) -> None:
        while not self._stopping:
            try:
                batch = self.queuer.next()
            except psycopg.Error as error:
                self._selection_failed(error)
                batch = None
            if batch is None:
                self._wake.wait(self.poll_interval)
                self._wake.clear()
                continue
            try:
                self._submit_in_order(batch)
            finally:
                self._finished(batch)

    def _submit_in_order(self, batch: BatchGrant) -> None:
        with self._order_changed:
            while (turn := self._turn(batch)) is None:
                self._order_changed.wait(0.5)
        if not turn:
            return
        if self._fenced_locally(batch) or not self._check.held(batch.key, batch.claim_epoch):
            self._skip()
            return
        if not self._may_submit():
            return
        try:
            self.submit(batch)
        except Exception:
            self._submit_failed(batch)
        finally:
            self._submitted(batch)

    def _monitor(self) -> None:
        """Asks the external system about pending batches right after submissions, again
        soon (backing off up to the poll interval) while some are still in flight, and
        every poll interval; resolves what it learned in one call."""
        delay = self.poll_interval
        while not self._stopping:
            if self._resolve_soon.wait(delay):
                delay = MONITOR_FIRST_RETRY
            self._resolve_soon.clear()
            if self._stopping:
                return
            resolved: int | None = None
            in_flight = False
            try:
                resolved, in_flight = self._resolve_pending()
            except Exception as error:
                self._monitor_failed(error)
            delay = self._after_monitoring(delay, resolved, in_flight)

    def _resolve_pending(self) -> tuple[int, bool]:
        """Resolves what the external system knows; returns how many, and whether any
        submitted batch is still in flight."""
        pending = self._calls.run(self._pending())
        self.queuer.settle()
        submitted = self._to_ask(pending)
        resolutions, in_flight = self._answers(submitted, [self.status(batch) for batch in submitted])
        return (self._calls.run(self._resolve(resolutions)) if resolutions else 0), in_flight

    def _listen(self) -> None:
        """Wake idle submitters when a batch of this queue is enqueued or resolved."""
        listen(
            self.conninfo,
            "tenure_batch",
            name=f"{self.keyspace} {self.claimer.name}",
            stopping=self._listening,
            retry=self.poll_interval,
            on_notify=self._notified,
        )


class AsyncSubmissionPool(Submissions, AsyncRuntime):
    """:class:`SubmissionPool` for asyncio: the same submitters and monitor as tasks of the
    running event loop, with the same order, checks and resolution, and no thread.

    ``submit(batch)`` and ``status(batch)`` are coroutine functions (a plain function is
    called on the event loop, so it must not block). Use as ``async with``: leaving the
    block, or the cancellation of the task in it, lets the submissions in progress finish,
    then releases the claims, as leaving a :class:`SubmissionPool` does.
    """

    _order_changed: AsyncCondition
    _wake: asyncio.Event
    _resolve_soon: asyncio.Event

    def __init__(
        self,
        conninfo: str,
        keyspace: str,
        *,
        submit: AsyncSubmit,
        status: AsyncStatus,
        submitters: int = 8,
        depth: int = 1,
        prefetch: int = PREFETCH,
        cycle: float = 1.0,
        expiry: float = 3.0,
        poll_interval: float = 0.2,
        listen: bool = True,
        name: str | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        super().__init__(
            conninfo,
            keyspace,
            submitters=submitters,
            depth=depth,
            prefetch=prefetch,
            cycle=cycle,
            expiry=expiry,
            poll_interval=poll_interval,
            listen=listen,
            name=name,
            metrics=metrics,
            claimer=AsyncClaimer,
        )
        self.submit = submit
        self.status = status
        self.claimer: AsyncClaimer

        self.pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            conninfo, configure=aconfigure, **self._pool_options()
        )
        self._calls = AsyncPoolCalls(self.pool, self._calls_label(), self.call_bound)
        self.queuer: AsyncQueuer = AsyncQueuer(self._calls, self.claimer, **self._queuer_options())
        self._check = AsyncHeldCheck(
            self._calls, keyspace, self.claimer.instance_id, failure_level=self._failure_level
        )
        self._order_changed = AsyncCondition()
        self._wake = asyncio.Event()
        self._resolve_soon = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._listener: asyncio.Task[None] | None = None
        self._left_running: set[asyncio.Task[None]] = set()  # by stop(): referenced until they end

    async def start(self) -> Self:
        await acheck_start(self.conninfo, **self._start_options())
        await self.pool.open(wait=True, timeout=30)
        await self.claimer.start()
        for n in range(self.submitters):
            self._tasks.append(asyncio.create_task(self._submitter(), name=f"tenure-queue-{n}"))
        self._tasks.append(asyncio.create_task(self._monitor(), name="tenure-queue-monitor"))
        if self.listen:
            self._listener = asyncio.create_task(
                alisten(
                    self.conninfo,
                    "tenure_batch",
                    name=f"{self.keyspace} {self.claimer.name}",
                    retry=self.poll_interval,
                    on_notify=self._notified,
                ),
                name="tenure-queue-listen",
            )
        return self

    async def stop(self) -> None:
        """Let the submissions in progress finish, stop, and release the claims, within the
        bound of :meth:`SubmissionPool.stop`: a task still waiting for the database at the
        end is left to end by itself."""
        self._stop_waiting()
        if self._listener is not None:
            self._listener.cancel()

        def returned() -> bool:
            with self._order_changed:
                return self._submissions_returned()

        await await_until(returned, self._order_changed.wait, None)
        end = time.monotonic() + self.claimer.safe_window
        await self.claimer.stop(grace=self.claimer.safe_window)
        self._calls.deadlines.cut()  # a call still in flight ends now
        # Never cancelled: psycopg would wait for a cancel request the server cannot get.
        tasks = [*self._tasks, *([self._listener] if self._listener is not None else [])]
        if tasks:
            await asyncio.wait(tasks, timeout=max(0.0, end - time.monotonic()))
        for task in self._tasks:
            if task.done() and not task.cancelled() and task.exception() is not None:
                # as a thread that died would have printed it
                log.error(
                    "%s: %s ended with an error", self.keyspace, task.get_name(), exc_info=task.exception()
                )
        self._left_running |= {task for task in tasks if not task.done()}
        for task in self._left_running:
            task.add_done_callback(self._left_running.discard)
        self._tasks.clear()
        self._listener = None
        await self.pool.close(timeout=max(0.0, end - time.monotonic()))

    async def _submitter(self) -> None:
        while not self._stopping:
            try:
                batch = await self.queuer.next()
            except psycopg.Error as error:
                self._selection_failed(error)
                batch = None
            if batch is None:
                await _rest(self._wake, self.poll_interval)
                continue
            try:
                await self._submit_in_order(batch)
            finally:
                self._finished(batch)

    async def _submit_in_order(self, batch: BatchGrant) -> None:
        while True:
            with self._order_changed:
                turn = self._turn(batch)
            if turn is not None:
                break
            await self._order_changed.wait(0.5)
        if not turn:
            return
        if self._fenced_locally(batch) or not await self._check.held(batch.key, batch.claim_epoch):
            self._skip()
            return
        if not self._may_submit():
            return
        try:
            await _resolved(self.submit(batch))
        except Exception:
            self._submit_failed(batch)
        finally:  # also when cancelled: it may have reached the external system
            self._submitted(batch)

    async def _monitor(self) -> None:
        """:meth:`SubmissionPool._monitor`."""
        delay = self.poll_interval
        while not self._stopping:
            if await _rest(self._resolve_soon, delay):
                delay = MONITOR_FIRST_RETRY
            if self._stopping:
                return
            resolved: int | None = None
            in_flight = False
            try:
                resolved, in_flight = await self._resolve_pending()
            except Exception as error:
                self._monitor_failed(error)
            delay = self._after_monitoring(delay, resolved, in_flight)

    async def _resolve_pending(self) -> tuple[int, bool]:
        """:meth:`SubmissionPool._resolve_pending`."""
        pending = await self._calls.run(self._pending())
        await self.queuer.settle()
        submitted = self._to_ask(pending)
        outcomes = [await _resolved(self.status(batch)) for batch in submitted]
        resolutions, in_flight = self._answers(submitted, outcomes)
        return (await self._calls.run(self._resolve(resolutions)) if resolutions else 0), in_flight
