"""``tenure bench``: figures as ratios to baselines measured in the same run.

1. Heartbeat throughput: pgbench clients each acting as an elector renewing its own
   service type with ``update_heartbeat``, against pgbench running a one-row UPDATE
   with the same number of clients on the same cluster.
2. Contended bids: every client bidding for one type (one renews, the rest are
   discarded), against the same baseline.
3. Takeover time: demo service processes, the primary SIGKILLed again and again; the
   time from the kill (server clock) to the start of the next term, against T + I.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import psycopg

from tenure.demo import ServiceProcess, server_now, setup, wait_for_primary
from tenure.driver import Driver
from tenure.history import read_terms

BASELINE_SQL = "UPDATE tenure_bench.row SET v = v + 1 WHERE id = :client_id;\n"
OWN_TYPE_SQL = (
    "SELECT * FROM tenure.update_heartbeat(md5('bench' || :client_id)::uuid, 'bench-' || :client_id, "
    "'3 s', '1 s');\n"
)
SHARED_TYPE_SQL = (
    "SELECT * FROM tenure.update_heartbeat(md5('bench' || :client_id)::uuid, 'bench-shared', '3 s', '1 s');\n"
)


def pgbench_tps(conninfo: str, script: str, *, clients: int, seconds: float, workdir: Path) -> float:
    path = workdir / f"script-{abs(hash(script))}.sql"
    path.write_text(script)
    pgbench = shutil.which("pgbench") or "/usr/lib/postgresql/15/bin/pgbench"
    command = [
        pgbench,
        "--no-vacuum",
        "--client",
        str(clients),
        "--jobs",
        str(min(clients, os.cpu_count() or 1)),
        "--time",
        str(max(1, round(seconds))),
        "--file",
        str(path),
    ]
    if conninfo:
        command.append(conninfo)
    result = subprocess.run(command, capture_output=True, text=True, check=True)
    match = re.search(r"tps = ([0-9.]+) \(without initial connection time\)", result.stdout)
    if match is None:
        raise RuntimeError(f"pgbench printed no tps:\n{result.stdout}\n{result.stderr}")
    return float(match.group(1))


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * p // 100))
    return ordered[int(rank) - 1]


def takeover_times(
    admin_conninfo: str, *, kills: int, interval: float, timeout: float, workdir: Path
) -> list[float]:
    app_conninfo = setup(admin_conninfo)
    utype = "bench-takeover"
    times: list[float] = []
    spawned = 0

    def spawn() -> ServiceProcess:
        nonlocal spawned
        spawned += 1
        return ServiceProcess.spawn(
            app_conninfo, utype, workdir / f"takeover-{spawned}.log", interval=interval, timeout=timeout
        )

    services = [spawn() for _ in range(3)]
    with psycopg.connect(admin_conninfo, autocommit=True) as admin:
        driver = Driver(admin)
        try:
            by_id = {service.instance_id(): service for service in services}
            for _ in range(kills):
                primary, _term = wait_for_primary(driver, utype)
                killed_at = server_now(admin)
                victim = by_id.pop(primary)
                victim.signal(signal.SIGKILL)
                victim.process.wait()
                _, term = wait_for_primary(driver, utype, other_than=primary)
                started = next(t.started_at for t in read_terms(admin, utype) if t.term == term)
                times.append((started - killed_at).total_seconds())
                replacement = spawn()
                by_id[replacement.instance_id()] = replacement
                services.append(replacement)
        finally:
            for service in services:
                service.stop()
    return times


def run_bench(admin_conninfo: str, *, seconds: float, clients: int, kills: int) -> int:
    workdir = Path(tempfile.mkdtemp(prefix="tenure-bench-"))
    with psycopg.connect(admin_conninfo, autocommit=True) as admin:
        admin.execute("CREATE SCHEMA IF NOT EXISTS tenure_bench")
        admin.execute("CREATE TABLE IF NOT EXISTS tenure_bench.row (id int PRIMARY KEY, v bigint NOT NULL)")
        admin.execute(
            "INSERT INTO tenure_bench.row SELECT g, 0 FROM generate_series(0, %s) g ON CONFLICT DO NOTHING",
            (clients,),
        )

    print(f"tenure bench: {clients} clients, {seconds:.0f} s per throughput run, {kills} kills")
    baseline = pgbench_tps(admin_conninfo, BASELINE_SQL, clients=clients, seconds=seconds, workdir=workdir)
    own = pgbench_tps(admin_conninfo, OWN_TYPE_SQL, clients=clients, seconds=seconds, workdir=workdir)
    shared = pgbench_tps(admin_conninfo, SHARED_TYPE_SQL, clients=clients, seconds=seconds, workdir=workdir)
    print(f"  baseline  pgbench one-row UPDATE               {baseline:10.0f} tps   1.00")
    print(f"  heartbeat {clients} electors, one type each        {own:10.0f} /s    {own / baseline:.2f}")
    print(
        f"  heartbeat {clients} electors bidding for one type   {shared:10.0f} /s    {shared / baseline:.2f}"
    )

    interval, timeout = 0.2, 0.6
    times = takeover_times(admin_conninfo, kills=kills, interval=interval, timeout=timeout, workdir=workdir)
    bound = timeout + interval
    if times:
        p50, p99, worst = percentile(times, 50), percentile(times, 99), max(times)
        print(
            f"  takeover after SIGKILL of the primary, I = {interval} s, T = {timeout} s, {len(times)} kills:"
        )
        print(
            f"    p50 {p50:.3f} s ({p50 / bound:.2f} of T + I)   p99 {p99:.3f} s ({p99 / bound:.2f})   "
            f"max {worst:.3f} s ({worst / bound:.2f}); bound T + I = {bound:.3f} s; "
            f"{sum(t > bound for t in times)} over the bound"
        )
    print(f"  logs: {workdir}")
    return 0
