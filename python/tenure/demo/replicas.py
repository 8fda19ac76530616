"""The replicas part of ``tenure demo``: three replicas of a small HTTP service
(``tenure.testing.replicas``) behind HAProxy (Debian's package, on loopback, with an
HTTP health check on ``/health/active``), a client writing through it, the active
replica killed with SIGKILL; what the client was told is checked against the
database and the epochs are drawn as a timeline.
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path
from typing import IO

import psycopg

from tenure.testing import plots
from tenure.testing.database import setup
from tenure.testing.haproxy import HAProxy
from tenure.testing.replicas import (
    Client,
    ReplicaProcess,
    ReplicaSettings,
    check_replica_records,
    read_replica_records,
    wait_for_active,
)


def run_replica_demo(
    admin_conninfo: str, *, workdir: Path, settings: ReplicaSettings | None = None, out: IO[str] | None = None
) -> bool:
    """Three replicas behind HAProxy, a client, the active replica SIGKILLed; True when every check held."""
    out = out or sys.stdout
    settings = settings or ReplicaSettings()
    conninfo = setup(admin_conninfo)
    admin = psycopg.connect(admin_conninfo, autocommit=True)
    print(
        f"\ntenure demo, replicas: 3 replicas of a small HTTP service behind HAProxy, one active; "
        f"acquisition and ping every {settings.interval} s, idle_session_timeout {settings.idle_timeout} s, "
        f"grace {settings.grace} s, health check every {settings.check_interval} s",
        file=out,
    )
    replicas = [
        ReplicaProcess(conninfo, f"replica-{n}", workdir / f"replica-{n}.log", settings=settings)
        for n in (1, 2, 3)
    ]
    try:
        with HAProxy(
            [(r.name, r.port) for r in replicas], workdir, check_interval=settings.check_interval
        ) as haproxy:
            first = wait_for_active(replicas, admin)
            client = Client(haproxy.url).start()
            client.wait_success_after(time.monotonic())
            print(f"  {first.name} is active; the client writes through {haproxy.url} for 2 s", file=out)
            time.sleep(2)
            killed_at = time.monotonic()
            first.signal(signal.SIGKILL)
            print(f"  SIGKILL {first.name} (pid {first.process.pid})", file=out)
            success = client.wait_success_after(killed_at, other_than=first.replica)
            failed = client.failed_between(killed_at, success.done)
            took = success.done - killed_at
            print(
                f"  {success.replica} answers through HAProxy {took:.3f} s after the kill "
                f"(bound {settings.failover_bound:.2f} s: grace + 3 intervals + 2 health checks; the dead "
                f"replica's reservation ran out first); {failed} requests failed meanwhile",
                file=out,
            )
            time.sleep(2)
            client.stop()
    finally:
        for replica in replicas:
            replica.stop()
    terms, writes = read_replica_records(admin)
    admin.close()
    print("\ntimeline of the lock (server clock, UTC):", file=out)
    for t in terms:
        count = sum(1 for w in writes if w.epoch == t.epoch)
        print(
            f"  epoch {t.epoch}: {t.replica:<22} pid {t.pid:<7} from {t.acquired_at:%H:%M:%S.%f} "
            f"{count:5d} writes",
            file=out,
        )
    answers = client.answers
    accepted = sum(1 for a in answers if a.status == 200)
    problems = check_replica_records(terms, writes, answers)
    for problem in problems:
        print(f"  VIOLATION: {problem}", file=out)
    if not problems:
        print(
            f"checked: {accepted} of {len(answers)} requests accepted, every one recorded; all {len(writes)} "
            "writes made by the lock holder of their epoch inside its term: never two active replicas",
            file=out,
        )
    picture = plots.timeline(
        workdir / "replicas.png",
        title="the active replica across a SIGKILL (each lock epoch, acquired to its last accepted write)",
        holds=[
            (
                t.replica,
                t.acquired_at,
                max((w.done_at for w in writes if w.epoch == t.epoch), default=t.acquired_at),
                f"epoch {t.epoch}",
            )
            for t in terms
        ],
        out=out,
    )
    if picture is not None:
        print(f"picture: {picture}", file=out)
    print(f"replica logs: {workdir}", file=out)
    return not problems
