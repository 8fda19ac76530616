"""Tasks: completions per second by real worker processes (the threaded TaskWorker and the
AsyncTaskWorker, ``tenure task worker --async``) and through SQL alone, against
the bare SKIP LOCKED claim and complete on a plain table; the same through a handler in
any language (``--exec``, ``--http``) against the Python worker; enqueues per second
against a one-row INSERT; wake-up latency from enqueue to lease against a bare NOTIFY
(and, for scale, a bare queue's INSERT + NOTIFY and SKIP LOCKED claim on it).
"""

from __future__ import annotations

import contextlib
import json
import random
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg

from tenure.bench.common import (
    Rate,
    Repeated,
    interleaved,
    percentile,
    pgbench_rate,
    pgbench_run,
    rate_line,
    rates,
    ratio_spread,
    round_ratios,
    scalar,
    start_process,
    startup,
    stop_processes,
)
from tenure.driver import Driver
from tenure.testing.database import server_now

TASK_KIND = "bench"  # the kind tenure.bench.app processes
PYTHON_WORKER = ("--module", "tenure.bench.app")  # how a task worker handles its tasks by default


OWNER = "md5(:client_id::text)::uuid"  # one instance id per pgbench client


# The bare queue: what one would write without tenure, with the same backlog.
JOBS_DDL = """
CREATE TABLE IF NOT EXISTS tenure_bench.jobs (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    due          timestamptz NOT NULL,
    leased_until timestamptz NOT NULL DEFAULT '-infinity',
    owner        uuid,
    done         boolean     NOT NULL DEFAULT false
);
CREATE INDEX IF NOT EXISTS jobs_due ON tenure_bench.jobs (due) WHERE NOT done;
"""


# A backlog of %(size)s tasks due 1 ms apart, oldest first, loaded by one INSERT ... SELECT
# as the superuser (tenure.task with the columns task_enqueue would set), each at a priority
# drawn at random from 0 .. %(priorities)s - 1 (1: all at the default, 0).
LOAD_SQL = {
    "tenure.task": "INSERT INTO tenure.task (kind, state, created_at, last_change, last_action, next_action, "
    "priority) "
    "SELECT %(kind)s, 'new', now(), now(), now(), now() - g * interval '1 ms', "
    "floor(random() * %(priorities)s)::integer "
    "FROM generate_series(%(size)s, 1, -1) g",
    "tenure_bench.jobs": "INSERT INTO tenure_bench.jobs (due) "
    "SELECT now() - g * interval '1 ms' FROM generate_series(%(size)s, 1, -1) g",
}


UNDONE = {"tenure.task": "status = 'pending'", "tenure_bench.jobs": "NOT done"}


# Claim and complete as two transactions, like a worker: the claim commits before the work.
# An empty claim (backlog ran out) completes nothing instead of aborting the client.
BARE_CLAIM_SQL = f"""\
WITH claimed AS (
    UPDATE tenure_bench.jobs SET owner = {OWNER}, leased_until = now() + interval '30 s'
     WHERE id = (SELECT id FROM tenure_bench.jobs WHERE NOT done AND leased_until <= now()
                  ORDER BY due LIMIT 1 FOR UPDATE SKIP LOCKED)
    RETURNING id)
SELECT coalesce(max(id), 0) AS id FROM claimed \\gset
\\if :id
UPDATE tenure_bench.jobs SET done = true, owner = NULL WHERE id = :id AND owner = {OWNER};
\\endif
"""


# The calls a task worker makes (kinds included), without the Python runtime.
TENURE_CLAIM_SQL = f"""\
SELECT coalesce(max(id::text), '') AS id, coalesce(max(epoch), 0) AS epoch
  FROM tenure.task_acquire({OWNER}, '30 s', 1, ARRAY['{TASK_KIND}']) \\gset
\\if :epoch
SELECT tenure.task_complete(':id', {OWNER}, :epoch);
\\endif
"""


