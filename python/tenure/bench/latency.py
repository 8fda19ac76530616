"""Latency: how long a job waits from its enqueue to its completion when the queue is busy but
not full, tenure against pgqueuer, each at half of its own maximum rate.

The systems and configurations are the best of the peers section's rows in the same run
(:mod:`tenure.bench.peers`): pgqueuer-asyncpg's best batch size, tenure's best threaded
(``tenure``) and async (``tenure-async``) configuration, each run with the same worker
processes as there (without those rows: :data:`FALLBACK_BATCH` and the first
``--peer-tenure`` or :data:`FALLBACK_TENURE`).

A system's maximum here is what it completes with this producer, single enqueues one
commit each, not the peers section's drain of a backlog loaded in one transaction (on a
durable cluster a commit per job takes a fraction of that). So each system is first
offered more than it takes (a probe: its drain rate from the peers row, at least
:data:`PROBE_RATE`) and its maximum is the jobs it completed per second in the window;
then it is offered half of that, ``--repeat`` times. ``--latency-rate`` offers one rate to
every system instead, without the probe.

A paced producer (:mod:`tenure.bench.pacing`: :data:`PRODUCERS` processes of :data:`SENDERS`
connections each, one enqueue call and one commit per job, the way an application enqueues;
tenure's through its AsyncDriver, pgqueuer's through its own ``Queries.enqueue`` on asyncpg)
offers single no-op jobs on a fixed schedule for :data:`WARM_UP` s, the window, and
:data:`TAIL` s; each job carries its due moment. Latency is completion minus the job's due
moment on the schedule, not minus its actual enqueue: a producer that falls behind (every
connection busy) keeps its schedule and the delay counts, so a queue that slows its
producers down cannot hide it (no coordinated omission); how late the producer itself was
is shown apart. One clock measures both ends: the server's. The schedule is anchored to the
server's clock once per producer (around the shortest of five round trips) and kept on the
host's monotonic clock; completion is the server's clock when the job's completion
statement began: tenure's ``finished_at`` (clock_timestamp() at the start of the task_cycle
or task_complete call), pgqueuer's log row ``created`` (now() of the statement that
deletes the job and logs it ``successful``). Neither includes the commit of that statement.
Only the jobs due in the window count; the rate completed is the jobs finished in the window
by the server's clock, per second.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import psycopg

from tenure.bench import pacing
from tenure.bench.common import Repeated, percentile, start_process, stop_processes
from tenure.bench.peers import (
    LEFT_SQL,
    PEER_PROCESSES,
    PEER_SCHEMAS,
    RUNNER,
    STALL,
    Row,
    best,
    go,
    peer_workers,
    server_epoch,
)
from tenure.bench.tasks import TASK_KIND, clean, task_workers

WARM_UP = 1.0  # seconds of the schedule before the window: not counted
TAIL = 0.5  # seconds of the schedule after the window: its last jobs meet the same load
PRODUCERS = 2  # pacing processes per run
SENDERS = 32  # connections of each, enqueueing at once: the producer is not to be what limits
LEAD = 0.2  # seconds from the word to start to the first job due


def grace(schedule: float) -> float:
    """Seconds past the end of a schedule this long that producers still send late jobs: a
    job still unsent then counts as saturation (it was late by at least the grace)."""
    return max(10.0, schedule)


# Without a peers row to take the best from (the section not run): these configurations.
FALLBACK_BATCH = 500  # pgqueuer's jobs per dequeue
FALLBACK_TENURE = (2, 256)  # tenure's worker processes x concurrency
# The least a probe offers (jobs/s): far above what single enqueues, a commit each, reach on
# this project's machine (about 700/s, durable); a probe that is not saturated says so.
PROBE_RATE = 5_000.0

SYSTEMS = ("pgqueuer-asyncpg", "tenure", "tenure-async")

# Each system's finished jobs: id, completion by the server's clock (epoch seconds).
COMPLETED_SQL = {
    "tenure": "SELECT id::text, extract(epoch FROM finished_at)::float8 "
    "FROM tenure.task WHERE status = 'done'",
    "pgqueuer": "SELECT job_id::text, extract(epoch FROM created)::float8 "
    f"FROM {PEER_SCHEMAS['pgqueuer']}.pgqueuer_log WHERE status = 'successful'",
}


@dataclass(frozen=True)
class Target:
    """One system in one configuration, with the rate to offer it."""

    system: str  # pgqueuer-asyncpg, tenure, tenure-async
    processes: int  # worker processes
    size: int  # pgqueuer: jobs per dequeue (batch); tenure: --concurrency
    rate: float | None  # jobs/s offered; None: half of its maximum, found by a probe
    drained: float | None  # the peers section's jobs/s of this configuration, if it ran

    @property
    def probe_rate(self) -> float:
        """What the probe offers: more than single enqueues can reach."""
        return max(PROBE_RATE, self.drained or 0.0)

    @property
    def config(self) -> str:
        size = "batch" if self.system.startswith("pgqueuer") else "concurrency"
        return f"{self.processes} processes x {size} {self.size}"


@dataclass(frozen=True)
class Run:
    """One run of a target: seconds from due to completion of the jobs due in the window."""

    offered: float  # jobs/s on the schedule
    sent: float  # jobs/s the producers sent in the window
    completed: float  # jobs/s finished in the window (server clock)
    p50: float
    p99: float
    worst: float
    late99: float  # the producers' own lag: p99 of sent minus due
    enqueue50: float  # p50 of an enqueue call's round trip (acknowledged minus sent)
    jobs: int  # due in the window
    unsent: int  # of them, not sent within the grace: the figures are then lower bounds


def targets(
    rows: Sequence[Row],
    *,
    rate: float | None,
    tenure: tuple[int, int] = FALLBACK_TENURE,
    systems: Sequence[str] = SYSTEMS,
) -> list[Target]:
    """Each of ``systems`` in the configuration of its best row (without one: the fallback),
    offered ``rate``, or half of its maximum when ``rate`` is None."""
    chosen = []
    for system in systems:
        row = best(rows, system)
        if row is not None:
            found = re.fullmatch(r"(\d+) processes x (?:batch|concurrency) (\d+)", row.config)
            assert found is not None, row.config
            processes, size = int(found.group(1)), int(found.group(2))
        else:
            processes, size = (PEER_PROCESSES, FALLBACK_BATCH) if system.startswith("pgqueuer") else tenure
        chosen.append(Target(system, processes, size, rate, None if row is None else row.rate))
    return chosen


def summarize(
    records: Sequence[tuple[str, float, float, float]],
    completed: dict[str, float],
    *,
    rate: float,
    start: float,
    seconds: float,
    grace_seconds: float,
) -> Run:
    """The run's figures from the producers' records and the jobs' completion moments."""
    begin, end = start + WARM_UP, start + WARM_UP + seconds
    window = [(job, due, sent) for job, due, sent, _ in records if begin <= due < end]
    calls = [acked - sent for job, due, sent, acked in records if job != pacing.UNSENT and begin <= due < end]
    missing = [job for job, _, _ in window if job != pacing.UNSENT and job not in completed]
    if not window or missing:
        raise RuntimeError(f"{len(window)} jobs due in the window, {len(missing)} never completed")
    # A job never sent waited at least until the producers gave up on it.
    cutoff = start + WARM_UP + seconds + TAIL + grace_seconds
    latencies = [(cutoff if job == pacing.UNSENT else completed[job]) - due for job, due, _ in window]
    lags = [(cutoff if job == pacing.UNSENT else sent) - due for job, due, sent in window]
    return Run(
        offered=rate,
        sent=sum(1 for _, _, sent, _ in records if begin <= sent < end) / seconds,
        completed=sum(1 for at in completed.values() if begin <= at < end) / seconds,
        p50=percentile(latencies, 50),
        p99=percentile(latencies, 99),
        worst=max(latencies),
        late99=percentile(lags, 99),
        enqueue50=percentile(calls, 50) if calls else float("nan"),
        jobs=len(window),
        unsent=sum(1 for job, _, _ in window if job == pacing.UNSENT),
    )


