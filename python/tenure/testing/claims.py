"""A claim-holding demo service: it holds a fair share of a keyspace's keys and, every
``work_every`` seconds, does fenced work on a few of the keys it holds (a row in
``tenure_demo.claim_work`` written under ``claim_fence`` in the same transaction).
It prints one JSON line per event. Run one with
``python -m tenure.testing.claims --db URL --keyspace services``; with ``--async`` the
same service runs on asyncio (``AsyncClaimer``, each fenced write inside
``claimer.holding(key)``), without a thread.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import signal
import sys
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg
from psycopg.rows import class_row

from tenure.connect import aconnect, connect
from tenure.driver import AsyncDriver, Driver
from tenure.errors import ClaimLost
from tenure.runtime.claims import AsyncClaimer, Claimer, Keys
from tenure.runtime.shutdown import wait_for_shutdown
from tenure.testing.child import ChildProcess, emit


def run_service(conninfo: str, keyspace: str, *, cycle: float, expiry: float, work_every: float) -> None:
    claimer = Claimer(
        conninfo,
        keyspace,
        cycle=cycle,
        expiry=expiry,
        on_gained=lambda keys: emit("gained", count=len(keys)),
        on_lost=lambda keys: emit("lost", count=len(keys)),
    )
    stop = threading.Event()
    chooser = random.Random()

    def work() -> None:
        connection = connect(
            conninfo, application_name=f"tenure demo claim work {claimer.name}", deadline=expiry
        )
        driver = Driver(connection)
        while not stop.wait(work_every):
            held: Keys = claimer.held()
            for key in chooser.sample(sorted(held), min(5, len(held))):
                epoch = held[key]
                if claimer.epoch(key) != epoch:
                    continue  # lost meanwhile: do not act on it
                began = time.monotonic()
                try:
                    with connection.transaction():
                        driver.claim_fence(keyspace, claimer.instance_id, key, epoch)
                        connection.execute(
                            "INSERT INTO tenure_demo.claim_work (keyspace, key, epoch, instance_id) "
                            "VALUES (%s, %s, %s, %s)",
                            (keyspace, key, epoch, claimer.instance_id),
                        )
                    emit("work", key=key, epoch=epoch, began=began)
                except ClaimLost:
                    emit("refused", key=key, epoch=epoch, began=began)
                except psycopg.Error as error:
                    emit("work_failed", error=str(error).splitlines()[0])
                    if connection.broken or connection.closed:
                        connection = connect(
                            conninfo, application_name="tenure demo claim work", deadline=expiry
                        )
                        driver = Driver(connection)
        connection.close()

    with claimer:
        emit("started", instance_id=str(claimer.instance_id), pid=os.getpid())
        worker = threading.Thread(target=work, daemon=True)
        worker.start()
        wait_for_shutdown()
        stop.set()
        worker.join()
    emit("released")


async def run_async_service(
    conninfo: str, keyspace: str, *, cycle: float, expiry: float, work_every: float
) -> None:
    """:func:`run_service` on asyncio: the same events, each fenced write in ``holding(key)``."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    chooser = random.Random()

    async def work(claimer: AsyncClaimer) -> None:
        connection = None
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), work_every)
                break
            held: Keys = claimer.held()
            for key in chooser.sample(sorted(held), min(5, len(held))):
                epoch = held[key]
                try:
                    if connection is None or connection.broken or connection.closed:
                        connection = await aconnect(
                            conninfo,
                            application_name=f"tenure demo claim work {claimer.name}",
                            deadline=expiry,
                        )
                    async with claimer.holding(key, timeout=0) as held_in:
                        if held_in != epoch:
                            continue  # lost and taken again meanwhile: not the epoch chosen
                        began = time.monotonic()
                        try:
                            async with connection.transaction():
                                await AsyncDriver(connection).claim_fence(
                                    keyspace, claimer.instance_id, key, epoch
                                )
                                await connection.execute(
                                    "INSERT INTO tenure_demo.claim_work (keyspace, key, epoch, instance_id) "
                                    "VALUES (%s, %s, %s, %s)",
                                    (keyspace, key, epoch, claimer.instance_id),
                                )
                            emit("work", key=key, epoch=epoch, began=began)
                        except ClaimLost:
                            # the database's fence refused it
                            emit("refused", key=key, epoch=epoch, began=began)
                except TimeoutError:
                    continue  # not held any more: do not act on it
                except ClaimLost:
                    # holding() cancelled the write as the key was lost: its connection may be
                    # mid-statement, so it is not used again
                    emit("work_cancelled", key=key, epoch=epoch)
                    if connection is not None:
                        await connection.close()
                        connection = None
                except psycopg.Error as error:
                    emit("work_failed", error=str(error).splitlines()[0])
        if connection is not None:
            await connection.close()

    async with AsyncClaimer(
        conninfo,
        keyspace,
        cycle=cycle,
        expiry=expiry,
        on_gained=lambda keys: emit("gained", count=len(keys)),
        on_lost=lambda keys: emit("lost", count=len(keys)),
    ) as claimer:
        emit("started", instance_id=str(claimer.instance_id), pid=os.getpid(), mode="async")
        await work(claimer)
    emit("released")


