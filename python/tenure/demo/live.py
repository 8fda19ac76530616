"""The end of ``tenure demo`` in a terminal: the dashboard over the demo's database, with a
small fleet still at work behind it, until Ctrl-C.

The fleet: two instances of the heartbeat demo service (the primary hands over every
``rotate`` seconds: it is stopped and a fresh instance joins, so the terms make a
timeline), two claimers sharing the keys of the claims part, two task workers running the
order workflow of the tasks part, and a feeder that enqueues an order every second. The
dashboard connects as the demo's application role, a member of ``tenure_worker``.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO

import psycopg

from tenure.dashboard import DashboardServer, Settings
from tenure.driver import Driver
from tenure.testing.child import ChildProcess
from tenure.testing.claims import ClaimerProcess
from tenure.testing.database import APP_ROLE, setup
from tenure.testing.heartbeat import ServiceProcess
from tenure.testing.tasks import TaskWorkerProcess

UTYPE, KEYSPACE, KEYS = "demo", "demo-services", 12
INTERVAL, TIMEOUT, CYCLE, EXPIRY, LEASE = 0.5, 1.5, 0.5, 1.5, 2.0


@dataclass
class Fleet:
    """The demo services behind the dashboard, each a child process logging under ``workdir``."""

    app_conninfo: str
    workdir: Path
    processes: list[ChildProcess] = field(default_factory=list)
    electors: list[ServiceProcess] = field(default_factory=list)
    spawned: int = 0

    def elector(self) -> ServiceProcess:
        self.spawned += 1
        service = ServiceProcess.spawn(
            self.app_conninfo,
            UTYPE,
            self.workdir / f"live-instance-{self.spawned}.log",
            interval=INTERVAL,
            timeout=TIMEOUT,
        )
        self.processes.append(service)
        self.electors.append(service)
        return service

    def start(self) -> None:
        for _ in range(2):
            self.elector()
        self.processes += [
            ClaimerProcess(
                self.app_conninfo,
                KEYSPACE,
                self.workdir / f"live-claimer-{n}.log",
                cycle=CYCLE,
                expiry=EXPIRY,
            )
            for n in (1, 2)
        ]
        self.processes += [
            TaskWorkerProcess(
                self.app_conninfo,
                "tenure.demo.tasks",
                self.workdir / f"live-worker-{n}.log",
                lease=LEASE,
                poll_interval=0.2,
                concurrency=2,
            )
            for n in (1, 2)
        ]

    def hand_over(self, driver: Driver) -> None:
        """Stop the primary (SIGTERM: it steps down) and start a fresh instance in its place."""
        primary = driver.get_primary(UTYPE)
        if primary is None:
            return
        for service in self.electors:
            if service.process.poll() is None and service.instance_id(wait=1.0) == primary.instance_id:
                service.stop()
                self.electors.remove(service)
                self.elector()
                return

    def running(self) -> list[ChildProcess]:
        return [p for p in self.processes if p.process.poll() is None]

    def stop(self) -> None:
        for process in self.processes:
            process.signal(signal.SIGTERM)  # all at once, then wait for each
        for process in self.processes:
            process.stop()


def _feed(admin_conninfo: str, fleet: Fleet, stop: threading.Event, rotate: float) -> None:
    """An order every second; the primary handed over every ``rotate`` seconds."""
    with psycopg.connect(admin_conninfo, autocommit=True) as connection:
        driver = Driver(connection)
        order, next_rotation = 10_000, time.monotonic() + rotate
        while not stop.wait(1.0):
            order += 1
            driver.task_enqueue("order", {"order": order})
            if time.monotonic() >= next_rotation:
                fleet.hand_over(driver)
                next_rotation = time.monotonic() + rotate


@contextlib.contextmanager
def live(
    admin_conninfo: str, *, workdir: Path, host: str = "127.0.0.1", port: int = 0, rotate: float = 30.0
) -> Iterator[tuple[DashboardServer, Fleet]]:
    """The fleet at work and the dashboard over it while the ``with`` block runs; both are
    stopped when it ends, however it ends."""
    app_conninfo = setup(admin_conninfo)
    with psycopg.connect(admin_conninfo, autocommit=True) as admin:
        Driver(admin).claim_register(KEYSPACE, [f"service-{n:02d}" for n in range(1, KEYS + 1)])
    fleet = Fleet(app_conninfo, workdir)
    stop = threading.Event()
    feeder = threading.Thread(
        target=_feed, args=(admin_conninfo, fleet, stop, rotate), name="demo feeder", daemon=True
    )
    try:
        fleet.start()
        feeder.start()
        with contextlib.ExitStack() as stack:
            settings = Settings(refresh=2.0)
            try:
                server = stack.enter_context(
                    DashboardServer(app_conninfo, host=host, port=port, settings=settings)
                )
            except OSError:  # the port is taken: any free one will do
                server = stack.enter_context(
                    DashboardServer(app_conninfo, host=host, port=0, settings=settings)
                )
            yield server, fleet
    finally:
        stop.set()
        if feeder.is_alive():
            feeder.join(10)
        fleet.stop()


def run_live(
    admin_conninfo: str,
    *,
    workdir: Path,
    host: str = "127.0.0.1",
    port: int = 8080,
    rotate: float = 30.0,
    stop: threading.Event | None = None,
    out: IO[str] | None = None,
) -> None:
    """Print the dashboard's URL and keep it and the fleet up until SIGINT or SIGTERM (or
    ``stop`` is set); then stop everything. Must run on the main thread (signal handlers)."""
    out = out or sys.stdout
    stop = stop or threading.Event()

    def stopping(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {signum: signal.signal(signum, stopping) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        with live(admin_conninfo, workdir=workdir, host=host, port=port, rotate=rotate) as (server, _):
            print(
                f"\ntenure dashboard: {server.url}/ (read-only, as the role {APP_ROLE}), over a small fleet "
                f"still at work: 2 electors of {UTYPE!r} (the primary hands over every {rotate:g} s), "
                f"2 claimers of {KEYSPACE!r}, 2 task workers, an order a second. Ctrl-C stops it.",
                file=out,
                flush=True,
            )
            while not stop.wait(0.5):
                pass
            print("stopping the dashboard and the fleet", file=out, flush=True)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
