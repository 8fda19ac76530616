"""The heartbeat part of ``tenure demo``: three instances of the demo service
(``tenure.testing.heartbeat``) elect a primary that does fenced writes, the primary
is killed with SIGKILL, a follower takes over; the terms and writes are checked
against each other and drawn as a timeline.
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path
from typing import IO

import psycopg

from tenure.driver import Driver
from tenure.testing import plots
from tenure.testing.database import server_now, setup
from tenure.testing.heartbeat import ServiceProcess, read_writes, wait_for_primary
from tenure.testing.history import check_terms, check_writes, read_terms


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
