"""Replicas in process: several sessions against the lock, the ReplicaManager's role
changes (clean stop, pg_terminate_backend, a connection blip through a proxy), the
write guard, the HTTP endpoint and the refusal of a transaction-pooling proxy (a real
pgbouncer in transaction mode). The manager's tests run against ReplicaManager and
AsyncReplicaManager (``flavour``); AsyncReplicaManager's ``active()`` and the
cancellation of the task around it have tests of their own."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from proxy import PausingProxy
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from tenure.aio import AsyncReplicaManager
from tenure.driver import Driver
from tenure.errors import CommitNotConfirmed, InvalidConfiguration, NotPrimary
from tenure.http.replica import ReplicaServer, active_only
from tenure.runtime.replicas import ReplicaManager, ReplicaTiming
from tenure.testing.aio import Flavour
from tenure.testing.pgbouncer import PgBouncer
from tenure.testing.replicas import Answer, ReplicaTerm, ReplicaWrite, check_replica_records

I = 0.2


def wait_for(condition: Callable[[], bool], wait: float = 10.0) -> None:
    end = time.monotonic() + wait
    while time.monotonic() < end:
        if condition():
            return
        time.sleep(0.02)
    raise TimeoutError(f"condition not met within {wait} s")


@pytest.fixture
def managers(app_conninfo: str, flavour: Flavour) -> Iterator[Callable[..., ReplicaManager]]:
    started: list[ReplicaManager] = []

    def start(name: str, conninfo: str | None = None, **options: Any) -> ReplicaManager:
        manager = flavour(ReplicaManager, conninfo or app_conninfo, name=name, interval=I, **options)
        started.append(manager.start())
        return manager

    yield start
    for manager in started:
        manager.stop()


def written(
    flavour: Flavour, manager: ReplicaManager, statement: str, params: tuple[Any, ...] = ()
) -> list[Any]:
    """``statement`` in ``manager.write()`` (``async with`` for the async twin): its rows."""
    if flavour.loop is None:
        with manager.write() as connection:
            cursor = connection.execute(statement, params)
            return cursor.fetchall() if cursor.description else []

    async def on_the_loop() -> list[Any]:
        target: AsyncReplicaManager = manager.target  # type: ignore[attr-defined]
        async with target.write() as connection:
            cursor = await connection.execute(statement, params)
            return await cursor.fetchall() if cursor.description else []

    return flavour.loop.run(on_the_loop())


def test_sessions_see_one_holder(app_conninfo: str, connect: Any) -> None:
    a = Driver(connect(make_conninfo(app_conninfo, application_name="replica a")))
    b = Driver(connect(app_conninfo))
    first = a.replica_acquire("a")
    assert first.acquired and first.epoch == 1
    other = b.replica_acquire("b")
    assert not other.acquired
    assert (other.replica, other.pid, other.since) == ("a", a.backend_pid(), first.since)
    assert a.replica_guard() == 1
    with pytest.raises(NotPrimary) as refused:
        b.replica_guard()
    assert f"held by pid {a.backend_pid()} (replica a, epoch 1)" in (refused.value.detail or "")
    holder = b.replica_holder()
    assert holder is not None
    assert (holder.pid, holder.application_name, holder.replica, holder.epoch) == (
        a.backend_pid(),
        "replica a",
        "a",
        1,
    )
    a_pid = a.backend_pid()
    a.connection.close()  # the session ends, and the lock is free once the server has seen it
    gone = "SELECT NOT EXISTS (SELECT FROM pg_stat_activity WHERE pid = %s)"
    wait_for(lambda: b.connection.execute(gone, (a_pid,)).fetchone() == (True,))
    second = b.replica_acquire("b")
    assert second.acquired and second.epoch == 2
    assert b.replica_guard(epoch=2) == 2


def test_reservation_holds_the_lock_for_its_previous_holder(app_conninfo: str, connect: Any) -> None:
    a = Driver(connect(app_conninfo))
    b = Driver(connect(app_conninfo))
    assert a.replica_acquire("a", reserve=30).acquired
    a_pid = a.connection.info.backend_pid
    a.connection.close()
    # Closing returns before the server ends the session (and frees its advisory lock): until
    # then b would be refused for a live holder, not for the reservation this test is about.
    watcher = connect()
    gone = "SELECT NOT EXISTS (SELECT FROM pg_stat_activity WHERE pid = %s)"
    wait_for(lambda: watcher.execute(gone, (a_pid,)).fetchone() == (True,))
    refused = b.replica_acquire("b", reserve=30)
    assert not refused.acquired and refused.replica == "a" and refused.reserved_until is not None
    again = Driver(connect(app_conninfo)).replica_acquire("a", reserve=30)
    assert again.acquired and again.epoch == 2


def test_manager_fails_over_and_guards_writes(
    managers: Callable[..., ReplicaManager], admin: Any, flavour: Flavour
) -> None:
    admin.execute("CREATE TABLE IF NOT EXISTS tenure_demo.replica_test (replica text, epoch bigint)")
    admin.execute("GRANT INSERT ON tenure_demo.replica_test TO tenure_demo_app")
    events: list[tuple[str, str, object]] = []
    first = managers(
        "first",
        on_active=lambda epoch: events.append(("first", "active", epoch)),
        on_passive=lambda reason: events.append(("first", "passive", reason)),
    )
    assert first.wait_until_active(10)
    second = managers("second")
    wait_for(lambda: second.last_answer is not None)
    assert not second.is_active()

    insert = "INSERT INTO tenure_demo.replica_test VALUES (%s, %s)"
    written(flavour, first, insert, (first.name, first.epoch))
    with pytest.raises(NotPrimary, match="is passive"):
        written(flavour, second, insert, (second.name, 0))
    status = first.status()
    assert status["role"] == "active" and status["lock_id"] == Driver(admin).replica_lock_id()

    # pg_terminate_backend on the lock session: an order to fail over.
    holder = Driver(admin).replica_holder()
    assert holder is not None and holder.replica == first.name
    admin.execute("SELECT pg_terminate_backend(%s)", (holder.pid,))
    assert second.wait_until_active(10)
    wait_for(lambda: not first.is_active())
    assert any(e[:2] == ("first", "passive") and "administrator" in str(e[2]) for e in events)

    # A clean stop releases the lock and drops the reservation: the other takes over.
    second.stop()
    assert first.wait_until_active(5 * I + 2)
    rows = admin.execute("SELECT replica, epoch FROM tenure_demo.replica_test").fetchall()
    assert rows == [(first.name, 1)]


def test_a_write_whose_commit_was_not_confirmed_fails(
    managers: Callable[..., ReplicaManager], flavour: Flavour
) -> None:
    """A write whose commit's wait for the synchronous standby was cancelled (kept by the old
    primary alone, so a failover may lose it) is not acknowledged: write() raises, as every
    runtime transaction does. (A WARNING raised in the transaction stands in for the
    server's, as no standby runs here.) The replica then reclaims its lock."""
    replica = managers("unconfirmed")
    assert replica.wait_until_active(10)
    cancelled = (
        "DO $$ BEGIN RAISE WARNING 'canceling wait for synchronous replication due to user request'; END $$"
    )
    with pytest.raises(CommitNotConfirmed):
        written(flavour, replica, cancelled)
    assert replica.wait_until_active(10)


def test_blip_shorter_than_grace_keeps_the_replica_active(
    managers: Callable[..., ReplicaManager], app_conninfo: str, admin: Any
) -> None:
    params = conninfo_to_dict(app_conninfo)
    with PausingProxy(str(params["host"]), int(str(params["port"]))) as proxy:
        through_proxy = make_conninfo(app_conninfo, host="127.0.0.1", port=proxy.port)
        first = managers("first", through_proxy, grace=1.0)
        assert first.wait_until_active(10)
        epoch = first.epoch
        second = managers("second", grace=1.0)
        wait_for(lambda: second.last_answer is not None)
        for _ in range(3):
            proxy.reset()
            wait_for(lambda: not first.is_active(), wait=3)
            assert first.wait_until_active(3), "the replica reclaims its lock within the grace period"
            assert not second.is_active()
    terms = admin.execute("SELECT epoch, replica FROM tenure.replica_term ORDER BY epoch").fetchall()
    assert [replica for _, replica in terms] == [first.name] * 4
    assert terms[-1][0] > (epoch or 0)


def test_health_endpoint_and_passive_rejection(managers: Callable[..., ReplicaManager]) -> None:
    first = managers("first")
    assert first.wait_until_active(10)
    second = managers("second")

    def servers(manager: ReplicaManager) -> ReplicaServer:
        @active_only(manager)
        def hello(request: dict[str, Any]) -> tuple[int, dict[str, Any]]:
            return 200, {"hello": request.get("name"), "epoch": manager.epoch}

        return ReplicaServer(manager, routes={("POST", "/hello"): hello}).start()

    one, two = servers(first), servers(second)
    try:

        def get(url: str, data: bytes | None = None) -> tuple[int, dict[str, Any]]:
            try:
                with urllib.request.urlopen(url, data=data, timeout=5) as response:
                    return response.status, json.loads(response.read())
            except urllib.error.HTTPError as error:
                return error.code, json.loads(error.read())

        status, body = get(one.url + "/health/active")
        assert status == 200 and body["role"] == "active" and body["epoch"] == first.epoch
        assert body["lock_id"] == first.lock_id and body["in_role_s"] >= 0
        status, body = get(two.url + "/health/active")
        assert status == 503 and body["role"] == "passive"
        assert get(two.url + "/health/live")[0] == 200
        assert get(one.url + "/hello", b'{"name": "x"}') == (200, {"hello": "x", "epoch": first.epoch})
        status, body = get(two.url + "/hello", b'{"name": "x"}')
        assert status == 503 and "is passive" in body["error"]
        assert get(one.url + "/nowhere")[0] == 404
    finally:
        one.stop()
        two.stop()


def test_timing_is_checked() -> None:
    with pytest.raises(InvalidConfiguration, match="twice the interval"):
        ReplicaTiming(interval=1, idle_timeout=2, grace=1)
    with pytest.raises(InvalidConfiguration, match="positive"):
        ReplicaTiming(interval=0, idle_timeout=2, grace=1)
    assert ReplicaTiming(interval=0.5, idle_timeout=1.5, grace=2).reserve == 3.0
    assert ReplicaTiming(interval=0.5, idle_timeout=1.5, grace=0).reserve is None


@pytest.fixture
def pgbouncer(app_conninfo: str) -> Iterator[Callable[[str], str]]:
    """Start pgbouncer (Debian's) in a pool mode in front of the test database; returns a conninfo."""
    params = conninfo_to_dict(app_conninfo)
    with contextlib.ExitStack() as started:

        def start(mode: str) -> str:
            bouncer = started.enter_context(
                PgBouncer(
                    upstream_host=str(params["host"]),
                    upstream_port=int(str(params["port"])),
                    users=[str(params["user"])],
                    pool_mode=mode,
                    default_pool_size=4,
                    ignore_startup_parameters="extra_float_digits,options,statement_timeout,"
                    "idle_in_transaction_session_timeout,idle_session_timeout",
                )
            )
            return bouncer.conninfo(str(params["dbname"]), user=str(params["user"]))

        yield start


@pytest.mark.usefixtures("needs_pgbouncer")
def test_transaction_pooling_is_refused(pgbouncer: Callable[[str], str], flavour: Flavour) -> None:
    pooled = pgbouncer("transaction")
    # What goes wrong without the check: once a's transaction ends, its server session
    # (holding a's lock) goes back to the pool and b's next transaction runs in it, so
    # b passes the write guard of a lock it never acquired.
    with psycopg.connect(pooled, autocommit=True) as a, psycopg.connect(pooled, autocommit=True) as b:
        assert Driver(a).replica_acquire("a").acquired
        assert Driver(b).replica_guard() == 1
    manager = flavour(ReplicaManager, pooled, name="pooled", interval=I)
    with pytest.raises(InvalidConfiguration, match="transaction-pooling proxy"):
        manager.start()
    # (The transaction pool still holds a's lock in a server session nobody uses: another scope.)
    session = flavour(ReplicaManager, pgbouncer("session"), name="session-pooled", scope="s", interval=I)
    session.start()
    try:
        assert session.wait_until_active(10)
        shown = written(flavour, session, "SHOW idle_session_timeout")
        assert shown == [("600ms",)], "set even though pgbouncer dropped the startup options"
    finally:
        session.stop()


def test_record_checker_finds_overlapping_writes() -> None:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)

    def at(seconds: float) -> datetime:
        return t0 + timedelta(seconds=seconds)

    terms = [ReplicaTerm(1, "a", 10, at(0)), ReplicaTerm(2, "b", 20, at(5))]
    good = [ReplicaWrite("w1", "a", 1, 10, at(1)), ReplicaWrite("w2", "b", 2, 20, at(6))]
    assert check_replica_records(terms, good) == []
    late = [*good, ReplicaWrite("w3", "a", 1, 10, at(5.5))]  # a still writing after b acquired
    assert any("falls outside its term" in p for p in check_replica_records(terms, late))
    foreign = [ReplicaWrite("w4", "a", 2, 10, at(6))]  # a write in b's epoch from a's session
    assert any("in epoch 2 of b" in p for p in check_replica_records(terms, foreign))
    accepted = [Answer(0, 0, 200, "w9", "a", 1)]  # answered 200 but never recorded
    assert any("not recorded" in p for p in check_replica_records(terms, good, accepted))
    gap = [ReplicaTerm(1, "a", 10, at(0)), ReplicaTerm(3, "b", 20, at(5))]
    assert any("epochs are not" in p for p in check_replica_records(gap, []))


