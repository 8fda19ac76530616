"""Claims in-process: the driver against a real database, and the Claimer runtime."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import psycopg
import pytest

from tenure import ClaimLost, Driver, InvalidArgument, InvalidConfiguration
from tenure.runtime.claims import Claimer, Keys

CYCLE, EXPIRY = 0.2, 0.7


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


def test_configuration_is_checked() -> None:
    with pytest.raises(InvalidConfiguration, match="twice the cycle"):
        Claimer("host=/nonexistent", "ks", cycle=1, expiry=2)
    with pytest.raises(InvalidArgument):
        Claimer("host=/nonexistent", "", cycle=1, expiry=3)


class Events:
    def __init__(self) -> None:
        self.gained: list[Keys] = []
        self.lost: list[Keys] = []

    def on_gained(self, keys: Keys) -> None:
        self.gained.append(keys)

    def on_lost(self, keys: Keys) -> None:
        self.lost.append(keys)


def test_two_claimers_share_and_one_takes_all_when_the_other_leaves(
    app_conninfo: str, admin: psycopg.Connection[Any]
) -> None:
    Driver(admin).claim_register("pair", [f"s{n}" for n in range(20)])
    first_events, second_events = Events(), Events()
    first = Claimer(
        app_conninfo,
        "pair",
        cycle=CYCLE,
        expiry=EXPIRY,
        on_gained=first_events.on_gained,
        on_lost=first_events.on_lost,
    ).start()
    try:
        assert first.wait_for(lambda held: len(held) == 20, 15), "alone, it takes every key"
        with Claimer(
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
    app_conninfo: str, admin: psycopg.Connection[Any], connect: Any
) -> None:
    Driver(admin).claim_register("hang", ["a", "b"])
    events = Events()
    lost_all = threading.Event()

    def on_lost(keys: Keys) -> None:
        events.on_lost(keys)
        if len(keys) == 2:
            lost_all.set()

    with Claimer(app_conninfo, "hang", cycle=CYCLE, expiry=EXPIRY, on_lost=on_lost) as claimer:
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
