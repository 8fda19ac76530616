"""``tenure bench``: figures as ratios to baselines measured in the same run.

1. Heartbeat throughput: pgbench clients each acting as an elector renewing its own
   service type with ``update_heartbeat``, against pgbench running a one-row UPDATE
   with the same number of clients on the same cluster.
2. Contended bids: every client bidding for one type (one renews, the rest are
   discarded), against the same baseline.
3. Takeover time: demo service processes, the primary SIGKILLed again and again; the
   time from the kill (server clock) to the start of the next term, against T + I.
4. Tasks completed per second with 1, 4, 8 workers on a backlog of 100,000 and of
   1,000,000 tasks: real ``tenure task worker`` processes running a no-op processor
   (:mod:`tenure.bench.app`), and the same SQL calls driven by pgbench, against pgbench
   running the bare SKIP LOCKED claim and complete on a plain table with the same backlog.
5. Tasks enqueued per second, one per call and in batches, against a one-row INSERT.
6. Wake-up latency from enqueue to lease start with and without LISTEN/NOTIFY, against
   a bare NOTIFY reaching a listener (on) and against the poll interval (off).
7. Claims: instances holding their fair share of 10,000 (and 1,000) keys, each running
   claim_renew + claim_take as fast as it can (one pgbench client per instance), against
   pgbench running one UPDATE that extends the expiry of the same rows on a plain table.
8. The submission queue: batches per second end to end and fairness under a flood
   (:mod:`tenure.bench.batches`).
9. Replica failover: three demo replicas behind HAProxy with a client writing through it;
   the active replica SIGKILLed again and again; the time from the kill to the first
   successful request through the load balancer, against the acquisition interval plus
   the health-check interval, without a grace period and with one (whose reservation
   the failover must wait out).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg

from tenure.bench.batches import queue_bench
from tenure.driver import Driver
from tenure.testing.database import retire_keyspace, server_now, setup
from tenure.testing.haproxy import HAProxy
from tenure.testing.heartbeat import ServiceProcess, wait_for_primary
from tenure.testing.history import read_terms
from tenure.testing.replicas import Client, ReplicaProcess, ReplicaSettings, wait_for_active

BASELINE_SQL = "UPDATE tenure_bench.row SET v = v + 1 WHERE id = :client_id;\n"
OWN_TYPE_SQL = (
    "SELECT * FROM tenure.update_heartbeat(md5('bench' || :client_id)::uuid, 'bench-' || :client_id, "
    "'3 s', '1 s');\n"
)
SHARED_TYPE_SQL = (
    "SELECT * FROM tenure.update_heartbeat(md5('bench' || :client_id)::uuid, 'bench-shared', '3 s', '1 s');\n"
)

# -- tasks --------------------------------------------------------------------------

TASK_KIND = "bench"  # the kind tenure.bench.app processes
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
# as the superuser (tenure.task with the columns task_enqueue would set).
LOAD_SQL = {
    "tenure.task": "INSERT INTO tenure.task (kind, state, created_at, last_change, last_action, next_action) "
    "SELECT %(kind)s, 'new', now(), now(), now(), now() - g * interval '1 ms' "
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
CLAIM_RUNS = {  # how -> (table, pgbench script or None for worker processes)
    "bare": ("tenure_bench.jobs", BARE_CLAIM_SQL),
    "sql": ("tenure.task", TENURE_CLAIM_SQL),
    "workers": ("tenure.task", None),
}

ENQUEUE_BASELINE_SQL = "INSERT INTO tenure_bench.jobs (due) VALUES (now());\n"
ENQUEUE_ONE_SQL = f"SELECT * FROM tenure.task_enqueue('{TASK_KIND}');\n"


def enqueue_many_sql(batch: int) -> str:
    tasks = json.dumps([{"kind": TASK_KIND}] * batch)
    return f"SELECT * FROM tenure.task_enqueue_many('{tasks}');\n"


@dataclass(frozen=True)
class PgbenchResult:
    tps: float  # scripts run per second, without the connection time
    latency_ms: float  # pgbench's latency average: one script, all its statements
    statement_ms: list[float]  # the average of each statement, with per_command only


def pgbench_run(
    conninfo: str, script: str, *, clients: int, seconds: float, workdir: Path, per_command: bool = False
) -> PgbenchResult:
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
    if per_command:
        command.append("--report-per-command")
    if conninfo:
        command.append(conninfo)
    result = subprocess.run(command, capture_output=True, text=True, check=True)
    tps = re.search(r"tps = ([0-9.]+) \(without initial connection time\)", result.stdout)
    latency = re.search(r"latency average = ([0-9.]+) ms", result.stdout)
    if tps is None or latency is None:
        raise RuntimeError(f"pgbench printed no tps or latency:\n{result.stdout}\n{result.stderr}")
    _, _, per_statement = result.stdout.partition("statement latencies in milliseconds")
    statement_ms = [float(m) for m in re.findall(r"^\s+([0-9.]+)\s", per_statement, re.MULTILINE)]
    return PgbenchResult(float(tps.group(1)), float(latency.group(1)), statement_ms)


def pgbench_tps(conninfo: str, script: str, *, clients: int, seconds: float, workdir: Path) -> float:
    return pgbench_run(conninfo, script, clients=clients, seconds=seconds, workdir=workdir).tps


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


# -- task figures -----------------------------------------------------------------------

WARM_UP = 1.0  # seconds between the workers' start and the measurement


def scalar(connection: psycopg.Connection[Any], query: str, params: tuple[object, ...] = ()) -> Any:
    row = connection.execute(query, params).fetchone()
    assert row is not None
    return row[0]


def clean(admin: psycopg.Connection[Any]) -> None:
    """Remove every task, lease and job an earlier phase left."""
    admin.execute("TRUNCATE tenure.task, tenure.task_lease_log, tenure_bench.jobs")


def fill(admin: psycopg.Connection[Any], table: str, size: int) -> None:
    """Replace everything with a fresh backlog of ``size`` due rows in ``table``."""
    clean(admin)
    admin.execute(LOAD_SQL[table], {"kind": TASK_KIND, "size": size})
    admin.execute(f"VACUUM ANALYZE {table}")
    admin.execute("CHECKPOINT")  # the load's checkpoint is not to land in the measurement


def wait_started(process: subprocess.Popen[bytes], log_path: Path, *, wait: float = 30.0) -> None:
    end = time.monotonic() + wait
    while " started: " not in log_path.read_text():
        if process.poll() is not None or time.monotonic() > end:
            raise RuntimeError(f"task worker {process.pid} did not start:\n{log_path.read_text()}")
        time.sleep(0.05)


@contextmanager
def task_workers(conninfo: str, count: int, *options: str, logs: Path) -> Iterator[None]:
    """``count`` real ``tenure task worker`` processes of tenure.bench.app, one task in flight each,
    started before the body runs and stopped with SIGTERM when it ends, however it ends."""
    command = [
        *(sys.executable, "-m", "tenure", "task", "worker", "--db", conninfo),
        *("--module", "tenure.bench.app", "--concurrency", "1", "--lease", "30", *options),
    ]
    processes: list[tuple[subprocess.Popen[bytes], Path]] = []
    try:
        for n in range(1, count + 1):
            log_path = logs.with_name(f"{logs.name}-{n}.log")
            with open(log_path, "wb") as log:
                processes.append((subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT), log_path))
        for process, log_path in processes:
            wait_started(process, log_path)
        yield
    finally:
        for process, _ in processes:
            if process.poll() is None:
                process.terminate()
        for process, _ in processes:
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def worker_rate(
    admin: psycopg.Connection[Any], conninfo: str, *, workers: int, seconds: float, logs: Path
) -> float:
    """Tasks the workers finished per second in a window after warm-up, by the server's clock."""
    with task_workers(conninfo, workers, "--poll-interval", "0.05", logs=logs):
        time.sleep(WARM_UP)
        start = server_now(admin)
        time.sleep(seconds)
    end = start + timedelta(seconds=seconds)
    finished = scalar(
        admin, "SELECT count(*) FROM tenure.task WHERE finished_at >= %s AND finished_at < %s", (start, end)
    )
    return int(finished) / seconds


