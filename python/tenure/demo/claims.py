"""The claims part of ``tenure demo``: three instances of the claim-holding demo
service (``tenure.testing.claims``) share twelve keys, each doing fenced work on the
keys it holds; one is killed with SIGKILL and the others take its keys once its
claims expire. The claim log and the fenced work are checked against each other and
drawn as a timeline, one row per key.
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path
from typing import IO
from uuid import UUID

import psycopg

from tenure.driver import Driver
from tenure.testing import plots
from tenure.testing.claims import ClaimerProcess, check_claim_records, read_claim_spans
from tenure.testing.database import retire_keyspace, server_now, setup

KEYSPACE, KEYS, CYCLE, EXPIRY = "demo-services", 12, 0.5, 1.5


def _shares(driver: Driver) -> dict[UUID, int]:
    return {i.instance_id: i.keys_held for i in driver.claim_instances(KEYSPACE) if i.live}


def _wait_for_shares(driver: Driver, expected: dict[UUID, int], wait: float = 30.0) -> None:
    end = time.monotonic() + wait
    while _shares(driver) != expected:
        if time.monotonic() > end:
            raise TimeoutError(f"shares {_shares(driver)} did not reach {expected} within {wait} s")
        time.sleep(0.05)


def run_claims_demo(admin_conninfo: str, *, workdir: Path, out: IO[str] | None = None) -> bool:
    """Three claimers, twelve keys, one claimer killed; True when every check held."""
    out = out or sys.stdout
    app_conninfo = setup(admin_conninfo)
    admin = psycopg.connect(admin_conninfo, autocommit=True)
    driver = Driver(admin)
    retire_keyspace(admin, KEYSPACE)  # a demo run before this one
    print(
        f"\ntenure demo, claims: 3 instances share {KEYS} keys of {KEYSPACE!r}, renew-and-take every "
        f"{CYCLE} s, claims expire after {EXPIRY} s; each does fenced work on the keys it holds",
        file=out,
    )
    claimers = [
        ClaimerProcess(app_conninfo, KEYSPACE, workdir / f"claimer-{n}.log", cycle=CYCLE, expiry=EXPIRY)
        for n in (1, 2, 3)
    ]
    names = {c.instance_id: f"claimer-{n}" for n, c in enumerate(claimers, start=1)}
    try:
        time.sleep(2 * CYCLE)  # all three live before the keys appear, so no one grabs them all
        driver.claim_register(KEYSPACE, [f"service-{n:02d}" for n in range(1, KEYS + 1)])
        _wait_for_shares(driver, {c.instance_id: KEYS // 3 for c in claimers})
        print(f"  each holds {KEYS // 3} keys; letting them work for 2 s", file=out)
        time.sleep(2)
        victim, survivors = claimers[0], claimers[1:]
        victim_keys = [r.key for r in driver.claims(KEYSPACE) if r.claimant == victim.instance_id]
        killed_at = server_now(admin)
        victim.signal(signal.SIGKILL)
        print(f"  SIGKILL {names[victim.instance_id]}, holder of {', '.join(victim_keys)}", file=out)
        _wait_for_shares(driver, {c.instance_id: KEYS // 2 for c in survivors})
        spans = read_claim_spans(admin, KEYSPACE)
        retaken = max(s.claimed_at for s in spans if s.key in victim_keys and s.claimed_at > killed_at)
        took = (retaken - killed_at).total_seconds()
        bound = EXPIRY + CYCLE
        print(
            f"  the survivors hold {KEYS // 2} keys each; the last of the killed instance's keys was "
            f"taken {took:.3f} s after the kill (bound expiry + cycle = {bound:.3f} s: "
            f"{'within' if took <= bound else 'OVER'})",
            file=out,
        )
        time.sleep(1)
    finally:
        for claimer in claimers:
            claimer.stop()
    spans = read_claim_spans(admin, KEYSPACE)
    problems = check_claim_records(admin, KEYSPACE, max_gap=EXPIRY + CYCLE)
    work = admin.execute(
        "SELECT count(*) FROM tenure_demo.claim_work WHERE keyspace = %s", (KEYSPACE,)
    ).fetchone()
    end = server_now(admin)
    admin.close()
    for problem in problems:
        print(f"  VIOLATION: {problem}", file=out)
    if not problems:
        print(
            f"checked: {len(spans)} claims in the claim log, no key without a claimant for longer than "
            f"{EXPIRY + CYCLE} s, all {work[0] if work else 0} fenced writes by the key's claimant "
            "within its claim",
            file=out,
        )
    picture = plots.timeline(
        workdir / "claims.png",
        title=f"claimant of each key across a SIGKILL (cycle {CYCLE} s, expiry {EXPIRY} s)",
        holds=[
            (s.key, s.claimed_at, s.ended_at or end, f"{names.get(s.claimant, '?')} e{s.epoch}")
            for s in spans
        ],
        events=[("SIGKILL", killed_at)],
        out=out,
    )
    if picture is not None:
        print(f"picture: {picture}", file=out)
    return not problems and took <= bound
