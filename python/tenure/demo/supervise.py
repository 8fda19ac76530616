"""The supervised-command part of ``tenure demo``: three ``tenure elect --exec`` shims run a
small program (:mod:`tenure.testing.fenced_child`, standing for a service in any language)
that makes fenced writes with the term in its environment. The primary's shim is
SIGKILLed; its warden stops the orphaned child at once, and a standby's child takes over
once the term expires. The children's own logs are checked against each other (never two
alive at once) and against the database (every write inside its writer's term).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import IO

import psycopg

from tenure.testing.database import setup
from tenure.testing.history import read_terms
from tenure.testing.supervise import Fleet, check_heartbeat_writes, check_no_overlap

UTYPE = "demo-exec"
INTERVAL, TIMEOUT = 0.5, 1.5
STARTUP = 2.0  # a child's start-up and first write, beyond the takeover bound


def run_supervise_demo(admin_conninfo: str, *, workdir: Path, out: IO[str] | None = None) -> bool:
    """Run this part; True when every check held."""
    out = out or sys.stdout
    app_conninfo = setup(admin_conninfo)
    admin = psycopg.connect(admin_conninfo, autocommit=True)
    # An earlier run's rows and terms: this part checks its own run against the database.
    admin.execute("DELETE FROM tenure_demo.work WHERE utype = %s", (UTYPE,))
    admin.execute("DELETE FROM tenure.heartbeat WHERE utype = %s", (UTYPE,))
    print(
        f"\ntenure demo, a supervised command: 3 shims `tenure elect --type {UTYPE} --interval {INTERVAL} "
        f"--timeout {TIMEOUT} --exec -- python fenced_child.py`; the child makes a fenced write every 0.1 s "
        f"with the term in its environment",
        file=out,
    )
    workdir = workdir / "supervise"
    names: dict[object, str] = {}
    with Fleet(
        admin, app_conninfo, workdir, elect=UTYPE, interval=INTERVAL, timeout=TIMEOUT, every=0.1
    ) as fleet:
        for _ in range(3):
            fleet.spawn()
        names.update({shim.instance_id: shim.name for shim in fleet.shims})
        first = fleet.wait_for_child()
        origin = first.started
        print(
            f"  {names[first.instance]}'s child (pid {first.pid}) runs in term {first.grant}; "
            "letting it work for 2 s",
            file=out,
        )
        time.sleep(2)
        fault = fleet.strike("shim SIGKILL", first)
        successor = fleet.wait_for_child(after=fault.at)
        first = fleet.wait_gone(first)
        print(
            f"  {names[successor.instance]}'s child (pid {successor.pid}) took over in term "
            f"{successor.grant}; letting it work for 2 s",
            file=out,
        )
        time.sleep(2)
        fleet.stop()
        lives = fleet.watch.lives()
    first = next(x for x in lives if x.pid == first.pid)
    successor = next(x for x in lives if x.pid == successor.pid)
    terms = {t.term: t for t in read_terms(admin, UTYPE)}

    def at(mono: float | None) -> str:
        return "   ?   " if mono is None else f"{mono - origin:7.3f}"

    print("\ntimeline (seconds on the host's monotonic clock, from the first child's start):", file=out)
    rows = [
        (first.started, f"{names[first.instance]}'s child starts in term {first.grant}"),
        (
            first.writes[-1]["mono"] if first.writes else None,
            f"its last fenced write ({len(first.writes)} in all)",
        ),
        (fault.at, f"SIGKILL {names[first.instance]} (pid {fault.shim.pid}): its warden's pipe closes"),
        (first.sigterm, "the child gets SIGTERM from the warden"),
        (first.died, "the child exits"),
        (successor.started, f"{names[successor.instance]}'s child starts in term {successor.grant}"),
        (successor.writes[0]["mono"] if successor.writes else None, "its first fenced write"),
    ]
    for mono, what in sorted(rows, key=lambda row: row[0] if row[0] is not None else float("inf")):
        print(f"  {at(mono)}  {what}", file=out)
    old, new = terms.get(first.grant), terms.get(successor.grant)
    if old is not None and new is not None:
        print(
            f"  (server clock: term {old.term} ended at {old.ended_at:%H:%M:%S.%f} ({old.end_reason}: its "
            f"last renewal + T), term {new.term} began at {new.started_at:%H:%M:%S.%f})",
            file=out,
        )

    took = successor.started - fault.at
    bound = TIMEOUT + INTERVAL
    problems = check_no_overlap(lives) + check_heartbeat_writes(admin, UTYPE, lives)
    admin.close()
    dead_for = successor.started - first.until
    print(
        f"\nhandover: the killed shim's child was dead {dead_for:.3f} s before the next child started; "
        f"the next child started {took:.3f} s after the kill (bound T + I = {bound:.3f} s plus a child's "
        f"start-up: {'within' if took <= bound + STARTUP else 'OVER'})",
        file=out,
    )
    for problem in problems:
        print(f"  VIOLATION: {problem}", file=out)
    writes = sum(len(x.writes) for x in lives)
    if not problems:
        print(
            f"checked: never two children alive at once (from their own logs and a watch on /proc), all "
            f"{writes} fenced writes the children logged are in the table, inside their writer's term",
            file=out,
        )
    print(f"shim and child logs: {workdir}", file=out)
    return not problems and took <= bound + STARTUP and first.writes != [] and successor.writes != []