def completion_rate(
    admin: psycopg.Connection[Any],
    conninfo: str,
    how: str,
    *,
    backlog: int,
    clients: int,
    seconds: float,
    workdir: Path,
) -> float:
    """Tasks claimed and completed per second on a fresh backlog, the way ``how`` names."""
    table, script = CLAIM_RUNS[how]
    fill(admin, table, backlog)
    if script is None:
        logs = workdir / f"workers-{backlog}-{clients}"
        rate = worker_rate(admin, conninfo, workers=clients, seconds=seconds, logs=logs)
    else:
        rate = pgbench_tps(conninfo, script, clients=clients, seconds=seconds, workdir=workdir)
    if not scalar(admin, f"SELECT EXISTS (SELECT FROM {table} WHERE {UNDONE[table]})"):
        print(f"    ({how}, {clients} clients: the backlog ran out, so the figure is void: raise --backlogs)")
    return rate


def task_throughput(
    admin: psycopg.Connection[Any],
    conninfo: str,
    *,
    backlog: int,
    workers: list[int],
    seconds: float,
    workdir: Path,
) -> None:
    print(
        f"  tasks completed per second (acquire + complete, no-op processor), backlog {backlog:,} "
        f"(INSERT ... SELECT generate_series), {seconds:.0f} s per run:"
    )
    print("    clients   bare SKIP LOCKED (baseline)   tenure SQL by pgbench   tenure task workers")
    for count in workers:
        bare, sql, processes = (
            completion_rate(
                admin, conninfo, how, backlog=backlog, clients=count, seconds=seconds, workdir=workdir
            )
            for how in CLAIM_RUNS
        )
        print(
            f"    {count:7d}   {bare:10.0f} /s   1.00         {sql:8.0f} /s   {sql / bare:.2f}"
            f"    {processes:8.0f} /s   {processes / bare:.2f}",
            flush=True,
        )


