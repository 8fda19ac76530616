"""The driver: one method per public SQL function of schema ``tenure``.

It holds no policy (no sleeps, no retries): rows become dataclasses and tenure's
SQLSTATEs become the exceptions of :mod:`tenure.errors`. Each method runs in the
connection's current transaction, or in a transaction of its own on an autocommit
connection, so an application can fence its own writes in the same transaction.
"""

from __future__ import annotations

import base64
import functools
from collections.abc import Callable, Coroutine, Generator, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Concatenate, Generic, ParamSpec, Self, TypeVar, overload
from uuid import UUID

import psycopg
from psycopg import sql
from psycopg.rows import RowFactory, class_row, dict_row, tuple_row
from psycopg.types.json import Jsonb

from tenure.connect import aconfirm_commit, confirm_commit, forget_unconfirmed
from tenure.errors import from_psycopg

T = TypeVar("T")
P = ParamSpec("P")


@dataclass(frozen=True)
class PrimaryEntry:
    """The primary of a service type and its term (fencing epoch)."""

    utype: str
    instance_id: UUID
    term: int
    renewed_at: datetime
    valid_until: datetime


@dataclass(frozen=True)
class HeartbeatStatus:
    """One row of the operator view ``tenure.heartbeat_status``."""

    utype: str
    instance_id: UUID | None
    term: int
    renewed_at: datetime
    heartbeat_age: timedelta
    timeout: timedelta
    heartbeat_interval: timedelta | None
    valid_until: datetime
    live: bool
    term_started_at: datetime | None


@dataclass(frozen=True)
class TaskLease:
    """A task handed to an owner, with the epoch that fences its writes."""

    id: UUID
    kind: str
    state: str
    data: Any
    epoch: int
    attempts: int
    lease_until: datetime


@dataclass(frozen=True)
class TaskCycled:
    """One row of ``task_cycle``'s answer: a reported outcome (``outcome`` complete, release,
    fail or extend; ``refused`` says why it was not applied), a new lease (``outcome`` lease), or
    a rate-limited kind held back (``outcome`` throttled, ``id`` and ``epoch`` None,
    ``next_action`` when its rate lets the next lease through)."""

    id: UUID | None
    epoch: int | None
    outcome: str
    refused: str | None
    kind: str | None
    state: str | None
    data: Any
    attempts: int | None
    next_action: datetime | None


@dataclass(frozen=True)
class TaskKind:
    """One row of the view ``tenure.task_kinds``: a kind's settings and what runs against them."""

    kind: str
    paused: bool
    max_running: int | None
    max_running_per_key: int | None
    rate: int | None
    rate_period: timedelta | None
    running: int
    due: int
    rate_used: int | None
    changed_at: datetime


@dataclass(frozen=True)
class TaskDependency:
    """One row of the view ``tenure.task_dependencies``: ``task_id`` runs after ``after_id``."""

    task_id: UUID
    after_id: UUID
    after_status: str


@dataclass(frozen=True)
class TaskEnqueued:
    """An enqueued task: ``created`` False when its id or key existed; ``next_action`` when it
    is due (waiting: the earliest it may be), None when created dead after a dead task."""

    id: UUID
    kind: str
    created: bool
    next_action: datetime | None


@dataclass(frozen=True)
class TaskRow:
    """One row of the view ``tenure.tasks``."""

    id: UUID
    kind: str
    state: str
    status: str
    owner: UUID | None
    epoch: int
    data: Any
    attempts: int
    max_attempts: int
    last_error: str | None
    idempotency_key: str | None
    created_at: datetime
    last_change: datetime
    last_action: datetime
    next_action: datetime | None
    leased_at: datetime | None
    finished_at: datetime | None
    leased: bool
    due: bool
    priority: int
    limit_key: str | None
    after_left: int


@dataclass(frozen=True)
class TaskStatus:
    """One row of the view ``tenure.task_status``: tasks counted by kind, state, status."""

    kind: str
    state: str
    status: str
    tasks: int
    leased: int
    due: int
    oldest_due_age: timedelta | None
    max_attempts_used: int


@dataclass(frozen=True)
class TableVacuum:
    """One row of the view ``tenure.table_vacuum``: one of tenure's tables, its rows and dead rows
    (the server's statistics), the dead rows past which autovacuum visits it (None where
    autovacuum is off), its last vacuum and analyze, and its size with indexes."""

    table_name: str
    live_rows: int
    dead_rows: int
    autovacuum_at: int | None
    last_vacuum: datetime | None
    vacuums: int
    last_analyze: datetime | None
    total_bytes: int


@dataclass(frozen=True)
class ClaimGrant:
    """A key of the caller: renewed, released, taken, or (key None) a take skipped as busy."""

    key: str | None
    epoch: int | None
    expires_at: datetime | None
    change: str


@dataclass(frozen=True)
class ClaimRow:
    """One row of the view ``tenure.claims``."""

    keyspace: str
    key: str
    claimant: UUID | None
    epoch: int
    expires_at: datetime | None
    claimed_at: datetime | None
    claim_age: timedelta | None
    live: bool
    unclaimed_for: timedelta | None


@dataclass(frozen=True)
class ClaimInstance:
    """One row of the view ``tenure.claim_instances``."""

    keyspace: str
    instance_id: UUID
    renewed_at: datetime
    expires_at: datetime
    live: bool
    keys_held: int
    fair_share: int


@dataclass(frozen=True)
class BatchEnqueued:
    id: UUID
    key: str
    seq: int
    created: bool


@dataclass(frozen=True)
class BatchGrant:
    """A batch handed to a submitter, with the claim epoch to re-check just before submitting."""

    id: UUID
    key: str
    seq: int
    payload: bytes
    state_keys: list[str]
    attempts: int
    claim_epoch: int
    round: int


@dataclass(frozen=True)
class Resolution:
    """What the external system says of a pending batch, for batch_resolve_many."""

    id: UUID
    epoch: int
    status: str  # 'committed', 'invalid' or 'unknown'
    detail: str | None = None
    # the attempts of the grant the external system was asked about: the resolution is
    # refused (TN301) once the batch was selected again (None: whatever attempt it is in)
    attempt: int | None = None


