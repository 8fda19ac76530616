"""A submission-queue service for the process tests, demo and bench: a SubmissionPool
against a simulated ledger served over HTTP (``python -m tenure.ledger``).
Run one with ``python -m tenure.demo_queue --db URL --keyspace orders --ledger URL``."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from uuid import UUID

from tenure.demo import ChildProcess
from tenure.ledger import LedgerClient
from tenure.queue import SubmissionPool
from tenure.shutdown import wait_for_shutdown


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m tenure.demo_queue", description="one submission-queue service"
    )
    parser.add_argument("--db", default=os.environ.get("TENURE_DB", ""))
    parser.add_argument("--keyspace", default="orders")
    parser.add_argument("--ledger", required=True, help="URL of python -m tenure.ledger")
    parser.add_argument("--submitters", type=int, default=8)
    parser.add_argument("--depth", type=int, default=1)
    parser.add_argument("--cycle", type=float, default=0.3)
    parser.add_argument("--expiry", type=float, default=1.0)
    parser.add_argument("--poll-interval", type=float, default=0.02)
    args = parser.parse_args(argv)
    ledger = LedgerClient(args.ledger)
    pool = SubmissionPool(
        args.db,
        args.keyspace,
        submit=ledger.submit,
        status=ledger.status,
        submitters=args.submitters,
        depth=args.depth,
        cycle=args.cycle,
        expiry=args.expiry,
        poll_interval=args.poll_interval,
    )
    with pool:
        print(json.dumps({"event": "started", "instance_id": str(pool.claimer.instance_id)}), flush=True)
        wait_for_shutdown()
    print(json.dumps({"event": "stopped", "submitted": pool.submitted, "skipped": pool.skipped}), flush=True)


class QueueProcess(ChildProcess):
    def __init__(
        self, conninfo: str, keyspace: str, ledger_url: str, log_path: Path, *, depth: int = 1
    ) -> None:
        super().__init__(
            [
                sys.executable,
                "-m",
                "tenure.demo_queue",
                "--db",
                conninfo,
                "--keyspace",
                keyspace,
                "--ledger",
                ledger_url,
                "--depth",
                str(depth),
            ],
            log_path,
        )
        self.instance_id = UUID(self.wait_for_output(r'"instance_id": "([0-9a-f-]{36})"').group(1))


class LedgerProcess(ChildProcess):
    def __init__(self, log_path: Path, *, reorders: bool, forgets: bool, invalid_prefix: str = "bad") -> None:
        flags = [*(["--reorders"] if reorders else []), *(["--forgets"] if forgets else [])]
        super().__init__(
            [sys.executable, "-m", "tenure.ledger", "--invalid-prefix", invalid_prefix, *flags], log_path
        )
        self.url = self.wait_for_output(r'"url": "(http://[^"]+)"').group(1)
        self.client = LedgerClient(self.url)


if __name__ == "__main__":
    main()