def enqueue_rates(
    admin: psycopg.Connection[Any],
    conninfo: str,
    *,
    clients: int,
    seconds: float,
    batches: list[int],
    backlog: int,
    workdir: Path,
) -> None:
    """Enqueue onto an analyzed backlog: on a freshly emptied table, plans cached before
    autoanalyze catches up scan the growing table, which is not the steady state."""
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
        f"{seconds:.0f} s per run:"
    )
    baseline = 0.0
    for label, table, script, per_call in runs:
        fill(admin, table, backlog)
        rate = per_call * pgbench_tps(conninfo, script, clients=clients, seconds=seconds, workdir=workdir)
        baseline = baseline or rate
        print(f"    {label:<52} {rate:10.0f} /s   {rate / baseline:.2f}", flush=True)


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


def wake_latency(admin: psycopg.Connection[Any], conninfo: str, *, tasks: int, workdir: Path) -> None:
    poll = 1.0
    bare = notify_latencies(conninfo, count=tasks)
    on = wake_latencies(admin, conninfo, listen=True, poll=poll, tasks=tasks, workdir=workdir)
    off = wake_latencies(admin, conninfo, listen=False, poll=poll, tasks=tasks, workdir=workdir)
    print(
        f"  wake-up latency from enqueue to lease (server clock), one idle worker polling every {poll:g} s, "
        f"{len(on)} tasks 50-200 ms apart:"
    )

    def line(label: str, values: list[float], ref50: float, ref99: float) -> None:
        p50, p99 = percentile(values, 50), percentile(values, 99)
        print(
            f"    {label:<52} p50 {p50 * 1000:7.1f} ms {p50 / ref50:7.2f}   "
            f"p99 {p99 * 1000:7.1f} ms {p99 / ref99:7.2f}"
        )

    bare50, bare99 = percentile(bare, 50), percentile(bare, 99)
    line("baseline  bare NOTIFY to the listener's next query", bare, bare50, bare99)
    line("notifications on", on, bare50, bare99)
    line("notifications off (--no-listen), ratio to the poll", off, poll, poll)


