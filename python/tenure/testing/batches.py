"""One submission-queue service as a process: a SubmissionPool against a simulated
ledger served over HTTP (``python -m tenure.testing.ledger``), used by the demo, the
process tests and the bench. Run one with
``python -m tenure.testing.batches --db URL --keyspace orders --ledger URL``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from tenure.runtime.batches import SubmissionPool
from tenure.runtime.shutdown import wait_for_shutdown
from tenure.testing.child import ChildProcess
from tenure.testing.ledger import LedgerClient


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m tenure.testing.batches", description="one submission-queue service"
    )
    parser.add_argument("--db", default=os.environ.get("TENURE_DB", ""))
    parser.add_argument("--keyspace", default="orders")
    parser.add_argument("--ledger", required=True, help="URL of python -m tenure.testing.ledger")
    parser.add_argument("--submitters", type=int, default=8)
    parser.add_argument("--depth", type=int, default=1)
    parser.add_argument("--cycle", type=float, default=0.3)
    parser.add_argument("--expiry", type=float, default=1.0)
    parser.add_argument("--poll-interval", type=float, default=0.2)
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
                "tenure.testing.batches",
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
        self.instance_id = self.announced_instance_id()


if __name__ == "__main__":
    main()