CYCLE_BATCH = 10  # tasks a pgbench client completes and leases per task_cycle call


# A worker's round trip without the Python runtime: each call completes the tasks the
# previous one leased (their ids and epochs carried in the client's variable :held) and
# leases as many more, in one call and one commit.
TENURE_CYCLE_SQL = f"""\
SELECT coalesce(jsonb_agg(jsonb_build_object('id', id, 'epoch', epoch, 'outcome', 'complete'))
                FILTER (WHERE outcome = 'lease'), '[]') AS held,
       count(*) FILTER (WHERE outcome = 'complete' AND refused IS NULL) AS completed
  FROM tenure.task_cycle({OWNER}, '30 s', {CYCLE_BATCH}, ARRAY['{TASK_KIND}'], ':held') \\gset
"""


CLAIM_RUNS = {  # how -> (table, pgbench script or None for worker processes, tasks per script run)
    "bare": ("tenure_bench.jobs", BARE_CLAIM_SQL, 1),
    "sql": ("tenure.task", TENURE_CLAIM_SQL, 1),
    "cycle": ("tenure.task", TENURE_CYCLE_SQL, CYCLE_BATCH),
    "workers": ("tenure.task", None, 1),
    "async workers": ("tenure.task", None, 1),
}


ENQUEUE_BASELINE_SQL = "INSERT INTO tenure_bench.jobs (due) VALUES (now());\n"


ENQUEUE_ONE_SQL = f"SELECT * FROM tenure.task_enqueue('{TASK_KIND}');\n"


def enqueue_many_sql(batch: int) -> str:
    tasks = json.dumps([{"kind": TASK_KIND}] * batch)
    return f"SELECT * FROM tenure.task_enqueue_many('{tasks}');\n"


WARM_UP = 1.0  # seconds between the workers' start and the measurement


def clean(admin: psycopg.Connection[Any]) -> None:
    """Remove every task, lease, kind setting and job an earlier phase left (CASCADE: with
    the tables that refer to tasks and kinds, such as their dependencies and rate logs)."""
    admin.execute("TRUNCATE tenure.task, tenure.task_lease_log, tenure.task_kind, tenure_bench.jobs CASCADE")


def fill(admin: psycopg.Connection[Any], table: str, size: int, *, priorities: int = 1) -> None:
    """Replace everything with a fresh backlog of ``size`` due rows in ``table`` (tasks at
    priorities drawn from 0 .. ``priorities`` - 1)."""
    clean(admin)
    admin.execute(LOAD_SQL[table], {"kind": TASK_KIND, "size": size, "priorities": priorities})
    admin.execute(f"VACUUM ANALYZE {table}")
    admin.execute("CHECKPOINT")  # the load's checkpoint is not to land in the measurement


def wait_started(process: subprocess.Popen[bytes], log_path: Path, *, wait: float = 30.0) -> None:
    end = time.monotonic() + wait
    while " started: " not in log_path.read_text():
        if process.poll() is not None or time.monotonic() > end:
            raise RuntimeError(f"task worker {process.pid} did not start:\n{log_path.read_text()}")
        time.sleep(0.05)


@contextmanager
def task_workers(
    conninfo: str,
    count: int,
    *options: str,
    logs: Path,
    concurrency: int = 1,
    asynchronous: bool = False,
    handled_by: Sequence[str] = PYTHON_WORKER,
) -> Iterator[list[tuple[subprocess.Popen[bytes], Path]]]:
    """``count`` real ``tenure task worker`` processes of tenure.bench.app (or ``handled_by``:
    ``--exec ...`` or ``--http ...``), ``concurrency`` tasks in flight each, started before the
    body runs and stopped with SIGTERM when it ends, however it ends; with ``asynchronous``,
    AsyncTaskWorkers (``--async``). The block gets the processes with their logs."""
    command = [
        *(sys.executable, "-m", "tenure", "task", "worker", "--db", conninfo),
        *("--concurrency", str(concurrency), "--lease", "30", *options),
        *(["--async"] if asynchronous else []),
        *handled_by,  # last: --exec takes the rest of the line
    ]
    processes: list[tuple[subprocess.Popen[bytes], Path]] = []
    try:
        for n in range(1, count + 1):
            log_path = logs.with_name(f"{logs.name}-{n}.log")
            processes.append((start_process(command, log_path), log_path))
        for process, log_path in processes:
            wait_started(process, log_path)
        yield processes
    finally:
        stop_processes(processes)


