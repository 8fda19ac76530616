"""A synchronous standby: tenure's task workers against pgqueuer on a two-node Patroni
cluster (:class:`tenure.testing.patroni.PatroniCluster`, ``synchronous_mode`` and
``synchronous_mode_strict`` on) at production durability (fsync, synchronous_commit,
full_page_writes and wal_sync_method at PostgreSQL's defaults), every worker connected to
the primary.

There every writing commit waits for its WAL to be flushed on the primary, sent to the
standby and flushed there too: a commit costs a network round trip and two disk flushes,
so what scales is how many jobs each commit carries. The rows are the peers section's
(:mod:`tenure.bench.peers`), measured the same way (jobs/s between 10% and 90% drained,
start-up apart, ``--repeat`` interleaved rounds with medians, spreads and the machine's
speed during each run (:func:`tenure.bench.common.interleaved`); in the first
round a run whose steady window is shorter than ``min_window``, ``--peer-seconds``, runs
again with a larger backlog, which its row keeps), for
pgqueuer-asyncpg at the batch sizes of :data:`SYNC_BATCHES` and tenure's TaskWorker and
AsyncTaskWorker in the configurations of :data:`SYNC_TENURE`, each shown as a ratio to
pgqueuer's best on the same cluster; and the jobs each writing commit carried in the same
window: jobs finished over transaction ids assigned (every transaction that writes takes
one, and only those wait for the standby; the bench's own reads take none); and, as in
the peers section, the CPU per job of the primary's processes and of the workers.

The section starts the cluster itself (about 10 s: etcd, initdb, a pg_basebackup) and
stops everything it started however it ends (the cluster, the worker processes; SIGTERM
included); Patroni's and PostgreSQL's logs are copied to the bench's workdir.
"""

from __future__ import annotations

import contextlib
import functools
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

import psycopg

from tenure.bench.common import durability, percentile
from tenure.bench.peers import (
    Drained,
    Row,
    best,
    drain_rows,
    peer_key,
    peer_rate,
    per_commit_text,
    per_job_text,
    round_ratios,
    tenure_runners,
)
from tenure.bench.tasks import JOBS_DDL
from tenure.testing import procs
from tenure.testing.patroni import BINARIES, PatroniCluster

SYNC_NODES = 2
SYNC_BATCHES: tuple[int, ...] = (100, 500)  # pgqueuer-asyncpg's batch sizes (its best ones on one node)
SYNC_TENURE: list[tuple[int, int]] = [(2, 1024), (2, 256), (2, 64)]  # (worker processes, --concurrency)
DB = "tenure_bench"
COMMIT_PROBES = 50  # single-row commits timed for the cluster's commit latency


def commit_latency(connection: psycopg.Connection[Any]) -> float:
    """The median of COMMIT_PROBES single writing commits, in ms (each waits for the standby)."""
    times = []
    for _ in range(COMMIT_PROBES):
        began = time.perf_counter()
        connection.execute("SELECT pg_logical_emit_message(true, 'tenure-bench', 'commit probe')")
        times.append(1000 * (time.perf_counter() - began))
    return percentile(times, 50)


@contextlib.contextmanager
def sigterm_exits() -> Iterator[None]:
    """SIGTERM raises SystemExit while the block runs, so its ``finally`` clauses stop the
    cluster and the workers (Python's default for SIGTERM would end the process at once)."""

    def leave(signum: int, frame: FrameType | None) -> None:
        print("tenure bench: SIGTERM, stopping the sync section's workers and cluster", file=sys.stderr)
        raise SystemExit(128 + signum)

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, leave)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def table(rows: Sequence[Row]) -> list[str]:
    reference = best(rows, "pgqueuer-asyncpg")
    header = (
        f"    {'system':<18} {'configuration':<32} {'jobs/s':>8} {'x pgqueuer best':>16} "
        f"{'jobs/commit':>11} {'server us/job':>13} {'workers us/job':>14} {'start-up':>9}   runs"
    )
    lines = [header]
    for row in rows:
        ratio = f"{row.rate / reference.rate:16.2f}" if reference else f"{'-':>16}"
        lines.append(
            f"    {row.system:<18} {row.config:<32} {row.rate:8.0f} {ratio} "
            f"{per_commit_text(row.per_commit):>11} {per_job_text(row.server_us):>13} "
            f"{per_job_text(row.workers_us):>14} "
            f"{row.startup:7.2f} s   {row.rates.describe()}"
        )
    if reference is not None:
        lines.append(f"    reference: pgqueuer best = {reference.config} ({reference.rate:.0f} /s)")
    return lines


def headline(rows: Sequence[Row]) -> list[str]:
    reference = best(rows, "pgqueuer-asyncpg")
    if reference is None:
        return []
    lines = [
        f"  headline, synchronous standby: tenure's best over pgqueuer-asyncpg's best "
        f"({reference.config}, {reference.rate:.0f} /s):"
    ]
    peers = [row for row in rows if row.system == "pgqueuer-asyncpg"]
    for system in ("tenure", "tenure-async"):
        row = best(rows, system)
        if row is not None:
            rounds = round_ratios(row, peers)
            paired = f" (rounds: {' / '.join(f'{r:.2f}' for r in rounds)})" if len(rounds) > 1 else ""
            lines.append(
                f"    {system:<14} {row.config:<32} {row.rate:8.0f} /s   "
                f"{row.rate / reference.rate:.2f}x{paired}"
            )
    return lines