@dataclass(frozen=True)
class BatchKey:
    """One row of the view ``tenure.batch_keys``: depth per key."""

    keyspace: str
    key: str
    mode: str
    implicit_deps: bool
    claimant: UUID | None
    claimed: bool
    queued: int
    pending: int
    unknown: int
    invalid: int
    committed: int
    oldest_waiting_age: timedelta | None
    halted: bool


@dataclass(frozen=True)
class BatchRow:
    """One row of the view ``tenure.batches`` (without the payload)."""

    keyspace: str
    key: str
    seq: int
    id: UUID
    status: str
    payload_bytes: int
    state_keys: list[str]
    depends_on: list[UUID]
    attempts: int
    enqueued_at: datetime
    submitted_at: datetime | None
    resolved_at: datetime | None
    submitter: UUID | None
    claim_epoch: int | None
    detail: str | None


@dataclass(frozen=True)
class ReplicaGrant:
    """Answer of ``replica_acquire``: whether the calling session holds the lock now, and the holder."""

    lock_id: int
    acquired: bool
    epoch: int
    replica: str | None
    pid: int | None
    since: datetime | None
    reserved_until: datetime | None


@dataclass(frozen=True)
class ReplicaHolder:
    """Who holds a replica lock (``replica_holder`` and the view ``tenure.replicas``)."""

    scope: str
    counter: int
    lock_id: int
    pid: int | None
    application_name: str | None
    replica: str | None
    epoch: int | None
    since: datetime | None
    renewed_at: datetime | None
    reserved_until: datetime | None


@dataclass(frozen=True)
class ScheduleInfo:
    """A schedule, as ``schedule_set``, ``schedule_pause``, ``schedule_resume``, ``schedule_drop`` return it.

    ``next_slot`` is None while paused, and earlier than now when the schedule is overdue.
    """

    name: str
    kind: str
    cron: str | None
    every: timedelta | None
    timezone: str
    data: Any
    max_attempts: int
    catch_up: str
    catch_up_limit: int
    paused: bool
    next_slot: datetime | None
    last_slot: datetime | None
    last_task_id: UUID | None
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class ScheduleSlot:
    """A task ``schedule_tick`` created: the schedule, the slot and the task."""

    name: str
    slot: datetime
    task_id: UUID


@dataclass(frozen=True)
class ScheduleRow:
    """One row of the view ``tenure.schedules``."""

    name: str
    kind: str
    cron: str | None
    every: timedelta | None
    timezone: str
    paused: bool
    next_slot: datetime | None
    last_slot: datetime | None
    last_task_id: UUID | None
    last_task_status: str | None
    catch_up: str
    catch_up_limit: int
    data: Any
    max_attempts: int
    created_at: datetime
    updated_at: datetime


def _json(value: Any) -> Jsonb | None:
    return None if value is None else Jsonb(value)


@contextmanager
def _translated() -> Iterator[None]:
    try:
        yield
    except psycopg.Error as error:
        tenure_error = from_psycopg(error)
        if tenure_error is None:
            raise
        raise tenure_error from error


def _seconds(value: timedelta | float | None) -> timedelta | None:
    if value is None or isinstance(value, timedelta):
        return value
    return timedelta(seconds=value)


# The views an operator reads, each with the columns that order its rows.
OPERATOR_VIEWS: dict[str, tuple[str, ...]] = {
    "heartbeat_status": ("utype",),
    "claim_keyspaces": ("keyspace",),
    "claim_instances": ("keyspace", "instance_id"),
    "claims": ("keyspace", "key"),
    "task_status": ("kind", "state", "status"),
    "task_kinds": ("kind",),
    "batch_queues": ("keyspace",),
    "batch_keys": ("keyspace", "key"),
    "replicas": ("scope", "counter"),
    "table_vacuum": ("table_name",),
}

# The histories with a retention function tenure.<history>_prune(p_older_than, p_limit).
PRUNE_HISTORIES = ("task", "batch", "heartbeat", "claim", "replica")


Params = Sequence[object] | dict[str, object]
Statement = str | sql.SQL | sql.Composed


class Query:
    """One statement an operation asks its runner to execute; the answer is every row,
    made by ``rows`` (a psycopg row factory)."""

    __slots__ = ("params", "rows", "statement")

    def __init__(self, statement: Statement, params: Params, rows: RowFactory[Any]) -> None:
        self.statement, self.params, self.rows = statement, params, rows


# An operation: a generator that yields the statements it needs, receives each one's rows,
# and returns its result. Written once, it runs on a Connection (Driver.run) or on an
# AsyncConnection (AsyncDriver.run); runtimes compose operations into their cycles with
# ``yield from``, so that each decision is written once for both.
Op = Generator[Query, list[Any], T]


def _task_json(task: dict[str, Any]) -> dict[str, Any]:
    """One task of task_enqueue_many as JSON: delays in seconds as text, ids as text."""
    out = dict(task)
    if isinstance(out.get("delay"), int | float):
        out["delay"] = f"{out['delay']} seconds"
    if out.get("id") is not None:
        out["id"] = str(out["id"])
    if out.get("after") is not None:
        out["after"] = [str(id) for id in out["after"]]
    return out


def _rows(row_type: type[T], statement: str, params: Params) -> Op[list[T]]:
    return (yield Query(statement, params, class_row(row_type)))


def _positional_row(row_type: type[T]) -> RowFactory[T]:
    """``class_row(row_type)`` for a hot path: when the columns are the dataclass's fields in
    order, each row is made from its values by position (no mapping of names per row)."""
    fields = list(row_type.__dataclass_fields__)  # type: ignore[attr-defined]
    by_name = class_row(row_type)

    def factory(cursor: Any) -> Callable[[Sequence[Any]], T]:
        if [column.name for column in cursor.description or ()] != fields:
            return by_name(cursor)
        return lambda values: row_type(*values)

    return factory


_TASK_CYCLED_ROWS = _positional_row(TaskCycled)  # task_cycle's rows: two per task on a worker's hot path


def _scalar(statement: Statement, params: Params) -> Op[Any]:
    rows = yield Query(statement, params, tuple_row)
    return rows[0][0]


