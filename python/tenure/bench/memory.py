"""Memory: the resident size (VmRSS, from /proc) of one worker process idle, and with
1,000 tasks in flight, tenure (the threaded TaskWorker and the AsyncTaskWorker, each with
``--concurrency 1000``) against pgqueuer (asyncpg, batch 100), on the same cluster.

Idle is measured a second after the worker started on an empty queue (pgqueuer: after
its worker loop started); in flight once the database shows every one of the tasks
leased (tenure) or picked (pgqueuer) and a second more (their handlers started), each task
a sleep of ``hold`` seconds."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

from tenure.bench.common import scalar
from tenure.bench.hold import HOLD_KIND
from tenure.bench.peers import PEER_SCHEMAS, RUNNER, go, peer_workers
from tenure.bench.tasks import LOAD_SQL, WARM_UP, clean, task_workers

IN_FLIGHT = 1000
HOLD = 20.0  # seconds each task takes
PGQUEUER_BATCH = 100
SETTLE = 1.0  # seconds between the last lease (or pick) and the reading


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def wait_for(check: Callable[[], bool], *, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not check():
        if time.monotonic() > end:
            raise TimeoutError(f"{what}: not within {timeout:.0f} s")
        time.sleep(0.05)


def tenure_memory(
    admin: psycopg.Connection[Any],
    conninfo: str,
    *,
    asynchronous: bool,
    tasks: int,
    hold: float,
    workdir: Path,
) -> tuple[float, float]:
    clean(admin)
    name = "async" if asynchronous else "threaded"
    before = os.environ.get("TENURE_BENCH_HOLD")
    os.environ["TENURE_BENCH_HOLD"] = str(hold)  # read by tenure.bench.hold in the worker process
    try:
        with task_workers(
            conninfo,
            1,
            "--poll-interval",
            "0.05",
            logs=workdir / f"memory-tenure-{name}",
            concurrency=tasks,
            asynchronous=asynchronous,
            handled_by=("--module", "tenure.bench.hold"),
        ) as processes:
            pid = processes[0][0].pid
            time.sleep(WARM_UP)
            idle = rss_mib(pid)
            admin.execute(LOAD_SQL["tenure.task"], {"kind": HOLD_KIND, "size": tasks, "priorities": 1})
            leased = "SELECT count(*) FROM tenure.task WHERE kind = %s AND owner IS NOT NULL"
            wait_for(
                lambda: int(scalar(admin, leased, (HOLD_KIND,))) >= tasks,
                timeout=max(hold - SETTLE, 1.0),
                what=f"tenure {name} worker leasing {tasks} tasks",
            )
            time.sleep(SETTLE)
            busy = rss_mib(pid)
    finally:
        if before is None:
            os.environ.pop("TENURE_BENCH_HOLD", None)
        else:
            os.environ["TENURE_BENCH_HOLD"] = before
    clean(admin)
    return idle, busy


def pgqueuer_memory(
    admin: psycopg.Connection[Any], conninfo: str, *, python: str, tasks: int, hold: float, workdir: Path
) -> tuple[float, float]:
    schema = PEER_SCHEMAS["pgqueuer"]
    base = [python, str(RUNNER), "--db", conninfo, "--schema", schema, "pgqueuer-asyncpg"]
    subprocess.run([*base, "install"], check=True, capture_output=True)
    work = [*base, "work", "--batch", str(PGQUEUER_BATCH), "--hold", str(hold)]
    try:
        with peer_workers(work, 1, logs=workdir / "memory-pgqueuer") as processes:
            go(processes)
            pid = processes[0][0].pid
            time.sleep(WARM_UP)
            idle = rss_mib(pid)
            subprocess.run([*base, "enqueue", str(tasks)], check=True, capture_output=True)
            picked = f"SELECT count(*) FROM {schema}.pgqueuer WHERE status = 'picked'"
            wait_for(
                lambda: int(scalar(admin, picked)) >= tasks,
                timeout=max(hold - SETTLE, 1.0),
                what=f"pgqueuer picking {tasks} jobs",
            )
            time.sleep(SETTLE)
            busy = rss_mib(pid)
    finally:
        admin.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    return idle, busy


def memory(
    admin: psycopg.Connection[Any],
    conninfo: str,
    *,
    python: str,
    workdir: Path,
    tasks: int = IN_FLIGHT,
    hold: float = HOLD,
) -> None:
    print(
        f"  memory: resident size (VmRSS) of one worker process, idle and with {tasks:,} tasks in flight "
        f"(each a {hold:g} s sleep), and the ratio of each to pgqueuer's:"
    )
    rows: list[tuple[str, float, float]] = []
    if Path(python).exists():
        rows.append(
            (
                f"pgqueuer, asyncpg, batch {PGQUEUER_BATCH} (baseline)",
                *pgqueuer_memory(admin, conninfo, python=python, tasks=tasks, hold=hold, workdir=workdir),
            )
        )
    else:
        print(f"    (no pgqueuer row: no peers' interpreter at {python})")
    for asynchronous in (False, True):
        label = f"tenure {'AsyncTaskWorker' if asynchronous else 'TaskWorker'}, --concurrency {tasks}"
        rss = tenure_memory(
            admin, conninfo, asynchronous=asynchronous, tasks=tasks, hold=hold, workdir=workdir
        )
        rows.append((label, *rss))
    base_idle, base_busy = (rows[0][1], rows[0][2]) if rows[0][0].startswith("pgqueuer") else (0.0, 0.0)
    for label, idle, busy in rows:
        ratios = f"   {idle / base_idle:5.2f}   {busy / base_busy:5.2f}" if base_idle else ""
        print(f"    {label:<48} idle {idle:7.1f} MiB   in flight {busy:7.1f} MiB{ratios}", flush=True)