def worker_rate(
    admin: psycopg.Connection[Any],
    conninfo: str,
    *,
    workers: int,
    concurrency: int,
    seconds: float,
    logs: Path,
    asynchronous: bool = False,
    handled_by: Sequence[str] = PYTHON_WORKER,
) -> Rate:
    """Tasks the workers finished per second in a window after warm-up, by the server's clock;
    the start-up apart: the time from before the processes started to the window, less the
    time the steady rate takes for what they finished in it."""
    spawned = server_now(admin)
    with task_workers(
        conninfo,
        workers,
        "--poll-interval",
        "0.05",
        logs=logs,
        concurrency=concurrency,
        asynchronous=asynchronous,
        handled_by=handled_by,
    ):
        time.sleep(WARM_UP)
        start = server_now(admin)
        time.sleep(seconds)
    end = start + timedelta(seconds=seconds)
    query = "SELECT count(*) FROM tenure.task WHERE finished_at >= %s AND finished_at < %s"
    rate = int(scalar(admin, query, (start, end))) / seconds
    warming = int(scalar(admin, query, (spawned, start)))
    return Rate(rate, (start - spawned).total_seconds() - warming / rate if rate else None)


def completion_rate(
    admin: psycopg.Connection[Any],
    conninfo: str,
    how: str,
    *,
    backlog: int,
    clients: int,
    concurrency: int,
    seconds: float,
    workdir: Path,
    priorities: int = 1,
    max_running: int | None = None,
) -> Rate:
    """Tasks claimed and completed per second on a fresh backlog, the way ``how`` names (tasks
    at ``priorities`` priorities; the kind limited to ``max_running`` leased at once), steady
    (pgbench: after its first second; workers: after a second's warm-up), start-up apart."""
    table, script, per_run = CLAIM_RUNS[how]
    fill(admin, table, backlog, priorities=priorities)
    if max_running is not None:
        Driver(admin).task_kind_set(TASK_KIND, max_running=max_running)
    if script is None:
        asynchronous = how == "async workers"
        controls = f"-priorities{priorities}" * (priorities > 1)
        controls += f"-max{max_running}" * (max_running is not None)
        logs = workdir / f"{'async-' if asynchronous else ''}workers-{backlog}-{clients}{controls}"
        rate = worker_rate(
            admin,
            conninfo,
            workers=clients,
            concurrency=concurrency,
            seconds=seconds,
            logs=logs,
            asynchronous=asynchronous,
        )
    else:
        run = pgbench_run(
            conninfo, script, clients=clients, seconds=seconds, workdir=workdir, defines={"held": "[]"}
        )
        per_call = 1.0
        if per_run > 1:  # a call completes what the one before leased: count what got done per call
            done = int(scalar(admin, f"SELECT count(*) FROM {table} WHERE status = 'done'"))
            per_call = done / (run.tps * max(1, round(seconds))) if run.tps else 0.0
        rate = Rate(run.steady_tps * per_call, run.startup)
    if not scalar(admin, f"SELECT EXISTS (SELECT FROM {table} WHERE {UNDONE[table]})"):
        print(f"    ({how}, {clients} clients: the backlog ran out, so the figure is void: raise --backlogs)")
    return rate