# -- claims -------------------------------------------------------------------------------

CLAIM_KEYSPACE = "tenure-bench"
CLAIM_EXPIRY = 30.0  # seconds: longer than a run, so that only renewals keep the claims
CLAIMANT = "md5('claim' || :client_id)::uuid"  # pgbench client n is instance md5('claim' || n)

# What one would write without tenure: each owner's rows, and one UPDATE extending them.
CLAIMS_PLAIN_DDL = """
CREATE TABLE IF NOT EXISTS tenure_bench.claims_plain (
    key        text        PRIMARY KEY,
    owner      int         NOT NULL,
    expires_at timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS claims_plain_owner ON tenure_bench.claims_plain (owner);
"""
# The same keys with the same owners in the same physical order as the claims settled.
CLAIMS_PLAIN_LOAD = """
INSERT INTO tenure_bench.claims_plain (key, owner, expires_at)
SELECT k.key, i.n, k.expires_at
  FROM tenure.claim_key k
  JOIN (SELECT n, md5('claim' || n)::uuid AS id FROM generate_series(0, %(instances)s - 1) n) i
    ON i.id = k.claimant
 WHERE k.keyspace = %(keyspace)s
 ORDER BY k.ctid
"""
CLAIMS_PLAIN_SQL = (
    "UPDATE tenure_bench.claims_plain SET expires_at = now() + interval '30 s' WHERE owner = :client_id;\n"
)
# One cycle of an instance that holds its fair share: renew all, then try to take more.
CLAIM_CYCLE_SQL = (
    f"SELECT count(*) FROM tenure.claim_renew('{CLAIM_KEYSPACE}', {CLAIMANT}, '30 s');\n"
    f"SELECT count(*) FROM tenure.claim_take('{CLAIM_KEYSPACE}', {CLAIMANT}, '30 s');\n"
)


def claimant(n: int) -> UUID:
    """The instance id of pgbench client ``n``: md5('claim' || n)::uuid."""
    return UUID(hashlib.md5(f"claim{n}".encode()).hexdigest())


def claims_clean(admin: psycopg.Connection[Any]) -> None:
    """Retire every key of the bench keyspace (their claim log goes with them) and let every
    instance leave it, including those of an earlier run that was interrupted."""
    retire_keyspace(admin, CLAIM_KEYSPACE)
    driver = Driver(admin)
    for instance in driver.claim_instances(CLAIM_KEYSPACE):
        driver.claim_release(CLAIM_KEYSPACE, instance.instance_id)
    admin.execute("TRUNCATE tenure_bench.claims_plain")


def claims_settle(admin: psycopg.Connection[Any], *, keys: int, instances: int) -> dict[UUID, int]:
    """Register ``keys`` keys and bring ``instances`` instances to their fair share with
    claim_renew and claim_take until a whole round moves no key; the keys each holds."""
    claims_clean(admin)
    driver = Driver(admin)
    driver.claim_register(CLAIM_KEYSPACE, [f"key-{n}" for n in range(1, keys + 1)])
    ids = [claimant(n) for n in range(instances)]
    for instance in ids:  # all live before the first take: the share is keys / instances from the start
        driver.claim_renew(CLAIM_KEYSPACE, instance, expiry=CLAIM_EXPIRY)
    for _ in range(20):
        moved = False
        for instance in ids:
            renewed = driver.claim_renew(CLAIM_KEYSPACE, instance, expiry=CLAIM_EXPIRY)
            taken = driver.claim_take(CLAIM_KEYSPACE, instance, expiry=CLAIM_EXPIRY)
            moved |= any(g.change != "renewed" for g in renewed) or bool(taken)
        if not moved:
            break
    held = {row.instance_id: row.keys_held for row in driver.claim_instances(CLAIM_KEYSPACE)}
    share = math.ceil(keys / instances)
    if sum(held.values()) != keys or max(held.values()) > share or set(held) != set(ids):
        raise RuntimeError(f"the claims did not settle at a fair share of {share}: {held}")
    return held