@contextmanager
def producers(
    command: list[str], *, name: str, workdir: Path
) -> Iterator[list[tuple[subprocess.Popen[bytes], Path, Path]]]:
    """:data:`PRODUCERS` processes of ``command`` (plus ``--share k --shares n --out FILE``),
    started before the body runs (they connect while the workers start) and stopped after it;
    the body gets each with its log and its output file."""
    started: list[tuple[subprocess.Popen[bytes], Path, Path]] = []
    try:
        for k in range(PRODUCERS):
            log, out = workdir / f"{name}-producer-{k}.log", workdir / f"{name}-produced-{k}.txt"
            extra = ["--share", str(k), "--shares", str(PRODUCERS), "--out", str(out)]
            started.append((start_process([*command, *extra], log, stdin=subprocess.PIPE), log, out))
        yield started
    finally:
        stop_processes([(process, log) for process, log, _ in started])


def produce(
    admin: psycopg.Connection[Any],
    started: Sequence[tuple[subprocess.Popen[bytes], Path, Path]],
    *,
    seconds: float,
) -> tuple[float, list[tuple[str, float, float, float]]]:
    """Once every producer is ready, give them one schedule; return its start (server epoch
    seconds) and every job's record, once all have ended."""
    for process, log, _ in started:
        wait_ready(process, log)
    start = server_epoch(admin) + LEAD
    for process, _, _ in started:
        assert process.stdin is not None
        process.stdin.write(f"{start:.6f}\n".encode())
        process.stdin.flush()
    schedule = WARM_UP + seconds + TAIL
    deadline = time.monotonic() + LEAD + schedule + grace(schedule) + STALL
    for process, log, _ in started:
        try:
            code = process.wait(max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            raise TimeoutError(f"producer {process.args!r} still running:\n{log.read_text()}") from None
        if code != 0:
            raise RuntimeError(f"producer {process.args!r} ended ({code}):\n{log.read_text()}")
    return start, [record for _, _, out in started for record in pacing.read(out)]


def wait_ready(process: subprocess.Popen[bytes], log: Path, *, wait: float = 60.0) -> None:
    end = time.monotonic() + wait
    while "ready" not in log.read_text().split():
        if process.poll() is not None or time.monotonic() > end:
            raise RuntimeError(f"producer {process.args!r} did not get ready:\n{log.read_text()}")
        time.sleep(0.02)


def wait_drained(
    admin: psycopg.Connection[Any], query: str, processes: Sequence[tuple[subprocess.Popen[bytes], Path]]
) -> None:
    """Until nothing is left to do (``query``: what is left), while ``processes`` keep running."""
    last, since = -1, time.monotonic()
    while True:
        row = admin.execute(query).fetchone()
        assert row is not None
        left = int(row[0])
        if left == 0:
            return
        if left != last:
            last, since = left, time.monotonic()
        elif time.monotonic() - since > STALL:
            raise TimeoutError(f"{left} jobs left and no progress for {STALL:.0f} s")
        for process, log in processes:
            if process.poll() is not None:
                raise RuntimeError(f"{process.args!r} ended ({process.returncode}):\n{log.read_text()}")
        time.sleep(0.1)


def completions(admin: psycopg.Connection[Any], query: str) -> dict[str, float]:
    return {job: float(at) for job, at in admin.execute(query).fetchall()}


def run_target(
    admin: psycopg.Connection[Any],
    conninfo: str,
    target: Target,
    *,
    rate: float,
    python: str,
    seconds: float,
    workdir: Path,
    name: str,
    probe: bool = False,
) -> Run:
    """The target's workers up and idle, the paced producers run their schedule at ``rate``,
    the queue drains; the figures of the jobs due in the window. A ``probe`` sends nothing
    after the schedule's end (it is to find what the system takes, not to wait on it)."""
    name = f"latency-{target.system}-{target.processes}x{target.size}-{name}"
    schedule = WARM_UP + seconds + TAIL
    grace_seconds = 0.0 if probe else grace(schedule)
    pacing_options = [
        *("--rate", str(rate), "--seconds", str(schedule), "--grace", str(grace_seconds)),
        *("--senders", str(SENDERS)),
    ]
    if target.system.startswith("pgqueuer"):
        admin.execute("CHECKPOINT")  # as before tenure's runs: none is due in the window
        base = [python, str(RUNNER), "--db", conninfo, "--schema", PEER_SCHEMAS["pgqueuer"], target.system]
        subprocess.run([*base, "install"], check=True, capture_output=True)
        work = [*base, "work", "--batch", str(target.size)]
        with (
            producers([*base, "pace", *pacing_options], name=name, workdir=workdir) as started,
            peer_workers(work, target.processes, logs=workdir / name) as workers,
        ):
            go(workers)
            start, records = produce(admin, started, seconds=seconds)
            wait_drained(admin, LEFT_SQL["pgqueuer"], workers)
        done = completions(admin, COMPLETED_SQL["pgqueuer"])
        admin.execute(f"DROP SCHEMA IF EXISTS {PEER_SCHEMAS['pgqueuer']} CASCADE")
    else:
        clean(admin)
        admin.execute("CHECKPOINT")
        options = ("--concurrency", str(target.size), "--poll-interval", "0.05")
        producer = [sys.executable, "-c", PRODUCER, "produce", "--db", conninfo, *pacing_options]
        asynchronous = target.system == "tenure-async"
        with (
            producers(producer, name=name, workdir=workdir) as started,
            task_workers(
                conninfo, target.processes, *options, logs=workdir / name, asynchronous=asynchronous
            ) as workers,
        ):
            start, records = produce(admin, started, seconds=seconds)
            wait_drained(admin, LEFT_SQL["tenure"], workers)
        done = completions(admin, COMPLETED_SQL["tenure"])
        clean(admin)
    return summarize(records, done, rate=rate, start=start, seconds=seconds, grace_seconds=grace_seconds)


def ms(seconds: float) -> str:
    return f"{seconds * 1000:8.1f}"


def latency_bench(
    admin: psycopg.Connection[Any],
    conninfo: str,
    *,
    rows: Sequence[Row],
    rate: float | None,
    seconds: float,
    python: str,
    workdir: Path,
    tenure: tuple[int, int] = FALLBACK_TENURE,
    systems: Sequence[str] = SYSTEMS,
    repeat: int = 1,
) -> dict[str, list[Run]]:
    """Every target of :func:`targets`: without ``rate``, each one's maximum found by a probe
    first; then each at its rate, ``repeat`` times in interleaved rounds; print each run, then
    the medians and tenure's over pgqueuer's."""
    chosen = targets(rows, rate=rate, tenure=tenure, systems=systems)
    print(
        f"  end-to-end latency, enqueue to completion, of single no-op jobs offered at "
        f"{'half of each system' + chr(39) + 's maximum with them' if rate is None else f'{rate:,.0f} /s'} "
        f"({PRODUCERS} producers x {SENDERS} connections, one enqueue per job; {WARM_UP:g} s warm-up, "
        f"{seconds:g} s window; from the job's due moment to its completion, server clock):"
    )
    runs: dict[str, list[Run]] = {target.system: [] for target in chosen}
    maximums: dict[str, Run] = {}
    try:
        if rate is None:
            print(
                "    each system's maximum: offered more than it takes (its drain rate above, at least "
                f"{PROBE_RATE:,.0f} /s), what it completed in the window"
            )
        for target in chosen if rate is None else ():
            probe = run_target(
                admin,
                conninfo,
                target,
                rate=target.probe_rate,
                python=python,
                seconds=seconds,
                workdir=workdir,
                name="probe",
                probe=True,
            )
            maximums[target.system] = probe
            print(
                f"    maximum: {target.system:<17} {target.config:<30} offered {probe.offered:7.0f} /s, "
                f"sent {probe.sent:7.0f}, completed {probe.completed:7.0f}"
                + ("" if probe.unsent else "   NOT SATURATED: the maximum is at least this"),
                flush=True,
            )
        chosen = [replace(t, rate=maximums[t.system].completed / 2) if t.rate is None else t for t in chosen]
        for round_ in range(1, repeat + 1):
            for target in chosen:
                assert target.rate is not None
                run = run_target(
                    admin,
                    conninfo,
                    target,
                    rate=target.rate,
                    python=python,
                    seconds=seconds,
                    workdir=workdir,
                    name=str(round_),
                )
                runs[target.system].append(run)
                print(
                    f"    {f'round {round_}: ' if repeat > 1 else ''}{target.system:<17} {target.config:<30} "
                    f"offered {run.offered:7.0f} /s, sent {run.sent:7.0f}, completed {run.completed:7.0f}   "
                    f"p50 {ms(run.p50)} ms  p99 {ms(run.p99)} ms  max {ms(run.worst)} ms   "
                    f"producer late p99 {ms(run.late99)} ms, enqueue call p50 {ms(run.enqueue50)} ms"
                    + (
                        f"\n      SATURATED: {run.unsent:,} of the {run.jobs:,} jobs due in the window were "
                        "never sent (every producer connection was waiting on an enqueue until the grace ran "
                        "out): "
                        "these figures are lower bounds; try a lower --latency-rate"
                        if run.unsent
                        else ""
                    ),
                    flush=True,
                )
    finally:
        admin.execute(f"DROP SCHEMA IF EXISTS {PEER_SCHEMAS['pgqueuer']} CASCADE")
        clean(admin)
    print(
        f"    {'system':<17} {'configuration':<30} {'drained':>8} {'maximum':>8} {'offered':>8} "
        f"{'completed':>9} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}   p99 runs"
        + ("  (medians of the rounds)" if repeat > 1 else "")
    )
    for target in chosen:
        assert target.rate is not None
        done = runs[target.system]
        spread = Repeated(tuple(run.p99 * 1000 for run in done))
        drained = f"{target.drained:8.0f}" if target.drained is not None else f"{'-':>8}"
        found = maximums.get(target.system)
        maximum = f"{found.completed:8.0f}" if found is not None else f"{'-':>8}"
        print(
            f"    {target.system:<17} {target.config:<30} {drained} {maximum} {target.rate:8.0f} "
            f"{median(run.completed for run in done):9.0f} {ms(median(run.p50 for run in done))} "
            f"{ms(spread.median / 1000)} {ms(median(run.worst for run in done))}   {spread.describe()}"
            + ("  SATURATED (lower bounds)" if any(run.unsent for run in done) else "")
        )
    reference = runs.get("pgqueuer-asyncpg")
    if reference:
        p50, p99 = median(run.p50 for run in reference), median(run.p99 for run in reference)
        print("  headline: tenure's latency over pgqueuer-asyncpg's (below 1: tenure's jobs finish sooner):")
        for system in ("tenure", "tenure-async"):
            if runs.get(system):
                own50, own99 = (
                    median(run.p50 for run in runs[system]),
                    median(run.p99 for run in runs[system]),
                )
                print(f"    {system:<14} p50 {own50 / p50:5.2f}x   p99 {own99 / p99:5.2f}x")
    return runs


def median(values: Any) -> float:
    return Repeated(tuple(values)).median


# The producer of tenure's runs (-c, not -m: tenure.bench imports this module first).
PRODUCER = "import sys; from tenure.bench.latency import main; sys.exit(main(sys.argv[1:]))"


async def produce_tenure(args: argparse.Namespace) -> None:
    """``args.senders`` connections each enqueueing single tasks with the AsyncDriver, paced."""
    from tenure.connect import aconnect
    from tenure.driver import AsyncDriver

    connections = []
    try:
        senders = []
        for _ in range(args.senders):
            connection = await aconnect(args.db, application_name="tenure-bench-latency", deadline=30)
            connections.append(connection)
            driver = AsyncDriver(connection)

            async def enqueue(due: float, driver: AsyncDriver = driver) -> str:
                task = await driver.task_enqueue(TASK_KIND, {"due": due})
                return str(task.id)

            senders.append(enqueue)

        async def now() -> float:
            cursor = await connections[0].execute("SELECT extract(epoch FROM clock_timestamp())::float8")
            row = await cursor.fetchone()
            assert row is not None
            return float(row[0])

        await pacing.run(senders, now, args)
    finally:
        for connection in connections:
            await connection.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tenure.bench.latency")
    actions = parser.add_subparsers(dest="action", required=True)
    paced = actions.add_parser("produce", help="tenure's paced producer (tenure.bench.pacing)")
    paced.add_argument("--db", required=True)
    paced.add_argument("--rate", type=float, required=True, help="jobs/s of all the pacing processes")
    paced.add_argument("--seconds", type=float, required=True, help="length of the schedule")
    paced.add_argument("--senders", type=int, default=SENDERS)
    paced.add_argument("--grace", type=float, default=10.0)
    paced.add_argument("--share", type=int, default=0)
    paced.add_argument("--shares", type=int, default=1)
    paced.add_argument("--out", required=True)
    asyncio.run(produce_tenure(parser.parse_args(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