# -- AsyncReplicaManager only: active() and the cancellation of the enclosing task ---------


def test_active_block_runs_only_while_active(app_conninfo: str, admin: Any) -> None:
    """The body of ``active()`` runs in the epoch it was given; when the lock session is
    ended, the body is cancelled at once and NotPrimary raised in its place; a passive
    replica's ``active()`` waits, then times out."""
    admin.execute("CREATE TABLE IF NOT EXISTS tenure_demo.replica_test (replica text, epoch bigint)")
    admin.execute("GRANT INSERT ON tenure_demo.replica_test TO tenure_demo_app")
    reached: list[str] = []

    async def scenario() -> None:
        async with (
            AsyncReplicaManager(app_conninfo, name="first", interval=I) as first,
            AsyncReplicaManager(app_conninfo, name="second", interval=I) as second,
        ):
            async with first.active(timeout=10) as epoch:
                assert epoch == first.epoch == 1
                async with first.write() as connection:
                    await connection.execute(
                        "INSERT INTO tenure_demo.replica_test VALUES (%s, %s)", (first.name, epoch)
                    )
            with pytest.raises(TimeoutError):
                async with second.active(timeout=3 * I):
                    reached.append("second active while first holds the lock")
            with pytest.raises(NotPrimary, match="no longer active in epoch 1"):
                async with first.active(timeout=10):
                    holder = Driver(admin).replica_holder()
                    assert holder is not None and holder.replica == first.name
                    admin.execute("SELECT pg_terminate_backend(%s)", (holder.pid,))
                    await asyncio.sleep(10 * I)  # the body is cancelled here
                    reached.append("first ran on after its lock session ended")
            async with second.active(timeout=10) as epoch:
                assert epoch == 2 and not first.is_active()

    asyncio.run(scenario())
    assert reached == []
    rows = admin.execute("SELECT replica, epoch FROM tenure_demo.replica_test").fetchall()
    assert [epoch for _, epoch in rows] == [1]


