"""The submission queue with real processes: 3 instances, 50 keys, a skewed flood of
batches (one key sends a quarter of them at once; 1,000 batches by default,
TENURE_QUEUE_BATCHES=20000 for the issue's full size), against a simulated ledger
process in each of its modes, with an instance killed, one frozen past its claim
expiry, every instance's server sessions terminated, and (where the ledger forgets)
the ledger restarted; once with asyncio services (AsyncSubmissionPool, ``--async``).
The ledger's final history must equal applying every valid batch of each key in
submission order. And ``tenure batch run --http``: a handler of the test's own gets
every batch once, in per-key order, as JSON."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from uuid import UUID

import httpx
import psycopg
import pytest

from tenure import BatchGrant, Driver
from tenure.http.batches import BatchHandler, HandlerError
from tenure.testing.batches import QueueProcess
from tenure.testing.child import ChildProcess
from tenure.testing.ledger import LedgerProcess, SimulatedLedger, check_applied

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
    assert check_applied(expected, report["applied"]) == [], (
        "each key's valid batches once, in submission order"
    )
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


class Handler:
    """A small batch handler of the test's own, as a program in another language would
    serve ``tenure batch run --http``: POST /submit hands the batch to a simulated
    ledger, POST /status asks it; every request is recorded as it arrived."""

    def __init__(self, *, fail_status_once: bool) -> None:
        self.ledger = SimulatedLedger(keeps_order=True)
        self.submits: list[dict[str, Any]] = []
        self.statuses = 0
        self.fail_status_once = fail_status_once
        handler = self

        class Requests(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # the shim keeps its connections alive
            disable_nagle_algorithm = True  # else each answer's body waits 40 ms for a delayed ACK

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                batch = BatchGrant(
                    id=UUID(body["id"]),
                    key=body["key"],
                    seq=body["seq"],
                    payload=base64.b64decode(body["payload"]),
                    state_keys=body["state_keys"],
                    attempts=body["attempts"],
                    claim_epoch=body["epoch"],
                    round=body["round"],
                )
                if self.path == "/ledger/submit":
                    with lock:
                        handler.submits.append(body)
                    handler.ledger.submit(batch)
                    self.reply(200, {})
                elif self.path == "/ledger/status":
                    with lock:
                        handler.statuses += 1
                        fail = handler.fail_status_once
                        handler.fail_status_once = False
                    if fail:
                        self.reply(500, {"error": "the ledger is busy"})
                    else:
                        self.reply(200, {"status": handler.ledger.status(batch)})
                else:
                    self.reply(404, {"error": self.path})

            def reply(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Requests)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/ledger"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_batch_run_http_delivers_every_batch_once_in_per_key_order(
    processes: list[Any], app_conninfo: str, admin: psycopg.Connection[Any], tmp_path: Path
) -> None:
    driver = Driver(admin)
    driver.batch_configure("handled", mode="unconstrained")
    handler = Handler(fail_status_once=True)
    try:
        chooser = random.Random("http")
        # payloads that are not text: they travel as base64
        batches = [
            {"key": f"k{chooser.randrange(2)}", "payload": bytes([n % 256, 0xFF, n // 256])}
            for n in range(300)
        ]
        driver.batch_enqueue_many("handled", batches)
        shim = ChildProcess(
            [
                *(
                    sys.executable,
                    "-m",
                    "tenure",
                    "batch",
                    "run",
                    "--db",
                    app_conninfo,
                    "--keyspace",
                    "handled",
                ),
                *(
                    "--http",
                    handler.url,
                    "--submitters",
                    "4",
                    "--depth",
                    "3",
                    "--cycle",
                    "0.5",
                    "--expiry",
                    "2",
                ),
            ],
            tmp_path / "shim.log",
        )
        processes.append(shim)
        instance = shim.wait_for_output(r"instance ([0-9a-f-]{36})").group(1)

        def resolved() -> int:
            row = admin.execute(
                "SELECT count(*) FROM tenure.batch WHERE keyspace = 'handled' AND status = 'committed'"
            ).fetchone()
            return int(row[0]) if row else 0

        deadline = time.monotonic() + 120
        while resolved() < len(batches) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert resolved() == len(batches), f"only {resolved()} of {len(batches)} committed:\n{shim.output()}"
        shim.stop()
        assert shim.process.returncode == 0
        assert f"stopped: {len(batches)} submitted, 0 skipped" in shim.output()
        assert "the ledger is busy" in shim.output(), (
            "a status the handler failed was logged, and asked again"
        )
    finally:
        handler.close()

    rows = admin.execute(
        "SELECT id, key, seq, payload FROM tenure.batch WHERE keyspace = 'handled' ORDER BY key, seq"
    ).fetchall()
    ids = [body["id"] for body in handler.submits]
    assert sorted(ids) == sorted(str(row[0]) for row in rows), "every batch submitted exactly once"
    arrived: dict[str, list[int]] = {}
    for body in handler.submits:
        arrived.setdefault(body["key"], []).append(body["seq"])
        assert body["keyspace"] == "handled" and body["instance_id"] == instance
        assert body["epoch"] >= 1 and body["attempts"] >= 1 and body["round"] >= 1
    for key, seqs in arrived.items():
        assert seqs == sorted(seqs), f"{key}: batches reached the handler in per-key order"
    expected: dict[str, list[bytes]] = {}
    for _, key, _, payload in rows:
        expected.setdefault(key, []).append(bytes(payload))
    assert check_applied(expected, handler.ledger.history()) == [], (
        "each key's batches once, in order, intact"
    )
    epochs = {c.key: c.epoch for c in driver.claims("handled")}
    assert all(body["epoch"] == epochs[body["key"]] for body in handler.submits), (
        "each under its claim's epoch"
    )


def test_batch_run_needs_a_module_or_a_handler_url(app_conninfo: str) -> None:
    base = [sys.executable, "-m", "tenure", "batch", "run", "--db", app_conninfo, "--keyspace", "handled"]
    neither = subprocess.run(base, capture_output=True, text=True)
    assert neither.returncode == 2 and "one of the arguments --module --http is required" in neither.stderr
    both = subprocess.run([*base, "--module", "m", "--http", "http://x"], capture_output=True, text=True)
    assert both.returncode == 2 and "not allowed with argument" in both.stderr
    bad = subprocess.run([*base, "--http", "127.0.0.1:8080"], capture_output=True, text=True)
    assert bad.returncode == 2 and "--http needs the handler's base URL" in bad.stderr


@pytest.mark.parametrize(
    ("status", "body", "message"),
    [
        (200, b'{"status": "done"}', "answered status 'done': expected committed, invalid, unknown or null"),
        (200, b"committed", 'expected {"status": "committed" | "invalid" | "unknown" | null}'),
        (200, b'{"state": "committed"}', 'expected {"status"'),
        (503, b"busy", "answered 503: 'busy'"),
    ],
)
def test_a_handler_answer_outside_the_protocol_is_an_error_naming_it(
    status: int, body: bytes, message: str
) -> None:
    batch = BatchGrant(UUID(int=1), "po-1", 2, b"\x00\xff", ["s"], 1, 4, 1)
    seen: list[dict[str, Any]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        return httpx.Response(status, content=body)

    async def ask() -> None:
        async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
            handler = BatchHandler(
                "http://handler/ledger/", client=client, keyspace="q", instance_id=UUID(int=9)
            )
            with pytest.raises(HandlerError, match=re.escape(message)):
                await handler.status(batch)

    asyncio.run(ask())
    assert seen == [
        {
            "keyspace": "q",
            "instance_id": str(UUID(int=9)),
            "id": str(UUID(int=1)),
            "key": "po-1",
            "seq": 2,
            "payload": "AP8=",
            "state_keys": ["s"],
            "attempts": 1,
            "epoch": 4,
            "round": 1,
        }
    ]
