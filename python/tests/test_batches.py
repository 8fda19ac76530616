"""The submission queue through the driver: order, modes, resolution and fencing."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest

from tenure import ClaimLost, Driver
from tenure.errors import InvalidTransition


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
