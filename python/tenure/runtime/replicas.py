"""Active/passive replicas behind a load balancer: leadership bound to a database connection.

Several replicas of a service share one database. Exactly one is active: its
``ReplicaManager`` holds tenure's session-level advisory lock on a dedicated
connection, the lock connection, and every write of the replica goes through that
connection, each write transaction starting with ``replica_guard`` (``manager.write()``
does both). The passive replicas try to acquire the lock every ``interval``.

- Lock loss: when the lock connection breaks, the replica is passive at once (writes in
  flight fail with it); for ``grace`` seconds it reconnects and reclaims the lock, which
  the database reserves for it by the server's clock (``replica_acquire`` refuses the
  others until ``grace + 2 * interval`` after its last ping), so a blip shorter than the
  grace period keeps the same replica active. A lock session ended by an administrator
  (``pg_terminate_backend``) is taken as an order to fail over: the replica drops its
  reservation and stays out for the grace period (at least 3 intervals) before
  competing again.
- Hang: the lock session carries ``idle_session_timeout`` (``idle_timeout``, a few
  intervals) and the active replica pings every interval, so the server ends a frozen
  replica's session and frees the lock; on waking, the watchdog has made it passive
  before it can write (no successful ping within ``idle_timeout`` of when it was sent,
  on the monotonic clock), and its dead connection could not write anyway.
- ``ReplicaServer`` answers the load balancer (``GET /health/active`` 200 only on the
  active replica, ``GET /health/live``) and serves the application's routes;
  ``active_only`` makes a route refuse requests while the replica is passive.
- A transaction-pooling proxy between the replica and the server (pgbouncer with
  ``pool_mode = transaction``) cannot keep a session lock: ``start()`` detects one and
  refuses to run.

``Replication`` holds every decision above; ``ReplicaManager`` runs it on threads and
``AsyncReplicaManager`` on asyncio tasks (``async with manager.active() as epoch:``).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any, Self

import psycopg

from tenure.connect import (
    aconnect,
    adurable_transaction,
    arefuse_transaction_pooling,
    connect,
    durable_transaction,
    instance_name,
    refuse_transaction_pooling,
)
from tenure.driver import OPS, AsyncDriver, Driver, Op, ReplicaGrant
from tenure.errors import InvalidConfiguration, NotPrimary, TenureError
from tenure.metrics import Metrics
from tenure.runtime.loop import AsyncGrantLoop, GrantLogic, GrantLoop, capped

log = logging.getLogger(__name__)

ADMIN_SHUTDOWN = "57P01"  # the session was ended by pg_terminate_backend (or a server shutdown)


@dataclass(frozen=True)
class ReplicaTiming:
    """Seconds: ping and acquisition ``interval``, the lock session's ``idle_timeout``, ``grace``."""

    interval: float
    idle_timeout: float
    grace: float

    def __post_init__(self) -> None:
        if not self.interval > 0:
            raise InvalidConfiguration(f"replica interval must be positive, got {self.interval!r} s")
        if not self.idle_timeout > 2 * self.interval:
            raise InvalidConfiguration(
                f"idle timeout must be longer than twice the interval: idle_timeout={self.idle_timeout} s, "
                f"interval={self.interval} s",
                hint="Choose idle_timeout = 3 * interval: the active replica pings every interval and the "
                "server ends its lock session after idle_timeout without a statement.",
            )
        if not self.grace >= 0:
            raise InvalidConfiguration(f"grace period must not be negative, got {self.grace!r} s")

    @property
    def step_aside(self) -> float:
        """How long a replica whose lock session an operator ended stays out of the competition."""
        return max(3 * self.interval, self.grace)

    @property
    def reserve(self) -> float | None:
        """How long after its last ping the lock stays reserved for the active replica."""
        return self.grace + 2 * self.interval if self.grace > 0 else None