def task_throughput(
    admin: psycopg.Connection[Any],
    conninfo: str,
    *,
    backlog: int,
    workers: list[int],
    concurrency: int,
    seconds: float,
    workdir: Path,
    repeat: int = 1,
) -> None:
    """Each row ``repeat`` times, in interleaved rounds (every row once per round): the
    figures are the medians, and a line under each row gives the spread of its runs. Each run
    is a steady window: pgbench's rate leaves out its connections and its first second, the
    workers' starts after they started and warmed up for a second (the start-up printed apart)."""
    print(
        f"  tasks completed per second (acquire + complete, no-op processor), backlog {backlog:,} "
        f"(INSERT ... SELECT generate_series), {seconds:.0f} s per run; the same number of pgbench "
        f"clients or worker processes (each with --concurrency {concurrency})"
        f"{f'; medians of {repeat} interleaved rounds' if repeat > 1 else ''}:"
    )
    runs = interleaved(
        [(count, how) for count in workers for how in CLAIM_RUNS],
        lambda row, _: completion_rate(
            admin,
            conninfo,
            row[1],
            backlog=backlog,
            clients=row[0],
            concurrency=concurrency,
            seconds=seconds,
            workdir=workdir,
        ),
        repeat=repeat,
        show=lambda row, run: f"{row[0]} clients, {row[1]} {run.rate:.0f} /s",
    )
    print(
        "    clients   bare SKIP LOCKED (baseline)   tenure SQL by pgbench   "
        f"task_cycle by pgbench ({CYCLE_BATCH} per call)   tenure task workers   "
        "async task workers (x threaded)"
    )
    for count in workers:
        bare, sql, cycle, processes, async_processes = (rates(runs[count, how]).median for how in CLAIM_RUNS)
        print(
            f"    {count:7d}   {bare:10.0f} /s   1.00         {sql:8.0f} /s   {sql / bare:.2f}"
            f"       {cycle:8.0f} /s   {cycle / bare:.2f}                 {processes:8.0f} /s   "
            f"{processes / bare:.2f}       {async_processes:8.0f} /s   {async_processes / bare:.2f} "
            f"({async_processes / processes if processes else float('nan'):.2f})",
            flush=True,
        )
        starts = ", ".join(f"{how} {startup(runs[count, how])}" for how in CLAIM_RUNS)
        print(f"              start-up: {starts}")
        if repeat > 1:
            spreads = "; ".join(f"{how} {rates(runs[count, how]).describe()}" for how in CLAIM_RUNS)
            print(f"              runs: {spreads}")
            bare_runs = rates(runs[count, "bare"]).values
            per_round = "; ".join(
                f"{how} {round_ratios(rates(runs[count, how]).values, bare_runs).describe('{:.2f}')}"
                for how in list(CLAIM_RUNS)[1:]
            )
            print(f"              ratio to bare per round: {per_round}")


PRIORITIES = 10  # the priorities row: each task at a priority drawn from 0 .. 9


