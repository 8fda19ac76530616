"""How long a supervised command outlives its grant: ``tenure elect --exec`` shims whose
child makes fenced writes (:mod:`tenure.testing.fenced_child`), the primary's shim
SIGKILLed, SIGSTOPped or cut off from the database (``pg_terminate_backend`` of its
connections) again and again, at a random point of its renewal cycle.

For each fault, on the host's monotonic clock (server timestamps are carried over to it
through an offset measured around a ``clock_timestamp()`` query):

- fault -> death: from the fault to the child's death (the exit it logs as its last act
  on SIGTERM; when SIGKILLed, the moment a watch polling /proc saw it gone);
- death - window end: from the end of the grant's safe window to the death. The end is
  the last renewal the database recorded plus T - I: for a term that expired,
  ``heartbeat_term.ended_at - T``; for the connections killed, ``heartbeat.renewed_at``
  read in the statement that killed them. The shim counts its window from when it *sent*
  that renewal, a round trip earlier, so its own window ends slightly before this one;
- margin: from the death to the earliest moment another instance could be granted the
  type (that renewal + T): what the bound leaves to spare; it must stay positive.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

from tenure.bench.common import percentile
from tenure.testing.database import setup
from tenure.testing.supervise import Fault, Fleet, ServerClock

KINDS = ("shim SIGKILL", "shim SIGSTOP", "connections killed")


@dataclass(frozen=True)
class Sample:
    kind: str
    fault_to_death: float
    after_window_end: float  # death - (last renewal + T - I); negative: it died before the end
    margin: float  # (last renewal + T) - death
    successor_gap: float  # the successor child's first log line - death
    # the raw times (monotonic), kept in samples.json beside the logs
    fault: float
    sigterm: float | None
    death: float
    renewal: float
    child_pid: int
    shim: str


def _last_renewal(admin: psycopg.Connection[Any], fault: Fault, utype: str, timeout: float) -> datetime:
    if fault.renewed_at is not None:
        return fault.renewed_at
    row = admin.execute(
        "SELECT ended_at, end_reason FROM tenure.heartbeat_term WHERE utype = %s AND term = %s",
        (utype, fault.child.grant),
    ).fetchone()
    if row is None or row[1] != "expired":
        raise RuntimeError(f"term {fault.child.grant} of {utype} did not expire: {row}")
    ended_at: datetime = row[0]
    return ended_at - timedelta(seconds=timeout)


def supervise_samples(
    admin_conninfo: str,
    *,
    faults: int,
    workdir: Path,
    interval: float = 0.3,
    timeout: float = 1.0,
    kinds: tuple[str, ...] = KINDS,
) -> list[Sample]:
    """``faults`` faults of each kind on three shims; one sample per fault, also written to
    ``workdir/supervise/samples.json``."""
    app_conninfo = setup(admin_conninfo)
    utype = f"bench-supervise-{int(time.time())}"
    chooser = random.Random()
    samples: list[Sample] = []
    with (
        psycopg.connect(admin_conninfo, autocommit=True) as admin,
        Fleet(
            admin, app_conninfo, workdir / "supervise", elect=utype, interval=interval, timeout=timeout
        ) as fleet,
    ):
        for _ in range(3):
            fleet.spawn()
        for n in range(faults * len(kinds)):
            kind = kinds[n % len(kinds)]
            child = fleet.wait_for_child()
            time.sleep(interval + chooser.uniform(0, interval))  # anywhere in its renewal cycle
            fault = fleet.strike(kind, child)
            successor = fleet.wait_for_child(after=fault.at)
            child = fleet.wait_gone(child)
            if kind == "shim SIGKILL":
                fleet.spawn()
            elif kind == "shim SIGSTOP":
                fleet.resume(fault)  # it finds its term gone and stands by
            assert child.died is not None
            clock = ServerClock(admin)
            renewal = clock.mono(_last_renewal(admin, fault, utype, timeout))
            samples.append(
                Sample(
                    kind=kind,
                    fault_to_death=child.died - fault.at,
                    after_window_end=child.died - (renewal + timeout - interval),
                    margin=renewal + timeout - child.died,
                    successor_gap=successor.started - child.died,
                    fault=fault.at,
                    sigterm=child.sigterm,
                    death=child.died,
                    renewal=renewal,
                    child_pid=child.pid,
                    shim=fault.shim.name,
                )
            )
    (workdir / "supervise" / "samples.json").write_text(json.dumps([asdict(s) for s in samples], indent=1))
    return samples


def _spread(values: list[float]) -> str:
    return (
        f"p50 {percentile(values, 50):+.3f}  p99 {percentile(values, 99):+.3f}  "
        f"[{min(values):+.3f}, {max(values):+.3f}]"
    )


def supervise(admin_conninfo: str, *, faults: int, workdir: Path) -> None:
    """Print the figures of :func:`supervise_samples`, per kind of fault."""
    interval, timeout = 0.3, 1.0
    samples = supervise_samples(
        admin_conninfo, faults=faults, workdir=workdir, interval=interval, timeout=timeout
    )
    print(
        f"  supervised command (tenure elect --exec), I = {interval} s, T = {timeout} s, kill-grace "
        f"{interval / 2} s, {faults} faults of each kind; seconds, p50 p99 [min, max]:"
    )
    for kind in KINDS:
        of_kind = [s for s in samples if s.kind == kind]
        if not of_kind:
            continue
        print(f"    {kind}:")
        print(f"      fault -> child's death                 {_spread([s.fault_to_death for s in of_kind])}")
        print(
            f"      safe window's end -> child's death     {_spread([s.after_window_end for s in of_kind])}"
        )
        print(f"      death -> earliest takeover (margin)    {_spread([s.margin for s in of_kind])}")
        print(f"      death -> successor's child             {_spread([s.successor_gap for s in of_kind])}")
    unsafe = [s for s in samples if s.margin <= 0]
    print(
        f"    {len(unsafe)} of {len(samples)} children outlived the earliest takeover; every sample: "
        f"{workdir / 'supervise' / 'samples.json'}"
    )
