"""Peers: tenure's task workers side by side with pgqueuer and procrastinate, on the same
cluster in the same run, against the bare two-commit SKIP LOCKED floor.

Every system drains a backlog of no-op jobs (``--peer-jobs``), and every one is measured
the same way, from the database: what is left is counted every 0.1 s or more (by one
backend, no more often than 20 times what a count costs), and the rate is the jobs finished
between 10% and 90% drained, by the server's clock, divided by the time that took
(start-up and the tail are outside the window; the start-up is reported apart: the time
from the load to 10% drained less the time the steady rate takes for 10%). A run whose
window is shorter than ``--peer-seconds`` runs again in the first round with a larger
backlog, which its row keeps. With ``--repeat N`` every system and configuration runs N
times, in N interleaved rounds (each round runs them all once), and the table shows the
median of each row with the spread of its runs.
The whole backlog is loaded in one transaction and its table analyzed while every worker
process is up and idle: the peers' processes wait, ready, for a word to start their worker
loops; tenure's, started on an empty queue, find the backlog at their next poll (every
0.05 s). The floor's table is loaded and analyzed before pgbench starts. Beside each rate,
the CPU each job cost in the same window, from /proc: the cluster's processes (when it runs
on this host) and the system's own worker processes (the floor's: pgbench): on a small
machine their sum is what bounds the rate, and it tells which side to make cheaper.

- the floor: pgbench running :data:`tenure.bench.tasks.BARE_CLAIM_SQL` on a plain table
  (4 and 8 clients);
- pgqueuer with asyncpg and with psycopg, and procrastinate: worker processes of
  ``peer_runner.py`` run with the peers' own virtual environment (``.venv-peers``,
  made by ``scripts/install-peers.sh``), each peer installed afresh in a schema of its own;
- tenure: real ``tenure task worker --module tenure.bench.app`` processes, in the
  configurations of :data:`TENURE_CONFIGS`, driven through the CLI only: the threaded
  TaskWorker (system ``tenure``) and, in each configuration, the AsyncTaskWorker
  (``--async``, system ``tenure-async``).
"""

from __future__ import annotations

import functools
import itertools
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from tenure.bench.common import (
    Repeated,
    ServerCpu,
    cpu_of,
    grown_size,
    interleaved,
    scalar,
    start_process,
    stop_processes,
)
from tenure.bench.tasks import BARE_CLAIM_SQL, LOAD_SQL, TASK_KIND, clean, fill, task_workers

# tenure's configurations, (worker processes, --concurrency of each): extend here.
TENURE_CONFIGS: list[tuple[int, int]] = [(2, 4), (2, 16), (2, 64), (3, 64), (2, 256), (2, 1024), (4, 1)]

FLOOR_CLIENTS = (4, 8)  # pgbench clients of the bare floor

# The peers' configurations. pgqueuer runs 2 processes at each batch size (jobs per dequeue;
# its concurrency is unlimited by default) and the best counts; procrastinate runs
# 2 processes x concurrency 4.
PEER_PROCESSES = 2
PGQUEUER_BATCHES = {"pgqueuer-asyncpg": (10, 100, 500), "pgqueuer-psycopg": (10, 100)}
PROCRASTINATE_CONCURRENCY = (4,)

PEER_SCHEMAS = {"pgqueuer": "bench_pgqueuer", "procrastinate": "bench_procrastinate"}

# What runs beside tenure by default (--peer-systems): the floor and every peer.
PEER_SYSTEMS = ("floor", *PGQUEUER_BATCHES, "procrastinate")

# What is left, with the server's clock read after the count.
LEFT_SQL = {
    "floor": "SELECT count(*), clock_timestamp() FROM tenure_bench.jobs WHERE NOT done",
    "tenure": "SELECT count(*), clock_timestamp() FROM tenure.task WHERE status = 'pending'",
    "pgqueuer": f"SELECT count(*), clock_timestamp() FROM {PEER_SCHEMAS['pgqueuer']}.pgqueuer",
    "procrastinate": "SELECT count(*), clock_timestamp() "
    f"FROM {PEER_SCHEMAS['procrastinate']}.procrastinate_jobs WHERE status IN ('todo', 'doing')",
}

