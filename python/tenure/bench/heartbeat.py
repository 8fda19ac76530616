"""Heartbeat throughput (renewals per second against a one-row UPDATE) and takeover
times after SIGKILL of the primary (against T + I).
"""

from __future__ import annotations

import signal
from pathlib import Path

import psycopg

from tenure.bench.common import interleaved, percentile, pgbench_rate, rate_line
from tenure.driver import Driver
from tenure.testing.database import server_now, setup
from tenure.testing.heartbeat import ServiceProcess, wait_for_primary
from tenure.testing.history import read_terms

BASELINE_SQL = "UPDATE tenure_bench.row SET v = v + 1 WHERE id = :client_id;\n"


OWN_TYPE_SQL = (
    "SELECT * FROM tenure.update_heartbeat(md5('bench' || :client_id)::uuid, 'bench-' || :client_id, "
    "'3 s', '1 s');\n"
)


SHARED_TYPE_SQL = (
    "SELECT * FROM tenure.update_heartbeat(md5('bench' || :client_id)::uuid, 'bench-shared', '3 s', '1 s');\n"
)


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


def heartbeat_throughput(
    admin_conninfo: str, *, clients: int, seconds: float, workdir: Path, repeat: int = 1
) -> None:
    """Renewals per second, each client its own type and all bidding for one, against a
    one-row UPDATE: steady rates (each run's first second apart as its start-up), ``repeat``
    interleaved rounds, medians."""
    rows = {
        "baseline  pgbench one-row UPDATE": BASELINE_SQL,
        f"heartbeat {clients} electors, one type each": OWN_TYPE_SQL,
        f"heartbeat {clients} electors bidding for one type": SHARED_TYPE_SQL,
    }
    runs = interleaved(
        list(rows),
        lambda label, _: pgbench_rate(
            admin_conninfo, rows[label], clients=clients, seconds=seconds, workdir=workdir
        ),
        repeat=repeat,
        show=lambda label, run: f"{label} {run.rate:,.0f} /s",
    )
    print(
        f"  heartbeat renewals per second, {clients} pgbench clients, {seconds:.0f} s a run (the first "
        f"second apart, as the start-up){f'; medians of {repeat} interleaved rounds' if repeat > 1 else ''}:"
    )
    baseline = runs[next(iter(rows))]
    for label, measured in runs.items():
        print(f"  {rate_line(label, measured, baseline, width=44)}", flush=True)


def takeover(admin_conninfo: str, *, kills: int, workdir: Path) -> None:
    """Seconds from a SIGKILL of the primary to the next term, against T + I."""
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