class operation(Generic[P, T]):
    """A driver method written once as an operation: on a :class:`Driver` it runs at once
    and returns the result; on an :class:`AsyncDriver` it is a coroutine; on
    :data:`OPS` it returns the operation itself, to compose with ``yield from``."""

    def __init__(self, body: Callable[Concatenate[Any, P], Op[T]]) -> None:
        self.body = body
        functools.update_wrapper(self, body)  # type: ignore[arg-type, unused-ignore]

    @overload
    def __get__(self, instance: None, owner: type[Any]) -> Self: ...
    @overload
    def __get__(self, instance: AsyncDriver, owner: type[Any]) -> Callable[P, Coroutine[Any, Any, T]]: ...
    @overload
    def __get__(self, instance: Driver, owner: type[Any]) -> Callable[P, T]: ...
    @overload
    def __get__(self, instance: Operations, owner: type[Any]) -> Callable[P, Op[T]]: ...
    def __get__(self, instance: Operations | None, owner: type[Any]) -> Any:
        if instance is None:
            return self
        return instance._bind(self.body)

    def __call__(self, instance: Operations, *args: P.args, **kwargs: P.kwargs) -> Any:
        """Called on the class, as ``Driver.task_cycle(driver, ...)``, like a plain method."""
        return instance._bind(self.body)(*args, **kwargs)


