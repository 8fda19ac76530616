"""The submission queue with real processes: 3 instances, 50 keys, a skewed flood of
batches (one key sends a quarter of them at once; 1,000 batches by default,
TENURE_QUEUE_BATCHES=20000 for the issue's full size), against a simulated ledger
process in each of its modes, with an instance killed, one frozen past its claim
expiry, every instance's server sessions terminated, and (where the ledger forgets)
the ledger restarted; once with asyncio services (AsyncSubmissionPool, ``--async``).
The ledger's final history must equal applying every valid batch of each key in
submission order."""

from __future__ import annotations

import os
import random
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tenure import Driver
from tenure.testing.batches import QueueProcess
from tenure.testing.ledger import LedgerProcess

BATCHES = int(os.environ.get("TENURE_QUEUE_BATCHES", "1000"))
KEYS, FLOOD_SHARE, EXPIRY = 50, 0.25, 1.0


@pytest.fixture
def processes() -> Iterator[list[Any]]:
    started: list[Any] = []
    try:
        yield started
    finally:
        for process in started:
            process.stop()


@pytest.mark.parametrize(
    ("mode", "reorders", "forgets", "asynchronous"),
    [
        ("unconstrained", False, False, False),
        ("serial", True, False, False),
        ("serial", False, True, False),
        ("serial", True, True, True),
    ],
    ids=["keeps-order:unconstrained", "reorders:serial", "forgets:serial", "async:reorders-forgets:serial"],
)
def test_every_key_applied_in_submission_order(
    processes: list[Any],
    app_conninfo: str,
    admin: psycopg.Connection[Any],
    tmp_path: Path,
    mode: str,
    reorders: bool,
    forgets: bool,
    asynchronous: bool,
) -> None:
    driver = Driver(admin)
    driver.batch_configure("orders", mode=mode, implicit_deps=False)
    ledger = LedgerProcess(tmp_path / "ledger.log", reorders=reorders, forgets=forgets)
    processes.append(ledger)
    chooser = random.Random(f"{mode}-{reorders}-{forgets}")
    flood = int(BATCHES * FLOOD_SHARE)
    keys = ["flood"] * flood + [f"po-{chooser.randrange(KEYS - 1)}" for _ in range(BATCHES - flood)]
    batches = [
        {"key": key, "payload": f"{'bad' if chooser.random() < 0.01 else ''}{key}:{n}".encode()}
        for n, key in enumerate(keys)
    ]
    instances = [
        QueueProcess(
            app_conninfo, "orders", ledger.url, tmp_path / f"queue-{n}.log", asynchronous=asynchronous
        )
        for n in range(3)
    ]
    processes.extend(instances)
    for start in range(0, len(batches), 500):
        driver.batch_enqueue_many("orders", batches[start : start + 500])

    def resolved() -> int:
        row = admin.execute(
            "SELECT count(*) FROM tenure.batch "
            "WHERE keyspace = 'orders' AND status IN ('committed', 'invalid')"
        ).fetchone()
        return int(row[0]) if row else 0

    deadline = time.monotonic() + 300
    time.sleep(1)
    victim = instances[0]
    victim.signal(signal.SIGKILL)
    victim.process.wait()
    replacement = QueueProcess(
        app_conninfo, "orders", ledger.url, tmp_path / "queue-3.log", asynchronous=asynchronous
    )
    processes.append(replacement)
    frozen = instances[1]
    frozen.signal(signal.SIGSTOP)
    time.sleep(EXPIRY + 0.5)
    frozen.signal(signal.SIGCONT)
    time.sleep(0.5)
    # Every server session of every instance (pools, claimers, listeners) ends under it.
    terminated = admin.execute(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
        "WHERE application_name LIKE 'tenure %' AND pid <> pg_backend_pid()"
    ).fetchone()
    assert terminated and terminated[0] >= 3, "each running instance had server sessions to terminate"
    if forgets:
        ledger.client.restart()
    while resolved() < BATCHES and time.monotonic() < deadline:
        time.sleep(0.2)
    assert resolved() == BATCHES, f"only {resolved()} of {BATCHES} batches resolved"

    rows = admin.execute(
        "SELECT id, key, seq, payload, status, attempts, resolved_at - enqueued_at FROM tenure.batch "
        "WHERE keyspace = 'orders' ORDER BY key, seq"
    ).fetchall()
    report = ledger.client.report()
    expected: dict[str, list[str]] = {}
    for _, key, _, payload, status, _, _ in rows:
        if status == "committed":
            expected.setdefault(key, []).append(bytes(payload).decode())
        assert status != "invalid" or bytes(payload).startswith(b"bad"), "a valid batch was lost as invalid"
        assert status == "invalid" or not bytes(payload).startswith(b"bad"), "an invalid batch was applied"
    assert report["applied"] == expected, "the ledger applied each key's valid batches in submission order"
    for batch_id, _, _, _, status, attempts, _ in rows:
        if status == "invalid":
            assert report["submissions"].get(str(batch_id), 0) <= attempts, "an invalid batch was resubmitted"
    for instance in [*instances, replacement]:
        (started,) = [e for e in instance.events() if e["event"] == "started"]
        assert (started.get("mode") == "async") == asynchronous, "the service ran in the flavour asked for"
    small = [wait.total_seconds() for _, key, _, _, _, _, wait in rows if key != "flood" and wait is not None]
    print(
        f"{mode} (reorders={reorders}, forgets={forgets}, async={asynchronous}): {BATCHES} batches, "
        f"worst wait of a small key {max(small):.2f} s while 'flood' sent {flood}"
    )
