"""A simulated external system (the seed's ledger) for tests, the demo and the bench.

Switches: ``keeps_order`` (True: each key's batches are applied in their sequence
order, a batch that arrives early waiting for its predecessors, as a ledger with
per-key sequence numbers does; False: batches are applied after a random delay,
so two batches of a key submitted in order can be applied out of order, as with
gossip),
``persists`` (False: a restart forgets batches received but not yet applied, whose
status then reads 'unknown'), and ``invalid`` (a predicate on the payload: such
batches are rejected, status 'invalid'). The state of a key is the payload of the
last batch applied to it, as a purchase order's price is its last change.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import random
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from uuid import UUID

from tenure.driver import BatchGrant
from tenure.testing.child import ChildProcess


@dataclass
class SimulatedLedger:
    keeps_order: bool = True
    persists: bool = True
    invalid: Callable[[bytes], bool] = lambda payload: False
    max_delay: float = 0.05
    seed: int = 0
    applied: dict[str, list[bytes]] = field(default_factory=dict)
    _status: dict[UUID, str] = field(default_factory=dict)
    _waiting: dict[UUID, tuple[float, BatchGrant]] = field(default_factory=dict)
    _next_seq: dict[str, int] = field(default_factory=dict)  # keeps_order: per key, the seq applied next
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._random = random.Random(self.seed)

    def submit(self, batch: BatchGrant) -> None:
        with self._lock:
            if self._status.get(batch.id) in ("committed", "invalid"):
                return  # already kept: a resubmission changes nothing
            delay = 0.0 if self.keeps_order else self._random.uniform(0, self.max_delay)
            self._waiting[batch.id] = (time.monotonic() + delay, batch)
            self._status[batch.id] = "received"
            self._apply_due()

    def status(self, batch: BatchGrant) -> str | None:
        """'committed', 'invalid', 'unknown' (lost in a restart), or None while in flight."""
        with self._lock:
            self._apply_due()
            state = self._status.get(batch.id)
            if state is None:
                return "unknown"
            return None if state == "received" else state

    def restart(self) -> None:
        """A restart: without ``persists``, batches not applied yet are forgotten."""
        with self._lock:
            self._apply_due()
            if not self.persists:
                for batch_id in self._waiting:
                    self._status.pop(batch_id, None)
                self._waiting.clear()

    def history(self) -> dict[str, list[bytes]]:
        """Every key's applied payloads, in the order they were applied."""
        with self._lock:
            self._apply_due()
            return {key: list(payloads) for key, payloads in self.applied.items()}

    def state(self) -> dict[str, bytes]:
        with self._lock:
            self._apply_due()
            return {key: payloads[-1] for key, payloads in self.applied.items() if payloads}

    def _apply_due(self) -> None:
        now = time.monotonic()
        order = (
            (lambda item: (item[1][1].key, item[1][1].seq)) if self.keeps_order else (lambda item: item[1][0])
        )
        for batch_id, (due, batch) in sorted(self._waiting.items(), key=order):
            if due > now or (self.keeps_order and batch.seq != self._next_seq.get(batch.key, 1)):
                continue
            del self._waiting[batch_id]
            self._next_seq[batch.key] = batch.seq + 1
            if self.invalid(batch.payload):
                self._status[batch_id] = "invalid"
            else:
                self.applied.setdefault(batch.key, []).append(batch.payload)
                self._status[batch_id] = "committed"


def check_applied(
    expected: Mapping[str, Sequence[Hashable]], applied: Mapping[str, Sequence[Hashable]]
) -> list[str]:
    """Violations of "each key's batches applied once each, in submission order": what a
    ledger ``applied`` (per key, in the order applied) against the ``expected`` payloads
    (per key, in submission order)."""
    problems = []
    for key in sorted(set(expected) | set(applied)):
        want, got = list(expected.get(key, ())), list(applied.get(key, ()))
        if want == got:
            continue
        twice = sorted({repr(item) for item in got if got.count(item) > 1})
        if twice:
            problems.append(f"{key}: applied more than once: {', '.join(twice[:3])}")
        missing = [item for item in want if item not in got]
        if missing:
            problems.append(f"{key}: {len(missing)} batches never applied, e.g. {missing[0]!r}")
        unexpected = [item for item in got if item not in want]
        if unexpected:
            problems.append(
                f"{key}: {len(unexpected)} batches applied that should not be, e.g. {unexpected[0]!r}"
            )
        in_order = list(dict.fromkeys(item for item in got if item in want))
        if in_order != [item for item in want if item in in_order]:
            problems.append(f"{key}: applied out of submission order")
    return problems


# -- the ledger as a process of its own, shared by every instance ---------------------