class Operations:
    """Every public SQL function of schema ``tenure`` as an operation; see :class:`Driver`."""

    def _bind(self, body: Callable[..., Op[T]]) -> Callable[..., Any]:
        return functools.partial(body, self)

    @operation
    def server_time(self) -> Op[datetime]:
        """The database's clock (the start of the current transaction, if one is open)."""
        return (yield from _scalar("SELECT now()", ()))  # type: ignore[no-any-return]

    @operation
    def view_rows(self, view: str) -> Op[list[dict[str, Any]]]:
        """Every row of one of tenure's operator views, in the order of its leading columns."""
        if view not in OPERATOR_VIEWS:
            raise ValueError(
                f"not one of tenure's operator views: {view!r}; choose from {sorted(OPERATOR_VIEWS)}"
            )
        query = sql.SQL("SELECT * FROM tenure.{} ORDER BY {}").format(
            sql.Identifier(view), sql.SQL(", ").join(sql.Identifier(c) for c in OPERATOR_VIEWS[view])
        )
        return (yield Query(query, (), dict_row))

    @operation
    def table_vacuum(self) -> Op[list[TableVacuum]]:
        """Each of tenure's tables: rows, dead rows against autovacuum's count, last vacuum, size."""
        return (yield from _rows(TableVacuum, "SELECT * FROM tenure.table_vacuum ORDER BY table_name", ()))

    @operation
    def update_heartbeat(
        self,
        instance_id: UUID,
        utype: str,
        *,
        timeout: timedelta | float,
        interval: timedelta | float | None = None,
    ) -> Op[PrimaryEntry]:
        """Heartbeat as a candidate for primary; returns who is primary now, with the term."""
        rows = yield from _rows(
            PrimaryEntry,
            "SELECT * FROM tenure.update_heartbeat(%s, %s, %s, %s)",
            (instance_id, utype, _seconds(timeout), _seconds(interval)),
        )
        return rows[0]

    @operation
    def get_primary(self, utype: str) -> Op[PrimaryEntry | None]:
        """The live primary of ``utype``, or None when there is none."""
        rows = yield from _rows(PrimaryEntry, "SELECT * FROM tenure.get_primary(%s)", (utype,))
        return rows[0] if rows else None

    @operation
    def check_primary(self, instance_id: UUID, utype: str) -> Op[bool]:
        """True only if ``instance_id`` is the live primary of ``utype``."""
        return bool((yield from _scalar("SELECT tenure.check_primary(%s, %s)", (instance_id, utype))))

    @operation
    def heartbeat_resign(self, instance_id: UUID, utype: str) -> Op[bool]:
        """Give up primacy at once; True if the instance was the live primary."""
        return bool((yield from _scalar("SELECT tenure.heartbeat_resign(%s, %s)", (instance_id, utype))))

    @operation
    def heartbeat_fence(self, instance_id: UUID, utype: str, term: int) -> Op[None]:
        """Raise NotPrimary unless the instance is the live primary in ``term``.

        Call it inside the transaction of the write it guards.
        """
        (yield from _scalar("SELECT tenure.heartbeat_fence(%s, %s, %s)", (instance_id, utype, term)))

    @operation
    def heartbeat_prune(self, *, older_than: timedelta | float, limit: int = 10000) -> Op[int]:
        """Retention: delete at most ``limit`` ended terms older than ``older_than``, oldest first.

        Never the current term of a service type, never a heartbeat entry.

        Returns how many were deleted: call again while it returns ``limit``.
        """
        return int(
            (yield from _scalar("SELECT tenure.heartbeat_prune(%s, %s)", (_seconds(older_than), limit)))
        )

    @operation
    def heartbeat_status(self) -> Op[list[HeartbeatStatus]]:
        """Every service type: primary, term, last heartbeat and its age, liveness."""
        return (yield from _rows(HeartbeatStatus, "SELECT * FROM tenure.heartbeat_status ORDER BY utype", ()))

    # -- tasks ---------------------------------------------------------------------

    @operation
    def task_enqueue(
        self,
        kind: str,
        data: Any = None,
        *,
        state: str = "new",
        delay: timedelta | float = 0,
        id: UUID | None = None,
        idempotency_key: str | None = None,
        max_attempts: int = 5,
        priority: int = 0,
        limit_key: str | None = None,
        after: Sequence[UUID] | None = None,
    ) -> Op[TaskEnqueued]:
        """Enqueue one task; ``after``: it runs once every one of these tasks is done."""
        rows = yield from _rows(
            TaskEnqueued,
            "SELECT * FROM tenure.task_enqueue(%s, coalesce(%s, '{}'::jsonb), %s, %s, %s, %s, %s, %s, %s,"
            " %s::uuid[])",
            (
                kind,
                _json(data),
                state,
                _seconds(delay),
                id,
                idempotency_key,
                max_attempts,
                priority,
                limit_key,
                None if after is None else list(after),
            ),
        )
        return rows[0]

    @operation
    def task_enqueue_many(self, tasks: Sequence[dict[str, Any]]) -> Op[list[TaskEnqueued]]:
        """Enqueue many in one call (at most 10,000); each dict has the keys of task_enqueue
        (``delay`` in seconds or text; ``id`` and the ids in ``after`` UUIDs or text)."""
        payload = [_task_json(task) for task in tasks]
        return (
            yield from _rows(TaskEnqueued, "SELECT * FROM tenure.task_enqueue_many(%s)", (Jsonb(payload),))
        )

    @operation
    def task_acquire(
        self, owner: UUID, *, lease: timedelta | float, limit: int = 1, kinds: Sequence[str] | None = None
    ) -> Op[list[TaskLease]]:
        return (
            yield from _rows(
                TaskLease,
                "SELECT * FROM tenure.task_acquire(%s, %s, %s, %s)",
                (owner, _seconds(lease), limit, None if kinds is None else list(kinds)),
            )
        )

    @operation
    def task_cycle(
        self,
        owner: UUID,
        *,
        lease: timedelta | float,
        limit: int,
        kinds: Sequence[str] | None = None,
        outcomes: Sequence[dict[str, Any]] = (),
        wait: timedelta | float | None = None,
    ) -> Op[list[TaskCycled]]:
        """Report ``outcomes`` and lease up to ``limit`` due tasks, in one call and one commit.

        Each outcome is ``{"id": ..., "epoch": ..., "outcome": "complete" | "release" | "fail" | "extend"}``
        with the optional keys of that outcome (``state``, ``data``, ``delay`` and ``retry_delay`` in
        seconds, ``error``); ids may be UUIDs. Returns a row per outcome, then a row per new lease.
        With ``wait``, a call that leaves slots free registers ``owner`` for ``NOTIFY tenure_task``
        of its kinds for that long (tasks are announced only to registered waiters).
        """
        payload = [
            outcome if isinstance(outcome["id"], str) else {**outcome, "id": str(outcome["id"])}
            for outcome in outcomes
        ]
        return (
            yield Query(
                "SELECT * FROM tenure.task_cycle(%s, %s, %s, %s, %s, %s)",
                (
                    owner,
                    _seconds(lease),
                    limit,
                    None if kinds is None else list(kinds),
                    Jsonb(payload),
                    None if wait is None else _seconds(wait),
                ),
                _TASK_CYCLED_ROWS,
            )
        )

    @operation
    def task_extend(self, id: UUID, owner: UUID, epoch: int, *, lease: timedelta | float) -> Op[datetime]:
        return (  # type: ignore[no-any-return]
            yield from _scalar(
                "SELECT tenure.task_extend(%s, %s, %s, %s)", (id, owner, epoch, _seconds(lease))
            )
        )

    @operation
    def task_update(
        self,
        id: UUID,
        owner: UUID,
        epoch: int,
        *,
        state: str | None = None,
        data: Any = None,
        lease: timedelta | float | None = None,
    ) -> Op[datetime]:
        return (  # type: ignore[no-any-return]
            yield from _scalar(
                "SELECT tenure.task_update(%s, %s, %s, %s, %s, %s)",
                (id, owner, epoch, state, _json(data), _seconds(lease)),
            )
        )

    @operation
    def task_release(
        self,
        id: UUID,
        owner: UUID,
        epoch: int,
        *,
        delay: timedelta | float = 0,
        state: str | None = None,
        data: Any = None,
    ) -> Op[datetime]:
        return (  # type: ignore[no-any-return]
            yield from _scalar(
                "SELECT tenure.task_release(%s, %s, %s, %s, %s, %s)",
                (id, owner, epoch, _seconds(delay), state, _json(data)),
            )
        )

    @operation
    def task_complete(
        self, id: UUID, owner: UUID, epoch: int, *, state: str = "done", data: Any = None
    ) -> Op[datetime]:
        return (  # type: ignore[no-any-return]
            yield from _scalar(
                "SELECT tenure.task_complete(%s, %s, %s, %s, %s)", (id, owner, epoch, state, _json(data))
            )
        )

    @operation
    def task_fail(
        self, id: UUID, owner: UUID, epoch: int, *, error: str, retry_delay: timedelta | float | None = None
    ) -> Op[datetime | None]:
        """Record a failed attempt; returns when the task is due again, None when it is dead."""
        return (  # type: ignore[no-any-return]
            yield from _scalar(
                "SELECT tenure.task_fail(%s, %s, %s, %s, %s)",
                (id, owner, epoch, error, _seconds(retry_delay)),
            )
        )

    @operation
    def task_fence(self, id: UUID, owner: UUID, epoch: int) -> Op[None]:
        """Raise LeaseLost unless the caller holds the lease; call it inside the guarded transaction."""
        (yield from _scalar("SELECT tenure.task_fence(%s, %s, %s)", (id, owner, epoch)))

    @operation
    def task_eject(self, id: UUID, owner: UUID, *, lease: timedelta | float) -> Op[TaskLease | None]:
        """Take the task over at once; None when it is already done or dead."""
        rows = yield from _rows(
            TaskLease, "SELECT * FROM tenure.task_eject(%s, %s, %s)", (id, owner, _seconds(lease))
        )
        return rows[0] if rows else None

    @operation
    def task_cancel(self, id: UUID) -> Op[bool]:
        """Cancel a task: pending or waiting, it never runs; leased, its holder's writes get TN102.

        Returns False when it had already finished.
        """
        return bool((yield from _scalar("SELECT tenure.task_cancel(%s)", (id,))))

    @operation
    def task_set_priority(self, id: UUID, priority: int) -> Op[bool]:
        """Change a pending or waiting task's priority; False when it had finished."""
        return bool((yield from _scalar("SELECT tenure.task_set_priority(%s, %s)", (id, priority))))

    @operation
    def task_kind_set(
        self,
        kind: str,
        *,
        paused: bool | None = None,
        max_running: int | None = None,
        max_running_per_key: int | None = None,
        rate: int | None = None,
        rate_period: timedelta | float | None = None,
    ) -> Op[TaskKind]:
        """Change a kind's settings: None leaves one as it is, 0 removes a limit."""
        rows = yield from _rows(
            TaskKind,
            "SELECT * FROM tenure.task_kind_set(%s, %s, %s, %s, %s, %s)",
            (
                kind,
                paused,
                max_running,
                max_running_per_key,
                rate,
                None if rate_period is None else _seconds(rate_period),
            ),
        )
        return rows[0]

    @operation
    def task_kinds(self) -> Op[list[TaskKind]]:
        """Every kind with settings (``tenure.task_kinds``)."""
        return (yield from _rows(TaskKind, "SELECT * FROM tenure.task_kinds ORDER BY kind", ()))

    @operation
    def task_dependencies(self, id: UUID) -> Op[list[TaskDependency]]:
        """The tasks that task ``id`` runs after, with their status."""
        return (
            yield from _rows(
                TaskDependency,
                "SELECT * FROM tenure.task_dependencies WHERE task_id = %s ORDER BY after_id",
                (id,),
            )
        )

    @operation
    def task_requeue(self, id: UUID, *, delay: timedelta | float = 0) -> Op[bool]:
        return bool((yield from _scalar("SELECT tenure.task_requeue(%s, %s)", (id, _seconds(delay)))))

    @operation
    def task_purge(self, *, older_than: timedelta | float, include_dead: bool = False) -> Op[int]:
        return int(
            (yield from _scalar("SELECT tenure.task_purge(%s, %s)", (_seconds(older_than), include_dead)))
        )

    @operation
    def task_prune(self, *, older_than: timedelta | float, limit: int = 10000) -> Op[int]:
        """Retention: delete at most ``limit`` tasks finished before ``older_than`` ago, oldest first.

        Done and dead tasks go with their lease log.
        Never a pending task. Once pruned, an enqueue with the same idempotency key or id
        creates a new task: keys de-duplicate for the retention age.

        Returns how many were deleted: call again while it returns ``limit``.
        """
        return int((yield from _scalar("SELECT tenure.task_prune(%s, %s)", (_seconds(older_than), limit))))

    @operation
    def tasks(
        self,
        *,
        kind: str | None = None,
        state: str | None = None,
        status: str | None = None,
        owner: UUID | None = None,
        due: bool | None = None,
        limit: int = 100,
    ) -> Op[list[TaskRow]]:
        """Rows of ``tenure.tasks`` matching every filter given, oldest next_action first."""
        return (
            yield from _rows(
                TaskRow,
                """
            SELECT * FROM tenure.tasks
             WHERE (%(kind)s::text IS NULL OR kind = %(kind)s)
               AND (%(state)s::text IS NULL OR state = %(state)s)
               AND (%(status)s::text IS NULL OR status = %(status)s)
               AND (%(owner)s::uuid IS NULL OR owner = %(owner)s)
               AND (%(due)s::boolean IS NULL OR due = %(due)s)
             ORDER BY next_action NULLS LAST, created_at
             LIMIT %(limit)s
            """,
                {"kind": kind, "state": state, "status": status, "owner": owner, "due": due, "limit": limit},
            )
        )

    @operation
    def task(self, id: UUID) -> Op[TaskRow | None]:
        rows = yield from _rows(TaskRow, "SELECT * FROM tenure.tasks WHERE id = %s", (id,))
        return rows[0] if rows else None

    @operation
    def tasks_by_id(self, ids: Sequence[UUID]) -> Op[list[TaskRow]]:
        """The rows of ``tenure.tasks`` with these ids, in no order (unknown ids have none)."""
        return (yield from _rows(TaskRow, "SELECT * FROM tenure.tasks WHERE id = ANY(%s)", (list(ids),)))

    @operation
    def task_status(self) -> Op[list[TaskStatus]]:
        return (
            yield from _rows(TaskStatus, "SELECT * FROM tenure.task_status ORDER BY kind, status, state", ())
        )

    # -- claims --------------------------------------------------------------------

    @operation
    def claim_register(self, keyspace: str, keys: Sequence[str]) -> Op[int]:
        return int((yield from _scalar("SELECT tenure.claim_register(%s, %s)", (keyspace, list(keys)))))

    @operation
    def claim_retire(self, keyspace: str, keys: Sequence[str]) -> Op[int]:
        return int((yield from _scalar("SELECT tenure.claim_retire(%s, %s)", (keyspace, list(keys)))))

    @operation
    def claim_renew(
        self, keyspace: str, instance_id: UUID, *, expiry: timedelta | float
    ) -> Op[list[ClaimGrant]]:
        """Renew every claim the instance holds; keys above the fair share come back 'released'."""
        return (
            yield from _rows(
                ClaimGrant,
                "SELECT * FROM tenure.claim_renew(%s, %s, %s)",
                (keyspace, instance_id, _seconds(expiry)),
            )
        )

    @operation
    def claim_take(
        self, keyspace: str, instance_id: UUID, *, expiry: timedelta | float, limit: int | None = None
    ) -> Op[list[ClaimGrant]]:
        """Take free or expired keys up to the fair share; one row with change 'busy' when skipped."""
        return (
            yield from _rows(
                ClaimGrant,
                "SELECT * FROM tenure.claim_take(%s, %s, %s, %s)",
                (keyspace, instance_id, _seconds(expiry), limit),
            )
        )

    @operation
    def claim_cycle(
        self, keyspace: str, instance_id: UUID, *, expiry: timedelta | float, limit: int | None = None
    ) -> Op[list[ClaimGrant]]:
        """Renew, then take if below the fair share, in one call: renewed/released rows, then
        taken rows (or one 'busy' row)."""
        return (
            yield from _rows(
                ClaimGrant,
                "SELECT * FROM tenure.claim_cycle(%s, %s, %s, %s)",
                (keyspace, instance_id, _seconds(expiry), limit),
            )
        )

    @operation
    def claim_release(self, keyspace: str, instance_id: UUID, keys: Sequence[str] | None = None) -> Op[int]:
        """Give keys back; with None, all of them, and leave the keyspace."""
        return int(
            (
                yield from _scalar(
                    "SELECT tenure.claim_release(%s, %s, %s)",
                    (keyspace, instance_id, None if keys is None else list(keys)),
                )
            )
        )

    @operation
    def claim_check(self, keyspace: str, instance_id: UUID, key: str, epoch: int) -> Op[bool]:
        return bool(
            (
                yield from _scalar(
                    "SELECT tenure.claim_check(%s, %s, %s, %s)", (keyspace, instance_id, key, epoch)
                )
            )
        )

    @operation
    def claim_fence(self, keyspace: str, instance_id: UUID, key: str, epoch: int) -> Op[None]:
        """Raise ClaimLost unless the instance holds the key in that epoch.

        Call it inside the transaction of the write it guards.
        """
        (yield from _scalar("SELECT tenure.claim_fence(%s, %s, %s, %s)", (keyspace, instance_id, key, epoch)))

    @operation
    def claim_prune(self, *, older_than: timedelta | float, limit: int = 10000) -> Op[int]:
        """Retention: delete at most ``limit`` claim log entries that ended before ``older_than`` ago.

        A claim ends when it passes on or is released; oldest first.
        Never the entry of a claim still held, never a claim key.

        Returns how many were deleted: call again while it returns ``limit``.
        """
        return int((yield from _scalar("SELECT tenure.claim_prune(%s, %s)", (_seconds(older_than), limit))))

    @operation
    def claims(self, keyspace: str | None = None) -> Op[list[ClaimRow]]:
        return (
            yield from _rows(
                ClaimRow,
                "SELECT * FROM tenure.claims WHERE %(keyspace)s::text IS NULL OR keyspace = %(keyspace)s "
                "ORDER BY keyspace, key",
                {"keyspace": keyspace},
            )
        )

    @operation
    def claim_instances(self, keyspace: str | None = None) -> Op[list[ClaimInstance]]:
        return (
            yield from _rows(
                ClaimInstance,
                "SELECT * FROM tenure.claim_instances "
                "WHERE %(keyspace)s::text IS NULL OR keyspace = %(keyspace)s ORDER BY keyspace, instance_id",
                {"keyspace": keyspace},
            )
        )

    # -- the submission queue --------------------------------------------------------

    @operation
    def batch_configure(
        self, keyspace: str, *, mode: str, implicit_deps: bool = True, key: str | None = None
    ) -> Op[None]:
        (
            yield from _scalar(
                "SELECT tenure.batch_configure(%s, %s, %s, %s)", (keyspace, mode, implicit_deps, key)
            )
        )

    @operation
    def batch_enqueue(
        self,
        keyspace: str,
        key: str,
        payload: bytes,
        *,
        state_keys: Sequence[str] = (),
        depends_on: Sequence[UUID] = (),
        id: UUID | None = None,
    ) -> Op[BatchEnqueued]:
        rows = yield from _rows(
            BatchEnqueued,
            "SELECT * FROM tenure.batch_enqueue(%s, %s, %s, %s, %s, %s)",
            (keyspace, key, payload, list(state_keys), list(depends_on), id),
        )
        return rows[0]

    @operation
    def batch_enqueue_many(self, keyspace: str, batches: Sequence[dict[str, Any]]) -> Op[list[BatchEnqueued]]:
        """Each dict has key and payload (bytes), optionally state_keys, depends_on and id."""
        payload = [
            {
                **batch,
                "payload": base64.b64encode(batch["payload"]).decode(),
                **({"depends_on": [str(d) for d in batch["depends_on"]]} if "depends_on" in batch else {}),
                **({"id": str(batch["id"])} if "id" in batch else {}),
            }
            for batch in batches
        ]
        return (
            yield from _rows(
                BatchEnqueued, "SELECT * FROM tenure.batch_enqueue_many(%s, %s)", (keyspace, Jsonb(payload))
            )
        )

    @operation
    def batch_select(
        self, keyspace: str, instance_id: UUID, *, limit: int, depth: int = 1
    ) -> Op[list[BatchGrant]]:
        """Mark up to ``limit`` eligible batches of held keys pending and return them, round by round."""
        return (
            yield from _rows(
                BatchGrant,
                "SELECT * FROM tenure.batch_select(%s, %s, %s, %s)",
                (keyspace, instance_id, limit, depth),
            )
        )

    @operation
    def batch_resolve(
        self, keyspace: str, instance_id: UUID, id: UUID, epoch: int, status: str, detail: str | None = None
    ) -> Op[str]:
        return str(
            (
                yield from _scalar(
                    "SELECT tenure.batch_resolve(%s, %s, %s, %s, %s, %s)",
                    (keyspace, instance_id, id, epoch, status, detail),
                )
            )
        )

    @operation
    def batch_resolve_many(
        self, keyspace: str, instance_id: UUID, resolutions: Sequence[Resolution]
    ) -> Op[int]:
        """Resolve several batches in one call, all or none; returns how many."""
        items = [
            {
                "id": str(r.id),
                "epoch": r.epoch,
                "status": r.status,
                **({"detail": r.detail} if r.detail else {}),
                **({"attempt": r.attempt} if r.attempt is not None else {}),
            }
            for r in resolutions
        ]
        return int(
            (
                yield from _scalar(
                    "SELECT tenure.batch_resolve_many(%s, %s, %s)", (keyspace, instance_id, Jsonb(items))
                )
            )
        )

    @operation
    def batch_skip(self, keyspace: str, id: UUID) -> Op[bool]:
        return bool((yield from _scalar("SELECT tenure.batch_skip(%s, %s)", (keyspace, id))))

    @operation
    def batch_retry(self, keyspace: str, id: UUID) -> Op[bool]:
        return bool((yield from _scalar("SELECT tenure.batch_retry(%s, %s)", (keyspace, id))))

    @operation
    def batch_check(
        self, keyspace: str, instance_id: UUID, claims: Sequence[tuple[str, int]]
    ) -> Op[list[bool]]:
        """``claim_check`` for several (key, epoch) pairs in one call: one answer per pair, in order."""
        if not claims:
            return []
        answers = yield from _scalar(
            "SELECT tenure.batch_check(%s, %s, %s::text[], %s::bigint[])",
            (keyspace, instance_id, [key for key, _ in claims], [epoch for _, epoch in claims]),
        )
        return [bool(a) for a in answers]

    @operation
    def batch_prune(self, *, older_than: timedelta | float, limit: int = 10000) -> Op[int]:
        """Retention: delete at most ``limit`` batches settled before ``older_than`` ago, oldest first.

        Committed and skipped batches, by when they were resolved.
        Never an unsettled batch nor one an unsettled batch depends on. Each pruned batch
        leaves a tombstone for ``older_than`` more, so its id and dependencies on it answer as
        before; expired tombstones are removed by the same call.

        Returns how many were deleted: call again while it returns ``limit``.
        """
        return int((yield from _scalar("SELECT tenure.batch_prune(%s, %s)", (_seconds(older_than), limit))))

    @operation
    def batch_pending(self, keyspace: str, instance_id: UUID) -> Op[list[BatchGrant]]:
        return (
            yield from _rows(
                BatchGrant, "SELECT * FROM tenure.batch_pending(%s, %s)", (keyspace, instance_id)
            )
        )

    @operation
    def batches(
        self, keyspace: str, *, key: str | None = None, status: str | None = None, limit: int = 100
    ) -> Op[list[BatchRow]]:
        """Rows of ``tenure.batches`` of a queue, by key and sequence."""
        return (
            yield from _rows(
                BatchRow,
                """
            SELECT * FROM tenure.batches
             WHERE keyspace = %(keyspace)s
               AND (%(key)s::text IS NULL OR key = %(key)s)
               AND (%(status)s::text IS NULL OR status = %(status)s)
             ORDER BY key, seq
             LIMIT %(limit)s
            """,
                {"keyspace": keyspace, "key": key, "status": status, "limit": limit},
            )
        )

    @operation
    def batch_keys(self, keyspace: str | None = None) -> Op[list[BatchKey]]:
        return (
            yield from _rows(
                BatchKey,
                "SELECT * FROM tenure.batch_keys WHERE %(keyspace)s::text IS NULL OR keyspace = %(keyspace)s "
                "ORDER BY keyspace, key",
                {"keyspace": keyspace},
            )
        )

    # -- replicas --------------------------------------------------------------------

    @operation
    def replica_lock_id(self, *, counter: int = 0, scope: str | None = None) -> Op[int]:
        """The 30-bit lock id of (scope, counter); scope defaults to the database's name."""
        return int((yield from _scalar("SELECT tenure.replica_lock_id(%s, %s)", (counter, scope))))

    @operation
    def replica_register(self, *, counter: int = 0, scope: str | None = None) -> Op[int]:
        """Register (scope, counter) and return its lock id; InvalidConfiguration on a collision."""
        return int((yield from _scalar("SELECT tenure.replica_register(%s, %s)", (counter, scope))))

    @operation
    def replica_acquire(
        self,
        replica: str,
        *,
        reserve: timedelta | float | None = None,
        counter: int = 0,
        scope: str | None = None,
    ) -> Op[ReplicaGrant]:
        """Try to make this session the active replica (no waiting); the answer names the holder."""
        rows = yield from _rows(
            ReplicaGrant,
            "SELECT * FROM tenure.replica_acquire(%s, %s, %s, %s)",
            (replica, _seconds(reserve), counter, scope),
        )
        return rows[0]

    @operation
    def replica_guard(
        self, *, epoch: int | None = None, counter: int = 0, scope: str | None = None
    ) -> Op[int]:
        """Raise NotPrimary unless this session holds the lock (in ``epoch``); returns the epoch.

        Call it first in each write transaction of the active replica, on its lock connection.
        """
        return int((yield from _scalar("SELECT tenure.replica_guard(%s, %s, %s)", (epoch, counter, scope))))

    @operation
    def replica_ping(
        self,
        replica: str,
        epoch: int,
        *,
        reserve: timedelta | float | None = None,
        counter: int = 0,
        scope: str | None = None,
    ) -> Op[datetime]:
        """The active replica's ping: NotPrimary unless it still holds the lock in ``epoch``."""
        return (  # type: ignore[no-any-return]
            yield from _scalar(
                "SELECT tenure.replica_ping(%s, %s, %s, %s, %s)",
                (replica, epoch, _seconds(reserve), counter, scope),
            )
        )

    @operation
    def replica_release(self, replica: str, *, counter: int = 0, scope: str | None = None) -> Op[bool]:
        """Release the lock if this session holds it and drop the replica's reservation."""
        return bool(
            (yield from _scalar("SELECT tenure.replica_release(%s, %s, %s)", (replica, counter, scope)))
        )

    @operation
    def replica_holder(self, *, counter: int = 0, scope: str | None = None) -> Op[ReplicaHolder | None]:
        """Who holds the lock (pid None when nobody does); None when it was never registered."""
        rows = yield from _rows(
            ReplicaHolder, "SELECT * FROM tenure.replica_holder(%s, %s)", (counter, scope)
        )
        return rows[0] if rows else None

    @operation
    def replica_prune(self, *, older_than: timedelta | float, limit: int = 10000) -> Op[int]:
        """Retention: delete at most ``limit`` replica terms that ended before ``older_than`` ago.

        A term ends when a later acquisition of its lock begins; oldest first.
        Never the last term of a lock, never the lock registry.

        Returns how many were deleted: call again while it returns ``limit``.
        """
        return int((yield from _scalar("SELECT tenure.replica_prune(%s, %s)", (_seconds(older_than), limit))))

    @operation
    def replicas(self) -> Op[list[ReplicaHolder]]:
        """Every registered replica lock with its holder (the view ``tenure.replicas``)."""
        return (yield from _rows(ReplicaHolder, "SELECT * FROM tenure.replicas ORDER BY scope, counter", ()))

    # -- schedules -------------------------------------------------------------------

    @operation
    def cron_next(self, cron: str, after: datetime, *, timezone: str = "UTC") -> Op[datetime]:
        """The first time strictly after ``after`` at which ``cron`` runs, read in ``timezone``."""
        return (yield from _scalar("SELECT tenure.cron_next(%s, %s, %s)", (cron, after, timezone)))  # type: ignore[no-any-return]

    @operation
    def schedule_set(
        self,
        name: str,
        kind: str,
        *,
        cron: str | None = None,
        every: timedelta | float | None = None,
        timezone: str = "UTC",
        data: Any = None,
        max_attempts: int = 5,
        catch_up: str = "latest",
        catch_up_limit: int = 10,
    ) -> Op[ScheduleInfo]:
        """Create or change a schedule (exactly one of ``cron`` and ``every``).

        Setting the same ``cron``/``every``/``timezone`` again keeps the schedule's progress
        and its pause, so a registry may set its schedules at every start.
        """
        rows = yield from _rows(
            ScheduleInfo,
            "SELECT * FROM tenure.schedule_set(%s, %s, %s, %s, %s, coalesce(%s, '{}'::jsonb), %s, %s, %s)",
            (
                name,
                kind,
                cron,
                _seconds(every),
                timezone,
                _json(data),
                max_attempts,
                catch_up,
                catch_up_limit,
            ),
        )
        return rows[0]

    @operation
    def schedule_tick(self) -> Op[list[ScheduleSlot]]:
        """Turn every due slot into exactly one task; returns the tasks created."""
        return (yield from _rows(ScheduleSlot, "SELECT * FROM tenure.schedule_tick()", ()))

    @operation
    def schedule_pause(self, name: str) -> Op[ScheduleInfo]:
        """Pause a schedule: no task for it until :meth:`schedule_resume`."""
        return (yield from _rows(ScheduleInfo, "SELECT * FROM tenure.schedule_pause(%s)", (name,)))[0]

    @operation
    def schedule_resume(self, name: str) -> Op[ScheduleInfo]:
        """Resume a paused schedule; the slots missed while paused are skipped."""
        return (yield from _rows(ScheduleInfo, "SELECT * FROM tenure.schedule_resume(%s)", (name,)))[0]

    @operation
    def schedule_drop(self, name: str) -> Op[ScheduleInfo]:
        """Delete a schedule (its tasks stay); returns it as it was."""
        return (yield from _rows(ScheduleInfo, "SELECT * FROM tenure.schedule_drop(%s)", (name,)))[0]

    @operation
    def schedule_run_now(self, name: str) -> Op[UUID]:
        """One extra task of the schedule now, outside its slots; returns the task's id."""
        return (yield from _scalar("SELECT tenure.schedule_run_now(%s)", (name,)))  # type: ignore[no-any-return]

    @operation
    def schedules(self) -> Op[list[ScheduleRow]]:
        """Every schedule (the view ``tenure.schedules``), by name."""
        return (yield from _rows(ScheduleRow, "SELECT * FROM tenure.schedules ORDER BY name", ()))

    # -- retention (the maintainer's generic calls) -------------------------------------

    @operation
    def prunable_histories(self) -> Op[list[str]]:
        """The histories (of ``PRUNE_HISTORIES``) whose ``tenure.<history>_prune(interval,
        integer)`` exists in this database and may be executed by this role."""
        query = (
            "SELECT left(p.proname, -length('_prune')) FROM pg_proc p"
            " JOIN pg_namespace n ON n.oid = p.pronamespace"
            " WHERE n.nspname = 'tenure' AND p.proname = ANY(%s)"
            " AND pg_get_function_identity_arguments(p.oid) = 'p_older_than interval, p_limit integer'"
            " AND has_function_privilege(p.oid, 'EXECUTE') ORDER BY 1"
        )
        rows = yield Query(query, ([f"{h}_prune" for h in PRUNE_HISTORIES],), tuple_row)
        return [str(row[0]) for row in rows]

    @operation
    def prune(self, history: str, *, older_than: timedelta | float, limit: int) -> Op[int]:
        """``tenure.<history>_prune(older_than, limit)``: rows removed, at most ``limit``."""
        if history not in PRUNE_HISTORIES:
            raise ValueError(f"no prune function for {history!r}; choose from {PRUNE_HISTORIES}")
        prune = {
            "task": OPS.task_prune,
            "batch": OPS.batch_prune,
            "heartbeat": OPS.heartbeat_prune,
            "claim": OPS.claim_prune,
            "replica": OPS.replica_prune,
        }[history]
        return (yield from prune(older_than=older_than, limit=limit))

    @operation
    def set_idle_session_timeout(self, seconds: float) -> Op[None]:
        """Have the server end this session after ``seconds`` without a statement (0: never)."""
        (
            yield from _scalar(
                "SELECT set_config('idle_session_timeout', %s, false)", (f"{int(seconds * 1000)}ms",)
            )
        )

    @operation
    def backend_pid(self) -> Op[int]:
        """The server process of this connection (to tell a transaction-pooling proxy apart)."""
        return int((yield from _scalar("SELECT pg_backend_pid()", ())))


