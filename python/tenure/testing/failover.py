"""A fleet of tenure clients run through database failovers, and the checks of what they were told.

The fleet: electors of one service type, each doing fenced writes (``heartbeat_fence``
and a row in ``fo_writes``, in one durable transaction) while it believes it is
primary, task workers whose every step writes a row to ``fo_effects`` with the
task's transition, and claimers sharing the keys of one keyspace, each doing fenced
writes on the keys it holds (``claim_fence`` and a row in ``fo_claim_writes``, in one
durable transaction), submission pools (:class:`~tenure.SubmissionPool`) sending a
stream of batches of a few keys to a ledger table (:class:`FencedLedger`: each batch applied
under its key's claim in the epoch it was selected under), and active/passive replicas of
one service (:class:`AckingReplica`), each writing through ``ReplicaManager.write()`` (the
replica guard, on its lock connection) while active. Each client logs, in a
:class:`ClientLog`, only what the database acknowledged: the terms it was granted and
when it stepped down (on the monotonic clock, which every process of the machine
shares), each key it held and each epoch a replica was active in, from when to when (up
to the end of its safe window at the latest), the fenced writes, batch applications and
task outcomes whose commit was confirmed, the leases it was handed, and (at most every
0.1 s per area) when it was last acknowledged something ("served").

:func:`check` compares that log with the final database, because a lost commit
leaves the final tables perfectly consistent: no term granted twice, no two
instances believing they are primary at one instant, no (task, epoch) leased twice,
no key held by two instances at one instant nor granted twice in one epoch, no replica
epoch granted twice nor two replicas active at one instant, no acknowledged write
(fenced by a term, a claim or the replica lock), outcome, enqueued task or batch, or
batch application lost, every task done exactly once, every batch committed and applied
to the ledger exactly once, in its key's sequence order.
:class:`Timing` holds what a failover cost: whether a primary came back within
:data:`TAKEOVER_BOUND` after the database was writable again, and how long each area
took to serve again (its first acknowledgement), against :data:`SERVE_BOUNDS`.

test_failover runs a :class:`Fleet` in threads; the failover demo runs each client as
a process (``python -m tenure.testing.failover --db CONNINFO --elector e0 --claimer c0``) that writes
its log as JSON lines to stdout, read back with :meth:`ClientLog.read`.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import IO, Any, TypeVar

import psycopg

from tenure import (
    BatchGrant,
    Claimer,
    Complete,
    Driver,
    Elector,
    Outcome,
    ReplicaManager,
    SubmissionPool,
    Task,
    TaskWorker,
    TenureError,
)
from tenure.connect import Deadlines, connect, durable_transaction
from tenure.runtime.shutdown import wait_for_shutdown
from tenure.testing import procs
from tenure.testing.ledger import check_applied

UTYPE, INTERVAL, TIMEOUT = "fo", 0.5, 2.0
KIND, LEASE = "fo", 3.0
KEYSPACE, KEYS, CYCLE, EXPIRY = "fo", tuple(f"k{n}" for n in range(6)), 0.5, 2.0
APP = "fo_app"
QUEUE, BATCH_KEYS = "fob", tuple(f"b{n}" for n in range(4))
REPLICA_SCOPE, REPLICA_INTERVAL = "fo", 0.5
# A new primary renews within I once it reaches the new server; reaching it may cost a
# connect timeout (2 s) per host that does not answer; the old primary's entry, if it
# died, is re-based at the first write and runs out T later.
TAKEOVER_BOUND = TIMEOUT + 2 * INTERVAL + 2 * 2.0 + 1.0
# Seconds from the database writable again to each area's first acknowledgement (the
# reasoning is in docs/operations.md). A client notices a dead server at once (a reset) or,
# on a frozen one, when its call's bound ends (2 s at most here), then connects through the
# host list, where a frozen host costs a connect timeout (2 s); then each area waits for
# what its grants need, plus 1 s for a loaded machine.
RECONNECT = 2.0 + 2.0
CLOCK_SPREAD = 4.0  # the test clusters' node clocks differ by up to 4 s (+2 s and -2 s)
SERVE_BOUNDS = {
    "elector": TAKEOVER_BOUND + 1.0,  # a primary, then its writer's first fenced write
    "claims": RECONNECT + EXPIRY + CYCLE + 1.0,  # a dead holder's claim runs out (re-based), next cycle
    "tasks": RECONNECT + LEASE + 1.0,  # a lease taken before the fault runs out (re-based)
    # the pool's claimer as a claimer's, then a ledger session's call bound
    "batches": RECONNECT + EXPIRY + CYCLE + 2.0 + 1.0,
    # a dead replica's reservation (grace + 2 intervals), written by the old server's clock and
    # read by the new one's, then the next acquisition
    "replicas": RECONNECT + 6 * REPLICA_INTERVAL + CLOCK_SPREAD + REPLICA_INTERVAL + 1.0,
}
R = TypeVar("R")

# The application role lowers synchronous_commit, a common throughput setting: tenure's
# writes, the fenced ones included, must still wait for the synchronous standby.
SETUP = f"""
CREATE ROLE {APP} LOGIN IN ROLE tenure_worker;
ALTER ROLE {APP} SET synchronous_commit = off;
CREATE TABLE fo_writes (instance_id uuid, term bigint, seq int, PRIMARY KEY (instance_id, term, seq));
CREATE TABLE fo_effects (task_id uuid, epoch bigint);
CREATE TABLE fo_claim_writes (
    instance_id uuid, key text, epoch bigint, seq int, PRIMARY KEY (instance_id, seq)
);
CREATE TABLE fo_replica_writes (replica text, epoch bigint, seq int, PRIMARY KEY (replica, seq));
-- The ledger the submission queue sends its batches to: each batch applied in a transaction
-- fenced by the claim of its key in the epoch it was selected under, at the next position of
-- its key (under the lock of the key's row, so positions follow commit order). Nothing makes
-- a batch unique here: applying one twice would show. A submission that failed never reached
-- it, so the queue is serial (an unconstrained queue sends the next batch of a key before it
-- knows the previous one arrived: out of order here).
CREATE TABLE fo_ledger_key (key text PRIMARY KEY, applied int NOT NULL DEFAULT 0);
CREATE TABLE fo_ledger (batch_id uuid, key text, seq int, position int);
INSERT INTO fo_ledger_key (key) VALUES {", ".join(f"('{key}')" for key in BATCH_KEYS)};
GRANT INSERT, SELECT ON fo_writes, fo_effects, fo_claim_writes, fo_replica_writes, fo_ledger TO {APP};
GRANT SELECT, UPDATE ON fo_ledger_key TO {APP};
SELECT tenure.claim_register('{KEYSPACE}', ARRAY[{", ".join(f"'{key}'" for key in KEYS)}]);
SELECT tenure.batch_configure('{QUEUE}', 'serial', true, NULL);
"""

# how each kind of record is read back from JSON
_FIELDS: dict[str, tuple[Callable[[Any], Any], ...]] = {
    "elected": (str, int, float),  # elector, term, when (monotonic)
    "demoted": (str, float),  # elector, when
    "writes": (uuid.UUID, int, int),  # acknowledged fenced write: instance, term, seq
    "leases": (uuid.UUID, int, uuid.UUID),  # task, epoch, owner
    "outcomes": (uuid.UUID, int, str),  # acknowledged outcome: task, epoch, kind ("complete", ...)
    "claims": (uuid.UUID, str, int, float, float),  # instance, key, epoch, held from, until (monotonic)
    "claim_writes": (uuid.UUID, str, int, int),  # acknowledged fenced write: instance, key, epoch, seq
    "batches": (uuid.UUID, str, int),  # acknowledged application to the ledger: batch, key, seq
    "replicas": (str, int, float, float),  # replica, epoch, active from, until (monotonic)
    "replica_writes": (str, int, int),  # acknowledged guarded write: replica, epoch, seq
    "served": (str, float),  # an area's client was acknowledged something at this instant (monotonic)
}
AREAS = ("elector", "claims", "tasks", "batches", "replicas")
SERVED_EVERY = 0.1  # seconds: a client logs at most one "served" per area this often


@dataclass
class ClientLog:
    """What the database told the clients, and the tasks the producer saw enqueued.

    With a ``sink`` every record is also written to it as one JSON line."""

    elected: list[tuple[str, int, float]] = field(default_factory=list)
    demoted: list[tuple[str, float]] = field(default_factory=list)
    writes: list[tuple[uuid.UUID, int, int]] = field(default_factory=list)
    leases: list[tuple[uuid.UUID, int, uuid.UUID]] = field(default_factory=list)
    outcomes: list[tuple[uuid.UUID, int, str]] = field(default_factory=list)
    claims: list[tuple[uuid.UUID, str, int, float, float]] = field(default_factory=list)
    claim_writes: list[tuple[uuid.UUID, str, int, int]] = field(default_factory=list)
    batches: list[tuple[uuid.UUID, str, int]] = field(default_factory=list)
    replicas: list[tuple[str, int, float, float]] = field(default_factory=list)
    replica_writes: list[tuple[str, int, int]] = field(default_factory=list)
    served: list[tuple[str, float]] = field(default_factory=list)
    enqueued: list[uuid.UUID] = field(default_factory=list)
    enqueued_batches: list[uuid.UUID] = field(default_factory=list)
    sink: IO[str] | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    _last_served: dict[str, float] = field(default_factory=dict)

    def add(self, kind: str, *record: Any) -> None:
        with self.lock:
            getattr(self, kind).append(record)
            if self.sink is not None:
                self.sink.write(json.dumps([kind, *record], default=str) + "\n")
                self.sink.flush()

    @classmethod
    def read(cls, lines: Iterable[str]) -> ClientLog:
        """The records among lines (JSON lines of :meth:`add`; other lines are skipped)."""
        log = cls()
        for line in lines:
            if not line.startswith('["'):
                continue
            kind, *values = json.loads(line)
            log.add(kind, *(convert(value) for convert, value in zip(_FIELDS[kind], values, strict=True)))
        return log

    def enqueued_tasks(self, ids: Iterable[uuid.UUID]) -> None:
        with self.lock:
            self.enqueued.extend(ids)

    def enqueued_batch_ids(self, ids: Iterable[uuid.UUID]) -> None:
        with self.lock:
            self.enqueued_batches.extend(ids)

    def serve(self, area: str) -> None:
        """The client of ``area`` was just acknowledged something: logged as "served" unless
        this log recorded one for the area within :data:`SERVED_EVERY` (the first
        acknowledgement after an outage is always logged)."""
        now = time.monotonic()
        with self.lock:
            if now - self._last_served.get(area, -SERVED_EVERY) < SERVED_EVERY:
                return
            self._last_served[area] = now
        self.add("served", area, now)

    def served_at(self, area: str, since: float) -> float | None:
        """When the client of ``area`` was first acknowledged something at or after ``since``."""
        with self.lock:
            return min((at for name, at in self.served if name == area and at >= since), default=None)

    def primary_at(self, since: float) -> tuple[float, int] | None:
        """When the first instance was elected after ``since`` (monotonic), and its term."""
        with self.lock:
            found = [(at, term) for _, term, at in self.elected if at >= since]
        return min(found) if found else None

    def primacy(self, until: float = float("inf")) -> list[tuple[float, float, str, int]]:
        """(start, end, elector, term) of every believed primacy: from on_elected to the
        elector's next on_demoted, or ``until``."""
        with self.lock:
            spans = []
            for name, term, start in self.elected:
                ends = [at for who, at in self.demoted if who == name and at >= start]
                spans.append((start, min(ends, default=until), name, term))
        return sorted(spans)


# -- the clients ----------------------------------------------------------------------


class Session:
    """One connection through the (multi-host) conninfo, opened again after any failure;
    each call runs in a durable transaction that is abandoned after 2 s."""

    def __init__(self, conninfo: str, name: str) -> None:
        self.conninfo, self.name = conninfo, name
        self.connection: psycopg.Connection[Any] | None = None
        self.deadlines = Deadlines(name)

    def run(self, body: Callable[[psycopg.Connection[Any]], R]) -> R | None:
        """body's result once its commit is confirmed; None when anything failed."""
        try:
            if self.connection is None or self.connection.closed or self.connection.broken:
                self.connection = connect(self.conninfo, application_name=self.name, deadline=1.5)
            with self.deadlines.bounded(self.connection, 2.0), durable_transaction(self.connection):
                return body(self.connection)
        except (psycopg.Error, TenureError):
            if self.connection is not None:
                self.connection.close()
            self.connection = None
            return None

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()
        self.deadlines.close()


def fenced_writes(elector: Elector, conninfo: str, log: ClientLog, stopping: threading.Event) -> None:
    """Fenced writes while ``elector`` believes it is primary; logged once their commit is confirmed."""
    session = Session(conninfo, f"fo writer {elector.name}")
    for seq in itertools.count():
        if stopping.wait(0.02):
            break
        term = elector.term
        if term is None:
            continue

        def write(db: psycopg.Connection[Any], term: int = term, seq: int = seq) -> bool:
            Driver(db).heartbeat_fence(elector.instance_id, UTYPE, term)
            db.execute("INSERT INTO fo_writes VALUES (%s, %s, %s)", (elector.instance_id, term, seq))
            return True

        if session.run(write):
            log.add("writes", elector.instance_id, term, seq)
            log.serve("elector")
    session.close()


class AckingClaimer(Claimer):
    """A claimer that logs each span in which it believed it held a key: from just before
    the answer that granted it was taken up to when it was given up, which is the end of
    its safe window at the latest (``held()`` is empty from then on)."""

    def __init__(self, conninfo: str, log: ClientLog, name: str) -> None:
        self._since: dict[str, tuple[int, float]] = {}
        self._answered = self._window_end = 0.0
        super().__init__(
            conninfo,
            KEYSPACE,
            cycle=CYCLE,
            expiry=EXPIRY,
            name=name,
            on_gained=self._gained,
            on_lost=self._lost,
        )
        self.log = log

    def _update(self, held: dict[str, int], deadline: float, *, reason: str) -> None:
        with self._state:
            self._answered, self._window_end = time.monotonic(), self._deadline
        super()._update(held, deadline, reason=reason)

    def _expire(self) -> None:
        with self._state:  # not a window an answer just renewed, whose keys another _update gives up
            if time.monotonic() >= self._deadline:
                self._window_end = self._deadline
        super()._expire()

    def _gained(self, keys: dict[str, int]) -> None:
        for key, epoch in keys.items():
            self._since[key] = (epoch, self._answered)

    def _lost(self, keys: dict[str, int]) -> None:
        until = min(time.monotonic(), self._window_end)
        for key in keys:
            since = self._since.pop(key, None)
            if since is not None:
                self.log.add("claims", self.instance_id, key, since[0], since[1], until)


def claim_writes(claimer: Claimer, conninfo: str, log: ClientLog, stopping: threading.Event) -> None:
    """Fenced writes on the keys ``claimer`` holds, one key after another; logged once their
    commit is confirmed."""
    session = Session(conninfo, f"fo claim writer {claimer.name}")
    for seq in itertools.count():
        if stopping.wait(0.02):
            break
        held = claimer.held()
        if not held:
            continue
        key = sorted(held)[seq % len(held)]

        def write(db: psycopg.Connection[Any], key: str = key, epoch: int = held[key], seq: int = seq) -> int:
            Driver(db).claim_fence(KEYSPACE, claimer.instance_id, key, epoch)
            db.execute(
                "INSERT INTO fo_claim_writes VALUES (%s, %s, %s, %s)", (claimer.instance_id, key, epoch, seq)
            )
            return epoch

        epoch = session.run(write)
        if epoch is not None:
            log.add("claim_writes", claimer.instance_id, key, epoch, seq)
            log.serve("claims")
    session.close()


def enqueue_stream(
    conninfo: str, log: ClientLog, stopping: threading.Event, *, batch: int, every: float
) -> None:
    """Enqueue ``batch`` tasks every ``every`` seconds until stopping; logs the acknowledged ones."""
    session = Session(conninfo, "fo producer")
    while not stopping.wait(every):
        rows = session.run(lambda db: Driver(db).task_enqueue_many([{"kind": KIND}] * batch))
        log.enqueued_tasks(row.id for row in rows or [])
    session.close()


class AckingWorker(TaskWorker):
    """A task worker that logs each lease it is handed and each outcome the database acknowledged."""

    def __init__(self, conninfo: str, log: ClientLog, name: str) -> None:
        super().__init__(
            conninfo,
            {KIND: self._work},
            concurrency=3,
            lease=LEASE,
            poll_interval=0.1,
            name=name,
            shutdown_grace=1.0,
        )
        self.log = log

    def _work(self, task: Task) -> Outcome:
        self.log.add("leases", task.id, task.epoch, self.instance_id)
        time.sleep(0.15)
        return Complete(
            writes=lambda db: db.execute("INSERT INTO fo_effects VALUES (%s, %s)", (task.id, task.epoch))
        )

    def _count(self, task: Task, outcome: Outcome) -> None:
        # The worker counts an outcome exactly when the database told it the outcome was
        # recorded: its own transaction committed, its round trip applied it, or the task's
        # row showed it recorded in the task's epoch. Whatever path that took, this logs it.
        super()._count(task, outcome)
        self.log.add("outcomes", task.id, task.epoch, type(outcome).__name__.lower())
        self.log.serve("tasks")


class FencedLedger:
    """The ledger of the submission queue: ``apply`` (a SubmissionPool's ``submit``) applies a
    batch in fo_ledger in one durable transaction fenced by its key's claim in the epoch it
    was selected under, and logs it once its commit is confirmed; ``status`` says whether a
    batch was applied ('committed') or not ('unknown': the pool sends it again), after
    waiting for any application of its key in progress (the lock of the key's row), in a
    transaction the synchronous standby confirms (so a deposed primary gives no answer)."""

    def __init__(self, conninfo: str, log: ClientLog, name: str) -> None:
        self.conninfo, self.log, self.name = conninfo, log, name
        self.instance_id: uuid.UUID | None = None  # the pool's claimer, set once it exists
        self._sessions: dict[int, Session] = {}  # one per thread: submitters apply concurrently
        self._lock = threading.Lock()

    def _session(self) -> Session:
        with self._lock:
            return self._sessions.setdefault(
                threading.get_ident(), Session(self.conninfo, f"fo ledger {self.name}")
            )

    def apply(self, batch: BatchGrant) -> None:
        def body(db: psycopg.Connection[Any]) -> bool:
            assert self.instance_id is not None
            Driver(db).claim_fence(QUEUE, self.instance_id, batch.key, batch.claim_epoch)
            db.execute(
                "WITH head AS (UPDATE fo_ledger_key SET applied = applied + 1 WHERE key = %(key)s "
                "RETURNING applied) "
                "INSERT INTO fo_ledger SELECT %(id)s, %(key)s, %(seq)s, applied FROM head",
                {"id": batch.id, "key": batch.key, "seq": batch.seq},
            )
            return True

        if not self._session().run(body):
            raise ConnectionError(f"batch {batch.seq} of {batch.key} not applied, or not confirmed")
        self.log.add("batches", batch.id, batch.key, batch.seq)
        self.log.serve("batches")

    def status(self, batch: BatchGrant) -> str | None:
        def body(db: psycopg.Connection[Any]) -> str:
            # The answer counts only once the synchronous standby confirmed this transaction
            # (the row lock gives it a commit to confirm): a primary deposed while frozen and
            # thawed before Patroni demotes it still serves reads, and its "unknown" about a
            # batch applied since on the new primary would send that batch again.
            db.execute("SELECT set_config('synchronous_commit', 'on', true)")
            db.execute("SELECT 1 FROM fo_ledger_key WHERE key = %s FOR UPDATE", (batch.key,))
            found = db.execute("SELECT 1 FROM fo_ledger WHERE batch_id = %s", (batch.id,)).fetchone()
            return "committed" if found else "unknown"

        answer = self._session().run(body)
        if answer is None:
            raise ConnectionError(f"the ledger did not answer about batch {batch.seq} of {batch.key}")
        return answer

    def close(self) -> None:
        with self._lock:
            for session in self._sessions.values():
                session.close()
            self._sessions.clear()


def enqueue_batches(conninfo: str, log: ClientLog, stopping: threading.Event, *, every: float) -> None:
    """Enqueue a batch of every key of the queue every ``every`` seconds until stopping; logs
    the acknowledged ones."""
    session = Session(conninfo, "fo batch producer")
    for n in itertools.count():
        if stopping.wait(every):
            break
        batches = [{"key": key, "payload": f"{key}:{n}".encode()} for key in BATCH_KEYS]

        def enqueue(db: psycopg.Connection[Any], batches: list[dict[str, Any]] = batches) -> list[uuid.UUID]:
            return [row.id for row in Driver(db).batch_enqueue_many(QUEUE, batches)]

        log.enqueued_batch_ids(session.run(enqueue) or [])
    session.close()


class AckingReplica(ReplicaManager):
    """A replica that logs each span in which it believed it was active: from just before
    the answer that made it active was taken up to when it became passive, which is the
    end of its safe window at the latest (``is_active()`` is false from then on)."""

    def __init__(self, conninfo: str, log: ClientLog, name: str) -> None:
        self._answered = self._window_end = 0.0
        self._active_since: tuple[int, float] | None = None
        super().__init__(
            conninfo,
            name=name,
            scope=REPLICA_SCOPE,
            interval=REPLICA_INTERVAL,
            on_active=self._active,
            on_passive=self._passive,
        )
        self.log = log

    def _confirm(self, grant: int, deadline: float, *, too_late: str) -> None:
        with self._state:
            self._answered = time.monotonic()
            if self._grant is not None:  # a grant replacing another ends the old one's window now
                self._window_end = self._deadline
        super()._confirm(grant, deadline, too_late=too_late)

    def _demote(self, reason: str, *, only_if_expired: bool = False) -> None:
        with self._state:
            if self._grant is not None and not (only_if_expired and time.monotonic() < self._deadline):
                self._window_end = self._deadline
        super()._demote(reason, only_if_expired=only_if_expired)

    def _active(self, epoch: int) -> None:
        self._active_since = (epoch, self._answered)

    def _passive(self, reason: str) -> None:
        until = min(time.monotonic(), self._window_end)
        since, self._active_since = self._active_since, None
        if since is not None:
            self.log.add("replicas", self.name, since[0], since[1], until)


def replica_writes(replica: ReplicaManager, conninfo: str, log: ClientLog, stopping: threading.Event) -> None:
    """Writes guarded by the replica lock while ``replica`` is active, on its lock connection;
    logged once their commit is confirmed. (``conninfo`` is unused: the lock connection is
    the replica's own.)"""
    for seq in itertools.count():
        if stopping.wait(0.02):
            break
        if not replica.is_active():
            continue
        try:
            with replica.write() as db:
                epoch = Driver(db).replica_guard(scope=REPLICA_SCOPE)
                db.execute("INSERT INTO fo_replica_writes VALUES (%s, %s, %s)", (replica.name, epoch, seq))
        except (psycopg.Error, TenureError):
            continue
        log.add("replica_writes", replica.name, epoch, seq)
        log.serve("replicas")


@dataclass
class Fleet:
    """Electors and claimers (each with a fenced writer thread) and task workers in this process."""

    conninfo: str
    log: ClientLog
    electors: Sequence[str] = ("e0", "e1", "e2")
    workers: Sequence[str] = ("w0", "w1")
    claimers: Sequence[str] = ("c0", "c1")
    queues: Sequence[str] = ("q0", "q1")
    replicas: Sequence[str] = ("r0", "r1", "r2")
    stopping: threading.Event = field(default_factory=threading.Event)
    _electors: list[Elector] = field(default_factory=list)
    _workers: list[TaskWorker] = field(default_factory=list)
    _claimers: list[Claimer] = field(default_factory=list)
    _pools: list[tuple[SubmissionPool, FencedLedger]] = field(default_factory=list)
    _replicas: list[ReplicaManager] = field(default_factory=list)
    _threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> Fleet:
        for name in self.electors:
            elector = Elector(
                self.conninfo,
                UTYPE,
                interval=INTERVAL,
                timeout=TIMEOUT,
                name=name,
                on_elected=self._on_elected(name),
                on_demoted=self._on_demoted(name),
            )
            self._electors.append(elector.start())
            self._write_under(fenced_writes, elector)
        for name in self.workers:
            self._workers.append(AckingWorker(self.conninfo, self.log, name).start())
        for name in self.claimers:
            claimer = AckingClaimer(self.conninfo, self.log, name)
            self._claimers.append(claimer.start())
            self._write_under(claim_writes, claimer)
        for name in self.queues:
            ledger = FencedLedger(self.conninfo, self.log, name)
            pool = SubmissionPool(
                self.conninfo,
                QUEUE,
                submit=ledger.apply,
                status=ledger.status,
                submitters=2,
                depth=1,
                cycle=CYCLE,
                expiry=EXPIRY,
                poll_interval=0.2,
                name=name,
            )
            ledger.instance_id = pool.claimer.instance_id
            self._pools.append((pool.start(), ledger))
        for name in self.replicas:
            replica = AckingReplica(self.conninfo, self.log, name)
            self._replicas.append(replica.start())
            self._write_under(replica_writes, replica)
        return self

    def _write_under(self, writes: Callable[[R, str, ClientLog, threading.Event], None], runtime: R) -> None:
        """Run ``writes`` (fenced writes under what ``runtime`` holds) in a thread until stop()."""
        thread = threading.Thread(
            target=writes, args=(runtime, self.conninfo, self.log, self.stopping), daemon=True
        )
        thread.start()
        self._threads.append(thread)

    def _on_elected(self, name: str) -> Callable[[int], None]:
        return lambda term: self.log.add("elected", name, term, time.monotonic())

    def _on_demoted(self, name: str) -> Callable[[str], None]:
        return lambda reason: self.log.add("demoted", name, time.monotonic())

    def stop(self) -> None:
        self.stopping.set()
        for thread in self._threads:
            thread.join()
        # Each runtime takes up to its grace to stop: all at once, as a fleet of processes would.
        stops = [
            runtime.stop for runtime in [*self._workers, *self._claimers, *self._replicas, *self._electors]
        ]
        stops += [pool.stop for pool, _ in self._pools]
        stopping = [threading.Thread(target=stop, daemon=True) for stop in stops]
        for thread in stopping:
            thread.start()
        for thread in stopping:
            thread.join()
        for _, ledger in self._pools:
            ledger.close()


# -- the checks -------------------------------------------------------------------------


def check(log: ClientLog, admin: psycopg.Connection[Any]) -> list[str]:
    """The clients' log against the final database (``admin`` reads it); the violations found."""
    return check_records(
        log,
        writes=admin.execute("SELECT instance_id, term, seq FROM fo_writes").fetchall(),
        effects=admin.execute("SELECT task_id, epoch FROM fo_effects").fetchall(),
        tasks=admin.execute("SELECT id, status, epoch FROM tenure.task").fetchall(),
        claim_writes=admin.execute("SELECT instance_id, key, epoch, seq FROM fo_claim_writes").fetchall(),
        batches=admin.execute(
            "SELECT id, key, seq, status FROM tenure.batch WHERE keyspace = %s", (QUEUE,)
        ).fetchall(),
        ledger=admin.execute("SELECT batch_id, key, seq, position FROM fo_ledger").fetchall(),
        replica_writes=admin.execute("SELECT replica, epoch, seq FROM fo_replica_writes").fetchall(),
    )


def check_records(
    log: ClientLog,
    *,
    writes: Iterable[tuple[uuid.UUID, int, int]],
    effects: Sequence[tuple[uuid.UUID, int]],
    tasks: Iterable[tuple[uuid.UUID, str, int]],
    claim_writes: Iterable[tuple[uuid.UUID, str, int, int]],
    batches: Iterable[tuple[uuid.UUID, str, int, str]] | None = None,
    ledger: Iterable[tuple[uuid.UUID, str, int, int]] | None = None,
    replica_writes: Iterable[tuple[str, int, int]] | None = None,
) -> list[str]:
    """The clients' log against the final tables: ``writes`` (fo_writes: instance, term,
    seq), ``effects`` (fo_effects: task, epoch), ``tasks`` (tenure.task: id, status,
    epoch), ``claim_writes`` (fo_claim_writes: instance, key, epoch, seq), ``batches``
    (tenure.batch of the queue: id, key, seq, status), ``ledger`` (fo_ledger: batch, key,
    seq, position) and ``replica_writes`` (fo_replica_writes: replica, epoch, seq); the
    violations found. Without ``batches`` and ``ledger`` (a fleet without submission
    pools), or without ``replica_writes`` (without replicas), that area is not checked."""
    problems = []
    granted: dict[int, set[str]] = {}
    for name, term, _ in log.elected:
        granted.setdefault(term, set()).add(name)
    twice = {term: names for term, names in granted.items() if len(names) > 1}
    if twice:
        problems.append(f"a term granted to two instances: {twice}")
    if len({(name, term) for name, term, _ in log.elected}) != len(log.elected):
        problems.append("on_elected ran twice for one term")
    # believed primacy, on the clients' shared monotonic clock: never two at once
    spans = log.primacy()
    for (_, end, first, _), (start, _, second, _) in itertools.pairwise(spans):
        if first != second and start < end:
            problems.append(f"{first} and {second} both believed they were primary at {start:.3f}")
    leased: dict[tuple[uuid.UUID, int], set[uuid.UUID]] = {}
    for task, epoch, owner in log.leases:
        leased.setdefault((task, epoch), set()).add(owner)
    doubly = [pair for pair, owners in leased.items() if len(owners) > 1]
    if doubly:
        problems.append(f"{len(doubly)} (task, epoch) pairs leased to two workers")
    lost_writes = set(log.writes) - set(writes)
    if lost_writes:
        problems.append(f"{len(lost_writes)} acknowledged fenced writes lost")
    final = {task: (status, epoch) for task, status, epoch in tasks}
    problems += _lost_outcomes(log, set(effects), final)
    lost_tasks = set(log.enqueued) - set(final)
    if lost_tasks:
        problems.append(f"{len(lost_tasks)} acknowledged enqueued tasks lost")
    undone = [task for task, (status, _) in final.items() if status != "done"]
    if undone:
        problems.append(f"{len(undone)} of {len(final)} tasks not done")
    if len(effects) != len({task for task, _ in effects}) or {task for task, _ in effects} != set(final):
        problems.append(f"not every task's step applied exactly once: {len(effects)} for {len(final)} tasks")
    if not log.writes:
        problems.append("the primaries made no fenced write")
    if final and not log.outcomes:
        problems.append(f"no acknowledged task outcome to check, though {len(final)} tasks exist")
    problems += _claim_problems(log, set(claim_writes))
    if batches is not None and ledger is not None:
        problems += _batch_problems(log, list(batches), list(ledger))
    if replica_writes is not None:
        problems += _replica_problems(log, set(replica_writes))
    return problems


def _claim_problems(log: ClientLog, claim_writes: set[tuple[uuid.UUID, str, int, int]]) -> list[str]:
    """The claimers' spans and acknowledged writes against the final fo_claim_writes: no
    (key, epoch) granted to two instances, no key believed held by two instances at one
    instant (monotonic clock), no acknowledged write lost, no write under a claim its
    writer was never granted."""
    problems = []
    granted: dict[tuple[str, int], set[uuid.UUID]] = {}
    for instance, key, epoch, _, _ in log.claims:
        granted.setdefault((key, epoch), set()).add(instance)
    twice = sorted(pair for pair, holders in granted.items() if len(holders) > 1)
    if twice:
        problems.append(f"{len(twice)} (key, epoch) pairs granted to two instances, e.g. {twice[:3]}")
    overlaps = []
    for key in sorted({key for _, key, *_ in log.claims}):
        spans = sorted(
            (start, end, instance, epoch) for instance, k, epoch, start, end in log.claims if k == key
        )
        for n, (start, _, instance, epoch) in enumerate(spans):
            for _, end, other, other_epoch in spans[:n]:
                if other != instance and start < end:
                    overlaps.append(
                        f"{key} held in epoch {epoch} from {start:.3f} while held in epoch {other_epoch} "
                        f"until {end:.3f}"
                    )
    if overlaps:
        problems.append(f"a key held by two instances at once, {len(overlaps)} times: {overlaps[:3]}")
    lost = set(log.claim_writes) - claim_writes
    if lost:
        problems.append(f"{len(lost)} acknowledged claim-fenced writes lost")
    ungranted = {(i, k, e) for i, k, e, _ in claim_writes} - {(i, k, e) for i, k, e, *_ in log.claims}
    if ungranted:
        problems.append(
            f"{len(ungranted)} claim-fenced writes in a (key, epoch) their writer was never granted"
        )
    if not log.claim_writes:
        problems.append("the claimers made no fenced write")
    return problems


def _batch_problems(
    log: ClientLog,
    batches: list[tuple[uuid.UUID, str, int, str]],
    ledger: list[tuple[uuid.UUID, str, int, int]],
) -> list[str]:
    """The queue's final batches and the ledger against the log: no acknowledged enqueue
    lost, every batch committed, and applied to the ledger exactly once, in its key's
    sequence order; every acknowledged application still in the ledger."""
    problems = []
    final = {batch: (key, seq, status) for batch, key, seq, status in batches}
    lost = set(log.enqueued_batches) - set(final)
    if lost:
        problems.append(f"{len(lost)} acknowledged enqueued batches lost")
    unresolved = sorted(
        f"{key}#{seq} {status}" for key, seq, status in final.values() if status != "committed"
    )
    if unresolved:
        problems.append(f"{len(unresolved)} of {len(final)} batches not committed, e.g. {unresolved[:3]}")
    expected: dict[str, list[tuple[str, int]]] = {}
    for key, seq, _ in sorted(final.values()):
        expected.setdefault(key, []).append((key, seq))
    applied: dict[str, list[tuple[str, int]]] = {}
    for _, key, seq, _ in sorted(ledger, key=lambda row: (row[1], row[3])):
        applied.setdefault(key, []).append((key, seq))
    problems += [f"batches: {problem}" for problem in check_applied(expected, applied)]
    positions = [(key, position) for _, key, _, position in ledger]
    if len(set(positions)) != len(positions):
        problems.append("two batches applied at one position of a key")
    unapplied = {batch for batch, *_ in log.batches} - {batch for batch, *_ in ledger}
    if unapplied:
        problems.append(f"{len(unapplied)} acknowledged applications of batches lost")
    if not log.batches:
        problems.append("the submission pools applied no batch")
    return problems


def _replica_problems(log: ClientLog, replica_writes: set[tuple[str, int, int]]) -> list[str]:
    """The replicas' spans and acknowledged writes against the final fo_replica_writes: no
    epoch granted to two replicas, never two replicas believing they are active at one
    instant (monotonic clock), no acknowledged write lost, no write in an epoch its writer
    was never granted."""
    problems = []
    granted: dict[int, set[str]] = {}
    for name, epoch, _, _ in log.replicas:
        granted.setdefault(epoch, set()).add(name)
    twice = {epoch: sorted(names) for epoch, names in granted.items() if len(names) > 1}
    if twice:
        problems.append(f"a replica epoch granted to two replicas: {twice}")
    spans = sorted((start, end, name, epoch) for name, epoch, start, end in log.replicas)
    overlaps = [
        f"{name} active in epoch {epoch} from {start:.3f} while {other} was in epoch {other_epoch} "
        f"until {end:.3f}"
        for n, (start, _, name, epoch) in enumerate(spans)
        for _, end, other, other_epoch in spans[:n]
        if other != name and start < end
    ]
    if overlaps:
        problems.append(f"two replicas active at once, {len(overlaps)} times: {overlaps[:3]}")
    lost = set(log.replica_writes) - replica_writes
    if lost:
        problems.append(f"{len(lost)} acknowledged replica writes lost")
    ungranted = {(name, epoch) for name, epoch, _ in replica_writes} - {
        (name, epoch) for name, epoch, *_ in log.replicas
    }
    if ungranted:
        problems.append(
            f"{len(ungranted)} replica writes in an epoch their writer was never active in, "
            f"e.g. {sorted(ungranted)[:3]}"
        )
    if not log.replica_writes:
        problems.append("the active replicas made no write")
    return problems


def _lost_outcomes(
    log: ClientLog, effects: set[tuple[uuid.UUID, int]], final: dict[uuid.UUID, tuple[str, int]]
) -> list[str]:
    """Acknowledged outcomes the final tables do not show. A completion (which always
    carries its fo_effects row here) must have its row in its epoch and its task done; any
    other outcome must have left its task there, in that epoch or a later one."""
    lost = []
    for task, epoch, kind in log.outcomes:
        status, final_epoch = final.get(task, ("missing", -1))
        if kind == "complete":
            if (task, epoch) not in effects:
                lost.append(f"complete of {task} in epoch {epoch} (no effect of that epoch)")
            elif status != "done":
                lost.append(f"complete of {task} in epoch {epoch} (the task is {status})")
        elif final_epoch < epoch:
            lost.append(f"{kind} of {task} in epoch {epoch} (task {status} in epoch {final_epoch})")
    if not lost:
        return []
    return [f"{len(lost)} acknowledged task outcomes lost, e.g. {', '.join(lost[:3])}"]


@dataclass(frozen=True)
class Timing:
    """Seconds after a fault: until the database was writable again, until a primary was
    elected, and until each area's clients were first acknowledged something after the
    database was writable (None: not yet)."""

    writable: float
    primary: float
    served: dict[str, float | None] = field(default_factory=dict)

    @classmethod
    def measure(cls, log: ClientLog, *, fault: float, writable: float, primary: float) -> Timing:
        """From the clients' log: the fault, the database writable again and the first
        primary after the fault, on the monotonic clock."""
        served = {area: log.served_at(area, writable) for area in AREAS}
        return cls(
            writable=writable - fault,
            primary=primary - fault,
            served={area: None if at is None else at - fault for area, at in served.items()},
        )

    @property
    def takeover(self) -> float:
        """From writable again to a primary (0 when the electors were faster than the probe)."""
        return max(0.0, self.primary - self.writable)

    def to_serve(self, area: str) -> float | None:
        """From writable again to the first acknowledgement of ``area`` (None: none yet)."""
        served = self.served.get(area)
        return None if served is None else max(0.0, served - self.writable)

    def late_areas(self) -> list[str]:
        """The areas that did not serve again within their bound of :data:`SERVE_BOUNDS`."""
        late = []
        for area in self.served:
            took = self.to_serve(area)
            if took is None or took > SERVE_BOUNDS[area]:
                late.append(area)
        return late

    def serving(self) -> str:
        """Time to serve again per area, against its bound, as one line."""
        return ", ".join(
            f"{area} {'never' if (took := self.to_serve(area)) is None else f'{took:.2f} s'} "
            f"(bound {SERVE_BOUNDS[area]:.1f} s)"
            for area in self.served
        )


def wait(condition: Callable[[], bool], timeout: float) -> bool:
    """Poll ``condition`` (a database error counts as not yet) until it holds or timeout passes."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if condition():
                return True
        except psycopg.Error:
            pass
        time.sleep(0.2)
    return False


def main(argv: list[str] | None = None) -> None:
    """One process of the fleet: its clients run until SIGTERM; its log goes to stdout."""
    parser = argparse.ArgumentParser(prog="python -m tenure.testing.failover", description=main.__doc__)
    parser.add_argument("--db", required=True, help="conninfo (multi-host, target_session_attrs=read-write)")
    parser.add_argument("--elector", action="append", default=[], help="run an elector of this name")
    parser.add_argument("--worker", action="append", default=[], help="run a task worker of this name")
    parser.add_argument("--claimer", action="append", default=[], help="run a claimer of this name")
    parser.add_argument("--queue", action="append", default=[], help="run a submission pool of this name")
    parser.add_argument("--replica", action="append", default=[], help="run a replica of this name")
    args = parser.parse_args(argv)
    procs.die_with_parent()  # SIGTERM: stop cleanly, also when the demo itself was killed
    fleet = Fleet(
        args.db,
        ClientLog(sink=sys.stdout),
        electors=args.elector,
        workers=args.worker,
        claimers=args.claimer,
        queues=args.queue,
        replicas=args.replica,
    ).start()
    print("started", flush=True)
    wait_for_shutdown()
    fleet.stop()
    print("stopped", flush=True)


if __name__ == "__main__":
    main()
