"""The submission-queue part of ``tenure demo``, on the queue service of
``tenure.testing.batches`` and the simulated ledger of ``tenure.testing.ledger``.

Purchase orders whose price changes are batches for a gossip ledger, which may
apply two batches of a key in either order if both are in flight, so the queue is
serial. One order's change is rejected by the ledger and halts that order until an
operator skips it; one key floods the queue with batches just before the others
send theirs. Two instances share the keys; one is killed with SIGKILL on the way.
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path
from typing import IO

import psycopg

from tenure.driver import Driver
from tenure.testing.batches import QueueProcess
from tenure.testing.child import ChildProcess
from tenure.testing.database import retire_keyspace, server_now, setup
from tenure.testing.ledger import LedgerProcess

KEYSPACE, FLOOD, EXPIRY = "demo-ledger", 200, 1.0
ORDERS = {  # the payloads: price changes; the ledger rejects those starting with "bad"
    "po-1": ["price 2.75", "price 3.00", "price 3.25"],
    "po-2": ["price 10.00", "bad price 11.00", "price 12.00"],
    "po-3": ["price 5.00", "price 5.50"],
}


def run_queue_demo(admin_conninfo: str, *, workdir: Path, out: IO[str] | None = None) -> bool:
    """Run the purchase-order queue with a kill, a flood and a halt; True when every check held."""
    out = out or sys.stdout
    app_conninfo = setup(admin_conninfo)
    admin = psycopg.connect(admin_conninfo, autocommit=True)
    driver = Driver(admin)
    retire_keyspace(admin, KEYSPACE)  # a demo run before this one: its keys and batches go
    driver.batch_configure(KEYSPACE, mode="serial")
    print(
        f"\ntenure demo, submission queue: 2 instances serve {len(ORDERS) + 1} keys for a gossip ledger "
        f"(serial mode); 'flood' sends {FLOOD} batches just before the purchase orders send theirs",
        file=out,
    )
    processes: list[ChildProcess] = []
    try:
        ledger = LedgerProcess(workdir / "ledger.log", reorders=True, forgets=False)
        processes.append(ledger)
        instances = [
            QueueProcess(app_conninfo, KEYSPACE, ledger.url, workdir / f"queue-{n}.log") for n in (1, 2)
        ]
        processes.extend(instances)
        names = {q.instance_id: f"queue-{n}" for n, q in enumerate(instances, start=1)}
        driver.batch_enqueue_many(
            KEYSPACE, [{"key": "flood", "payload": f"flood {n}".encode()} for n in range(FLOOD)]
        )
        for n in range(max(len(prices) for prices in ORDERS.values())):
            for key, prices in ORDERS.items():
                if n < len(prices):
                    driver.batch_enqueue(KEYSPACE, key, prices[n].encode())
        time.sleep(1.0)
        victim = instances[0]
        killed_at = server_now(admin)
        victim.signal(signal.SIGKILL)
        victim.process.wait()
        print(
            f"  SIGKILL queue-1 at {killed_at:%H:%M:%S.%f}; queue-2 takes its keys once their claims expire",
            file=out,
        )
        skipped = _skip_when_halted(driver, "po-2", out)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and any(
            r.queued or r.pending or r.unknown for r in driver.batch_keys(KEYSPACE)
        ):
            time.sleep(0.1)
        report = ledger.client.report()
    finally:
        for process in processes:
            process.stop()

    rows = driver.batches(KEYSPACE, limit=10_000)
    holders = admin.execute(
        "SELECT key, claimant, epoch, claimed_at FROM tenure.claim_log WHERE keyspace = %s "
        "ORDER BY key, epoch",
        (KEYSPACE,),
    ).fetchall()
    waits = admin.execute(
        "SELECT key, max(resolved_at - enqueued_at) FROM tenure.batch WHERE keyspace = %s "
        "GROUP BY key ORDER BY key",
        (KEYSPACE,),
    ).fetchall()
    admin.close()
    ok = True
    print("\nkeys (server clock): who held each, and what the ledger applied, in order", file=out)
    for key in ["flood", *ORDERS]:
        held = ", ".join(
            f"{names.get(claimant, 'queue-?')} epoch {epoch} from {granted:%H:%M:%S.%f}"
            for k, claimant, epoch, granted in holders
            if k == key
        )
        applied = report["applied"].get(key, [])
        expected = [p for p in ORDERS.get(key, []) if not p.startswith("bad")]
        shown = (
            f"{len(applied)} batches"
            if key == "flood"
            else " -> ".join(a.removeprefix("price ") for a in applied)
        )
        print(f"  {key:<6} held by {held}; applied {shown}", file=out)
        if key != "flood" and applied != expected:
            print(f"  VIOLATION: {key} applied {applied}, expected {expected}", file=out)
            ok = False
    statuses = {(r.key, r.seq): r.status for r in rows}
    if statuses.get(("po-2", 2)) != "skipped" or not skipped:
        print(f"  VIOLATION: po-2's rejected change is {statuses.get(('po-2', 2))}, not skipped", file=out)
        ok = False
    if len(report["applied"].get("flood", [])) != FLOOD:
        print("  VIOLATION: the flood key's batches were not all applied", file=out)
        ok = False
    resubmitted = [
        r.id for r in rows if r.status == "skipped" and report["submissions"].get(str(r.id), 0) > 1
    ]
    if resubmitted:
        print(f"  VIOLATION: the invalid batch was submitted again: {resubmitted}", file=out)
        ok = False
    worst = {key: wait.total_seconds() for key, wait in waits if wait is not None}
    small = max(wait for key, wait in worst.items() if key != "flood")
    print(
        f"\nflood: the purchase orders waited at most {small:.2f} s (a halt and a kill included) "
        f"while 'flood' took {worst.get('flood', 0):.2f} s for its {FLOOD}",
        file=out,
    )
    if ok:
        print(
            "checked: every order's valid price changes applied once each, in submission order "
            "(po-1 ends at 3.25, never at 3.00); the rejected change halted po-2 until skipped and was "
            "never submitted again",
            file=out,
        )
    print(f"queue logs: {workdir}", file=out)
    return ok


def _skip_when_halted(driver: Driver, key: str, out: IO[str], wait: float = 30.0) -> bool:
    """Play the operator: once ``key`` halts at an invalid batch, skip that batch."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if any(r.key == key and r.halted for r in driver.batch_keys(KEYSPACE)):
            (bad,) = driver.batches(KEYSPACE, key=key, status="invalid")
            print(
                f"  {key} halted: the ledger rejected batch #{bad.seq} ({bad.id}); "
                f"the operator runs: tenure batch skip --keyspace {KEYSPACE} {bad.id}",
                file=out,
            )
            return driver.batch_skip(KEYSPACE, bad.id)
        time.sleep(0.05)
    print(f"  {key} never halted", file=out)
    return False