def sync_bench(
    *,
    jobs: int,
    python: str,
    workdir: Path,
    batches: Sequence[int] = SYNC_BATCHES,
    tenure_configs: Sequence[tuple[int, int]] = SYNC_TENURE,
    repeat: int = 1,
    min_window: float = 0.0,
    cluster: PatroniCluster | None = None,
    dbname: str = DB,
) -> list[Row]:
    """Start the cluster (or use ``cluster``, a running one in synchronous mode: the tests
    reuse theirs), deploy tenure into ``dbname`` unless it is there already, run every row
    ``repeat`` times in interleaved rounds, print the table; the cluster started here and
    every worker are gone when this returns or raises."""
    missing = procs.missing_programs(*BINARIES)
    if missing and cluster is None:
        raise RuntimeError(
            f"the sync section needs {', '.join(missing)} (Debian's patroni and etcd-server; "
            "scripts/install-deps.sh, run by make bench, installs them)"
        )
    if batches and not Path(python).exists():
        raise RuntimeError(
            f"no peers' interpreter at {python}: run scripts/install-peers.sh (make bench does)"
        )
    rounds = f", {repeat} interleaved rounds" if repeat > 1 else ""
    nodes = SYNC_NODES if cluster is None else len(cluster.nodes)
    print(
        f"  a synchronous standby: a {nodes}-node Patroni cluster (synchronous_mode_strict), "
        f"{jobs:,} no-op jobs drained on its primary{rounds}"
        f"{f'; runs grown to a steady window of {min_window:g} s or more' if min_window > 0 else ''}:",
        flush=True,
    )
    run = functools.partial(
        _run, jobs=jobs, python=python, workdir=workdir, batches=batches,
        tenure_configs=tenure_configs, repeat=repeat, min_window=min_window, dbname=dbname,
    )  # fmt: skip
    if cluster is not None:
        with sigterm_exits():
            return run(cluster)
    harness = PatroniCluster(nodes=SYNC_NODES, durable=True, scope="tenure-bench-sync")
    with sigterm_exits(), harness as started:
        try:
            return run(started)
        finally:
            for label, path in started.log_paths().items():
                with contextlib.suppress(OSError):
                    shutil.copy(path, workdir / f"sync-{label.replace(' ', '-')}.log")


def _run(
    cluster: PatroniCluster,
    *,
    jobs: int,
    python: str,
    workdir: Path,
    batches: Sequence[int],
    tenure_configs: Sequence[tuple[int, int]],
    repeat: int,
    min_window: float,
    dbname: str,
) -> list[Row]:
    leader = cluster.wait_ready(60)
    standby = cluster.sync_standby()
    if not cluster.psql(leader, "SELECT 1 FROM pg_database WHERE datname = %s", (dbname,)):
        cluster.deploy_tenure(dbname)
    conninfo = cluster.node_conninfo(leader, dbname)
    with psycopg.connect(conninfo, autocommit=True) as admin:
        streams = cluster.replication(leader)
        if standby is None or streams.get(standby) != ("streaming", "sync"):
            raise RuntimeError(
                f"no synchronous standby streaming from {leader}: {streams}\n{cluster.status()}"
            )
        admin.execute("CREATE SCHEMA IF NOT EXISTS tenure_bench")
        admin.execute(JOBS_DDL)  # the peers' clean-up truncates it
        print(f"    cluster: {durability(admin)}")
        print(
            f"    primary {leader}, synchronous standby {standby} (streaming, sync), up in "
            f"{cluster.startup_seconds:.1f} s; a single-row commit takes {commit_latency(admin):.2f} ms "
            f"(median of {COMMIT_PROBES})",
            flush=True,
        )

        runners: dict[tuple[str, str], Callable[[int], Drained]] = {}
        for batch in batches:
            runners[peer_key("pgqueuer-asyncpg", ("batch", batch))] = functools.partial(
                peer_rate, admin, conninfo, python=python, peer="pgqueuer-asyncpg",
                option=("batch", batch), workdir=workdir,
            )  # fmt: skip
        runners |= tenure_runners(admin, conninfo, tenure_configs, workdir=workdir)

        def show(key: tuple[str, str], drained: Drained) -> str:
            return (
                f"{key[0]:<18} {key[1]:<32} {drained.rate:8.0f} /s   {drained.jobs:>9,} jobs   "
                f"{per_commit_text(drained.per_commit):>6} jobs/commit   "
                f"start-up {drained.startup:.2f} s   CPU us/job: server {per_job_text(drained.server_us)}, "
                f"workers {per_job_text(drained.workers_us)}"
            )

        merged = drain_rows(runners, jobs=jobs, min_window=min_window, repeat=repeat, show=show)
    medians = "; medians of the rounds" if repeat > 1 else ""
    print(
        "  on the synchronous standby (ratios to pgqueuer's best on the same cluster; jobs/commit: jobs "
        f"finished per writing transaction in the 10%-90% window{medians}):"
    )
    for line in table(merged):
        print(line)
    for line in headline(merged):
        print(line)
    print(f"    (peers from {python}; {sys.executable} ran tenure; cluster logs: {workdir}/sync-*.log)")
    return merged
