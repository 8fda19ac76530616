"""What the bench's sections share: pgbench runs, percentiles, table sizes, and repeated
steady-state rows (:func:`interleaved` rounds of :class:`Rate` runs, summed up by
:class:`Repeated`)."""

from __future__ import annotations

import contextlib
import math
import os
import re
import shutil
import statistics
import subprocess
import threading
import time
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import psycopg

from tenure.testing.procs import die_with_parent


@dataclass(frozen=True)
class PgbenchResult:
    tps: float  # scripts run per second, without the connection time, over the whole run
    latency_ms: float  # pgbench's latency average: one script, all its statements
    statement_ms: list[float]  # the average of each statement, with per_command only
    steady_tps: float  # scripts per second after the first second (steady_tps below)
    startup: float | None  # seconds the first second lost against the steady rate; None: too short a run


PROGRESS = re.compile(r"^progress: ([0-9.]+) s, ([0-9.]+) tps", re.MULTILINE)


def steady_tps(progress: str, tps: float) -> tuple[float, float | None]:
    """The steady rate and the start-up of a pgbench run, from its ``--progress 1`` reports.
    The first second is the start-up (each backend's first statements, plans and catalog
    caches; after a CHECKPOINT, the full-page images of the first writes) and is left out:
    the rate is the mean of the later seconds' reports. The start-up is reported apart, as
    the time the first second lost: its length less the time its scripts take at the steady
    rate. A run with fewer than two reports gives its whole rate (``tps``) and no start-up."""
    reports = [(float(at), float(rate)) for at, rate in PROGRESS.findall(progress)]
    if len(reports) < 2:
        return tps, None
    (first_at, first), later = reports[0], reports[1:]
    steady = sum(rate for _, rate in later) / len(later)
    return steady, (first_at * (1 - first / steady) if steady else None)


def pgbench_run(
    conninfo: str,
    script: str,
    *,
    clients: int,
    seconds: float,
    workdir: Path,
    per_command: bool = False,
    defines: dict[str, str] | None = None,
) -> PgbenchResult:
    """pgbench running ``script``; ``defines`` are its variables' first values (``--define``)."""
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
        "--progress",
        "1",
        "--file",
        str(path),
    ]
    if per_command:
        command.append("--report-per-command")
    for name, value in (defines or {}).items():
        command += ["--define", f"{name}={value}"]
    if conninfo:
        command.append(conninfo)
    result = subprocess.run(command, capture_output=True, text=True, check=True)
    tps = re.search(r"tps = ([0-9.]+) \(without initial connection time\)", result.stdout)
    latency = re.search(r"latency average = ([0-9.]+) ms", result.stdout)
    if tps is None or latency is None:
        raise RuntimeError(f"pgbench printed no tps or latency:\n{result.stdout}\n{result.stderr}")
    _, _, per_statement = result.stdout.partition("statement latencies in milliseconds")
    statement_ms = [float(m) for m in re.findall(r"^\s+([0-9.]+)\s", per_statement, re.MULTILINE)]
    steady, startup = steady_tps(result.stderr, float(tps.group(1)))
    return PgbenchResult(float(tps.group(1)), float(latency.group(1)), statement_ms, steady, startup)


@dataclass(frozen=True)
class Rate:
    """One run of a throughput row: its steady rate and, apart from it, the seconds its
    start-up lost against that rate (None where the run cannot tell)."""

    rate: float
    startup: float | None = None


def pgbench_rate(
    conninfo: str,
    script: str,
    *,
    clients: int,
    seconds: float,
    workdir: Path,
    per_script: float = 1.0,
    defines: dict[str, str] | None = None,
) -> Rate:
    """pgbench's steady rate running ``script`` (each run of the script counting
    ``per_script``: tasks per call, say), its first second apart as the start-up."""
    run = pgbench_run(conninfo, script, clients=clients, seconds=seconds, workdir=workdir, defines=defines)
    return Rate(run.steady_tps * per_script, run.startup)


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * p // 100))
    return ordered[int(rank) - 1]