class ClaimerProcess(ChildProcess):
    """A claim-holding demo service as a child process (on asyncio with ``async_mode``)."""

    def __init__(
        self,
        conninfo: str,
        keyspace: str,
        log_path: Path,
        *,
        cycle: float,
        expiry: float,
        async_mode: bool = False,
    ) -> None:
        super().__init__(
            [
                sys.executable,
                "-m",
                "tenure.testing.claims",
                "--db",
                conninfo,
                "--keyspace",
                keyspace,
                "--cycle",
                str(cycle),
                "--expiry",
                str(expiry),
                *(["--async"] if async_mode else []),
            ],
            log_path,
        )
        self.instance_id = self.announced_instance_id()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m tenure.testing.claims", description="one claim-holding demo service"
    )
    parser.add_argument("--db", default=os.environ.get("TENURE_DB", ""))
    parser.add_argument("--keyspace", default="services")
    parser.add_argument("--cycle", type=float, default=0.5)
    parser.add_argument("--expiry", type=float, default=1.5)
    parser.add_argument("--work-every", type=float, default=0.2)
    parser.add_argument(
        "--async", dest="async_mode", action="store_true", help="run on asyncio (AsyncClaimer)"
    )
    args = parser.parse_args(argv)
    if args.async_mode:
        asyncio.run(
            run_async_service(
                args.db, args.keyspace, cycle=args.cycle, expiry=args.expiry, work_every=args.work_every
            )
        )
        return
    run_service(args.db, args.keyspace, cycle=args.cycle, expiry=args.expiry, work_every=args.work_every)


if __name__ == "__main__":
    main()


@dataclass(frozen=True)
class ClaimSpan:
    """One claim of a key from the claim log: who held it in which epoch, and from when."""

    key: str
    epoch: int
    claimant: UUID
    claimed_at: datetime
    unclaimed_since: datetime
    ended_at: datetime | None


def read_claim_spans(admin: psycopg.Connection[Any], keyspace: str) -> list[ClaimSpan]:
    with admin.cursor(row_factory=class_row(ClaimSpan)) as cursor:
        cursor.execute(
            "SELECT key, epoch, claimant, claimed_at, unclaimed_since, "
            "lead(claimed_at) OVER (PARTITION BY key ORDER BY epoch) AS ended_at "
            "FROM tenure.claim_log WHERE keyspace = %s ORDER BY key, epoch",
            (keyspace,),
        )
        return cursor.fetchall()


@dataclass(frozen=True)
class ClaimWork:
    """A fenced write of the demo service (``tenure_demo.claim_work``), stamped by the server."""

    key: str
    epoch: int
    instance_id: UUID
    done_at: datetime


def check_claim_records(admin: psycopg.Connection[Any], keyspace: str, *, max_gap: float) -> list[str]:
    """:func:`check_claims` on the keyspace's claim log and fenced work, read with ``admin``."""
    with admin.cursor(row_factory=class_row(ClaimWork)) as cursor:
        cursor.execute(
            "SELECT key, epoch, instance_id, done_at FROM tenure_demo.claim_work WHERE keyspace = %s",
            (keyspace,),
        )
        work = cursor.fetchall()
    return check_claims(read_claim_spans(admin, keyspace), work, max_gap=max_gap)


def check_claims(spans: list[ClaimSpan], work: list[ClaimWork], *, max_gap: float) -> list[str]:
    """What the claim log and the fenced work say against each other: each key's epochs
    granted once each, growing with time; no key without a claimant for longer than
    ``max_gap`` seconds; every fenced write done by the key's claimant of that epoch, after
    the claim began and before the next one did."""
    problems = []
    by_key: dict[str, dict[int, ClaimSpan]] = {}
    for span in spans:
        granted = by_key.setdefault(span.key, {})
        if span.epoch in granted:
            problems.append(
                f"{span.key}: epoch {span.epoch} granted twice, to {granted[span.epoch].claimant} "
                f"and {span.claimant}"
            )
        granted[span.epoch] = span
        gap = (span.claimed_at - span.unclaimed_since).total_seconds()
        if gap > max_gap:
            problems.append(f"{span.key} had no claimant for {gap:.3f} s before epoch {span.epoch}")
    for key, granted in by_key.items():
        in_time = sorted(granted.values(), key=lambda span: span.claimed_at)
        if [span.epoch for span in in_time] != sorted(granted):
            problems.append(f"{key}: epochs do not grow with time: {[span.epoch for span in in_time]}")
    for done in work:
        held = by_key.get(done.key, {}).get(done.epoch)
        if held is None or held.claimant != done.instance_id:
            problems.append(
                f"work on {done.key} by {done.instance_id} in epoch {done.epoch}, which it did not hold"
            )
        elif done.done_at < held.claimed_at or (held.ended_at is not None and done.done_at >= held.ended_at):
            problems.append(f"work on {done.key} in epoch {done.epoch} at {done.done_at} outside the claim")
    return problems
