"""Connections for tenure's runtime loops: autocommit, bounded in time on both ends,
safe behind a transaction pooler, and honest about commits a failover could lose.

Every wait ends: the connect timeout bounds each host of a multi-host conninfo,
keepalives and ``tcp_user_timeout`` end a connection whose packets go unanswered,
``statement_timeout`` ends a statement on a live server, and :class:`Deadlines`
abandons the socket of a call that overran its bound, which is the only way out
when the server is frozen (the kernel still acknowledges TCP then) or a commit
waits for a synchronous standby that does not answer.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import json
import logging
import os
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import psycopg
from psycopg.types.json import set_json_loads

from tenure.errors import CommitNotConfirmed, InvalidConfiguration

log = logging.getLogger(__name__)

# What the server says when a commit's wait for a synchronous standby was cancelled:
# the transaction committed locally and may be gone after a failover.
_SYNC_WAIT_CANCELLED = "canceling wait for synchronous replication"
_UNCONFIRMED = "_tenure_unconfirmed"


def instance_name(name: str | None = None) -> str:
    """A readable name for this process incarnation: given name or host, and pid."""
    return f"{name or socket.gethostname()}:{os.getpid()}"


def connection_options(
    *, application_name: str, deadline: float, idle_session_timeout: float | None = None
) -> dict[str, Any]:
    """Keyword arguments of ``psycopg.connect`` for a runtime connection (and its pools).

    ``prepare_threshold=None``: psycopg would otherwise prepare a statement on the
    server after five runs, and behind a transaction pooler another client's server
    session would then run it with its own arguments.
    """
    millis = max(1, int(deadline * 1000))
    idle = (
        "" if idle_session_timeout is None else f" -c idle_session_timeout={int(idle_session_timeout * 1000)}"
    )
    return {
        "autocommit": True,
        "prepare_threshold": None,
        "application_name": application_name[:63],
        "connect_timeout": max(2, int(deadline + 0.999)),
        "keepalives": 1,
        "keepalives_idle": max(1, int(deadline)),
        "keepalives_interval": 1,
        "keepalives_count": 3,
        "tcp_user_timeout": millis,
        "options": f"-c statement_timeout={millis} -c idle_in_transaction_session_timeout={max(millis, 1000)}"
        f"{idle}",
    }


def connect(
    conninfo: str, *, application_name: str, deadline: float, idle_session_timeout: float | None = None
) -> psycopg.Connection[Any]:
    """An autocommit connection whose every wait ends within about ``deadline`` seconds.

    A statement, an idle transaction and unacknowledged TCP data are all cut off
    after ``deadline``, so a loop that must act within a safe window is never stuck
    in the network or behind a lock for longer than that window. With
    ``idle_session_timeout`` the server also ends the session after that many
    seconds without a statement (a replica's lock session, so that a frozen
    client's session and its advisory lock do not live forever).
    """
    options = connection_options(
        application_name=application_name, deadline=deadline, idle_session_timeout=idle_session_timeout
    )
    try:
        connection = psycopg.connect(conninfo, **options)
    except psycopg.OperationalError as error:
        refused_startup_parameter(error)
        raise
    configure(connection)
    return connection


async def aconnect(
    conninfo: str, *, application_name: str, deadline: float, idle_session_timeout: float | None = None
) -> psycopg.AsyncConnection[Any]:
    """:func:`connect` for asyncio."""
    options = connection_options(
        application_name=application_name, deadline=deadline, idle_session_timeout=idle_session_timeout
    )
    try:
        connection = await psycopg.AsyncConnection.connect(conninfo, **options)
    except psycopg.OperationalError as error:
        refused_startup_parameter(error)
        raise
    configure(connection)
    return connection


def refused_startup_parameter(error: psycopg.OperationalError) -> None:
    """Raise a clear InvalidConfiguration if a pooler refused tenure's ``options``."""
    if "unsupported startup parameter" in str(error):
        raise InvalidConfiguration(
            "the server (a connection pooler) refused the startup parameter 'options' that carries "
            "tenure's statement_timeout and idle_in_transaction_session_timeout",
            detail=str(error).strip(),
            hint="In pgbouncer.ini set ignore_startup_parameters = extra_float_digits,options and set "
            "the timeouts for the role instead (ALTER ROLE app SET statement_timeout = '2s'), or connect "
            "to PostgreSQL directly.",
        ) from error


def configure(connection: psycopg.BaseConnection[Any]) -> None:
    """What every connection tenure opens gets (the ``configure`` of its pools): its
    unconfirmed commits watched (:func:`watch_commits`) and json values read by
    :func:`_json_loads`. A connection the caller passes in keeps its own adapters."""
    watch_commits(connection)
    set_json_loads(_json_loads, connection)


async def aconfigure(connection: psycopg.AsyncConnection[Any]) -> None:
    """:func:`configure` as a coroutine: the ``configure`` of an ``AsyncConnectionPool``."""
    configure(connection)


def _json_loads(data: str | bytes) -> Any:
    """``json.loads``, but without parsing ``{}``, the data of most tasks: a worker reads
    one per task it leases, and the parser's call cost ~1.5 us each, a few percent of a
    task's whole cost in a worker."""
    return {} if data == b"{}" else json.loads(data)


def watch_commits(connection: psycopg.BaseConnection[Any]) -> None:
    """Remember, on ``connection``, every commit the server could not confirm (once per connection)."""
    if hasattr(connection, _UNCONFIRMED):
        return
    setattr(connection, _UNCONFIRMED, [])

    def on_notice(diagnostic: psycopg.errors.Diagnostic) -> None:
        if (diagnostic.message_primary or "").startswith(_SYNC_WAIT_CANCELLED):
            getattr(connection, _UNCONFIRMED).append(diagnostic.message_primary)

    connection.add_notice_handler(on_notice)


def forget_unconfirmed(connection: psycopg.BaseConnection[Any]) -> None:
    """Start counting from now (before a call or a transaction whose commit is checked)."""
    watch_commits(connection)
    getattr(connection, _UNCONFIRMED).clear()


def confirm_commit(connection: psycopg.Connection[Any]) -> None:
    """Raise CommitNotConfirmed, and close ``connection``, if a commit since
    :func:`forget_unconfirmed` was not confirmed by the synchronous standbys."""
    message = _take_unconfirmed(connection)
    if message is not None:
        connection.close()
        raise _not_confirmed(message)


async def aconfirm_commit(connection: psycopg.AsyncConnection[Any]) -> None:
    """:func:`confirm_commit` for an async connection."""
    message = _take_unconfirmed(connection)
    if message is not None:
        await connection.close()
        raise _not_confirmed(message)


def _take_unconfirmed(connection: psycopg.BaseConnection[Any]) -> str | None:
    unconfirmed = getattr(connection, _UNCONFIRMED, None)
    if not unconfirmed:
        return None
    message: str = unconfirmed[0]
    unconfirmed.clear()
    return message


def _not_confirmed(message: str) -> CommitNotConfirmed:
    return CommitNotConfirmed(
        "the commit was not confirmed: the server committed locally but its wait for the synchronous "
        "standby was cancelled, so a failover may lose it",
        detail=f"The server said: {message}.",
        hint="Treat the call as failed and do not act on its result; retry on a new connection.",
    )


@contextmanager
def durable_transaction(connection: psycopg.Connection[Any]) -> Iterator[psycopg.Connection[Any]]:
    """``connection.transaction()`` whose commit must be confirmed (see :func:`confirm_commit`)."""
    forget_unconfirmed(connection)
    with connection.transaction():
        yield connection
    confirm_commit(connection)


@asynccontextmanager
async def adurable_transaction(
    connection: psycopg.AsyncConnection[Any],
) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    """:func:`durable_transaction` for an async connection."""
    forget_unconfirmed(connection)
    async with connection.transaction():
        yield connection
    await aconfirm_commit(connection)


def lost_server(error: BaseException, connection: psycopg.BaseConnection[Any] | None = None) -> bool:
    """Whether ``error`` means this connection no longer reaches a writable primary.

    A broken connection, a terminated or shut down backend (57P01-57P03), a
    connection exception (class 08), and a standby or read-only server (25006)
    all count: the caller should close the connection and connect again, which
    with ``target_session_attrs=read-write`` finds the primary.
    """
    if connection is not None and (connection.closed or connection.broken):
        return True
    if isinstance(error, CommitNotConfirmed):
        return True
    sqlstate = getattr(error, "sqlstate", None) or ""
    if isinstance(error, psycopg.OperationalError) and not sqlstate:
        return True
    return sqlstate == "25006" or sqlstate.startswith(("08", "57P"))


def abandon(connection: psycopg.BaseConnection[Any]) -> None:
    """Shut the socket of ``connection`` down from any thread.

    A thread blocked on it (a frozen server, a commit waiting for a standby) gets
    an error at once; the connection is broken afterwards and must be closed.
    """
    try:
        fd = connection.fileno()
    except psycopg.Error:
        return  # already closed
    try:
        with socket.socket(fileno=os.dup(fd)) as duplicate:
            duplicate.shutdown(socket.SHUT_RDWR)
    except OSError as error:
        log.debug("abandoning a connection: %s", error)


class Deadlines:
    """One watchdog thread that abandons the socket of every call that overran its bound.

    ``with deadlines.bounded(connection, seconds): ...`` costs a heap push and a
    set update. The thread wakes at least every :attr:`TICK` seconds, so a call whose
    bound ends later than its next wake-up does not wake it: no thread switch on the
    path of a call, which a worker woken by a notification would wait for.
    """

    TICK = 0.5

    def __init__(self, name: str) -> None:
        self.name = name
        self._wake = threading.Condition()
        self._heap: list[tuple[float, int, psycopg.Connection[Any]]] = []
        self._live: set[int] = set()
        self._tokens = itertools.count()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._next_look = 0.0  # when the thread looks at the heap next, at the latest

    @contextmanager
    def bounded(self, connection: psycopg.Connection[Any], seconds: float) -> Iterator[None]:
        token = next(self._tokens)
        deadline = time.monotonic() + seconds
        with self._wake:
            heapq.heappush(self._heap, (deadline, token, connection))
            self._live.add(token)
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._watch, name=f"tenure-deadlines-{self.name}")
                self._thread.daemon = True
                self._thread.start()
            elif deadline < self._next_look:
                self._wake.notify()
        try:
            yield
        finally:
            with self._wake:
                self._live.discard(token)

    def cut(self) -> None:
        """Abandon the socket of every call in progress now (a stop that will not wait for it)."""
        with self._wake:
            for _, token, connection in self._heap:
                if token in self._live:
                    abandon(connection)
            self._live.clear()

    def close(self) -> None:
        with self._wake:
            self._closed = True
            self._wake.notify()
        if self._thread is not None:
            self._thread.join()

    def _watch(self) -> None:
        with self._wake:
            while not self._closed:
                while self._heap and self._heap[0][1] not in self._live:
                    heapq.heappop(self._heap)
                now = time.monotonic()
                left = min(self._heap[0][0] - now, self.TICK) if self._heap else self.TICK
                if left > 0:
                    self._next_look = now + left
                    self._wake.wait(left)
                    continue
                _, token, connection = self._heap[0]
                heapq.heappop(self._heap)
                self._live.discard(token)
                log.warning("%s: a call overran its time bound: abandoning its connection", self.name)
                abandon(connection)