class Replication(GrantLogic):
    """What a replica manager decides, on threads (:class:`ReplicaManager`) or on asyncio
    (:class:`AsyncReplicaManager`): the lock session, pings, the reservation and the step
    aside, what a lost lock means, and which writes are refused."""

    grant_name = "epoch"
    _connection: Any  # the lock connection, of the shell's kind
    _writing: threading.RLock | asyncio.Lock  # around each cycle and each write (see _turn)

    def __init__(
        self,
        conninfo: str,
        *,
        name: str | None = None,
        counter: int = 0,
        scope: str | None = None,
        interval: float = 0.5,
        idle_timeout: float | None = None,
        grace: float | None = None,
        on_active: Callable[[int], object] | None = None,
        on_passive: Callable[[str], object] | None = None,
        check_pooling: bool = True,
        metrics: Metrics | None = None,
    ) -> None:
        self.timing = ReplicaTiming(
            interval=interval,
            idle_timeout=3 * interval if idle_timeout is None else idle_timeout,
            grace=4 * interval if grace is None else grace,
        )
        self.name = instance_name(name)
        self.counter = counter
        self.scope = scope
        self.check_pooling = check_pooling
        super().__init__(
            conninfo,
            period=interval,
            safe_window=self.timing.idle_timeout,
            label=f"replica {self.name}",
            metrics=metrics,
            runtime="replica",
            metric_name=f"{scope or ''}/{counter}",
            on_gained=on_active,
            on_lost=on_passive,
        )
        self.lock_id: int | None = None
        self.last_answer: ReplicaGrant | None = None
        self._grace_until = 0.0
        self._backoff_until = 0.0
        self._drop_reservation = False
        self._writing = self._new_turn()  # one user of the lock connection at a time: a cycle or a write

    # -- what the application asks ---------------------------------------------------

    @property
    def epoch(self) -> int | None:
        """The epoch this replica is active in, or None when it is passive."""
        return self._current()

    def is_active(self) -> bool:
        return self.epoch is not None

    @property
    def role(self) -> str:
        return "active" if self.is_active() else "passive"

    def in_grace(self) -> bool:
        """True while reclaiming the lock after losing the lock connection."""
        return time.monotonic() < self._grace_until

    def status(self) -> dict[str, object]:
        """Role, lock id, epoch and seconds in the role, for the health endpoint."""
        with self._state:
            epoch = self._grant if time.monotonic() < self._deadline else None
            in_role = time.monotonic() - self._since
        return {
            "role": "active" if epoch is not None else "passive",
            "replica": self.name,
            "lock_id": self.lock_id,
            "epoch": epoch,
            "in_role_s": round(in_role, 3),
            "reclaiming": epoch is None and self.in_grace(),
        }

    # -- writes on the lock connection -----------------------------------------------------

    def _writable(self) -> tuple[int, Any]:
        """The epoch and the lock connection to write in, or NotPrimary: asked before the
        turn (a passive replica refuses at once) and again with it held."""
        epoch = self.epoch
        connection = self._connection
        if epoch is None or connection is None or connection.closed:
            raise NotPrimary(
                f"replica {self.name} is passive: it makes no writes",
                hint="Send the request to the active replica (through the load balancer) and retry.",
            )
        return epoch, connection

    def _write_failed(self, error: Exception, connection: psycopg.BaseConnection[Any]) -> None:
        """A write on the lock connection raised ``error`` (with the turn held)."""
        if isinstance(error, NotPrimary):
            self._demote(f"write refused: {error.message}")
        elif isinstance(error, psycopg.Error) and (connection.broken or connection.closed):
            self._lost(error)

    # -- the lock session --------------------------------------------------------------

    def _dial_options(self, deadline: float | None = None) -> dict[str, Any]:
        """How a lock connection is opened (``connect`` or ``aconnect``), nothing set on it yet;
        its waits end within the idle timeout, or ``deadline`` if sooner (a leave in a stop)."""
        return {
            "application_name": f"tenure replica {self.name}",
            "deadline": capped(self.timing.idle_timeout, deadline),
            "idle_session_timeout": self.timing.idle_timeout,
        }

    def _lock_session(self) -> Op[None]:
        # Again by SQL: a proxy (pgbouncer's ignore_startup_parameters) may drop the
        # startup options, and without the timeout a frozen replica keeps the lock.
        yield from OPS.set_idle_session_timeout(self.timing.idle_timeout)

    def _refuse_pooling(self) -> dict[str, Any]:
        """What the transaction-pooling check says it refuses, and why."""
        return {"what": "tenure replicas", "needs": "a session advisory lock"}

    # -- the cycle (run in the shell's turn on the lock connection) ----------------------

    def _cycle(self) -> Op[None]:
        with self._state:
            epoch = self._grant
        if epoch is not None:
            sent = time.monotonic()
            try:
                yield from OPS.replica_ping(
                    self.name, epoch, reserve=self.timing.reserve, counter=self.counter, scope=self.scope
                )
            except (psycopg.Error, TenureError) as error:
                self._lost(error)
                return
            self._confirm(epoch, sent + self.timing.idle_timeout, too_late="ping answered too late")
            return
        try:
            if self._drop_reservation:
                # Let the others acquire first: drop the reservation, then stay out a while.
                yield from OPS.replica_release(self.name, counter=self.counter, scope=self.scope)
                self._drop_reservation = False
                self._backoff_until = time.monotonic() + self.timing.step_aside
            if time.monotonic() < self._backoff_until:
                return
            sent = time.monotonic()
            grant = yield from OPS.replica_acquire(
                self.name, reserve=self.timing.reserve, counter=self.counter, scope=self.scope
            )
        except psycopg.Error as error:
            log.warning("%s: acquisition failed: %s", self.label, error)
            self._close_connection()
            return
        self.lock_id = grant.lock_id
        self.last_answer = grant
        if grant.acquired and self._given_up(grant.epoch):
            # This session still holds the lock in an epoch this replica stepped down from (its
            # watchdog ran out while a call or a write hung): an answer that wrote nothing,
            # which an old primary thawed after a failover gives as well, before it is demoted.
            # Only a ping, which must commit durably, takes that epoch up again.
            yield from OPS.replica_ping(
                self.name, grant.epoch, reserve=self.timing.reserve, counter=self.counter, scope=self.scope
            )
        if grant.acquired:
            self._confirm(grant.epoch, sent + self.timing.idle_timeout, too_late="ping answered too late")

    def _cycle_failed(self, reason: str) -> None:
        self._demote(f"lock connection failed: {reason}")

    def _expire(self) -> None:
        self._demote("no successful ping within the idle timeout", only_if_expired=True)

    def _stopped(self) -> None:
        self._demote("stopped")

    def _leave(self) -> Op[None]:
        yield from OPS.replica_release(self.name, counter=self.counter, scope=self.scope)

    # -- role changes ------------------------------------------------------------------

    def _new_turn(self) -> threading.RLock | asyncio.Lock:
        raise NotImplementedError

    def _close_connection(self) -> None:
        """Close the lock connection now: whatever its session holds, it holds no longer."""
        raise NotImplementedError

    def _lost(self, error: Exception) -> None:
        """The lock connection broke, or the database says the lock is no longer ours."""
        self._close_connection()  # whatever the session still holds, it holds no longer
        if self._closing:
            self._demote("stopped")  # stop() cut the ping short
            return
        sqlstate = getattr(error, "sqlstate", None)
        terminated = sqlstate == ADMIN_SHUTDOWN or "administrator command" in str(error)
        if terminated:
            # An operator ended the lock session: fail over rather than reclaim.
            self._drop_reservation = True
            self._demote("lock session terminated by an administrator: failing over")
        elif isinstance(error, TenureError):
            self._demote(f"lock no longer held: {error}")
        else:
            self._grace_until = time.monotonic() + self.timing.grace
            first_line = str(error).splitlines()[0] if str(error) else error.__class__.__name__
            self._demote(f"lock connection lost ({first_line}): reclaiming for {self.timing.grace} s")

    def _gained(self, epoch: int) -> None:
        self._grace_until = 0.0
        lock = str(self.lock_id)
        self.metrics.replica_active.labels(lock).set(1)
        self.metrics.replica_epoch.labels(lock).set(epoch)
        self.metrics.replica_activations.labels(lock).inc()
        log.info("%s: active in epoch %d", self.name, epoch)

    def _lost_grant(self, epoch: int, reason: str) -> None:
        self.metrics.replica_active.labels(str(self.lock_id)).set(0)
        self.metrics.replica_epoch.labels(str(self.lock_id)).set(0)
        log.info("%s: passive: %s", self.name, reason)