def scalar(connection: psycopg.Connection[Any], query: str, params: tuple[object, ...] = ()) -> Any:
    row = connection.execute(query, params).fetchone()
    assert row is not None
    return row[0]


@dataclass(frozen=True)
class TableState:
    pages: int
    updates: int
    hot_updates: int


def table_state(admin: psycopg.Connection[Any], table: str) -> TableState:
    """Heap pages of ``table`` and its updates so far, all and HOT, once the statistics of the
    backends that ended (pgbench's) have stopped arriving."""
    query = (
        "SELECT pg_relation_size(relid) / current_setting('block_size')::int, n_tup_upd, n_tup_hot_upd "
        "FROM pg_stat_all_tables WHERE relid = %s::regclass"
    )
    row = None
    for _ in range(30):
        new = admin.execute(query, (table,)).fetchone()
        if new == row:
            break
        row = new
        time.sleep(0.1)
    assert row is not None
    return TableState(*(int(value) for value in row))


def growth(before: TableState, after: TableState) -> str:
    updates = after.updates - before.updates
    hot = 100 * (after.hot_updates - before.hot_updates) / updates if updates else 0.0
    return f"{before.pages:,} -> {after.pages:,} ({hot:.0f}%)"


def start_process(
    command: Sequence[str], log: Path, *, stdout: int | None = None, **popen: Any
) -> subprocess.Popen[bytes]:
    """command in a process of its own, its output (its standard error only, with ``stdout``
    such as subprocess.PIPE) to ``log``, that the kernel stops (SIGTERM) when the bench ends,
    however it ends: a bench killed leaves no worker behind to take the next run's tasks."""
    with open(log, "wb") as out:
        return subprocess.Popen(
            command, stdout=out if stdout is None else stdout, stderr=out, preexec_fn=die_with_parent, **popen
        )


def stop_processes(processes: Sequence[tuple[subprocess.Popen[bytes], Path]]) -> None:
    """SIGTERM, then SIGKILL after 15 s; a process still waiting on its standard input gets EOF."""
    for process, _ in processes:
        if process.stdin is not None:
            process.stdin.close()
        if process.poll() is None:
            process.terminate()
    for process, _ in processes:
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of process ``pid`` and of its children it has reaped (0
    once it is gone): fields 14-17 of /proc/PID/stat."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat.rsplit(")", 1)[1].split()  # the fields after the command's name, from field 3
    return sum(int(ticks) for ticks in fields[11:15]) / CLOCK_TICKS


def cpu_of(processes: Sequence[subprocess.Popen[Any]]) -> float:
    return sum(cpu_seconds(process.pid) for process in processes)