class AsyncDeadlines:
    """:class:`Deadlines` for asyncio: a timer on the event loop per call, no thread."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._live: dict[int, tuple[psycopg.BaseConnection[Any], asyncio.Task[Any] | None]] = {}
        self._tokens = itertools.count()

    @contextmanager
    def bounded(self, connection: psycopg.BaseConnection[Any], seconds: float) -> Iterator[None]:
        token = next(self._tokens)
        self._live[token] = (connection, asyncio.current_task())
        timer = asyncio.get_running_loop().call_later(seconds, self._overran, connection)
        try:
            yield
        finally:
            timer.cancel()
            self._live.pop(token, None)

    def cut(self) -> set[asyncio.Task[Any] | None]:
        """Abandon the socket of every call in progress now; the tasks that made them, which
        a stop should not cancel as well: psycopg answers the cancellation of a call with a
        cancel request to the server, and waits up to 10 s for it when the server is away."""
        live, self._live = self._live, {}
        for connection, _ in live.values():
            abandon(connection)
        return {task for _, task in live.values()}

    def _overran(self, connection: psycopg.BaseConnection[Any]) -> None:
        log.warning("%s: a call overran its time bound: abandoning its connection", self.name)
        abandon(connection)


def refuse_transaction_pooling(
    connection: psycopg.Connection[Any], conninfo: str, *, what: str, needs: str, deadline: float = 5.0
) -> None:
    """Raise InvalidConfiguration when ``connection`` goes through a transaction pooler.

    Two connections must reach two server sessions, and one connection always the
    same: a transaction pooler breaks one or the other within a few statements.
    Nothing is set on the session before the check.
    """

    def pid(on: psycopg.Connection[Any]) -> int:
        row = on.execute("SELECT pg_backend_pid()").fetchone()
        assert row is not None
        return int(row[0])

    with connect(conninfo, application_name=f"tenure pooling probe {what}"[:63], deadline=deadline) as probe:
        first = pid(connection)
        for _ in range(3):
            _pooled(first, pid(probe), pid(connection), what=what, needs=needs)


async def arefuse_transaction_pooling(
    connection: psycopg.AsyncConnection[Any], conninfo: str, *, what: str, needs: str, deadline: float = 5.0
) -> None:
    """:func:`refuse_transaction_pooling` for an async connection."""

    async def pid(on: psycopg.AsyncConnection[Any]) -> int:
        row = await (await on.execute("SELECT pg_backend_pid()")).fetchone()
        assert row is not None
        return int(row[0])

    name = f"tenure pooling probe {what}"[:63]
    async with await aconnect(conninfo, application_name=name, deadline=deadline) as probe:
        first = await pid(connection)
        for _ in range(3):
            _pooled(first, await pid(probe), await pid(connection), what=what, needs=needs)


def _pooled(first: int, other: int, again: int, *, what: str, needs: str) -> None:
    """Raise when another connection shares ``first``'s server process, or one connection moved."""
    if other == first or again != first:
        raise InvalidConfiguration(
            f"{what} cannot run through a transaction-pooling proxy: {needs} belongs to a server "
            "session, which other clients share there",
            detail=f"Two connections were served by server process {first}."
            if other == first
            else f"One connection was served by server processes {first} and {again}.",
            hint="Connect it to PostgreSQL directly or through a session-pooling proxy "
            "(pgbouncer pool_mode = session).",
        )