class ReplicaManager(Replication, GrantLoop):
    """Holds or competes for a replica lock in a background thread; a context manager.

    ``on_active(epoch)`` runs when this replica becomes active, ``on_passive(reason)``
    when it stops being active, on whichever thread noticed. Leaving the ``with`` block
    releases the lock, so a passive replica takes over at its next try.
    """

    _writing: threading.RLock

    def wait_until_active(self, timeout: float | None = None) -> bool:
        return self._wait_for_grant(timeout)

    @contextmanager
    def write(self) -> Iterator[psycopg.Connection[Any]]:
        """The lock connection inside a transaction that passed ``replica_guard``.

        Raises NotPrimary when this replica is passive, or when the database says the
        session no longer holds the lock in this replica's epoch; the transaction
        commits when the block ends without an exception, and a commit the server could
        not confirm (its wait for the synchronous standby was cancelled) raises
        CommitNotConfirmed, as the lock connection is lost.
        """
        self._writable()  # a passive replica refuses at once, without waiting for its turn
        with self._writing:
            epoch, connection = self._writable()
            try:
                with durable_transaction(connection):
                    Driver(connection).replica_guard(epoch=epoch, counter=self.counter, scope=self.scope)
                    yield connection
            except (psycopg.Error, NotPrimary) as error:
                self._write_failed(error, connection)
                raise

    def start(self) -> Self:
        if self.check_pooling:
            # The first lock connection is checked before anything is set on its session:
            # through a transaction pooler that would change a server session others share.
            connection = connect(self.conninfo, **self._dial_options())
            try:
                refuse_transaction_pooling(connection, self.conninfo, **self._refuse_pooling())
                Driver(connection).run(self._lock_session())
            except BaseException:
                connection.close()
                raise
            self._connection = connection
        return super().start()

    def _new_turn(self) -> threading.RLock:
        return threading.RLock()  # reentrant: a callback of the cycle may write

    def _turn(self) -> threading.RLock:
        return self._writing

    def _connect(self, *, deadline: float | None = None) -> psycopg.Connection[Any]:
        connection = connect(self.conninfo, **self._dial_options(deadline))
        Driver(connection).run(self._lock_session())
        return connection

    def _close_connection(self) -> None:
        if self._connection is not None:
            self._connection.close()