@dataclass(frozen=True)
class ServerCpu:
    """The CPU the cluster's processes have used: its postmaster, every backend and
    background process alive, and those that ended (the postmaster reaps them)."""

    postmaster: int

    @classmethod
    def of(cls, admin: psycopg.Connection[Any]) -> ServerCpu | None:
        """The cluster ``admin`` is connected to, when it runs on this host and its data
        directory is readable here (the bench runs as root or as the cluster's user); else None."""
        try:
            directory = str(scalar(admin, "SELECT current_setting('data_directory')"))
            pid = int((Path(directory) / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError, psycopg.Error):
            return None
        return cls(pid) if Path(f"/proc/{pid}").exists() else None

    def seconds(self) -> float:
        try:
            children = Path(f"/proc/{self.postmaster}/task/{self.postmaster}/children").read_text().split()
        except OSError:
            children = []
        return cpu_seconds(self.postmaster) + sum(cpu_seconds(int(child)) for child in children)


SPREAD_LIMIT = 0.15  # repeated runs of a row should agree within this (max - min over the median)


@dataclass(frozen=True)
class Repeated:
    """A figure measured in several runs (each of its rounds interleaved with the other rows'):
    the median is the figure, the spread is (max - min) / median."""

    values: tuple[float, ...]

    @property
    def median(self) -> float:
        ordered = sorted(self.values)
        middle = len(ordered) // 2
        return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2

    @property
    def spread(self) -> float:
        median = self.median
        return (max(self.values) - min(self.values)) / median if median else 0.0

    @property
    def moved(self) -> bool:
        """The runs disagree by more than :data:`SPREAD_LIMIT`: the row did not hold still."""
        return len(self.values) > 1 and self.spread > SPREAD_LIMIT

    def describe(self, number: str = "{:,.0f}", unit: str = "") -> str:
        """``"min-max, spread 7%"`` (with ``MOVED`` past :data:`SPREAD_LIMIT`), or ``"1 run"``;
        ``number`` formats the min and the max, ``unit`` follows them."""
        if len(self.values) < 2:
            return "1 run"
        moved = " MOVED" if self.moved else ""
        low, high = number.format(min(self.values)), number.format(max(self.values))
        return f"{low}-{high}{unit}, spread {self.spread:.0%}{moved}"


def rates(runs: Sequence[Rate]) -> Repeated:
    """The steady rates of a row's runs."""
    return Repeated(tuple(run.rate for run in runs))


def startup(runs: Sequence[Rate]) -> str:
    """The median start-up of a row's runs, ``"0.12 s"``, or ``"-"`` where no run tells."""
    known = tuple(run.startup for run in runs if run.startup is not None)
    return f"{Repeated(known).median:.2f} s" if known else "-"


def round_ratios(runs: Sequence[float], reference: Sequence[float]) -> Repeated:
    """A row's ratio to its reference row within each round (a slow spell of the machine
    slows both), over the rounds."""
    return Repeated(
        tuple(run / ref if ref else float("nan") for run, ref in zip(runs, reference, strict=True))
    )


def ratio_spread(runs: Sequence[float], reference: Sequence[float]) -> str:
    """``"; ratio per round 0.45-0.52, spread 14%"`` for a row with more than one run and a
    reference other than itself, else ``""``."""
    if len(runs) < 2 or list(runs) == list(reference):
        return ""
    return f"; ratio per round {round_ratios(runs, reference).describe('{:.2f}')}"


def rate_line(label: str, runs: Sequence[Rate], reference: Sequence[Rate], *, width: int) -> str:
    """A throughput row: ``label``, the median rate, its ratio to the median of ``reference``
    (the baseline row's runs), the median start-up and, with more than one run, the runs'
    min-max and spread (MOVED past the limit) and the spread of the ratio within each round."""
    rate, baseline = rates(runs), rates(reference).median
    ratio = rate.median / baseline if baseline else float("nan")
    spread = ""
    if len(runs) > 1:
        spread = f"   runs {rate.describe()}{ratio_spread(rate.values, rates(reference).values)}"
    return f"{label:<{width}} {rate.median:10,.0f} /s   {ratio:5.2f}   start-up {startup(runs)}{spread}"


Row = TypeVar("Row", bound=Hashable)
Result = TypeVar("Result")


def machine_speed(loops: int = 20_000) -> float:
    """How fast this machine runs a fixed piece of pure Python now, in loops per microsecond
    of the thread's own CPU time (about 1.5 ms of it): the speed of a core it was given, not
    how soon it was given one."""
    began = time.thread_time()
    total = 0
    for n in range(loops):
        total += n * n
    return loops / (time.thread_time() - began) / 1e6


@contextlib.contextmanager
def machine_speed_during(every: float = 0.2) -> Iterator[list[float]]:
    """The machine's speed (:func:`machine_speed`) every ``every`` seconds while the body runs
    (under 1% of a core), in the list it yields. A shared machine's speed moves with its
    neighbours: on this project's 2-core machine the same loop has run at 12 to 23 loops per
    microsecond within a minute, idle or busy, and a run's rate moves with it."""
    speeds: list[float] = []
    done = threading.Event()

    def sample() -> None:
        while not done.wait(every):
            speeds.append(machine_speed())

    sampler = threading.Thread(target=sample, name="machine-speed", daemon=True)
    sampler.start()
    try:
        yield speeds
    finally:
        done.set()
        sampler.join()


def machine_lines(runs: dict[Row, list[Result]], speeds: dict[Row, list[float]]) -> list[str]:
    """The spread of the machine's speed over a section's runs, and each row's rates as they
    would be at the median speed (rate x median / the run's speed): a row bound by the CPU
    holds still this way where its rates moved with the machine; one bound by the disk (a
    commit per job on a durable cluster) need not. Rows whose runs have no rate are left out."""
    every = Repeated(tuple(speed for row_speeds in speeds.values() for speed in row_speeds))
    median = every.median
    lines = [
        "    the machine's mean speed during each run (a fixed loop of pure Python, loops/us): "
        f"{every.describe('{:.1f}')}; each row's runs at the median speed "
        "(rate x median / the run's speed):"
    ]
    for row, results in runs.items():
        rates = [
            rate for result in results if isinstance(rate := getattr(result, "rate", None), (int, float))
        ]
        if len(rates) == len(results):
            steadied = tuple(rate * median / speed for rate, speed in zip(rates, speeds[row], strict=True))
            label = " ".join(map(str, row)) if isinstance(row, tuple) else str(row)
            lines.append(f"      {label}: {Repeated(steadied).describe()}")
    return lines


def interleaved(
    rows: Sequence[Row],
    measure: Callable[[Row, int], Result],
    *,
    repeat: int,
    show: Callable[[Row, Result], str] | None = None,
) -> dict[Row, list[Result]]:
    """The one way the bench repeats a section's rows: ``repeat`` interleaved rounds, round r
    measuring each row once, in order (``measure(row, r)``), so that a slow spell of a shared
    machine falls on every row of a round rather than on all the runs of one row. With more
    than one round each run is printed as it comes (``show``), with the machine's mean speed
    during it (:func:`machine_speed_during`) over the first run's, and the section ends with
    :func:`machine_lines`: rows that move with the machine's speed are the machine's doing.
    The section prints each row's median with :meth:`Repeated.describe`. Returns each row's
    runs, in round order."""
    runs: dict[Row, list[Result]] = {row: [] for row in rows}
    printed = show if repeat > 1 else None  # the machine's speed is read only where runs are printed
    speeds: dict[Row, list[float]] = {row: [] for row in rows}
    first: float | None = None
    for round_ in range(1, repeat + 1):
        for row in rows:
            watch: contextlib.AbstractContextManager[list[float]] = (
                machine_speed_during() if printed is not None else contextlib.nullcontext([])
            )
            with watch as during:
                result = measure(row, round_)
            runs[row].append(result)
            if printed is not None:
                speed = statistics.fmean(during) if during else machine_speed()
                first = first or speed
                speeds[row].append(speed)
                print(f"    round {round_}: {printed(row, result)}   machine {speed / first:.2f}", flush=True)
    if printed is not None:
        for line in machine_lines(runs, speeds):
            print(line, flush=True)
    return runs


def grown_size(size: int, window: float, wanted: float, ceiling: int, *, step: int = 1) -> int:
    """The size to run again a run of ``size`` (batches, jobs) whose steady window of ``window``
    seconds fell short of ``wanted``: enough for ``wanted`` at the rate it showed, with a
    quarter to spare, rounded up to ``step``; at least double, at most ``ceiling``."""
    needed = math.ceil(size * wanted * 1.25 / max(window, 0.05) / step) * step
    return min(max(needed, 2 * size), ceiling)


def durability(admin: psycopg.Connection[Any]) -> str:
    """What the cluster promises of a commit, for the head of the bench's output: ``durable``
    when fsync, synchronous_commit and full_page_writes are on (the production view), else
    ``NOT durable`` (fsync off: what remains is the CPU cost of each commit)."""
    names = ("fsync", "synchronous_commit", "full_page_writes", "wal_sync_method")
    settings = {name: str(scalar(admin, "SELECT current_setting(%s)", (name,))) for name in names}
    durable = all(settings[name] == "on" for name in names[:3])
    detail = ", ".join(f"{name} {value}" for name, value in settings.items())
    if durable:
        return f"durable ({detail}): the production view"
    return f"NOT durable ({detail}): a view of CPU cost, not of production"
