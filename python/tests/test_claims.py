"""Claims in-process: the driver against a real database, and the Claimer runtime.

The runtime tests run twice (``flavour``): against ``Claimer`` and against ``AsyncClaimer``
on an event loop of its own; the tests of ``AsyncClaimer.holding()`` are async only."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from typing import Any

import psycopg
import pytest

from tenure import ClaimLost, Driver, InvalidArgument, InvalidConfiguration
from tenure.aio import AsyncClaimer
from tenure.metrics import Metrics
from tenure.runtime.claims import Claimer, Keys
from tenure.testing.aio import Flavour
from tenure.testing.database import APP_ROLE

CYCLE, EXPIRY = 0.2, 0.7
# Scheduling on a loaded two-core machine adds to the bounds.
SLACK = 0.5


def test_driver_renew_take_release_and_fence(admin: psycopg.Connection[Any], connect: Any) -> None:
    driver = Driver(admin)
    a, b = uuid.uuid4(), uuid.uuid4()
    assert driver.claim_register("ks", [f"k{n}" for n in range(6)]) == 6
    taken = driver.claim_take("ks", a, expiry=30)
    assert [g.change for g in taken] == ["taken"] * 6 and {g.epoch for g in taken} == {1}
    assert driver.claim_take("ks", b, expiry=30) == [], "B is live now, but every key is held"
    renewed = driver.claim_renew("ks", a, expiry=30)
    assert sorted(g.change for g in renewed) == ["released"] * 3 + ["renewed"] * 3, "A gives up its excess"
    assert len(driver.claim_take("ks", b, expiry=30)) == 3
    shares = {i.instance_id: (i.keys_held, i.fair_share) for i in driver.claim_instances("ks")}
    assert shares == {a: (3, 3), b: (3, 3)}
    key = next(g for g in renewed if g.change == "renewed")
    assert key.key is not None and key.epoch is not None
    assert driver.claim_check("ks", a, key.key, key.epoch)
    assert not driver.claim_check("ks", b, key.key, key.epoch)
    with admin.transaction():
        driver.claim_fence("ks", a, key.key, key.epoch)
    with pytest.raises(ClaimLost) as lost:
        driver.claim_fence("ks", b, key.key, key.epoch)
    assert lost.value.sqlstate == "TN103" and "held by" in (lost.value.detail or "")
    assert driver.claim_release("ks", a) == 3
    assert {i.instance_id for i in driver.claim_instances("ks")} == {b}, "A left the keyspace"
    assert len(driver.claim_take("ks", b, expiry=30)) == 3, "B's share grew at once"
    with pytest.raises(InvalidArgument):
        driver.claim_register("ks", [""])
    assert all(row.live for row in driver.claims("ks"))


def test_a_take_is_skipped_while_another_instance_is_taking(
    admin: psycopg.Connection[Any], connect: Any
) -> None:
    driver = Driver(admin)
    driver.claim_register("busy", ["x", "y"])
    other = connect()
    with other.transaction():
        other.execute("SELECT pg_advisory_xact_lock(hashtext('tenure.claim_take'), hashtext('busy'))")
        skipped = driver.claim_take("busy", uuid.uuid4(), expiry=30)
        assert [(g.key, g.change) for g in skipped] == [(None, "busy")]
    assert len(driver.claim_take("busy", uuid.uuid4(), expiry=30)) == 2


def test_claim_cycle_renews_then_takes_in_one_call(admin: psycopg.Connection[Any], connect: Any) -> None:
    driver = Driver(admin)
    driver.claim_register("cyc", [f"k{n}" for n in range(4)])
    a, b = uuid.uuid4(), uuid.uuid4()
    first = driver.claim_cycle("cyc", a, expiry=30)
    assert sorted((g.key, g.epoch, g.change) for g in first) == [(f"k{n}", 1, "taken") for n in range(4)]
    again = driver.claim_cycle("cyc", a, expiry=30)
    assert sorted((g.key, g.epoch, g.change) for g in again) == [(f"k{n}", 1, "renewed") for n in range(4)]
    assert driver.claim_cycle("cyc", b, expiry=30) == [], "B is live now, but every key is held"
    given_up = driver.claim_cycle("cyc", a, expiry=30)
    assert sorted(g.change for g in given_up) == ["released", "released", "renewed", "renewed"]
    other = connect()
    with other.transaction():
        other.execute("SELECT pg_advisory_xact_lock(hashtext('tenure.claim_take'), hashtext('cyc'))")
        assert [(g.key, g.change) for g in driver.claim_cycle("cyc", b, expiry=30)] == [(None, "busy")]
    taken = driver.claim_cycle("cyc", b, expiry=30, limit=1)
    assert [(g.epoch, g.change) for g in taken] == [(2, "taken")]
    assert {(g.change) for g in driver.claim_cycle("cyc", b, expiry=30)} == {"renewed", "taken"}
    with pytest.raises(InvalidArgument, match="p_limit"):
        driver.claim_cycle("cyc", b, expiry=30, limit=0)


def test_configuration_is_checked(flavour: Flavour) -> None:
    with pytest.raises(InvalidConfiguration, match="twice the cycle"):
        flavour(Claimer, "host=/nonexistent", "ks", cycle=1, expiry=2)
    with pytest.raises(InvalidArgument):
        flavour(Claimer, "host=/nonexistent", "", cycle=1, expiry=3)


class Events:
    def __init__(self) -> None:
        self.gained: list[Keys] = []
        self.lost: list[Keys] = []

    def on_gained(self, keys: Keys) -> None:
        self.gained.append(keys)

    def on_lost(self, keys: Keys) -> None:
        self.lost.append(keys)


def test_two_claimers_share_and_one_takes_all_when_the_other_leaves(
    app_conninfo: str, admin: psycopg.Connection[Any], flavour: Flavour
) -> None:
    Driver(admin).claim_register("pair", [f"s{n}" for n in range(20)])
    first_events, second_events = Events(), Events()
    first = flavour(
        Claimer,
        app_conninfo,
        "pair",
        cycle=CYCLE,
        expiry=EXPIRY,
        on_gained=first_events.on_gained,
        on_lost=first_events.on_lost,
    ).start()
    try:
        assert first.wait_for(lambda held: len(held) == 20, 15), "alone, it takes every key"
        with flavour(
            Claimer,
            app_conninfo,
            "pair",
            cycle=CYCLE,
            expiry=EXPIRY,
            on_gained=second_events.on_gained,
            on_lost=second_events.on_lost,
        ) as second:
            assert first.wait_for(lambda held: len(held) == 10, 15)
            assert second.wait_for(lambda held: len(held) == 10, 15)
            assert not set(first.held()) & set(second.held())
            assert sum(len(keys) for keys in first_events.lost) == 10, (
                "the first gave up its excess, and said so"
            )
            first.stop()
            assert second.wait_for(lambda held: len(held) == 20, 15)
    finally:
        first.stop()
    assert Driver(admin).claim_instances("pair") == [], "both left the keyspace on stop"


def test_keys_are_lost_locally_when_renewals_hang(
    app_conninfo: str, admin: psycopg.Connection[Any], connect: Any, flavour: Flavour
) -> None:
    Driver(admin).claim_register("hang", ["a", "b"])
    events = Events()
    lost_all = threading.Event()

    def on_lost(keys: Keys) -> None:
        events.on_lost(keys)
        if len(keys) == 2:
            lost_all.set()

    with flavour(Claimer, app_conninfo, "hang", cycle=CYCLE, expiry=EXPIRY, on_lost=on_lost) as claimer:
        assert claimer.wait_for(lambda held: len(held) == 2, 15)
        blocker = connect()
        with blocker.transaction():
            blocker.execute("SELECT * FROM tenure.claim_instance WHERE keyspace = 'hang' FOR UPDATE")
            assert lost_all.wait(10), "given up at the safe window while the renewal hung"
            assert claimer.held() == {}
        assert claimer.wait_for(lambda held: len(held) == 2, 15), "and back once renewals pass again"


def test_a_renewal_racing_a_takeover_does_not_renew_the_taken_key(
    admin: psycopg.Connection[Any], connect: Any
) -> None:
    """A's claim expired for B's take but not yet for A's renewal, which waits on B's row lock."""
    a, b = uuid.uuid4(), uuid.uuid4()
    admin.execute("SELECT tenure._claim_register('race', ARRAY['k'], '2026-01-01 00:00:00+00')")
    admin.execute("SELECT tenure._claim_take('race', %s, '10 s', NULL, '2026-01-01 00:00:00+00')", (a,))
    taker, renewer = connect(), connect()
    renewed: list[Any] = []
    with taker.transaction():
        row = taker.execute(
            "SELECT key, epoch FROM tenure._claim_take('race', %s, '10 s', NULL, '2026-01-01 00:00:11+00')",
            (b,),
        ).fetchone()
        assert row == ("k", 2)
        racer = threading.Thread(
            target=lambda: renewed.extend(
                renewer.execute(
                    "SELECT key, change FROM tenure._claim_renew('race', %s, '10 s', "
                    "'2026-01-01 00:00:09+00')",
                    (a,),
                ).fetchall()
            )
        )
        racer.start()
        racer.join(0.5)
        assert racer.is_alive(), "the renewal waits on the row the take locked"
    racer.join(10)
    assert renewed == [], "once the take committed, the key is not A's to renew"
    holder = admin.execute("SELECT claimant, epoch FROM tenure.claim_key WHERE keyspace = 'race'").fetchone()
    assert holder == (b, 2)


# -- AsyncClaimer only: holding(), callbacks that are coroutines, cancellation ---------------
# Each runs under asyncio.wait_for(..., 60): a body that holding() never cancels fails, not hangs.


def async_claimer(conninfo: str, keyspace: str, *, expiry: float = EXPIRY, **options: Any) -> AsyncClaimer:
    return AsyncClaimer(conninfo, keyspace, cycle=CYCLE, expiry=expiry, **options)


async def claimer_pids(admin_conninfo: str, claimer: AsyncClaimer) -> list[int]:
    async with await psycopg.AsyncConnection.connect(admin_conninfo, autocommit=True) as admin:
        cursor = await admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (f"tenure {claimer.label}",)
        )
        return [row[0] for row in await cursor.fetchall()]


async def work_until_cancelled(claimer: AsyncClaimer, key: str, epoch: int, after_loss: list[float]) -> None:
    """The body of the loss tests: a step every 10 ms; a step that finds ``key`` no longer held
    in ``epoch`` records when. holding() stops the body at its first await once the key is
    lost, so at most one step (one the event loop had already made ready) sees the loss."""
    while True:
        if claimer.epoch(key) != epoch:
            after_loss.append(time.monotonic())
        await asyncio.sleep(0.01)


def test_holding_runs_the_body_with_the_epoch_and_keeps_the_key(
    app_conninfo: str, admin: psycopg.Connection[Any]
) -> None:
    Driver(admin).claim_register("hold", ["a", "b"])

    async def main() -> None:
        gained: list[Keys] = []

        async def on_gained(keys: Keys) -> None:  # a coroutine function runs as a task of its own
            await asyncio.sleep(0)
            gained.append(keys)

        async with async_claimer(app_conninfo, "hold", on_gained=on_gained) as claimer:
            async with claimer.holding("a", timeout=15) as epoch:
                assert epoch == claimer.epoch("a") == 1
                await asyncio.sleep(3 * CYCLE)  # renewals move the window on: the body runs on
                assert claimer.epoch("a") == epoch
            assert claimer.epoch("a") == epoch, "leaving the block keeps the key"
            assert await claimer.wait_for(lambda held: held == {"a": 1, "b": 1}, 5)
            assert gained and {k: e for keys in gained for k, e in keys.items()} == {"a": 1, "b": 1}
            with pytest.raises(TimeoutError, match="not held"):
                async with claimer.holding("unregistered", timeout=3 * CYCLE):
                    pytest.fail("the body of a key never held ran")
            with pytest.raises(ZeroDivisionError):  # the body's own error passes through
                async with claimer.holding("b", timeout=0):
                    raise ZeroDivisionError
        rows = {row.key: row.claimant for row in Driver(admin).claims("hold")}
        assert rows == {"a": None, "b": None}, "leaving the claimer released every key"

    asyncio.run(asyncio.wait_for(main(), 60))


def test_holding_is_cancelled_when_the_key_is_given_up(
    app_conninfo: str, admin: psycopg.Connection[Any]
) -> None:
    """The key is retired: the next renewal no longer returns it, and the body is cancelled
    then, not at the end of the safe window (a long one here, so that a slow cycle on a
    loaded machine cannot reach it first)."""
    Driver(admin).claim_register("retire", ["k"])

    async def main() -> None:
        after_loss: list[float] = []
        async with async_claimer(app_conninfo, "retire", expiry=3.0) as claimer:
            claimer_window = claimer.safe_window
            with pytest.raises(ClaimLost, match="given up") as lost:
                async with claimer.holding("k", timeout=15) as epoch:
                    Driver(admin).claim_retire("retire", ["k"])
                    retired_at = time.monotonic()
                    await work_until_cancelled(claimer, "k", epoch, after_loss)
            took = time.monotonic() - retired_at
            assert took < claimer_window, f"cancelled {took:.3f} s after the retirement"
            assert len(after_loss) <= 1, f"the body ran on after the loss: {after_loss}"
            assert lost.value.sqlstate == "TN103" and "'k'" in str(lost.value)
            assert claimer.held() == {}

    asyncio.run(asyncio.wait_for(main(), 60))


def test_holding_is_cancelled_at_the_safe_window_when_renewals_hang(
    app_conninfo: str, admin_conninfo: str, admin: psycopg.Connection[Any]
) -> None:
    Driver(admin).claim_register("hold-hang", ["k"])

    async def main() -> None:
        after_loss: list[float] = []
        async with async_claimer(app_conninfo, "hold-hang") as claimer:
            async with await psycopg.AsyncConnection.connect(admin_conninfo) as blocker:
                async with claimer.holding("k", timeout=15) as epoch:
                    pass
                with pytest.raises(ClaimLost, match="safe window"):
                    async with claimer.holding("k", timeout=15) as epoch:
                        await blocker.execute(
                            "SELECT * FROM tenure.claim_instance WHERE keyspace = 'hold-hang' FOR UPDATE"
                        )
                        blocked_at = time.monotonic()
                        await work_until_cancelled(claimer, "k", epoch, after_loss)
                took = time.monotonic() - blocked_at
                # The last renewal that passed was sent at most one cycle before the lock.
                assert took < EXPIRY - CYCLE + SLACK, f"cancelled {took:.3f} s after renewals hung"
                assert len(after_loss) <= 1, f"the body ran on after the loss: {after_loss}"
                assert claimer.held() == {}
                await blocker.rollback()
            async with claimer.holding("k", timeout=15):
                pass  # and held again once renewals pass

    asyncio.run(asyncio.wait_for(main(), 60))


def test_holding_is_cancelled_when_the_claimers_connection_is_killed_and_stays_away(
    app_conninfo: str, admin_conninfo: str, admin: psycopg.Connection[Any]
) -> None:
    """pg_terminate_backend of the claimer's connection, and the role cannot log in again:
    no renewal passes, so the body is cancelled at the end of the safe window."""
    Driver(admin).claim_register("hold-kill", ["k"])

    async def main() -> None:
        after_loss: list[float] = []
        async with async_claimer(app_conninfo, "hold-kill") as claimer:
            with pytest.raises(ClaimLost, match="safe window"):
                async with claimer.holding("k", timeout=15) as epoch:
                    pids = await claimer_pids(admin_conninfo, claimer)
                    assert pids, "the claimer's own connection is found by its application_name"
                    admin.execute(f"ALTER ROLE {APP_ROLE} NOLOGIN")
                    try:
                        admin.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) pid", (pids,))
                        killed_at = time.monotonic()
                        await work_until_cancelled(claimer, "k", epoch, after_loss)
                    finally:
                        admin.execute(f"ALTER ROLE {APP_ROLE} LOGIN")
            took = time.monotonic() - killed_at
            assert took < EXPIRY - CYCLE + SLACK, f"cancelled {took:.3f} s after the kill"
            assert len(after_loss) <= 1, f"the body ran on after the loss: {after_loss}"
            async with claimer.holding("k", timeout=15):
                pass  # back once it can log in again

    asyncio.run(asyncio.wait_for(main(), 60))


def test_cancelling_the_enclosing_task_leaves_the_blocks_and_releases(
    app_conninfo: str, admin: psycopg.Connection[Any]
) -> None:
    Driver(admin).claim_register("cancel", ["a", "b"])

    async def main() -> None:
        inside = asyncio.Event()

        async def service() -> None:
            async with async_claimer(app_conninfo, "cancel") as claimer:
                assert await claimer.wait_for(lambda held: len(held) == 2, 15)
                async with claimer.holding("a", timeout=15):
                    inside.set()
                    await asyncio.sleep(3600)

        task = asyncio.create_task(service())
        await asyncio.wait_for(inside.wait(), 15)
        assert {row.key for row in Driver(admin).claims("cancel") if row.claimant} == {"a", "b"}
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert Driver(admin).claim_instances("cancel") == [], "it left the keyspace"
        assert [row.claimant for row in Driver(admin).claims("cancel")] == [None, None], "and released"

    asyncio.run(asyncio.wait_for(main(), 60))


def test_a_sync_claimer_refuses_a_coroutine_callback_without_stopping(
    app_conninfo: str, admin: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    Driver(admin).claim_register("sync-coro", ["k"])

    async def on_gained(keys: Keys) -> None:
        pytest.fail("never awaited")

    with Claimer(app_conninfo, "sync-coro", cycle=CYCLE, expiry=EXPIRY, on_gained=on_gained) as claimer:
        assert claimer.wait_for(lambda held: held == {"k": 1}, 15)
        time.sleep(2 * CYCLE)
        assert claimer.held() == {"k": 1}, "it holds on"
    assert "only async runtimes run" in caplog.text


def test_a_body_that_cleans_up_after_its_cancellation_does_not_break_the_cycle(
    app_conninfo: str, admin: psycopg.Connection[Any]
) -> None:
    """Cycles go on while a cancelled body still awaits its clean-up: the change they report
    to holding() comes after the cancellation and must not fail them."""
    Driver(admin).claim_register("cleanup", ["k", "other"])
    metrics = Metrics()

    async def main() -> None:
        async with async_claimer(app_conninfo, "cleanup", metrics=metrics) as claimer:
            assert await claimer.wait_for(lambda held: len(held) == 2, 15)
            with pytest.raises(ClaimLost):
                async with claimer.holding("k", timeout=15):
                    try:
                        Driver(admin).claim_retire("cleanup", ["k"])
                        await asyncio.sleep(3600)
                    finally:
                        await asyncio.sleep(5 * CYCLE)  # cycles run meanwhile
            assert claimer.held() == {"other": 1}

    asyncio.run(asyncio.wait_for(main(), 60))
    failures = metrics.registry.get_sample_value(
        "tenure_cycle_failures_total", {"runtime": "claims", "name": "cleanup"}
    )
    assert not failures, "no cycle failed"