class AsyncReplicaManager(Replication, AsyncGrantLoop):
    """:class:`ReplicaManager` for asyncio: the same replica on two tasks of the running event
    loop, without a thread. Use as ``async with``: leaving the block, or the cancellation of
    the task in it, releases the lock.

    ``on_active`` and ``on_passive`` run on the event loop; a callback may be a coroutine
    function (it runs as a task of its own). Writes go through ``async with
    manager.write() as connection:`` on the lock connection, as with the sync manager;
    ``async with manager.active() as epoch:`` runs a body only while active.
    """

    _writing: asyncio.Lock

    async def wait_until_active(self, timeout: float | None = None) -> bool:
        """Wait until this replica is active (True) or ``timeout`` passes (False)."""
        return await self._wait_for_grant(timeout)

    def active(self, timeout: float | None = None) -> AbstractAsyncContextManager[int]:
        """``async with manager.active() as epoch:`` runs its body only while active in ``epoch``.

        Waits up to ``timeout`` seconds (None: for ever) to be active, else TimeoutError.
        When the epoch ends (the lock is lost, or no ping succeeded within the idle timeout
        of when it was sent), the body is cancelled at once and
        :class:`~tenure.errors.NotPrimary` raised from the block.
        """
        return self._holding_grant(timeout, self._epoch_lost)

    def _epoch_lost(self, epoch: int, reason: str) -> Exception:
        return NotPrimary(f"replica {self.name} is no longer active in epoch {epoch}: {reason}")

    @asynccontextmanager
    async def write(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """The lock connection inside a transaction that passed ``replica_guard``
        (see :meth:`ReplicaManager.write`)."""
        self._writable()  # a passive replica refuses at once, without waiting for its turn
        async with self._writing:
            epoch, connection = self._writable()
            try:
                async with adurable_transaction(connection):
                    await AsyncDriver(connection).replica_guard(
                        epoch=epoch, counter=self.counter, scope=self.scope
                    )
                    yield connection
            except (psycopg.Error, NotPrimary) as error:
                self._write_failed(error, connection)
                raise

    async def start(self) -> Self:
        if self.check_pooling:
            connection = await aconnect(self.conninfo, **self._dial_options())
            try:
                await arefuse_transaction_pooling(connection, self.conninfo, **self._refuse_pooling())
                await AsyncDriver(connection).run(self._lock_session())
            except BaseException:
                await connection.close()
                raise
            self._connection = connection
        return await super().start()

    def _new_turn(self) -> asyncio.Lock:
        return asyncio.Lock()

    def _turn(self) -> asyncio.Lock:
        return self._writing

    async def _connect(self, *, deadline: float | None = None) -> psycopg.AsyncConnection[Any]:
        connection = await aconnect(self.conninfo, **self._dial_options(deadline))
        await AsyncDriver(connection).run(self._lock_session())
        return connection

    def _close_connection(self) -> None:
        # Detached now, so the loop reconnects; AsyncConnection.close() only ends the
        # socket (no round trip), so the task that runs it ends the session at once.
        connection, self._connection = self._connection, None
        if connection is not None:
            self._schedule(connection.close())


# -- HTTP: the load balancer's health check and the application's routes ----------------