OPS = Operations()  # the operations themselves, for runtimes that compose them


class Driver(Operations):
    """Calls tenure's SQL functions on one psycopg connection."""

    def __init__(self, connection: psycopg.Connection[Any]) -> None:
        self.connection = connection

    def _bind(self, body: Callable[..., Op[T]]) -> Callable[..., Any]:
        @functools.wraps(body)
        def call(*args: Any, **kwargs: Any) -> T:
            return self.run(body(self, *args, **kwargs))

        return call

    def run(self, operation: Op[T]) -> T:
        """Run an operation (or a runtime's composition of them) on this connection."""
        step: Callable[[Any], Query] = operation.send
        argument: Any = None
        while True:
            try:
                query = step(argument)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            try:
                argument, step = self._execute(query), operation.send
            except Exception as error:
                argument, step = error, operation.throw

    def _execute(self, query: Query) -> list[Any]:
        with self._committed(), _translated(), self.connection.cursor(row_factory=query.rows) as cursor:
            cursor.execute(query.statement, query.params)
            return cursor.fetchall()

    @contextmanager
    def _committed(self) -> Iterator[None]:
        """On an autocommit connection each call commits: raise CommitNotConfirmed if that
        commit was not confirmed by the synchronous standbys. (In a transaction, the caller
        checks its own commit: :func:`tenure.connect.durable_transaction`.)"""
        if not self.connection.autocommit:
            yield
            return
        forget_unconfirmed(self.connection)
        yield
        confirm_commit(self.connection)


class AsyncDriver(Operations):
    """:class:`Driver` on a ``psycopg.AsyncConnection``: every method is a coroutine with the
    same arguments, rows and exceptions."""

    def __init__(self, connection: psycopg.AsyncConnection[Any]) -> None:
        self.connection = connection

    def _bind(self, body: Callable[..., Op[T]]) -> Callable[..., Any]:
        @functools.wraps(body)
        async def call(*args: Any, **kwargs: Any) -> T:
            return await self.run(body(self, *args, **kwargs))

        return call

    async def run(self, operation: Op[T]) -> T:
        """Run an operation (or a runtime's composition of them) on this connection."""
        step: Callable[[Any], Query] = operation.send
        argument: Any = None
        while True:
            try:
                query = step(argument)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            try:
                argument, step = await self._execute(query), operation.send
            except Exception as error:
                argument, step = error, operation.throw

    async def _execute(self, query: Query) -> list[Any]:
        connection = self.connection
        checked = connection.autocommit
        if checked:
            forget_unconfirmed(connection)
        with _translated():
            async with connection.cursor(row_factory=query.rows) as cursor:
                await cursor.execute(query.statement, query.params)
                rows = await cursor.fetchall()
        if checked:
            await aconfirm_commit(connection)
        return rows
