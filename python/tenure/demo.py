"""The demo service and the demo that runs three of it and kills the primary.

A demo service instance runs an elector and, while primary, does "primary work":
every ``work_every`` seconds a write to ``tenure_demo.work`` fenced by
``heartbeat_fence`` in the same transaction. It prints one JSON line per event.
Run one with ``python -m tenure.demo --db URL --type demo``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import IO, Any
from uuid import UUID

import psycopg
from psycopg.conninfo import make_conninfo
from psycopg.rows import class_row

from tenure import plots
from tenure.connect import connect
from tenure.driver import Driver
from tenure.elector import Elector
from tenure.errors import NotPrimary
from tenure.history import FencedWrite, check_terms, check_writes, read_terms
from tenure.shutdown import wait_for_shutdown

APP_ROLE = "tenure_demo_app"

SETUP_SQL = f"""
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{APP_ROLE}') THEN
        CREATE ROLE {APP_ROLE} LOGIN IN ROLE tenure_worker;
    END IF;
END
$$;
CREATE SCHEMA IF NOT EXISTS tenure_demo;
CREATE TABLE IF NOT EXISTS tenure_demo.work (
    id          bigserial   PRIMARY KEY,
    utype       text        NOT NULL,
    instance_id uuid        NOT NULL,
    term        bigint      NOT NULL,
    done_at     timestamptz NOT NULL DEFAULT clock_timestamp()
);
GRANT USAGE ON SCHEMA tenure_demo TO {APP_ROLE};
GRANT INSERT ON tenure_demo.work TO {APP_ROLE};
GRANT USAGE ON SEQUENCE tenure_demo.work_id_seq TO {APP_ROLE};
"""


def setup(admin_conninfo: str) -> str:
    """Create the demo's table and login role; returns the application's conninfo."""
    with psycopg.connect(admin_conninfo, autocommit=True) as connection:
        connection.execute(SETUP_SQL)
    return make_conninfo(admin_conninfo, user=APP_ROLE)


def read_writes(connection: psycopg.Connection[Any]) -> list[FencedWrite]:
    with connection.cursor(row_factory=class_row(FencedWrite)) as cursor:
        cursor.execute("SELECT utype, instance_id, term, done_at FROM tenure_demo.work ORDER BY id")
        return cursor.fetchall()


# -- one service instance ----------------------------------------------------------


def _emit(event: str, **fields: object) -> None:
    line = {"event": event, "mono": round(time.monotonic(), 4), **fields}
    print(json.dumps(line, default=str), flush=True)


def run_service(conninfo: str, utype: str, *, interval: float, timeout: float, work_every: float) -> None:
    elector = Elector(
        conninfo,
        utype,
        interval=interval,
        timeout=timeout,
        on_elected=lambda term: _emit("elected", term=term),
        on_demoted=lambda reason: _emit("demoted", reason=reason),
    )
    stop = threading.Event()

    def primary_work() -> None:
        work = connect(conninfo, application_name=f"tenure demo work {elector.name}", deadline=timeout)
        driver = Driver(work)
        while not stop.wait(work_every):
            term = elector.term
            if term is None:
                continue
            try:
                with work.transaction():
                    driver.heartbeat_fence(elector.instance_id, utype, term)
                    work.execute(
                        "INSERT INTO tenure_demo.work (utype, instance_id, term) VALUES (%s, %s, %s)",
                        (utype, elector.instance_id, term),
                    )
                _emit("work", term=term)
            except NotPrimary as refused:
                _emit("refused", term=term, detail=refused.detail)
            except psycopg.Error as error:
                _emit("work_failed", term=term, error=str(error).splitlines()[0])
                if work.closed or work.broken:
                    work = connect(
                        conninfo, application_name=f"tenure demo work {elector.name}", deadline=timeout
                    )
                    driver = Driver(work)
        work.close()

    with elector:
        _emit("started", instance_id=str(elector.instance_id), name=elector.name, pid=os.getpid())
        worker = threading.Thread(target=primary_work, name="demo-work", daemon=True)
        worker.start()
        wait_for_shutdown()
        stop.set()
        worker.join()
    _emit("resigned")


def service_main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tenure.demo", description="one demo service instance")
    parser.add_argument("--db", default=os.environ.get("TENURE_DB", ""), help="conninfo or URL")
    parser.add_argument("--type", dest="utype", default="demo")
    parser.add_argument("--interval", type=float, default=0.5)
    parser.add_argument("--timeout", type=float, default=1.5)
    parser.add_argument("--work-every", type=float, default=0.1)
    args = parser.parse_args(argv)
    run_service(args.db, args.utype, interval=args.interval, timeout=args.timeout, work_every=args.work_every)


# -- running several as processes ------------------------------------------------


class ChildProcess:
    """A child process whose output goes to a log file; stopped with SIGTERM, then SIGKILL."""

    def __init__(self, command: list[str], log_path: Path, *, env: dict[str, str] | None = None) -> None:
        self.log_path = log_path
        with open(log_path, "wb") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)

    def output(self) -> str:
        return self.log_path.read_text()

    def wait_for_output(self, pattern: str, wait: float = 20.0) -> re.Match[str]:
        end = time.monotonic() + wait
        while time.monotonic() < end:
            found = re.search(pattern, self.output())
            if found:
                return found
            time.sleep(0.05)
        raise TimeoutError(f"process {self.process.pid} printed no {pattern!r}; output:\n{self.output()}")

    def signal(self, signum: int) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signum)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


class ServiceProcess(ChildProcess):
    """A demo service instance (python -m tenure.demo) as a child process."""

    def __init__(self, conninfo: str, utype: str, log_path: Path, *, interval: float, timeout: float) -> None:
        super().__init__(
            [
                sys.executable,
                "-m",
                "tenure.demo",
                "--db",
                conninfo,
                "--type",
                utype,
                "--interval",
                str(interval),
                "--timeout",
                str(timeout),
            ],
            log_path,
        )
        self.utype = utype

    @classmethod
    def spawn(
        cls, conninfo: str, utype: str, log_path: Path, *, interval: float, timeout: float
    ) -> ServiceProcess:
        return cls(conninfo, utype, log_path, interval=interval, timeout=timeout)

    def events(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.output().splitlines() if line.startswith("{")]

    def instance_id(self, wait: float = 10.0) -> UUID:
        return UUID(self.wait_for_output(r'"instance_id": "([0-9a-f-]{36})"', wait).group(1))


class TaskWorkerProcess(ChildProcess):
    """``tenure task worker`` as a child process."""

    def __init__(
        self,
        conninfo: str,
        module: str,
        log_path: Path,
        *,
        lease: float,
        poll_interval: float,
        concurrency: int = 4,
        env: dict[str, str] | None = None,
    ) -> None:
        super().__init__(
            [
                sys.executable,
                "-m",
                "tenure",
                "task",
                "worker",
                "--db",
                conninfo,
                "--module",
                module,
                "--concurrency",
                str(concurrency),
                "--lease",
                str(lease),
                "--poll-interval",
                str(poll_interval),
                "--grace",
                "1",
            ],
            log_path,
            env=env,
        )
        self.instance_id = UUID(self.wait_for_output(r"task worker ([0-9a-f-]{36})").group(1))


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


def server_now(connection: psycopg.Connection[Any]) -> datetime:
    row = connection.execute("SELECT clock_timestamp()").fetchone()
    assert row is not None
    return row[0]  # type: ignore[no-any-return]


# -- the demo ------------------------------------------------------------------------


def run_demo(
    admin_conninfo: str,
    *,
    instances: int = 3,
    interval: float = 0.5,
    timeout: float = 1.5,
    workdir: Path,
    out: IO[str] | None = None,
) -> bool:
    """Run the demo; returns True when every check held."""
    out = out or sys.stdout
    utype = "demo"
    app_conninfo = setup(admin_conninfo)
    admin = psycopg.connect(admin_conninfo, autocommit=True)
    driver = Driver(admin)
    print(
        f"tenure demo: {instances} instances of a service of type {utype!r}, "
        f"heartbeat every I = {interval} s, timeout T = {timeout} s",
        file=out,
    )
    services = [
        ServiceProcess.spawn(
            app_conninfo, utype, workdir / f"instance-{n}.log", interval=interval, timeout=timeout
        )
        for n in range(1, instances + 1)
    ]
    names = {service.instance_id(): f"instance-{n}" for n, service in enumerate(services, start=1)}
    by_id = {service.instance_id(): service for service in services}
    try:
        first, term = wait_for_primary(driver, utype)
        print(f"  {names[first]} is primary in term {term}; letting it work for 3 s", file=out)
        time.sleep(3)
        killed_at = server_now(admin)
        by_id[first].signal(signal.SIGKILL)
        print(
            f"  SIGKILL {names[first]} (pid {by_id[first].process.pid}) at {killed_at:%H:%M:%S.%f}", file=out
        )
        second, term = wait_for_primary(driver, utype, other_than=first)
        print(f"  {names[second]} took over in term {term}; letting it work for 3 s", file=out)
        time.sleep(3)
    finally:
        for service in services:
            service.stop()
    terms = read_terms(admin, utype)
    writes = read_writes(admin)
    admin.close()

    print("\ntimeline (server clock, UTC):", file=out)
    for t in terms:
        count = sum(1 for w in writes if w.term == t.term)
        print(
            f"  term {t.term}: {names.get(t.instance_id, t.instance_id)!s:<11} "
            f"{t.started_at:%H:%M:%S.%f} -> {t.ended_at:%H:%M:%S.%f}  "
            f"{t.end_reason or 'running':<8} {count:4d} fenced writes",
            file=out,
        )
    takeover = next(t for t in terms if t.instance_id == second)
    took = (takeover.started_at - killed_at).total_seconds()
    bound = timeout + interval
    print(
        f"\ntakeover: {took:.3f} s after the kill; bound T + I = {bound:.3f} s "
        f"({'within' if took <= bound else 'OVER'} the bound, {took / bound:.0%} of it)",
        file=out,
    )
    problems = check_terms(terms) + check_writes(terms, writes)
    for problem in problems:
        print(f"  VIOLATION: {problem}", file=out)
    if not problems:
        print(
            f"checked: no two primaries at any instant, terms only grow, all {len(writes)} fenced writes "
            "fall inside their writer's term",
            file=out,
        )
    picture = plots.timeline(
        workdir / "leadership.png",
        title=f"primary of {utype!r} across a SIGKILL (I = {interval} s, T = {timeout} s)",
        holds=[
            (names.get(t.instance_id, str(t.instance_id)[:8]), t.started_at, t.ended_at, f"term {t.term}")
            for t in terms
        ],
        events=[("SIGKILL", killed_at)],
        out=out,
    )
    if picture is not None:
        print(f"picture: {picture}", file=out)
    print(f"instance logs: {workdir}", file=out)
    return not problems


if __name__ == "__main__":
    service_main()