def claims_moved(admin: psycopg.Connection[Any]) -> int:
    """Claims granted so far in the bench keyspace: unchanged across a run = no key changed hands."""
    return int(scalar(admin, "SELECT count(*) FROM tenure.claim_log WHERE keyspace = %s", (CLAIM_KEYSPACE,)))


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


def claim_costs(
    admin: psycopg.Connection[Any],
    conninfo: str,
    *,
    keys: list[int],
    instances: int,
    seconds: float,
    workdir: Path,
) -> None:
    """Cycles of claim_renew + claim_take by instances that hold their fair share, against one
    UPDATE extending the same rows of a plain table, both tables compacted before each run."""
    header = (
        f"claims: {instances} instances at their fair share, one pgbench client each, {seconds:.0f} s a run;",
        "a cycle = claim_renew (extends every claim of the caller) + claim_take (nothing to take;",
        "skipped at once while another instance takes); baseline = one UPDATE extending the client's",
        "rows of a plain table (key primary key, index on owner; same keys, owners and row order);",
        "keys renewed/s = cycles/s x keys / instances; both tables compacted (VACUUM FULL) before:",
    )
    print("\n".join(f"  {'  ' if n else ''}{line}" for n, line in enumerate(header)))
    print(
        "       keys  share  run              cycles/s  keys renewed/s  latency/cycle  ratio"
        "  renew ms  take ms  heap pages (HOT updates)"
    )
    for count in keys:
        held = claims_settle(admin, keys=count, instances=instances)
        share = max(held.values())
        admin.execute(CLAIMS_PLAIN_LOAD, {"instances": instances, "keyspace": CLAIM_KEYSPACE})
        for table in ("tenure.claim_key", "tenure.claim_instance", "tenure_bench.claims_plain"):
            admin.execute(f"VACUUM FULL ANALYZE {table}")  # both compact, whatever ran before
        admin.execute("CHECKPOINT")
        start = table_state(admin, "tenure_bench.claims_plain")
        bare = pgbench_run(conninfo, CLAIMS_PLAIN_SQL, clients=instances, seconds=seconds, workdir=workdir)
        bare_growth = growth(start, table_state(admin, "tenure_bench.claims_plain"))
        granted = claims_moved(admin)
        start = table_state(admin, "tenure.claim_key")
        cycle = pgbench_run(
            conninfo, CLAIM_CYCLE_SQL, clients=instances, seconds=seconds, workdir=workdir, per_command=True
        )
        cycle_growth = growth(start, table_state(admin, "tenure.claim_key"))
        settled = {row.instance_id: row.keys_held for row in Driver(admin).claim_instances(CLAIM_KEYSPACE)}
        renew_ms, take_ms = cycle.statement_ms[:2] if len(cycle.statement_ms) >= 2 else (math.nan, math.nan)
        per_cycle = count / instances  # keys renewed per cycle, on average over the clients
        lead = f"    {count:7,d}  {share:5,d}"
        print(
            f"{lead}  baseline UPDATE  {bare.tps:8.0f}  {bare.tps * per_cycle:12,.0f}/s"
            f"  {bare.latency_ms:10.2f} ms   1.00                     {bare_growth}"
        )
        print(
            f"{lead}  renew + take     {cycle.tps:8.0f}  {cycle.tps * per_cycle:12,.0f}/s"
            f"  {cycle.latency_ms:10.2f} ms  {cycle.tps / bare.tps:5.2f}  {renew_ms:8.2f} {take_ms:8.2f}"
            f"  {cycle_growth}",
            flush=True,
        )
        if claims_moved(admin) != granted or settled != held:
            print(f"    (keys changed hands during the run, so the figure is void: {held} -> {settled})")
    claims_clean(admin)


