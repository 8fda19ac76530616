"""The submission queue through the driver: order, modes, resolution and fencing."""

from __future__ import annotations

import time
import uuid
from typing import Any

import psycopg
import pytest

from tenure import ClaimLost, Driver
from tenure.driver import Resolution
from tenure.errors import InvalidTransition
from tenure.runtime.batches import SubmissionPool
from tenure.testing.ledger import SimulatedLedger


def test_serial_queue_through_the_driver(admin: psycopg.Connection[Any]) -> None:
    driver = Driver(admin)
    me, other = uuid.uuid4(), uuid.uuid4()
    driver.batch_configure("ledger", mode="serial")
    first = driver.batch_enqueue("ledger", "po-1", b"price 2.75")
    many = driver.batch_enqueue_many(
        "ledger", [{"key": "po-1", "payload": b"price 3.00"}, {"key": "po-1", "payload": b"price 3.25"}]
    )
    assert [first.seq, *(m.seq for m in many)] == [1, 2, 3]
    assert driver.claim_take("ledger", me, expiry=60)
    (grant,) = driver.batch_select("ledger", me, limit=8)
    assert (grant.key, grant.seq, grant.payload, grant.round) == ("po-1", 1, b"price 2.75", 1)
    assert driver.batch_select("ledger", me, limit=8) == [], "serial: the next waits for the commit"
    assert [p.id for p in driver.batch_pending("ledger", me)] == [grant.id]
    with pytest.raises(ClaimLost):
        driver.batch_resolve("ledger", other, grant.id, grant.claim_epoch, "committed")
    assert driver.batch_resolve("ledger", me, grant.id, grant.claim_epoch, "committed") == "committed"
    with pytest.raises(InvalidTransition):
        driver.batch_resolve("ledger", me, grant.id, grant.claim_epoch, "invalid")
    (second,) = driver.batch_select("ledger", me, limit=8)
    assert second.seq == 2
    driver.batch_resolve("ledger", me, second.id, second.claim_epoch, "unknown")
    (again,) = driver.batch_select("ledger", me, limit=8)
    assert (again.id, again.attempts) == (second.id, 2), "an unknown batch goes again before later ones"
    (row,) = driver.batch_keys("ledger")
    assert (row.key, row.mode, row.pending, row.queued, row.committed, row.halted) == (
        "po-1",
        "serial",
        1,
        1,
        1,
        False,
    )


def test_resolve_many_is_all_or_none(admin: psycopg.Connection[Any]) -> None:
    driver = Driver(admin)
    me = uuid.uuid4()
    driver.batch_configure("many", mode="unconstrained")
    driver.batch_enqueue_many("many", [{"key": k, "payload": b"x"} for k in ("a", "a", "b")])
    driver.claim_take("many", me, expiry=60)
    grants = driver.batch_select("many", me, limit=8, depth=2)
    assert sorted((g.key, g.seq) for g in grants) == [("a", 1), ("a", 2), ("b", 1)]
    stale = [Resolution(g.id, g.claim_epoch + (g.key == "b"), "committed") for g in grants]
    with pytest.raises(ClaimLost):
        driver.batch_resolve_many("many", me, stale)
    assert len(driver.batch_pending("many", me)) == 3, "nothing was resolved"
    outcomes = [Resolution(g.id, g.claim_epoch, "invalid" if g.key == "b" else "committed") for g in grants]
    assert driver.batch_resolve_many("many", me, outcomes) == 3
    assert {(r.key, r.committed, r.invalid) for r in driver.batch_keys("many")} == {("a", 2, 0), ("b", 0, 1)}


def wait_until(condition: Any, timeout: float = 30.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.05)
    return bool(condition())


def committed(driver: Driver, keyspace: str) -> int:
    return sum(row.committed for row in driver.batch_keys(keyspace))


@pytest.mark.parametrize(
    ("mode", "keeps_order", "depth"),
    [("unconstrained", True, 3), ("serial", False, 1), ("serial", True, 2)],
)
def test_pool_delivers_every_key_in_order(
    app_conninfo: str, admin: psycopg.Connection[Any], mode: str, keeps_order: bool, depth: int
) -> None:
    driver = Driver(admin)
    driver.batch_configure("orders", mode=mode)
    keys, per_key = 5, 12
    driver.batch_enqueue_many(
        "orders",
        [{"key": f"po-{k}", "payload": f"{k}:{n}".encode()} for n in range(per_key) for k in range(keys)],
    )
    ledger = SimulatedLedger(keeps_order=keeps_order, max_delay=0.02)
    with SubmissionPool(
        app_conninfo,
        "orders",
        submit=ledger.submit,
        status=ledger.status,
        submitters=4,
        depth=depth,
        cycle=0.2,
        expiry=0.7,
        poll_interval=0.05,
    ):
        assert wait_until(lambda: committed(driver, "orders") == keys * per_key)
    for k in range(keys):
        assert ledger.applied[f"po-{k}"] == [f"{k}:{n}".encode() for n in range(per_key)], (
            f"po-{k} out of order"
        )


def test_an_invalid_batch_halts_its_key_until_skipped(
    app_conninfo: str, admin: psycopg.Connection[Any]
) -> None:
    driver = Driver(admin)
    driver.batch_configure("halt", mode="serial")
    driver.batch_enqueue_many("halt", [{"key": "po", "payload": p} for p in (b"2.75", b"bad", b"3.25")])
    ledger = SimulatedLedger(invalid=lambda payload: payload == b"bad")
    with SubmissionPool(
        app_conninfo,
        "halt",
        submit=ledger.submit,
        status=ledger.status,
        submitters=2,
        cycle=0.2,
        expiry=0.7,
        poll_interval=0.05,
    ):
        assert wait_until(lambda: driver.batch_keys("halt")[0].halted)
        time.sleep(0.5)
        assert ledger.applied["po"] == [b"2.75"], "nothing after the invalid batch while the key is halted"
        (bad,) = [b for b in admin.execute("SELECT id FROM tenure.batch WHERE status = 'invalid'").fetchall()]
        assert driver.batch_skip("halt", bad[0])
        assert wait_until(lambda: ledger.state().get("po") == b"3.25")
    assert ledger.applied["po"] == [b"2.75", b"3.25"]
