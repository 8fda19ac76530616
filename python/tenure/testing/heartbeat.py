"""The heartbeat demo service, and running it as processes.

A demo service instance runs an elector and, while primary, does "primary work":
every ``work_every`` seconds a write to ``tenure_demo.work`` fenced by
``heartbeat_fence`` in the same transaction. It prints one JSON line per event.
Run one with ``python -m tenure.testing.heartbeat --db URL --type demo``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg
from psycopg.rows import class_row

from tenure.connect import aconnect, connect
from tenure.driver import AsyncDriver, Driver
from tenure.errors import NotPrimary
from tenure.runtime.heartbeat import AsyncElector, Elector
from tenure.runtime.shutdown import wait_for_shutdown
from tenure.testing.child import ChildProcess, emit
from tenure.testing.history import FencedWrite


def read_writes(connection: psycopg.Connection[Any]) -> list[FencedWrite]:
    with connection.cursor(row_factory=class_row(FencedWrite)) as cursor:
        cursor.execute("SELECT utype, instance_id, term, done_at FROM tenure_demo.work ORDER BY id")
        return cursor.fetchall()


# Both services print what their elector tells them.
EMIT_CHANGES: dict[str, Any] = {
    "on_elected": lambda term: emit("elected", term=term),
    "on_demoted": lambda reason: emit("demoted", reason=reason),
}
WORK = "INSERT INTO tenure_demo.work (utype, instance_id, term) VALUES (%s, %s, %s)"


def run_service(conninfo: str, utype: str, *, interval: float, timeout: float, work_every: float) -> None:
    elector = Elector(conninfo, utype, interval=interval, timeout=timeout, **EMIT_CHANGES)
    stop = threading.Event()

    def primary_work() -> None:
        work = connect(conninfo, application_name=f"tenure demo work {elector.name}", deadline=timeout)
        driver = Driver(work)
        while not stop.wait(work_every):
            term = elector.term
            if term is None:
                continue
            began = time.monotonic()
            try:
                with work.transaction():
                    driver.heartbeat_fence(elector.instance_id, utype, term)
                    work.execute(WORK, (utype, elector.instance_id, term))
                emit("work", term=term, began=began)
            except NotPrimary as refused:
                emit("refused", term=term, began=began, detail=refused.detail)
            except psycopg.Error as error:
                emit("work_failed", term=term, error=str(error).splitlines()[0])
                if work.closed or work.broken:
                    work = connect(
                        conninfo, application_name=f"tenure demo work {elector.name}", deadline=timeout
                    )
                    driver = Driver(work)
        work.close()

    with elector:
        emit("started", instance_id=str(elector.instance_id), name=elector.name, pid=os.getpid())
        worker = threading.Thread(target=primary_work, name="demo-work", daemon=True)
        worker.start()
        wait_for_shutdown()
        stop.set()
        worker.join()
    emit("resigned")


async def run_async_service(
    conninfo: str, utype: str, *, interval: float, timeout: float, work_every: float
) -> None:
    """``run_service`` as an asyncio service: an ``AsyncElector`` and the primary work in
    ``leading()``, on one event loop and no thread of its own."""
    elector = AsyncElector(conninfo, utype, interval=interval, timeout=timeout, **EMIT_CHANGES)
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(signum, stop.set)
    async with elector:
        emit("started", instance_id=str(elector.instance_id), name=elector.name, pid=os.getpid())
        work = asyncio.create_task(async_primary_work(elector, conninfo, utype, work_every=work_every))
        await stop.wait()
        work.cancel()
        await asyncio.gather(work, return_exceptions=True)
    emit("resigned")


async def async_primary_work(elector: AsyncElector, conninfo: str, utype: str, *, work_every: float) -> None:
    name = f"tenure demo work {elector.name}"
    connection: psycopg.AsyncConnection[Any] | None = None
    while True:
        try:
            async with elector.leading() as term:
                while True:
                    await asyncio.sleep(work_every)
                    if connection is None:
                        connection = await aconnect(
                            conninfo, application_name=name, deadline=elector.timing.timeout
                        )
                    began = time.monotonic()
                    try:
                        async with connection.transaction():
                            await AsyncDriver(connection).heartbeat_fence(elector.instance_id, utype, term)
                            await connection.execute(WORK, (utype, elector.instance_id, term))
                        emit("work", term=term, began=began)
                    except NotPrimary as refused:
                        emit("refused", term=term, began=began, detail=refused.detail)
                    except psycopg.Error as error:
                        emit("work_failed", term=term, error=str(error).splitlines()[0])
                        if connection.closed or connection.broken:
                            connection = None
        except NotPrimary:
            # The body was cancelled wherever it was, perhaps inside a statement: start afresh.
            if connection is not None:
                await connection.close()
                connection = None


def service_main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m tenure.testing.heartbeat", description="one demo service instance"
    )
    parser.add_argument("--db", default=os.environ.get("TENURE_DB", ""), help="conninfo or URL")
    parser.add_argument("--type", dest="utype", default="demo")
    parser.add_argument("--interval", type=float, default=0.5)
    parser.add_argument("--timeout", type=float, default=1.5)
    parser.add_argument("--work-every", type=float, default=0.1)
    parser.add_argument("--async", dest="use_async", action="store_true", help="the asyncio service")
    args = parser.parse_args(argv)
    options = {"interval": args.interval, "timeout": args.timeout, "work_every": args.work_every}
    if args.use_async:
        asyncio.run(run_async_service(args.db, args.utype, **options))
    else:
        run_service(args.db, args.utype, **options)


class ServiceProcess(ChildProcess):
    """A demo service instance (python -m tenure.testing.heartbeat) as a child process."""

    def __init__(
        self,
        conninfo: str,
        utype: str,
        log_path: Path,
        *,
        interval: float,
        timeout: float,
        use_async: bool = False,
    ) -> None:
        super().__init__(
            [
                sys.executable,
                "-m",
                "tenure.testing.heartbeat",
                "--db",
                conninfo,
                "--type",
                utype,
                "--interval",
                str(interval),
                "--timeout",
                str(timeout),
                *(["--async"] if use_async else []),
            ],
            log_path,
        )
        self.utype = utype

    @classmethod
    def spawn(
        cls,
        conninfo: str,
        utype: str,
        log_path: Path,
        *,
        interval: float,
        timeout: float,
        use_async: bool = False,
    ) -> ServiceProcess:
        return cls(conninfo, utype, log_path, interval=interval, timeout=timeout, use_async=use_async)

    def instance_id(self, wait: float = 10.0) -> UUID:
        return self.announced_instance_id(wait)


def wait_for_primary(
    driver: Driver, utype: str, *, other_than: UUID | None = None, wait: float = 30.0
) -> tuple[UUID, int]:
    end = time.monotonic() + wait
    while time.monotonic() < end:
        entry = driver.get_primary(utype)
        if entry is not None and entry.instance_id != other_than:
            return entry.instance_id, entry.term
        time.sleep(0.02)
    raise TimeoutError(f"no primary of {utype!r} other than {other_than} within {wait} s")


if __name__ == "__main__":
    service_main()