# The table each system drains: analyzed right after the load, so every planner sees a
# backlog (as a queue in steady state does) instead of the empty table it started with;
# ANALYZE also invalidates the plans the workers cached on the empty table.
DRAINED = {
    "tenure": "tenure.task",
    "pgqueuer": f"{PEER_SCHEMAS['pgqueuer']}.pgqueuer",
    "procrastinate": f"{PEER_SCHEMAS['procrastinate']}.procrastinate_jobs",
}

# Seconds between two counts of what is left: SAMPLE_EVERY, or SAMPLE_SHARE times as long
# as the last count took, whichever is longer. A count reads the whole drained table (tenure
# keeps its finished tasks, 30 ms at 136,000), and 10 a second would take a fifth of a core
# from the systems it measures.
SAMPLE_EVERY = 0.1
SAMPLE_SHARE = 20
MAX_PEER_JOBS = 1_000_000  # the largest backlog a run grows to (min_window)
# The shortest steady window of a run (--peer-seconds): this machine's core runs by half faster
# or slower for a few seconds at a time, and a 5 s window caught one or two such spells.
PEER_SECONDS = 15.0
STALL = 60.0  # seconds without progress before a drain is declared stuck

RUNNER = Path(__file__).with_name("peer_runner.py")


def default_peers_python() -> str:
    """The peers' interpreter: $TENURE_PEERS_PYTHON, else .venv-peers of the checkout tenure runs from."""
    return os.environ.get("TENURE_PEERS_PYTHON") or str(
        Path(__file__).resolve().parents[3] / ".venv-peers" / "bin" / "python"
    )


@dataclass(frozen=True)
class Drained:
    """One drain of the backlog."""

    rate: float  # jobs per second between 10% and 90% drained
    startup: float  # seconds from the load (the peers: the word to start) to 10% drained, less
    # the time the steady rate takes for 10%: what starting cost
    # CPU microseconds per job between 90% and 10% left: the cluster's processes (None when
    # the cluster is not on this host) and the system's own worker processes (or pgbench)
    server_us: float | None = None
    workers_us: float | None = None
    jobs: int = 0  # the backlog drained
    # WAL per job in the same window: bytes (from the insert position) and full-page images
    # (pg_stat_wal, which backends update about once a second); many images mean a
    # checkpoint began shortly before or inside the window
    wal_bytes: float | None = None
    wal_fpi: float | None = None
    # jobs per transaction id assigned in the window (one per writing transaction): how many
    # jobs each commit carried
    per_commit: float | None = None

    @property
    def window(self) -> float:
        """Seconds from 90% left to 10% left: the steady window the rate is measured over."""
        return 0.8 * self.jobs / self.rate


@dataclass(frozen=True)
class Row:
    system: str  # floor, pgqueuer-asyncpg, pgqueuer-psycopg, procrastinate, tenure
    config: str  # how it ran, e.g. "2 processes x concurrency 4"
    runs: tuple[Drained, ...]  # one per round of --repeat

    @property
    def rates(self) -> Repeated:
        return Repeated(tuple(run.rate for run in self.runs))

    @property
    def rate(self) -> float:
        """The median of the runs' jobs/s."""
        return self.rates.median

    @property
    def startup(self) -> float:
        """The median of the runs' start-up, in seconds."""
        return Repeated(tuple(run.startup for run in self.runs)).median

    @property
    def server_us(self) -> float | None:
        """The median of the runs' server CPU per job, in microseconds."""
        return _median_known(run.server_us for run in self.runs)

    @property
    def workers_us(self) -> float | None:
        """The median of the runs' workers' CPU per job, in microseconds."""
        return _median_known(run.workers_us for run in self.runs)

    @property
    def per_commit(self) -> float | None:
        """The median of the runs' jobs per transaction."""
        return _median_known(run.per_commit for run in self.runs)

    @property
    def wal_bytes(self) -> float | None:
        """The median of the runs' WAL bytes per job."""
        return _median_known(run.wal_bytes for run in self.runs)


def _median_known(values: Iterable[float | None]) -> float | None:
    known = tuple(value for value in values if value is not None)
    return Repeated(known).median if known else None


def per_job(samples: Sequence[tuple[float, int]], counter: Sequence[float], jobs: int) -> float:
    """How much ``counter`` (read with each of ``samples``) grew per job, from the last sample
    with 90% of ``jobs`` left to the first with 10% left."""
    first = max(n for n, (_, left) in enumerate(samples) if left >= 0.9 * jobs)
    last = min(n for n, (_, left) in enumerate(samples) if left <= 0.1 * jobs)
    done = samples[first][1] - samples[last][1]
    return (counter[last] - counter[first]) / done