SECTIONS = ("heartbeat", "takeover", "tasks", "enqueue", "wake", "claims", "queue", "replicas")


def run_bench(
    admin_conninfo: str,
    *,
    sections: list[str],
    seconds: float,
    clients: int,
    kills: int,
    backlogs: list[int],
    workers: list[int],
    task_seconds: float,
    enqueue_batches: list[int],
    wake_tasks: int,
    claim_keys: list[int],
    claim_instances: int,
    queue_keys: list[int],
    queue_batches: int,
    replica_trials: int,
) -> int:
    workdir = Path(tempfile.mkdtemp(prefix="tenure-bench-"))
    with psycopg.connect(admin_conninfo, autocommit=True) as admin:
        admin.execute("CREATE SCHEMA IF NOT EXISTS tenure_bench")
        admin.execute("CREATE TABLE IF NOT EXISTS tenure_bench.row (id int PRIMARY KEY, v bigint NOT NULL)")
        admin.execute(
            "INSERT INTO tenure_bench.row SELECT g, 0 FROM generate_series(0, %s) g ON CONFLICT DO NOTHING",
            (clients,),
        )
        admin.execute(JOBS_DDL)
        admin.execute(CLAIMS_PLAIN_DDL)

    print(f"tenure bench ({', '.join(sections)}): {clients} clients, {seconds:.0f} s per throughput run")
    if "heartbeat" in sections:
        baseline = pgbench_tps(
            admin_conninfo, BASELINE_SQL, clients=clients, seconds=seconds, workdir=workdir
        )
        own = pgbench_tps(admin_conninfo, OWN_TYPE_SQL, clients=clients, seconds=seconds, workdir=workdir)
        shared = pgbench_tps(
            admin_conninfo, SHARED_TYPE_SQL, clients=clients, seconds=seconds, workdir=workdir
        )
        print(f"  baseline  pgbench one-row UPDATE               {baseline:10.0f} tps   1.00")
        print(f"  heartbeat {clients} electors, one type each        {own:10.0f} /s    {own / baseline:.2f}")
        print(
            f"  heartbeat {clients} electors bidding for one type   {shared:10.0f} /s    "
            f"{shared / baseline:.2f}"
        )

    if "takeover" in sections:
        interval, timeout = 0.2, 0.6
        times = takeover_times(
            admin_conninfo, kills=kills, interval=interval, timeout=timeout, workdir=workdir
        )
        bound = timeout + interval
        if times:
            p50, p99, worst = percentile(times, 50), percentile(times, 99), max(times)
            print(
                f"  takeover after SIGKILL of the primary, I = {interval} s, T = {timeout} s, "
                f"{len(times)} kills:"
            )
            print(
                f"    p50 {p50:.3f} s ({p50 / bound:.2f} of T + I)   p99 {p99:.3f} s ({p99 / bound:.2f})   "
                f"max {worst:.3f} s ({worst / bound:.2f}); bound T + I = {bound:.3f} s; "
                f"{sum(t > bound for t in times)} over the bound"
            )

    with psycopg.connect(admin_conninfo, autocommit=True) as admin:
        if "tasks" in sections:
            for backlog in backlogs:
                task_throughput(
                    admin,
                    admin_conninfo,
                    backlog=backlog,
                    workers=workers,
                    seconds=task_seconds,
                    workdir=workdir,
                )
        if "enqueue" in sections:
            enqueue_rates(
                admin,
                admin_conninfo,
                clients=clients,
                seconds=task_seconds,
                batches=enqueue_batches,
                backlog=min(backlogs),
                workdir=workdir,
            )
        if "wake" in sections:
            wake_latency(admin, admin_conninfo, tasks=wake_tasks, workdir=workdir)
        clean(admin)
        if "claims" in sections:
            claim_costs(
                admin,
                admin_conninfo,
                keys=claim_keys,
                instances=claim_instances,
                seconds=seconds,
                workdir=workdir,
            )
        if "queue" in sections:
            queue_bench(admin, admin_conninfo, keys=queue_keys, batches=queue_batches, workdir=workdir)
    if "replicas" in sections:
        replica_failover(admin_conninfo, trials=replica_trials, workdir=workdir)
    print(f"  logs: {workdir}")
    return 0