def check_start(conninfo: str, *, application_name: str, listener: str | None) -> None:
    """What a pooled runtime checks before it opens its pool, on one direct connection, so
    that a problem is reported clearly and not as a pool timeout: a pooler that refuses
    tenure's startup options, and, for ``listener`` (a runtime that uses LISTEN), a
    transaction pooler."""
    with connect(conninfo, application_name=application_name, deadline=5.0) as probe:
        if listener is not None:
            refuse_transaction_pooling(probe, conninfo, what=listener, needs="LISTEN")


async def acheck_start(conninfo: str, *, application_name: str, listener: str | None) -> None:
    """:func:`check_start` for asyncio."""
    async with await aconnect(conninfo, application_name=application_name, deadline=5.0) as probe:
        if listener is not None:
            await arefuse_transaction_pooling(probe, conninfo, what=listener, needs="LISTEN")


def listen(
    conninfo: str,
    channel: str,
    *,
    name: str,
    stopping: threading.Event,
    retry: float,
    on_notify: Callable[[str | None], None],
    ping_every: float = 5.0,
) -> None:
    """LISTEN on ``channel`` until ``stopping`` is set, calling ``on_notify`` with each payload.

    ``on_notify(None)`` follows every (re)connection: what was announced while no one
    listened is lost, so the caller should poll then. Notifications only wake early;
    polling remains the truth. Every ``ping_every`` seconds a bounded ping makes sure
    the server still answers: after a failover away from a frozen primary the
    listener moves to the new one.
    """
    deadlines = Deadlines(f"listen {name}")
    bound = max(retry, 1.0)
    try:
        while not stopping.is_set():
            try:
                listener = connect(conninfo, application_name=f"tenure listen {name}", deadline=bound)
                with listener as connection:
                    connection.execute(f"LISTEN {channel}")
                    on_notify(None)
                    pinged = time.monotonic()
                    while not stopping.is_set():
                        for notify in connection.notifies(timeout=0.5):
                            on_notify(notify.payload)
                        if time.monotonic() - pinged >= ping_every:
                            with deadlines.bounded(connection, bound):
                                connection.execute("SELECT 1")
                            pinged = time.monotonic()
            except psycopg.Error as error:
                log.warning("%s: listen failed, polling only until it reconnects: %s", name, error)
                stopping.wait(retry)
    finally:
        deadlines.close()


async def alisten(
    conninfo: str,
    channel: str,
    *,
    name: str,
    retry: float,
    on_notify: Callable[[str | None], None],
    ping_every: float = 5.0,
) -> None:
    """:func:`listen` for asyncio, until the task running it is cancelled: the same
    ``on_notify(None)`` after every (re)connection and the same bounded pings."""
    deadlines = AsyncDeadlines(f"listen {name}")
    bound = max(retry, 1.0)
    while True:
        try:
            listener = await aconnect(conninfo, application_name=f"tenure listen {name}", deadline=bound)
            async with listener as connection:
                await connection.execute(f"LISTEN {channel}")
                on_notify(None)
                while True:
                    async for notify in connection.notifies(timeout=ping_every):
                        on_notify(notify.payload)
                    with deadlines.bounded(connection, bound):
                        await connection.execute("SELECT 1")
        except psycopg.Error as error:
            log.warning("%s: listen failed, polling only until it reconnects: %s", name, error)
            await asyncio.sleep(retry)