def per_commit_text(value: float | None) -> str:
    """Jobs per commit to one decimal, ``-`` when the window assigned no transaction id."""
    return "-" if value is None else f"{value:.1f}"


def _inverse(value: float) -> float | None:
    return 1 / value if value else None


def written(admin: psycopg.Connection[Any]) -> tuple[float, float, float]:
    """What the cluster wrote so far: WAL bytes (its insert position), full-page images, and
    transaction ids (the next to be assigned; reading it assigns none)."""
    row = admin.execute(
        "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::float8, wal_fpi::float8, "
        "pg_snapshot_xmax(pg_current_snapshot())::text::float8 FROM pg_stat_wal"
    ).fetchone()
    assert row is not None
    return row[0], row[1], row[2]


def when_left(samples: Sequence[tuple[float, int]], level: float) -> float:
    """The moment ``level`` jobs were left, interpolated between the two counts around it.
    ``samples`` are (seconds, left), in order."""
    for (t0, left0), (t1, left1) in itertools.pairwise(samples):
        if left1 <= level < left0:
            return t0 + (t1 - t0) * (left0 - level) / (left0 - left1)
    raise ValueError(f"the samples never reach {level:.0f} left: {samples[-3:]}")


def rate_between(samples: Sequence[tuple[float, int]], jobs: int) -> float:
    """Jobs per second from the moment ``jobs`` had 90% left to the moment 10% had, each moment
    interpolated between the two counts around it. ``samples`` are (seconds, left), in order."""
    start, end = when_left(samples, 0.9 * jobs), when_left(samples, 0.1 * jobs)
    if end <= start:
        raise ValueError(f"no time passed between 90% and 10% left ({start} -> {end}): raise --peer-jobs")
    return 0.8 * jobs / (end - start)


def drain(
    admin: psycopg.Connection[Any],
    query: str,
    *,
    jobs: int,
    loaded_at: float,
    processes: Sequence[tuple[subprocess.Popen[bytes], Path]],
    record: Path,
) -> Drained:
    """Count what is left every 0.1 s or more (SAMPLE_SHARE) from the load (``loaded_at``,
    server epoch seconds, with ``jobs`` left) until nothing is, while ``processes`` keep
    running, each count by one backend (no parallel workers); return the rate, the
    start-up and the CPU per job of the server and of ``processes``. The counts go to
    ``record`` (seconds since the load, jobs left), for a look at the curve."""
    server = ServerCpu.of(admin)
    workers = [process for process, _ in processes]
    samples: list[tuple[float, int]] = [(loaded_at, jobs)]
    server_cpu = [server.seconds() if server else 0.0]
    workers_cpu = [cpu_of(workers)]
    wal = [written(admin)]
    last_progress = time.monotonic()
    admin.execute("SET max_parallel_workers_per_gather = 0")
    while True:
        began = time.monotonic()
        row = admin.execute(query).fetchone()
        assert row is not None
        left, at = int(row[0]), row[1].timestamp()
        if left < samples[-1][1]:
            last_progress = time.monotonic()
        samples.append((at, left))
        server_cpu.append(server.seconds() if server else 0.0)
        workers_cpu.append(cpu_of(workers))
        wal.append(written(admin))
        if left == 0:
            record.write_text("".join(f"{t - loaded_at:.3f} {n}\n" for t, n in samples))
            rate = rate_between(samples, jobs)
            return Drained(
                rate,
                when_left(samples, 0.9 * jobs) - loaded_at - 0.1 * jobs / rate,
                1e6 * per_job(samples, server_cpu, jobs) if server else None,
                1e6 * per_job(samples, workers_cpu, jobs) if workers else None,
                jobs,
                per_job(samples, [bytes_ for bytes_, _, _ in wal], jobs),
                per_job(samples, [images for _, images, _ in wal], jobs),
                _inverse(per_job(samples, [xid for _, _, xid in wal], jobs)),
            )
        for process, log in processes:
            if process.poll() is not None:
                raise RuntimeError(f"{process.args!r} ended ({process.returncode}):\n{log.read_text()}")
        if time.monotonic() - last_progress > STALL:
            raise TimeoutError(f"{left} of {jobs} jobs left and no progress for {STALL:.0f} s")
        time.sleep(max(SAMPLE_EVERY, SAMPLE_SHARE * (time.monotonic() - began)))


