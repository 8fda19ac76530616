"""One submission-queue service as a process: a SubmissionPool against a simulated
ledger served over HTTP (``python -m tenure.testing.ledger``), used by the demo, the
process tests and the bench. Run one with
``python -m tenure.testing.batches --db URL --keyspace orders --ledger URL``; with
``--async`` it is an asyncio service instead: an AsyncSubmissionPool under
``asyncio.run``, with coroutine callbacks and no thread of its own.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import Any

from tenure.runtime.batches import AsyncSubmissionPool, SubmissionPool
from tenure.runtime.shutdown import wait_for_shutdown
from tenure.testing.child import ChildProcess, emit
from tenure.testing.ledger import AsyncLedgerClient, LedgerClient


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
    parser.add_argument("--async", dest="asynchronous", action="store_true", help="an asyncio service")
    args = parser.parse_args(argv)
    options: dict[str, Any] = {
        "submitters": args.submitters,
        "depth": args.depth,
        "cycle": args.cycle,
        "expiry": args.expiry,
        "poll_interval": args.poll_interval,
    }
    if args.asynchronous:
        asyncio.run(serve_async(args.db, args.keyspace, args.ledger, options))
        return
    ledger = LedgerClient(args.ledger)
    pool = SubmissionPool(args.db, args.keyspace, submit=ledger.submit, status=ledger.status, **options)
    with pool:
        emit("started", instance_id=str(pool.claimer.instance_id))
        wait_for_shutdown()
    emit("stopped", submitted=pool.submitted, skipped=pool.skipped)


async def serve_async(conninfo: str, keyspace: str, ledger_url: str, options: dict[str, Any]) -> None:
    """The same service on asyncio: runs until SIGTERM or SIGINT."""
    ledger = AsyncLedgerClient(ledger_url)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    pool = AsyncSubmissionPool(conninfo, keyspace, submit=ledger.submit, status=ledger.status, **options)
    async with pool:
        emit("started", instance_id=str(pool.claimer.instance_id), mode="async")
        await stop.wait()
    emit("stopped", submitted=pool.submitted, skipped=pool.skipped)


class QueueProcess(ChildProcess):
    def __init__(
        self,
        conninfo: str,
        keyspace: str,
        ledger_url: str,
        log_path: Path,
        *,
        depth: int = 1,
        asynchronous: bool = False,
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
                *(["--async"] if asynchronous else []),
            ],
            log_path,
        )
        self.instance_id = self.announced_instance_id()


if __name__ == "__main__":
    main()