def test_cancelling_the_enclosing_task_releases_the_lock(app_conninfo: str, admin: Any) -> None:
    """Cancelling the task that runs ``async with manager:`` leaves the block: the lock is
    released and the reservation dropped, so another replica acquires at its next try."""

    async def scenario() -> float:
        active = asyncio.Event()

        async def service() -> None:
            manager = AsyncReplicaManager(app_conninfo, name="leaving", interval=I, grace=30)
            async with manager, manager.active(timeout=10):
                active.set()
                await asyncio.Event().wait()  # serves until cancelled

        task = asyncio.create_task(service())
        await asyncio.wait_for(active.wait(), 10)
        async with AsyncReplicaManager(app_conninfo, name="next", interval=I, grace=30) as successor:
            assert not await successor.wait_until_active(3 * I)
            cancelled = time.monotonic()
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            assert await successor.wait_until_active(10)
            return time.monotonic() - cancelled

    took = asyncio.run(scenario())
    # Without the release, the reservation (grace 30 s + 2 intervals) would have kept it out.
    assert took < 30
    holder = Driver(admin).replica_holder()
    assert holder is None or holder.replica != "leaving"


def test_a_cancelled_write_rolls_back_and_keeps_the_lock(app_conninfo: str, admin: Any) -> None:
    """Cancelling a task in the middle of ``async with manager.write()`` rolls its transaction
    back; the lock connection stays usable, so the replica stays active in the same epoch."""
    admin.execute("CREATE TABLE IF NOT EXISTS tenure_demo.replica_test (replica text, epoch bigint)")
    admin.execute("GRANT INSERT ON tenure_demo.replica_test TO tenure_demo_app")
    insert = "INSERT INTO tenure_demo.replica_test VALUES (%s, %s)"

    async def scenario() -> None:
        async with AsyncReplicaManager(app_conninfo, name="writer", interval=I) as manager:
            assert await manager.wait_until_active(10)
            epoch = manager.epoch
            started = asyncio.Event()

            async def slow_write() -> None:
                async with manager.write() as connection:
                    await connection.execute(insert, ("cancelled", epoch))
                    started.set()
                    await connection.execute("SELECT pg_sleep(30)")

            task = asyncio.create_task(slow_write())
            await asyncio.wait_for(started.wait(), 10)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await asyncio.sleep(5 * I)  # pings go on, on the same session
            assert manager.epoch == epoch
            async with manager.write() as connection:
                await connection.execute(insert, ("kept", epoch))

    asyncio.run(scenario())
    rows = admin.execute("SELECT replica, epoch FROM tenure_demo.replica_test").fetchall()
    assert rows == [("kept", 1)]