def server_epoch(admin: psycopg.Connection[Any]) -> float:
    return float(scalar(admin, "SELECT extract(epoch FROM clock_timestamp())::float8"))


def floor_rate(
    admin: psycopg.Connection[Any], conninfo: str, jobs: int, *, clients: int, workdir: Path
) -> Drained:
    """pgbench clients running the bare claim + done until the table is drained."""
    fill(admin, "tenure_bench.jobs", jobs)
    script = workdir / "peers-floor.sql"
    script.write_text(BARE_CLAIM_SQL)
    pgbench = shutil.which("pgbench") or "/usr/lib/postgresql/15/bin/pgbench"
    command = [
        *(pgbench, "--no-vacuum", "--client", str(clients), "--jobs", str(min(clients, os.cpu_count() or 1))),
        *("--time", "3600", "--file", str(script), *([conninfo] if conninfo else [])),
    ]
    log = workdir / f"peers-floor-{clients}.log"
    loaded_at = server_epoch(admin)
    processes = [(start_process(command, log), log)]
    try:
        rate = drain(
            admin,
            LEFT_SQL["floor"],
            jobs=jobs,
            loaded_at=loaded_at,
            processes=processes,
            record=log.with_suffix(".left"),
        )
    finally:
        stop_processes(processes)
        clean(admin)
    return rate


def wait_ready(process: subprocess.Popen[bytes], log: Path, *, wait: float = 60.0) -> None:
    end = time.monotonic() + wait
    while "ready" not in log.read_text().split():
        if process.poll() is not None or time.monotonic() > end:
            raise RuntimeError(f"peer worker {process.args!r} did not get ready:\n{log.read_text()}")
        time.sleep(0.05)


def go(processes: Sequence[tuple[subprocess.Popen[bytes], Path]]) -> None:
    """Let the ready peer workers start their worker loops."""
    for process, _ in processes:
        assert process.stdin is not None
        process.stdin.write(b"go\n")
        process.stdin.flush()


@contextmanager
def peer_workers(
    command: list[str], count: int, *, logs: Path
) -> Iterator[list[tuple[subprocess.Popen[bytes], Path]]]:
    """``count`` worker processes of ``command``, ready before the body runs, stopped after it."""
    processes: list[tuple[subprocess.Popen[bytes], Path]] = []
    try:
        for n in range(1, count + 1):
            log = logs.with_name(f"{logs.name}-{n}.log")
            processes.append((start_process(command, log, stdin=subprocess.PIPE), log))
        for process, log in processes:
            wait_ready(process, log)
        yield processes
    finally:
        stop_processes(processes)


def peer_rate(
    admin: psycopg.Connection[Any],
    conninfo: str,
    jobs: int,
    *,
    python: str,
    peer: str,
    option: tuple[str, int],
    workdir: Path,
) -> Drained:
    """One peer, installed afresh in its schema, drained by PEER_PROCESSES worker processes."""
    family = peer.split("-")[0]
    base = [python, str(RUNNER), "--db", conninfo, "--schema", PEER_SCHEMAS[family], peer]
    subprocess.run([*base, "install"], check=True, capture_output=True)
    name, value = option
    work = [*base, "work", f"--{name}", str(value)]
    logs = workdir / f"peers-{peer}-{name}{value}"
    with peer_workers(work, PEER_PROCESSES, logs=logs) as processes:
        subprocess.run([*base, "enqueue", str(jobs)], check=True, capture_output=True)
        admin.execute(f"ANALYZE {DRAINED[family]}")
        loaded_at = server_epoch(admin)
        go(processes)
        rate = drain(
            admin,
            LEFT_SQL[family],
            jobs=jobs,
            loaded_at=loaded_at,
            processes=processes,
            record=logs.with_suffix(".left"),
        )
    return rate


def peer_key(peer: str, option: tuple[str, int]) -> tuple[str, str]:
    """A peer's row: its system and how it ran, e.g. ("pgqueuer-asyncpg", "2 processes x batch 100")."""
    name, value = option
    return peer, f"{PEER_PROCESSES} processes x {name} {value}"


def tenure_key(processes: int, concurrency: int, asynchronous: bool) -> tuple[str, str]:
    """tenure's row: "tenure" (threaded workers) or "tenure-async", and how it ran."""
    return (
        "tenure-async" if asynchronous else "tenure"
    ), f"{processes} processes x concurrency {concurrency}"