# -- replica failover ----------------------------------------------------------------------


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


def _sections(text: str) -> list[str]:
    """A comma-separated list of bench sections."""
    chosen = [part.strip() for part in text.split(",") if part.strip()]
    unknown = sorted(set(chosen) - set(SECTIONS))
    if not chosen or unknown:
        raise argparse.ArgumentTypeError(f"choose from {','.join(SECTIONS)}; unknown: {','.join(unknown)}")
    return chosen


def _counts(text: str) -> list[int]:
    """A comma-separated list of positive integers, for the bench's sizes."""
    try:
        counts = [int(part) for part in text.split(",")]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers separated by commas, got {text!r}")
    return counts


def build_parser() -> argparse.ArgumentParser:
    about = "measure heartbeat, task and claim throughput, takeover and wake-up times against baselines"
    parser = argparse.ArgumentParser(
        prog="tenure bench",
        description=about,
        epilog="example: tenure bench --db postgresql://postgres@127.0.0.1:5432/tenure_bench --kills 20",
    )
    parser.add_argument("--db", default=os.environ.get("TENURE_DB", ""), help="conninfo or URL")
    parser.add_argument(
        "--seconds", type=float, default=10.0, help="length of each heartbeat and claim run (10)"
    )
    parser.add_argument(
        "--clients", type=int, default=8, help="concurrent electors / pgbench clients, also for enqueue (8)"
    )
    parser.add_argument("--kills", type=int, default=20, help="primaries to kill for the takeover times (20)")
    parser.add_argument(
        "--backlogs",
        type=_counts,
        default=[100_000, 1_000_000],
        help="task backlogs to complete from (100000,1000000)",
    )
    parser.add_argument(
        "--task-workers",
        type=_counts,
        default=[1, 4, 8],
        help="task worker processes / pgbench clients completing tasks (1,4,8)",
    )
    parser.add_argument(
        "--task-seconds", type=float, default=10.0, help="length of each task completion and enqueue run (10)"
    )
    parser.add_argument(
        "--enqueue-batches",
        type=_counts,
        default=[100, 1000],
        help="tasks per task_enqueue_many call (100,1000)",
    )
    parser.add_argument(
        "--wake-tasks", type=int, default=50, help="tasks enqueued one by one for the wake-up latency (50)"
    )
    parser.add_argument(
        "--claim-keys",
        type=_counts,
        default=[1_000, 10_000],
        help="keys registered for the claim renew + take cost, one run per count (1000,10000)",
    )
    parser.add_argument(
        "--claim-instances",
        type=int,
        default=8,
        help="instances sharing the keys, one pgbench client each (8)",
    )
    parser.add_argument(
        "--queue-keys", type=_counts, default=[4, 1000], help="keys of the submission-queue runs (4,1000)"
    )
    parser.add_argument(
        "--queue-batches",
        type=int,
        default=2000,
        help="batches per submission-queue run, at least 4 per key (2000)",
    )
    parser.add_argument(
        "--sections",
        type=_sections,
        default=list(SECTIONS),
        help=f"comma-separated parts to run ({','.join(SECTIONS)})",
    )
    parser.add_argument(
        "--replica-trials",
        type=int,
        default=20,
        help="SIGKILLs of the active replica behind HAProxy, per setting, for the failover times (20)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_bench(
        args.db,
        sections=args.sections,
        seconds=args.seconds,
        clients=args.clients,
        kills=args.kills,
        backlogs=args.backlogs,
        workers=args.task_workers,
        task_seconds=args.task_seconds,
        enqueue_batches=args.enqueue_batches,
        wake_tasks=args.wake_tasks,
        claim_keys=args.claim_keys,
        claim_instances=args.claim_instances,
        queue_keys=args.queue_keys,
        queue_batches=args.queue_batches,
        replica_trials=args.replica_trials,
    )
