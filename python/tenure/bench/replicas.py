"""Replica failover: the active replica behind HAProxy SIGKILLed again and again; the time
from the kill to the first successful request, against the acquisition interval plus
the health-check interval, without and with a grace period.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import psycopg

from tenure.bench.common import percentile
from tenure.testing.database import setup
from tenure.testing.haproxy import HAProxy
from tenure.testing.replicas import Client, ReplicaProcess, ReplicaSettings, wait_for_active


def replica_failover_times(
    admin_conninfo: str, *, trials: int, settings: ReplicaSettings, workdir: Path
) -> list[tuple[float, int]]:
    """(seconds from SIGKILL to the first successful request through HAProxy, failed requests) per trial."""
    conninfo = setup(admin_conninfo)
    results: list[tuple[float, int]] = []
    spawned = 0

    def spawn(name: str, port: int | None = None) -> ReplicaProcess:
        nonlocal spawned
        spawned += 1
        return ReplicaProcess(
            conninfo, name, workdir / f"replica-{spawned}.log", settings=settings, port=port
        )

    replicas = [spawn(f"r{n}") for n in (1, 2, 3)]
    admin = psycopg.connect(admin_conninfo, autocommit=True)
    try:
        with HAProxy(
            [(r.name, r.port) for r in replicas], workdir, check_interval=settings.check_interval
        ) as lb:
            client = Client(lb.url).start()
            try:
                for _ in range(trials):
                    active = wait_for_active(replicas, admin)
                    client.wait_success_after(time.monotonic())
                    while any(r.health() == 0 for r in replicas):  # the last replacement is serving
                        time.sleep(0.05)
                    time.sleep(2 * settings.check_interval)
                    killed_at = time.monotonic()
                    active.signal(signal.SIGKILL)
                    success = client.wait_success_after(killed_at, other_than=active.replica)
                    results.append((success.done - killed_at, client.failed_between(killed_at, success.done)))
                    active.process.wait()
                    replicas[replicas.index(active)] = spawn(active.name, active.port)
            finally:
                client.stop()
    finally:
        for replica in replicas:
            replica.stop()
        admin.close()
    return results


def replica_failover(admin_conninfo: str, *, trials: int, workdir: Path) -> None:
    if trials < 1:
        return
    print(f"  replica failover through HAProxy, {trials} SIGKILLs of the active replica each:")
    print("    setting                                  p50       p99       max   vs I + check   failed/kill")
    for grace in (0.0, 0.6):
        settings = ReplicaSettings(interval=0.2, idle_timeout=0.6, grace=grace, check_interval=0.1)
        results = replica_failover_times(admin_conninfo, trials=trials, settings=settings, workdir=workdir)
        times = [t for t, _ in results]
        base = settings.interval + settings.check_interval
        p50, p99, worst = percentile(times, 50), percentile(times, 99), max(times)
        label = f"I = {settings.interval} s, check {settings.check_interval} s, grace {grace} s"
        print(
            f"    {label:<40} {p50:6.3f} s  {p99:6.3f} s  {worst:6.3f} s   "
            f"{p50 / base:4.1f} / {worst / base:4.1f}    {sum(f for _, f in results) / len(results):8.1f}",
            flush=True,
        )
        print(
            f"      bound grace + 3 I + 2 checks = {settings.failover_bound:.3f} s; "
            f"{sum(t > settings.failover_bound for t in times)} of {len(times)} over it"
        )