def tenure_rate(
    admin: psycopg.Connection[Any],
    conninfo: str,
    jobs: int,
    *,
    processes: int,
    concurrency: int,
    workdir: Path,
    asynchronous: bool = False,
) -> Drained:
    """Real ``tenure task worker`` processes draining a backlog loaded once they have started
    (with ``asynchronous``, ``tenure task worker --async``: system ``tenure-async``)."""
    clean(admin)
    admin.execute("CHECKPOINT")
    system, _ = tenure_key(processes, concurrency, asynchronous)
    options = ("--concurrency", str(concurrency), "--poll-interval", "0.05")
    logs = workdir / f"peers-{system}-{processes}x{concurrency}"
    with task_workers(conninfo, processes, *options, logs=logs, asynchronous=asynchronous) as workers:
        admin.execute(LOAD_SQL["tenure.task"], {"kind": TASK_KIND, "size": jobs, "priorities": 1})
        loaded_at = server_epoch(admin)
        admin.execute(f"ANALYZE {DRAINED['tenure']}")
        rate = drain(
            admin,
            LEFT_SQL["tenure"],
            jobs=jobs,
            loaded_at=loaded_at,
            processes=workers,
            record=logs.with_suffix(".left"),
        )
    clean(admin)
    return rate


def tenure_runners(
    admin: psycopg.Connection[Any], conninfo: str, configs: Sequence[tuple[int, int]], *, workdir: Path
) -> dict[tuple[str, str], Callable[[int], Drained]]:
    """A drain (:func:`tenure_rate`) for each configuration of ``configs``, (worker processes,
    concurrency), by the threaded workers and by the async ones, keyed by :func:`tenure_key`."""
    return {
        tenure_key(processes, concurrency, asynchronous): functools.partial(
            tenure_rate,
            admin,
            conninfo,
            processes=processes,
            concurrency=concurrency,
            workdir=workdir,
            asynchronous=asynchronous,
        )
        for (processes, concurrency), asynchronous in itertools.product(configs, (False, True))
    }


def per_job_text(value: float | None) -> str:
    """A figure per job (CPU microseconds, WAL bytes) to the unit, ``n/a`` when not measured."""
    return "n/a" if value is None else f"{value:.0f}"


def drain_rows(
    runners: dict[tuple[str, str], Callable[[int], Drained]],
    *,
    jobs: int,
    min_window: float,
    repeat: int,
    show: Callable[[tuple[str, str], Drained], str],
) -> list[Row]:
    """Each runner (a drain of that many jobs) as a row of ``repeat`` runs, in interleaved
    rounds (:func:`interleaved`, which prints each run with ``show``), from a backlog of
    ``jobs``. In the first round a run whose steady window is shorter than ``min_window``
    seconds runs again with a backlog grown to fit (at most :data:`MAX_PEER_JOBS`), which its
    row keeps for the later rounds."""
    backlog = dict.fromkeys(runners, jobs)

    def measure(key: tuple[str, str], round_: int) -> Drained:
        while True:
            drained = runners[key](backlog[key])
            if not (drained.window < min_window and backlog[key] < MAX_PEER_JOBS and round_ == 1):
                return drained
            backlog[key] = grown_size(backlog[key], drained.window, min_window, MAX_PEER_JOBS, step=1000)
            print(
                f"    ({key[0]} {key[1]}: {drained.jobs:,} jobs left a steady window of "
                f"{drained.window:.1f} s; again with {backlog[key]:,})",
                flush=True,
            )

    runs = interleaved(list(runners), measure, repeat=repeat, show=show)
    return [Row(*key, tuple(drained)) for key, drained in runs.items()]


def best(rows: Sequence[Row], *systems: str) -> Row | None:
    """The row of ``systems`` with the highest median rate."""
    return max((row for row in rows if row.system in systems), key=lambda row: row.rate, default=None)


