"""Claims with real processes: 300 keys, 3 instances, a 4th joins, one is killed, one
is frozen past its expiry and resumed, one has its connections terminated. Checked from
the database's claim log and the fenced work the instances did: never two claimants of a
key at one instant, no key without a claimant for longer than expiry + one cycle, shares
converging to 1/N. It runs with threaded services (Claimer) and with asyncio ones
(AsyncClaimer, ``--async``)."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg
import pytest

from tenure import Driver
from tenure.errors import ClaimLost
from tenure.testing.claims import ClaimerProcess, check_claim_records
from tenure.testing.database import server_now

CYCLE, EXPIRY = 0.3, 1.0
KEYSPACE, KEYS = "services", 300
# Process scheduling on a loaded two-core machine adds to the bounds.
SLACK = 0.5


@pytest.fixture
def claimers(
    app_conninfo: str, admin: psycopg.Connection[Any], tmp_path: Path
) -> Iterator[list[ClaimerProcess]]:
    spawned: list[ClaimerProcess] = []
    try:
        yield spawned
    finally:
        for process in spawned:
            process.stop()


def began(event: dict[str, Any]) -> float:
    """When the event's write began (its transaction), else when it was reported."""
    return float(event.get("began", event["mono"]))


def shares(driver: Driver) -> dict[UUID, int]:
    return {i.instance_id: i.keys_held for i in driver.claim_instances(KEYSPACE) if i.live}


def converge(driver: Driver, expected: dict[UUID, int], cycles: int) -> None:
    end = time.monotonic() + cycles * CYCLE + SLACK
    while time.monotonic() < end and shares(driver) != expected:
        time.sleep(0.05)
    assert shares(driver) == expected, f"after {cycles} cycles: {shares(driver)}"


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_claims_with_joins_kills_and_freezes(
    claimers: list[ClaimerProcess],
    app_conninfo: str,
    admin: psycopg.Connection[Any],
    tmp_path: Path,
    mode: str,
) -> None:
    driver = Driver(admin)

    def spawn() -> ClaimerProcess:
        process = ClaimerProcess(
            app_conninfo,
            KEYSPACE,
            tmp_path / f"claimer-{len(claimers)}.log",
            cycle=CYCLE,
            expiry=EXPIRY,
            async_mode=mode == "async",
        )
        claimers.append(process)
        return process

    first_three = [spawn() for _ in range(3)]
    time.sleep(2 * CYCLE)  # all three live before the keys appear
    driver.claim_register(KEYSPACE, [f"service-{n:03d}" for n in range(KEYS)])
    converge(driver, {p.instance_id: 100 for p in first_three}, cycles=6)

    fourth = spawn()
    converge(driver, {p.instance_id: 75 for p in claimers}, cycles=8)

    victim = first_three[0]
    victim_keys = [r.key for r in driver.claims(KEYSPACE) if r.claimant == victim.instance_id]
    killed_at = server_now(admin)
    victim.signal(signal.SIGKILL)
    victim.process.wait()
    survivors = [p for p in claimers if p is not victim]
    converge(driver, {p.instance_id: 100 for p in survivors}, cycles=int((EXPIRY + 8 * CYCLE) / CYCLE))
    retaken = admin.execute(
        "SELECT max(claimed_at) FROM tenure.claim_log "
        "WHERE keyspace = %s AND key = ANY(%s) AND claimed_at > %s",
        (KEYSPACE, victim_keys, killed_at),
    ).fetchone()
    assert retaken is not None and retaken[0] is not None
    took = (retaken[0] - killed_at).total_seconds()
    assert took <= EXPIRY + CYCLE + SLACK, (
        f"the last of the killed instance's keys was taken {took:.3f} s later"
    )

    frozen = fourth
    frozen_claim = next(r for r in driver.claims(KEYSPACE) if r.claimant == frozen.instance_id)
    frozen.signal(signal.SIGSTOP)
    others = [p for p in survivors if p is not frozen]
    converge(driver, {p.instance_id: 150 for p in others}, cycles=int((EXPIRY + 8 * CYCLE) / CYCLE))
    # A write the frozen one may still have on its way under a claim it held (it checked
    # the claim, then froze): the fence refuses it now that another instance holds the key.
    with (
        psycopg.connect(app_conninfo, autocommit=True) as stale,
        pytest.raises(ClaimLost),
        stale.transaction(),
    ):
        Driver(stale).claim_fence(KEYSPACE, frozen.instance_id, frozen_claim.key, frozen_claim.epoch)
        stale.execute(
            "INSERT INTO tenure_demo.claim_work (keyspace, key, epoch, instance_id) VALUES (%s, %s, %s, %s)",
            (KEYSPACE, frozen_claim.key, frozen_claim.epoch, frozen.instance_id),
        )
    resumed_at = time.monotonic()
    frozen.signal(signal.SIGCONT)
    converge(driver, {p.instance_id: 100 for p in survivors}, cycles=10)

    # The frozen one learned it had lost its keys before it did any more work.
    # (A write that committed before the freeze may be reported after it: its event says
    # when it began.)
    after = sorted(
        (e for e in frozen.events() if e["event"] in ("lost", "work", "refused") and began(e) >= resumed_at),
        key=began,
    )
    assert after and after[0]["event"] == "lost", f"events after SIGCONT: {after[:5]}"

    # pg_terminate_backend of every connection of one instance (its claim cycle's and its
    # work's): it reconnects, keeps its share and does fenced work again.
    cut = others[0]
    terminated = admin.execute(
        "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
        "WHERE application_name LIKE %s",
        (f"%:{cut.process.pid}",),
    ).fetchone()
    cut_at = time.monotonic()
    assert terminated is not None and terminated[0] >= 2, "its claim and work connections were found"
    converge(driver, {p.instance_id: 100 for p in survivors}, cycles=10)
    end = time.monotonic() + EXPIRY + 10 * CYCLE
    while time.monotonic() < end and not any(
        e["event"] == "work" and e["mono"] > cut_at for e in cut.events()
    ):
        time.sleep(0.05)
    assert any(e["event"] == "work" and e["mono"] > cut_at for e in cut.events()), "it worked again"

    for process in claimers:
        process.stop()
    for process in claimers:
        started = next(e for e in process.events() if e["event"] == "started")
        assert started.get("mode", "sync") == mode, "each service ran in the mode under test"

    work = admin.execute(
        "SELECT count(*) FROM tenure_demo.claim_work WHERE keyspace = %s", (KEYSPACE,)
    ).fetchone()
    assert work is not None and work[0] > 100
    assert check_claim_records(admin, KEYSPACE, max_gap=EXPIRY + CYCLE) == []