def control_costs(
    admin: psycopg.Connection[Any],
    conninfo: str,
    *,
    backlog: int,
    clients: int,
    concurrency: int,
    seconds: float,
    workdir: Path,
    repeat: int = 1,
) -> None:
    """The task controls' cost on the same workload: the kind limited by max_running (a limit
    that leaves every slot free, so only its bookkeeping counts, and one that binds), and the
    backlog spread over priorities, against the kind without settings, all at priority 0;
    ``repeat`` interleaved rounds, medians (the most leased at once: the most of any run)."""
    slots = {"cycle": clients * CYCLE_BATCH, "workers": clients * concurrency}  # tasks held at most
    loose = max(64, 2 * max(slots.values()))
    tight = max(1, min(slots.values()) // 4)
    runs: list[tuple[str, int, int | None]] = [  # label, priorities, max_running
        ("baseline  no kind settings, every task at priority 0", 1, None),
        (f"max_running {loose} (binds no slot: only its bookkeeping)", 1, loose),
        (f"max_running {tight} (binds: a quarter of the slots or fewer)", 1, tight),
        (f"priorities 0 .. {PRIORITIES - 1} at random", PRIORITIES, None),
    ]
    print(
        f"  task controls: tasks completed per second, backlog {backlog:,}, {clients} pgbench clients "
        f"({slots['cycle']} slots) or worker processes with --concurrency {concurrency} ({slots['workers']} "
        f"slots), {seconds:.0f} s per run{f'; medians of {repeat} interleaved rounds' if repeat > 1 else ''}:"
    )
    hows = ("cycle", "workers")

    def measure(row: tuple[str, int, int | None, str], _: int) -> tuple[Rate, int]:
        _label, priorities, max_running, how = row
        rate = completion_rate(
            admin,
            conninfo,
            how,
            backlog=backlog,
            clients=clients,
            concurrency=concurrency,
            seconds=seconds,
            workdir=workdir,
            priorities=priorities,
            max_running=max_running,
        )
        return rate, most_leased(admin)

    measured = interleaved(
        [(label, priorities, max_running, how) for label, priorities, max_running in runs for how in hows],
        measure,
        repeat=repeat,
        show=lambda row, run: f"{row[0].split('(')[0].strip()}, {row[3]} {run[0].rate:.0f} /s",
    )
    print(
        f"    {'':<62} {f'task_cycle by pgbench ({CYCLE_BATCH} per call)':<38}{'tenure task workers':<22}"
        "most leased at once (pgbench / workers)"
    )
    baseline = {how: rates([rate for rate, _ in measured[(*runs[0], how)]]).median for how in hows}
    for label, priorities, max_running in runs:
        rows = {how: measured[label, priorities, max_running, how] for how in hows}
        median = {how: rates([rate for rate, _ in rows[how]]).median for how in hows}
        most = {how: max(leased for _, leased in rows[how]) for how in hows}
        cycle, workers = (
            f"{median[how]:8.0f} /s   {median[how] / baseline[how] if baseline[how] else float('nan'):.2f}"
            for how in hows
        )
        print(
            f"    {label:<62} {cycle:<38}{workers:<22}{most['cycle']} / {most['workers']}",
            flush=True,
        )
        if repeat > 1:
            spreads = "; ".join(
                f"{how} {rates([rate for rate, _ in rows[how]]).describe()}"
                + ratio_spread(
                    rates([rate for rate, _ in rows[how]]).values,
                    rates([rate for rate, _ in measured[(*runs[0], how)]]).values,
                )
                for how in hows
            )
            print(f"      runs: {spreads}")
    clean(admin)


# The most tasks leased at the same moment, by the server's clock: each task's last lease
# (its current epoch) runs from its leased_at in the log to its last action (completed,
# released or failed), or on past the end while it is still held.
MOST_LEASED_SQL = """
SELECT coalesce(max(leased), 0) FROM (
    SELECT sum(v.step) OVER (ORDER BY v.at, v.step ROWS UNBOUNDED PRECEDING) AS leased
      FROM tenure.task_lease_log l
      JOIN tenure.task t ON t.id = l.task_id AND t.epoch = l.epoch
     CROSS JOIN LATERAL (
         VALUES (l.leased_at, 1),
                (CASE WHEN t.owner IS NULL THEN t.last_action ELSE 'infinity' END, -1)) v (at, step)
) w
"""


def most_leased(admin: psycopg.Connection[Any]) -> int:
    return int(scalar(admin, MOST_LEASED_SQL))


@contextmanager
def noop_http_handler(logs: Path) -> Iterator[str]:
    """The bench's no-op HTTP task handler (tenure.bench.shim_handler) in a process of its own:
    its URL while the block runs."""
    process = start_process([sys.executable, "-m", "tenure.bench.shim_handler"], logs, stdout=subprocess.PIPE)
    try:
        assert process.stdout is not None
        port = process.stdout.readline().decode().strip()
        if not port.isdigit():
            raise RuntimeError(f"the bench's HTTP task handler did not start; log: {logs}")
        yield f"http://127.0.0.1:{port}/tasks"
    finally:
        stop_processes([(process, logs)])


# The no-op command of the --exec row: a process start and its answer, nothing else (a
# command in an interpreted language adds its interpreter's start-up to each task).
NOOP_COMMAND = ("/bin/echo", '{"outcome": "complete"}')


def shim_throughput(
    admin: psycopg.Connection[Any],
    conninfo: str,
    *,
    backlog: int,
    concurrency: int,
    seconds: float,
    workdir: Path,
    repeat: int = 1,
) -> None:
    """One worker process handling no-op tasks in Python (--module), through a command per
    task (--exec) and through a local HTTP handler (--http), as ratios to the first, in the
    same run; ``repeat`` interleaved rounds, medians."""
    print(
        f"  tasks completed per second by one worker process with --concurrency {concurrency}, no-op "
        f"handlers, backlog {backlog:,}, {seconds:.0f} s per run"
        f"{f'; medians of {repeat} interleaved rounds' if repeat > 1 else ''}:"
    )
    runs: list[tuple[str, Sequence[str] | None]] = [
        ("--module (Python processor, threaded TaskWorker)", PYTHON_WORKER),
        (
            f"--exec {' '.join(NOOP_COMMAND[:1])} (a process per task)",
            ("--kind", TASK_KIND, "--exec", "--", *NOOP_COMMAND),
        ),
        ("--http (asyncio HTTP handler, kept-alive)", None),
    ]
    handlers = dict(runs)

    def measure(label: str, _: int) -> Rate:
        handled_by = handlers[label]
        fill(admin, "tenure.task", backlog)
        logs = workdir / f"shim-{label.split()[0].strip('-')}"
        with contextlib.ExitStack() as handler:
            if handled_by is None:  # --http: a no-op handler of its own, for this run only
                url = handler.enter_context(noop_http_handler(workdir / "shim-http-handler.log"))
                handled_by = ("--kind", TASK_KIND, "--http", url)
            rate = worker_rate(
                admin,
                conninfo,
                workers=1,
                concurrency=concurrency,
                seconds=seconds,
                logs=logs,
                handled_by=handled_by,
            )
        if not scalar(admin, f"SELECT EXISTS (SELECT FROM tenure.task WHERE {UNDONE['tenure.task']})"):
            print(f"    ({label}: the backlog ran out, so the figure is void: raise --backlogs)")
        return rate

    measured = interleaved(
        list(handlers), measure, repeat=repeat, show=lambda label, run: f"{label} {run.rate:.0f} /s"
    )
    baseline = measured[runs[0][0]]  # the Python worker's runs
    for label, _ in runs:
        print(f"    {rate_line(label, measured[label], baseline, width=56)}", flush=True)


def enqueue_rates(
    admin: psycopg.Connection[Any],
    conninfo: str,
    *,
    clients: int,
    seconds: float,
    batches: list[int],
    backlog: int,
    workdir: Path,
    repeat: int = 1,
) -> None:
    """Enqueue onto an analyzed backlog: on a freshly emptied table, plans cached before
    autoanalyze catches up scan the growing table, which is not the steady state. Steady
    rates (each run's first second apart as its start-up), ``repeat`` interleaved rounds,
    medians."""
    runs = [
        ("baseline  pgbench one-row INSERT into a plain table", "tenure_bench.jobs", ENQUEUE_BASELINE_SQL, 1),
        ("task_enqueue, one task per transaction", "tenure.task", ENQUEUE_ONE_SQL, 1),
        *(
            (f"task_enqueue_many, {batch} tasks per call", "tenure.task", enqueue_many_sql(batch), batch)
            for batch in batches
        ),
    ]
    print(
        f"  tasks enqueued per second onto a backlog of {backlog:,}, {clients} pgbench clients, "
        f"{seconds:.0f} s per run{f'; medians of {repeat} interleaved rounds' if repeat > 1 else ''}:"
    )
    scripts = {label: (table, script, per_call) for label, table, script, per_call in runs}

    def measure(label: str, _: int) -> Rate:
        table, script, per_call = scripts[label]
        fill(admin, table, backlog)
        return pgbench_rate(
            conninfo, script, clients=clients, seconds=seconds, workdir=workdir, per_script=per_call
        )

    measured = interleaved(
        list(scripts), measure, repeat=repeat, show=lambda label, run: f"{label} {run.rate:,.0f} /s"
    )
    baseline = measured[runs[0][0]]
    for label, rows in measured.items():
        print(f"    {rate_line(label, rows, baseline, width=52)}", flush=True)


def spaced(count: int) -> Iterator[int]:
    """0 .. count - 1, each after a random pause of 50-200 ms."""
    rng = random.Random()
    for n in range(count):
        time.sleep(rng.uniform(0.05, 0.2))
        yield n


def notify_latencies(conninfo: str, *, count: int) -> list[float]:
    """Bare LISTEN/NOTIFY: from pg_notify to the listener's next statement, by the server's clock."""
    latencies = []
    with (
        psycopg.connect(conninfo, autocommit=True) as listener,
        psycopg.connect(conninfo, autocommit=True) as sender,
    ):
        listener.execute("LISTEN tenure_bench")
        for _ in spaced(count):
            sender.execute("SELECT pg_notify('tenure_bench', clock_timestamp()::text)")
            (notify,) = listener.notifies(timeout=5, stop_after=1)  # the generator holds the connection
            query = "SELECT extract(epoch FROM clock_timestamp() - %s::timestamptz)::float8"
            latencies.append(float(scalar(listener, query, (notify.payload,))))
    return latencies


# A bare queue's wake-up, the same work as tenure's without tenure: the producer inserts a
# job and notifies in one statement (the job due at the insert's clock), the consumer claims
# it on the notification with one SKIP LOCKED update (stamped by the clock then) and marks it
# done; one connection each, no pool, no fencing, no lease log.
BARE_ENQUEUE_NOTIFY_SQL = (
    "WITH job AS (INSERT INTO tenure_bench.jobs (due) VALUES (clock_timestamp()) RETURNING id) "
    "SELECT pg_notify('tenure_bench_jobs', id::text) FROM job"
)
BARE_CLAIM_ON_NOTIFY_SQL = (
    "UPDATE tenure_bench.jobs SET owner = gen_random_uuid(), "
    "leased_until = clock_timestamp() + interval '30 s' "
    "WHERE id = (SELECT id FROM tenure_bench.jobs WHERE NOT done AND leased_until <= now() "
    "ORDER BY due LIMIT 1 FOR UPDATE SKIP LOCKED) "
    "RETURNING id, extract(epoch FROM clock_timestamp() - due)::float8"
)


def bare_queue_latencies(admin: psycopg.Connection[Any], conninfo: str, *, count: int) -> list[float]:
    """A bare queue's wake-up: from the job's insert to its claim on the notification, by the
    server's clock."""
    clean(admin)
    latencies = []
    with (
        psycopg.connect(conninfo, autocommit=True) as consumer,
        psycopg.connect(conninfo, autocommit=True) as producer,
    ):
        consumer.execute("LISTEN tenure_bench_jobs")
        for _ in spaced(count):
            producer.execute(BARE_ENQUEUE_NOTIFY_SQL)
            (_notify,) = consumer.notifies(timeout=5, stop_after=1)  # read whole: it holds the connection
            row = consumer.execute(BARE_CLAIM_ON_NOTIFY_SQL).fetchone()
            assert row is not None
            latencies.append(float(row[1]))
            consumer.execute("UPDATE tenure_bench.jobs SET done = true, owner = NULL WHERE id = %s", row[:1])
    return latencies


def wake_latencies(
    admin: psycopg.Connection[Any], conninfo: str, *, listen: bool, poll: float, tasks: int, workdir: Path
) -> list[float]:
    """From enqueue (created_at) to the start of the first lease (leased_at) with one idle worker."""
    clean(admin)
    options = ["--poll-interval", str(poll), *([] if listen else ["--no-listen"])]
    with task_workers(conninfo, 1, *options, logs=workdir / f"wake-{'listen' if listen else 'poll'}"):
        time.sleep(WARM_UP)  # idle: listening, and past its first poll
        for _ in spaced(tasks):
            Driver(admin).task_enqueue(TASK_KIND)
        end = time.monotonic() + poll + 10
        while scalar(admin, "SELECT EXISTS (SELECT FROM tenure.task WHERE status = 'pending')"):
            if time.monotonic() > end:
                raise TimeoutError(f"the worker left tasks unfinished; log: {workdir}")
            time.sleep(0.05)
    rows = admin.execute(
        "SELECT extract(epoch FROM l.leased_at - t.created_at)::float8 FROM tenure.task t "
        "JOIN tenure.task_lease_log l ON l.task_id = t.id AND l.epoch = 1"
    ).fetchall()
    return [float(row[0]) for row in rows]


def wake_latency(
    admin: psycopg.Connection[Any], conninfo: str, *, tasks: int, workdir: Path, repeat: int = 1
) -> None:
    """p50 and p99 of each way's wake-up, ``repeat`` interleaved rounds: the medians of the
    rounds' p50 and p99, each with the spread of its rounds."""
    poll = 1.0
    ways: dict[str, Callable[[], list[float]]] = {
        "baseline  bare NOTIFY to the listener's next query": lambda: notify_latencies(conninfo, count=tasks),
        "bare queue: INSERT + NOTIFY, SKIP LOCKED claim on it": lambda: bare_queue_latencies(
            admin, conninfo, count=tasks
        ),
        "notifications on": lambda: wake_latencies(
            admin, conninfo, listen=True, poll=poll, tasks=tasks, workdir=workdir
        ),
        "notifications off (--no-listen), ratio to the poll": lambda: wake_latencies(
            admin, conninfo, listen=False, poll=poll, tasks=tasks, workdir=workdir
        ),
    }

    def measure(label: str, _: int) -> tuple[float, float]:
        values = ways[label]()
        return percentile(values, 50), percentile(values, 99)

    measured = interleaved(
        list(ways),
        measure,
        repeat=repeat,
        show=lambda label, run: f"{label} p50 {run[0] * 1000:.1f} ms, p99 {run[1] * 1000:.1f} ms",
    )
    print(
        f"  wake-up latency from enqueue to lease (server clock), one idle worker polling every {poll:g} s, "
        f"{tasks} tasks 50-200 ms apart{f'; medians of {repeat} interleaved rounds' if repeat > 1 else ''}:"
    )
    p50s = {label: Repeated(tuple(1000 * p50 for p50, _ in runs)) for label, runs in measured.items()}
    p99s = {label: Repeated(tuple(1000 * p99 for _, p99 in runs)) for label, runs in measured.items()}
    bare = next(iter(ways))
    for label in ways:
        ref50, ref99 = p50s[bare].median, p99s[bare].median
        if "--no-listen" in label:  # against the poll interval
            ref50 = ref99 = poll * 1000
        p50, p99 = p50s[label], p99s[label]
        print(
            f"    {label:<52} p50 {p50.median:7.1f} ms {p50.median / ref50:7.2f}   "
            f"p99 {p99.median:7.1f} ms {p99.median / ref99:7.2f}",
            flush=True,
        )
        if repeat > 1:
            print(
                f"      runs: p50 {p50.describe('{:.1f}', ' ms')}; p99 {p99.describe('{:.1f}', ' ms')}"
                + ("" if "--no-listen" in label else ratio_spread(p50.values, p50s[bare].values))
            )