def table(rows: Sequence[Row]) -> list[str]:
    """Every row's jobs/s (the median of its runs) and its ratio to each reference: the floor at
    4 and 8 clients and the best configuration of each peer; then its start-up (the median of
    :attr:`Drained.startup`) and the spread of its runs."""
    references: list[tuple[str, Row]] = []
    for clients in FLOOR_CLIENTS:
        ref = next((row for row in rows if row.config == f"pgbench, {clients} clients"), None)
        if ref is not None:
            references.append((f"x floor({clients})", ref))
    for peer in (*PGQUEUER_BATCHES, "procrastinate"):
        ref = best(rows, peer)
        if ref is not None:
            references.append((f"x {peer}", ref))
    header = (
        f"    {'system':<18} {'configuration':<32} {'jobs/s':>8}"
        + "".join(f" {label:>19}" for label, _ in references)
        + f" {'server us/job':>13} {'workers us/job':>14} {'WAL B/job':>9} {'jobs/commit':>11} {'jobs':>9}"
        + f" {'start-up':>9}   runs"
    )
    lines = [header]
    for row in rows:
        ratios = "".join(f" {row.rate / ref.rate:19.2f}" for _, ref in references)
        lines.append(
            f"    {row.system:<18} {row.config:<32} {row.rate:8.0f}{ratios} "
            f"{per_job_text(row.server_us):>13} {per_job_text(row.workers_us):>14} "
            f"{per_job_text(row.wal_bytes):>9} {per_commit_text(row.per_commit):>11} {row.runs[-1].jobs:>9} "
            f"{row.startup:7.2f} s   {row.rates.describe()}"
        )
    lines.append(
        "    references: "
        + "; ".join(f"{label[2:]} = {ref.config} ({ref.rate:.0f} /s)" for label, ref in references)
    )
    return lines


# issue 29, each over pgqueuer-asyncpg's best: tenure's best, by either worker, at 1.5x, and
# the threaded TaskWorker's best at 1.0x too; the AsyncTaskWorker's best is shown beside them.
GOALS: list[tuple[str, tuple[str, ...], float | None]] = [
    ("tenure, either", ("tenure", "tenure-async"), 1.5),
    ("tenure", ("tenure",), 1.0),
    ("tenure-async", ("tenure-async",), None),
]


def round_ratios(row: Row, peers: Sequence[Row]) -> list[float]:
    """Round by round, ``row``'s jobs/s over the best of ``peers`` in the same round."""
    return [
        run.rate / max(peer.runs[n].rate for peer in peers)
        for n, run in enumerate(row.runs)
        if all(len(peer.runs) > n for peer in peers)
    ]


def headline(rows: Sequence[Row]) -> list[str]:
    """tenure's best configuration (either worker), the threaded and the async worker's best,
    over pgqueuer's best (asyncpg, the best of its batch sizes), with the goal of each, and
    round by round over pgqueuer's best in that round."""
    reference = best(rows, "pgqueuer-asyncpg")
    if reference is None:
        return []
    title = f"tenure's best over pgqueuer-asyncpg's best ({reference.config}, {reference.rate:.0f} /s)"
    lines = [f"  headline: {title}:"]
    peers = [row for row in rows if row.system == "pgqueuer-asyncpg"]
    for label, systems, goal in GOALS:
        row = best(rows, *systems)
        if row is not None:
            ratio = row.rate / reference.rate
            verdict = (
                ""
                if goal is None
                else f"   (goal {goal:.1f}x: {'holds' if ratio >= goal else 'NOT reached'})"
            )
            rounds = round_ratios(row, peers)
            paired = f"   rounds: {' / '.join(f'{r:.2f}' for r in rounds)}" if len(rounds) > 1 else ""
            lines.append(
                f"    {label:<15} {row.system:<13} {row.config:<32} {row.rate:8.0f} /s"
                f"   {ratio:.2f}x{verdict}{paired}"
            )
    return lines


def async_vs_sync(rows: Sequence[Row]) -> list[str]:
    """The AsyncTaskWorker's jobs/s over the threaded TaskWorker's, configuration by configuration."""
    threaded = {row.config: row for row in rows if row.system == "tenure"}
    lines = ["  tenure-async over tenure (the same configuration, same run):"]
    for row in rows:
        if row.system == "tenure-async" and row.config in threaded:
            sync = threaded[row.config].rate
            lines.append(
                f"    {row.config:<32} {row.rate:8.0f} /s over {sync:8.0f} /s = {row.rate / sync:.2f}"
            )
    return lines


