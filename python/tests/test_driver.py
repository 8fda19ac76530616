"""The driver against a real database: rows, exceptions, fencing, races, privileges."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest

from tenure import (
    CommitNotConfirmed,
    Driver,
    InvalidArgument,
    InvalidConfiguration,
    NotPrimary,
    PrimaryEntry,
    TenureError,
)
from tenure.aio import AsyncDriver
from tenure.connect import aconnect, adurable_transaction, durable_transaction
from tenure.connect import connect as tenure_connect
from tenure.driver import _scalar
from tenure.testing.aio import Blocking, Flavour


@pytest.fixture
def driver(flavour: Flavour, admin: psycopg.Connection[Any], admin_conninfo: str) -> Iterator[Driver]:
    """A Driver on an autocommit connection, or a blocking view of an AsyncDriver on one."""
    if flavour.loop is None:
        yield Driver(admin)
        return
    connection = flavour.loop.run(psycopg.AsyncConnection.connect(admin_conninfo, autocommit=True))
    yield Blocking(AsyncDriver(connection), flavour.loop)  # type: ignore[misc]
    flavour.loop.run(connection.close())


def test_update_heartbeat_elects_the_first_and_names_it_to_the_others(driver: Driver) -> None:
    a, b = uuid.uuid4(), uuid.uuid4()
    won = driver.update_heartbeat(a, "sched", timeout=3, interval=1)
    assert isinstance(won, PrimaryEntry)
    assert (won.instance_id, won.term, won.utype) == (a, 1, "sched")
    assert isinstance(won.renewed_at, datetime)
    assert won.valid_until - won.renewed_at == timedelta(seconds=3)
    lost = driver.update_heartbeat(b, "sched", timeout=timedelta(seconds=3))
    assert (lost.instance_id, lost.term) == (a, 1)
    assert driver.get_primary("sched") == driver.get_primary("sched")
    primary = driver.get_primary("sched")
    assert primary is not None and primary.instance_id == a
    assert driver.check_primary(a, "sched") is True
    assert driver.check_primary(b, "sched") is False
    assert driver.get_primary("nobody") is None


def test_resign_hands_over_at_once(driver: Driver) -> None:
    a, b = uuid.uuid4(), uuid.uuid4()
    driver.update_heartbeat(a, "sched", timeout=60)
    assert driver.heartbeat_resign(b, "sched") is False
    assert driver.heartbeat_resign(a, "sched") is True
    assert driver.get_primary("sched") is None
    taken = driver.update_heartbeat(b, "sched", timeout=60)
    assert (taken.instance_id, taken.term) == (b, 2)
    status = {row.utype: row for row in driver.heartbeat_status()}
    assert status["sched"].live and status["sched"].instance_id == b and status["sched"].term == 2


def test_sqlstates_become_tenure_exceptions_with_detail_and_hint(driver: Driver) -> None:
    with pytest.raises(InvalidArgument) as empty:
        driver.update_heartbeat(uuid.uuid4(), "", timeout=3)
    assert isinstance(empty.value, ValueError)
    assert "p_utype" in empty.value.message
    assert empty.value.detail == "p_utype was ''."
    assert empty.value.hint is not None and "Nothing was changed" in empty.value.hint
    with pytest.raises(InvalidConfiguration) as config:
        driver.update_heartbeat(uuid.uuid4(), "sched", timeout=2, interval=1)
    assert config.value.sqlstate == "TN002"
    assert "twice p_interval" in str(config.value)
    with pytest.raises(NotPrimary) as fence:
        driver.heartbeat_fence(uuid.uuid4(), "sched", 1)
    assert fence.value.sqlstate == "TN101"
    assert "has no entry" in (fence.value.detail or "")
    assert driver.heartbeat_status() == []


def test_other_errors_pass_through_unchanged(driver: Driver) -> None:
    with pytest.raises(psycopg.errors.UndefinedTable) as raised:
        driver.run(_scalar("SELECT * FROM no_such_table", ()))
    assert not isinstance(raised.value, TenureError)


def test_fence_guards_the_applications_own_transaction(admin: psycopg.Connection[Any]) -> None:
    admin.execute("CREATE TABLE ledger (term bigint, at timestamptz DEFAULT clock_timestamp())")
    driver = Driver(admin)
    me = uuid.uuid4()
    term = driver.update_heartbeat(me, "writer", timeout=60).term
    with admin.transaction():
        driver.heartbeat_fence(me, "writer", term)
        admin.execute("INSERT INTO ledger (term) VALUES (%s)", (term,))
    with pytest.raises(NotPrimary), admin.transaction():
        admin.execute("INSERT INTO ledger (term) VALUES (%s)", (term - 1,))
        driver.heartbeat_fence(me, "writer", term - 1 if term > 1 else term + 1)
    rows = admin.execute("SELECT term FROM ledger").fetchall()
    assert rows == [(term,)], "the write of the refused transaction was rolled back"


def test_async_fence_guards_the_applications_own_transaction(admin_conninfo: str) -> None:
    async def main() -> list[tuple[int]]:
        async with await psycopg.AsyncConnection.connect(admin_conninfo, autocommit=True) as connection:
            driver = AsyncDriver(connection)
            await connection.execute("CREATE TABLE ledger (term bigint)")
            me = uuid.uuid4()
            term = (await driver.update_heartbeat(me, "writer", timeout=60)).term
            async with connection.transaction():
                await driver.heartbeat_fence(me, "writer", term)
                await connection.execute("INSERT INTO ledger (term) VALUES (%s)", (term,))
            with pytest.raises(NotPrimary):
                async with connection.transaction():
                    await connection.execute("INSERT INTO ledger (term) VALUES (%s)", (term + 1,))
                    await driver.heartbeat_fence(me, "writer", term + 1)
            cursor = await connection.execute("SELECT term FROM ledger")
            return await cursor.fetchall()

    assert asyncio.run(main()) == [(1,)], "the write of the refused transaction was rolled back"


# What the server says when a commit's wait for a synchronous standby was cancelled; a WARNING
# raised in the transaction stands in for it, as no standby runs here.
_CANCELLED_WAIT = (
    "DO $$ BEGIN RAISE WARNING 'canceling wait for synchronous replication due to user request'; END $$"
)


def test_a_durable_transaction_refuses_a_commit_the_server_could_not_confirm(admin_conninfo: str) -> None:
    with tenure_connect(admin_conninfo, application_name="durable", deadline=5) as connection:
        with durable_transaction(connection):
            connection.execute("SELECT 1")
        with pytest.raises(CommitNotConfirmed), durable_transaction(connection):
            connection.execute(_CANCELLED_WAIT)
        assert connection.closed, "a connection whose commit was not confirmed is closed"


def test_an_async_durable_transaction_refuses_a_commit_the_server_could_not_confirm(
    admin_conninfo: str,
) -> None:
    async def main() -> bool:
        async with await aconnect(admin_conninfo, application_name="durable", deadline=5) as connection:
            async with adurable_transaction(connection):
                await connection.execute("SELECT 1")
            with pytest.raises(CommitNotConfirmed):
                async with adurable_transaction(connection):
                    await connection.execute(_CANCELLED_WAIT)
            return connection.closed

    assert asyncio.run(main()), "a connection whose commit was not confirmed is closed"


def test_a_fenced_transaction_holds_off_takeover_until_it_ends(
    admin: psycopg.Connection[Any], connect: Any
) -> None:
    """A takeover that waits on a fenced write starts its term after that write, by the server clock."""
    admin.execute("CREATE TABLE ledger (at timestamptz DEFAULT clock_timestamp())")
    holder, bidder = uuid.uuid4(), uuid.uuid4()
    fenced = connect()
    term = Driver(fenced).update_heartbeat(holder, "writer", timeout=0.3).term
    results: list[PrimaryEntry] = []
    with fenced.transaction():
        Driver(fenced).heartbeat_fence(holder, "writer", term)
        time.sleep(0.5)  # the holder's entry expires while its transaction is open
        bid = threading.Thread(
            target=lambda: results.append(Driver(connect()).update_heartbeat(bidder, "writer", timeout=0.3))
        )
        bid.start()
        time.sleep(0.3)
        assert results == [], "the takeover waited for the fenced transaction"
        fenced.execute("INSERT INTO ledger DEFAULT VALUES")
    bid.join(10)
    assert results and (results[0].instance_id, results[0].term) == (bidder, term + 1)
    row = admin.execute(
        "SELECT (SELECT max(at) FROM ledger) < (SELECT started_at FROM tenure.heartbeat_term "
        "WHERE utype = 'writer' AND term = %s)",
        (term + 1,),
    ).fetchone()
    assert row == (True,)


def bid(
    barrier: threading.Barrier,
    answers: list[PrimaryEntry],
    connection: psycopg.Connection[Any],
    me: uuid.UUID,
    utype: str,
) -> None:
    barrier.wait()
    answers.append(Driver(connection).update_heartbeat(me, utype, timeout=30))


@pytest.mark.parametrize("rounds", [25])
def test_concurrent_bids_elect_exactly_one(admin: psycopg.Connection[Any], connect: Any, rounds: int) -> None:
    """Racing first bids and racing takeovers of an expired entry: one winner, one term each."""
    bidders = 6
    connections = [connect() for _ in range(bidders)]
    for round_ in range(rounds):
        utype = f"race-{round_}"
        if round_ % 2:
            # An expired entry held by someone gone: the bids race to take it over.
            admin.execute(
                "SELECT tenure._update_heartbeat(gen_random_uuid(), %s, '1 s', NULL, "
                "now() - interval '1 minute')",
                (utype,),
            )
        ids = [uuid.uuid4() for _ in range(bidders)]
        barrier = threading.Barrier(bidders)
        answers: list[PrimaryEntry] = []

        threads = [
            threading.Thread(target=bid, args=(barrier, answers, c, i, utype))
            for c, i in zip(connections, ids, strict=True)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        winners = {(a.instance_id, a.term) for a in answers}
        assert len(winners) == 1, f"round {round_}: every bidder learns the same single winner"
        ((winner, term),) = winners
        assert winner in ids and term == 1 + round_ % 2
        terms = admin.execute(
            "SELECT count(*) FROM tenure.heartbeat_term WHERE utype = %s", (utype,)
        ).fetchone()
        assert terms == (term,), "exactly one new term per race"


def test_worker_role_may_only_call_functions_and_read_the_view(app_conninfo: str, connect: Any) -> None:
    app = connect(app_conninfo)
    driver = Driver(app)
    me = uuid.uuid4()
    assert driver.update_heartbeat(me, "app", timeout=5).instance_id == me
    assert [row.utype for row in driver.heartbeat_status()] == ["app"]
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        app.execute("SELECT * FROM tenure.heartbeat")
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        app.execute("UPDATE tenure.heartbeat SET term = term + 1")
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        app.execute("SELECT tenure._update_heartbeat(gen_random_uuid(), 'app', '5 s', NULL, now())")


def test_the_primarys_own_renewal_is_not_held_up_by_its_fenced_writes(connect: Any) -> None:
    me = uuid.uuid4()
    fenced, renewing = connect(), connect()
    renewing.execute("SET statement_timeout = '5s'")
    term = Driver(fenced).update_heartbeat(me, "writer", timeout=60).term
    with fenced.transaction():
        Driver(fenced).heartbeat_fence(me, "writer", term)
        renewed = Driver(renewing).update_heartbeat(me, "writer", timeout=60)
        assert (renewed.instance_id, renewed.term) == (me, term)