class LedgerServer:
    """Serves a SimulatedLedger over HTTP: POST /submit, POST /status, POST /restart, GET /state."""

    def __init__(self, ledger: SimulatedLedger, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.ledger = ledger
        self.submissions: dict[str, int] = {}
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
                if self.path == "/restart":
                    server.ledger.restart()
                    self._reply({"restarted": True})
                    return
                batch = _grant(body)
                if self.path == "/submit":
                    server.submissions[str(batch.id)] = server.submissions.get(str(batch.id), 0) + 1
                    server.ledger.submit(batch)
                    self._reply({"received": True})
                elif self.path == "/status":
                    self._reply({"status": server.ledger.status(batch)})
                else:
                    self._reply({"error": self.path}, 404)

            def do_GET(self) -> None:
                applied = {k: [p.decode() for p in v] for k, v in server.ledger.history().items()}
                self._reply({"applied": applied, "submissions": server.submissions})

            def _reply(self, body: dict[str, object], status: int = 200) -> None:
                payload = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.http = ThreadingHTTPServer((host, port), Handler)
        self.http.daemon_threads = True

    @property
    def url(self) -> str:
        host, port = self.http.server_address[:2]
        return f"http://{host!s}:{port}"


def _grant(body: dict[str, object]) -> BatchGrant:
    return BatchGrant(
        id=UUID(str(body["id"])),
        key=str(body["key"]),
        seq=int(str(body["seq"])),
        payload=base64.b64decode(str(body["payload"])),
        state_keys=[],
        attempts=0,
        claim_epoch=0,
        round=0,
    )


class LedgerClient:
    """submit() and status() for a SubmissionPool, against a LedgerServer."""

    def __init__(self, url: str, *, timeout: float = 5.0) -> None:
        self.url = url
        self.timeout = timeout

    def _post(self, path: str, batch: BatchGrant | None = None) -> dict[str, Any]:
        body = (
            {}
            if batch is None
            else {
                "id": str(batch.id),
                "key": batch.key,
                "seq": batch.seq,
                "payload": base64.b64encode(batch.payload).decode(),
            }
        )
        request = urllib.request.Request(
            self.url + path,
            data=json.dumps(body).encode(),
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=self.timeout) as response:
            return json.loads(response.read())  # type: ignore[no-any-return]

    def submit(self, batch: BatchGrant) -> None:
        self._post("/submit", batch)

    def status(self, batch: BatchGrant) -> str | None:
        return self._post("/status", batch)["status"]  # type: ignore[no-any-return]

    def restart(self) -> None:
        self._post("/restart")

    def report(self) -> dict[str, Any]:
        with urllib.request.urlopen(self.url + "/", timeout=self.timeout) as response:
            return json.loads(response.read())  # type: ignore[no-any-return]


class AsyncLedgerClient:
    """:class:`LedgerClient` for an AsyncSubmissionPool: coroutine ``submit`` and ``status``
    over asyncio streams (HTTP/1.0, one connection per request), no thread."""

    def __init__(self, url: str, *, timeout: float = 5.0) -> None:
        parsed = urllib.parse.urlsplit(url)
        self.host, self.port = parsed.hostname or "127.0.0.1", parsed.port or 80
        self.timeout = timeout

    async def _post(self, path: str, batch: BatchGrant) -> dict[str, Any]:
        body = json.dumps(
            {
                "id": str(batch.id),
                "key": batch.key,
                "seq": batch.seq,
                "payload": base64.b64encode(batch.payload).decode(),
            }
        ).encode()
        async with asyncio.timeout(self.timeout):
            reader, writer = await asyncio.open_connection(self.host, self.port)
            try:
                writer.write(
                    f"POST {path} HTTP/1.0\r\nHost: {self.host}\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(body)}\r\n\r\n".encode()
                    + body
                )
                await writer.drain()
                response = await reader.read()
            finally:
                writer.close()
        head, _, payload = response.partition(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.0 200") and not head.startswith(b"HTTP/1.1 200"):
            raise OSError(f"ledger {path}: {head.splitlines()[0] if head else b'no answer'!r}")
        return json.loads(payload)  # type: ignore[no-any-return]

    async def submit(self, batch: BatchGrant) -> None:
        await self._post("/submit", batch)

    async def status(self, batch: BatchGrant) -> str | None:
        return (await self._post("/status", batch))["status"]  # type: ignore[no-any-return]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m tenure.testing.ledger", description="a simulated ledger over HTTP"
    )
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--reorders", action="store_true", help="apply batches after a random delay")
    parser.add_argument("--forgets", action="store_true", help="a restart forgets batches not yet applied")
    parser.add_argument("--invalid-prefix", default="", help="payloads starting with it are invalid")
    parser.add_argument("--max-delay", type=float, default=0.05)
    args = parser.parse_args(argv)
    prefix = args.invalid_prefix.encode()
    ledger = SimulatedLedger(
        keeps_order=not args.reorders,
        persists=not args.forgets,
        max_delay=args.max_delay,
        invalid=lambda payload: bool(prefix) and payload.startswith(prefix),
    )
    server = LedgerServer(ledger, port=args.port)
    print(json.dumps({"event": "started", "url": server.url}), flush=True)
    server.http.serve_forever()


class LedgerProcess(ChildProcess):
    def __init__(self, log_path: Path, *, reorders: bool, forgets: bool, invalid_prefix: str = "bad") -> None:
        flags = [*(["--reorders"] if reorders else []), *(["--forgets"] if forgets else [])]
        super().__init__(
            [sys.executable, "-m", "tenure.testing.ledger", "--invalid-prefix", invalid_prefix, *flags],
            log_path,
        )
        self.url = self.wait_for_output(r'"url": "(http://[^"]+)"').group(1)
        self.client = LedgerClient(self.url)


if __name__ == "__main__":
    main()