def plot(path: Path, rows: Sequence[Row]) -> Path | None:
    """Jobs/s per configuration, one bar each, coloured by system (matplotlib, the plots extra)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("    (no plot: matplotlib is not installed; pip install 'tenure[plots]')")
        return None
    colours = {
        "floor": "#888888",
        "pgqueuer-asyncpg": "#1f77b4",
        "pgqueuer-psycopg": "#7fb3e0",
        "procrastinate": "#ff7f0e",
        "tenure": "#2ca02c",
        "tenure-async": "#98df8a",
    }
    fig, ax = plt.subplots(figsize=(10, 0.45 * len(rows) + 1.5))
    labels = [f"{row.system}: {row.config}" for row in rows]
    low = [row.rate - min(row.rates.values) for row in rows]  # the spread of the runs, as error bars
    high = [max(row.rates.values) - row.rate for row in rows]
    ax.barh(
        labels,
        [row.rate for row in rows],
        xerr=[low, high],
        color=[colours.get(row.system, "#444444") for row in rows],
    )
    for n, row in enumerate(rows):
        ax.text(row.rate, n, f" {row.rate:,.0f}", va="center", fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("jobs/s between 10% and 90% drained (median of the runs; bars: min to max)")
    ax.set_title("Draining a backlog of no-op jobs, same cluster, same run")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def peers_bench(
    admin: psycopg.Connection[Any],
    conninfo: str,
    *,
    jobs: int,
    python: str,
    workdir: Path,
    tenure_configs: Sequence[tuple[int, int]] = TENURE_CONFIGS,
    repeat: int = 1,
    systems: Sequence[str] = PEER_SYSTEMS,
    min_window: float = PEER_SECONDS,
) -> list[Row]:
    """Every system of ``systems`` (and tenure in each of ``tenure_configs``) drains ``jobs``
    no-op jobs, ``repeat`` times in interleaved rounds. In the first round a row whose steady
    window (90% to 10% left) is shorter than ``min_window`` seconds runs again with a larger
    backlog, and keeps that backlog in later rounds."""
    if not Path(python).exists():
        raise RuntimeError(
            f"no peers' interpreter at {python}: run scripts/install-peers.sh (make bench does)"
        )
    print(
        f"  tenure and its peers draining {jobs:,} no-op jobs, jobs/s between 10% and 90% drained"
        f"{f', {repeat} interleaved rounds' if repeat > 1 else ''}"
        f"{f'; runs grown to a steady window of {min_window:g} s or more' if min_window > 0 else ''}:"
    )
    runners: dict[tuple[str, str], Callable[[int], Drained]] = {}
    for clients in FLOOR_CLIENTS if "floor" in systems else ():
        runners["floor", f"pgbench, {clients} clients"] = functools.partial(
            floor_rate, admin, conninfo, clients=clients, workdir=workdir
        )
    options = [(peer, ("batch", batch)) for peer, batches in PGQUEUER_BATCHES.items() for batch in batches]
    options += [("procrastinate", ("concurrency", concurrency)) for concurrency in PROCRASTINATE_CONCURRENCY]
    for peer, option in options:
        if peer in systems:
            runners[peer_key(peer, option)] = functools.partial(
                peer_rate, admin, conninfo, python=python, peer=peer, option=option, workdir=workdir
            )
    runners |= tenure_runners(admin, conninfo, tenure_configs, workdir=workdir)

    def show(key: tuple[str, str], run: Drained) -> str:
        return (
            f"{key[0]:<18} {key[1]:<32} {run.rate:8.0f} /s   {run.jobs:>9,} jobs   "
            f"start-up {run.startup:.2f} s   "
            f"CPU us/job: server {per_job_text(run.server_us)}, workers {per_job_text(run.workers_us)}   "
            f"WAL/job: {per_job_text(run.wal_bytes)} bytes, {run.wal_fpi or 0:.3f} full pages   "
            f"jobs/commit {per_commit_text(run.per_commit)}"
        )

    try:
        merged = drain_rows(runners, jobs=jobs, min_window=min_window, repeat=repeat, show=show)
    finally:
        for schema in PEER_SCHEMAS.values():
            admin.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        clean(admin)
    print(
        "  side by side (each ratio is the row's jobs/s over the reference's, same run"
        f"{'; medians of the rounds' if repeat > 1 else ''}):"
    )
    for line in table(merged):
        print(line)
    for line in headline(merged):
        print(line)
    for line in async_vs_sync(merged):
        print(line)
    path = plot(workdir / "peers.png", merged)
    if path is not None:
        print(f"    plot: {path}")
    print(f"    (peers from {python}; {sys.executable} ran tenure)")
    return merged
