"""The retention soak of ``tenure bench`` (issue 15): every history under steady churn while
an elected :class:`~tenure.runtime.maintain.Maintainer` prunes it; table sizes and row counts
should stay flat once the retention age has passed.

For ``--soak-seconds``, in this process (threads, each runtime with its own connections):

- three :class:`~tenure.runtime.heartbeat.Elector` of one service type (I = 0.2 s, T = 0.6 s);
  every churn step restarts the primary, so ``heartbeat_term`` gains a term each time;
- a producer enqueuing tasks at a steady rate and a :class:`~tenure.runtime.tasks.TaskWorker`
  completing them (``task``, ``task_lease_log``), and a schedule ``every 1 s`` whose tasks the
  same worker runs (ticked by the maintainer);
- three :class:`~tenure.runtime.claims.Claimer` on a keyspace of 12 keys, one of them replaced
  every other churn step, so keys change hands (``claim_log``);
- a producer enqueuing batches on 8 keys and a :class:`~tenure.runtime.batches.SubmissionPool`
  with a ledger that applies at once (``batch``, then ``batch_tombstone`` once pruned);
- two maintainers (``tenure maintain``'s runtime, one elected, one standby), every history's
  age set to ``--soak-age``, retention every few seconds.

Every few seconds it counts the rows and takes ``pg_total_relation_size`` of each table. It
prints, per table, rows and size at the end of the first retention age (warm-up), at the
middle and at the end, and the growth from the middle to the end as a ratio (flat = 1.00);
the rows each maintainer pruned per history; and writes ``soak.png`` (rows over time) and
``soak.json`` (every task and batch id enqueued with the server time before its enqueue, the
ids completed and submitted, the maintainers' figures) into the bench's log directory.
:func:`verify` checks the database against that log: nothing pruned that was not finished
before the age cut, no current term or held claim's log entry removed.
"""

from __future__ import annotations

import itertools
import json
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

from tenure.bench.common import scalar
from tenure.driver import BatchGrant, Driver
from tenure.runtime.batches import SubmissionPool
from tenure.runtime.claims import Claimer
from tenure.runtime.heartbeat import Elector
from tenure.runtime.maintain import Maintainer, Retention
from tenure.runtime.tasks import Complete, Outcome, Task, TaskWorker
from tenure.testing import plots
from tenure.testing.database import retire_keyspace
from tenure.testing.ledger import SimulatedLedger

SOAK = "tenure-bench-soak"
UTYPE = SOAK  # the electors' service type
CLAIMS = f"{SOAK}-claims"  # the claimers' keyspace
QUEUE = f"{SOAK}-queue"  # the batch queue's keyspace (its keys are claimed by the pool)
TASK_KIND = "soak"
SCHEDULE_NAME, SCHEDULE_KIND = SOAK, "soak-every"
TABLES = ("task", "task_lease_log", "heartbeat_term", "claim_log", "batch", "batch_tombstone")
TASKS_PER_SECOND, BATCHES_PER_SECOND = 40, 10
ELECTORS, CLAIMERS, CLAIM_KEYS, QUEUE_KEYS = 3, 3, 12, 8
Samples = list[tuple[float, dict[str, tuple[int, int]]]]  # (seconds since the start, table -> (rows, bytes))
CHURN_EVERY = 2.0  # seconds between restarts of the primary elector (and of a claimer, every other)


def default_age(seconds: float) -> float:
    """A tenth of the run, at least 5 s: several retention periods fit in it."""
    return max(5.0, seconds / 10)


def retention_every(age: float) -> float:
    """A few seconds, and at least four runs per age."""
    return max(1.0, min(5.0, age / 4))


@dataclass
class SoakLog:
    """What the soak's clients did: the ground truth :func:`verify` checks the database against."""

    age: float
    tasks: dict[str, float] = field(default_factory=dict)  # id -> server time (epoch s) of enqueue
    completed: list[str] = field(default_factory=list)  # task ids the processor completed
    batches: dict[str, float] = field(default_factory=dict)  # id -> server time before its enqueue
    submitted: list[str] = field(default_factory=list)  # batch ids handed to the ledger
    maintainers: list[dict[str, Any]] = field(default_factory=list)
    end: float = 0.0  # server time (epoch s) once everything stopped

    def write(self, path: Path) -> Path:
        path.write_text(json.dumps(asdict(self)))
        return path

    @classmethod
    def read(cls, path: Path) -> SoakLog:
        return cls(**json.loads(path.read_text()))


class Repeating(threading.Thread):
    """Calls ``step`` every ``every`` seconds until stopped; an error ends the soak's run."""

    def __init__(self, name: str, every: float, step: Callable[[], None], stopping: threading.Event) -> None:
        super().__init__(name=f"soak-{name}", daemon=True)
        self.every, self.step, self.stopping = every, step, stopping
        self.error: BaseException | None = None

    def run(self) -> None:
        next_run = time.monotonic()
        try:
            while not self.stopping.is_set():
                self.step()
                next_run += self.every
                self.stopping.wait(max(0.0, next_run - time.monotonic()))
        except BaseException as error:  # reported by the main thread
            self.error = error
            self.stopping.set()


def epoch(moment: datetime) -> float:
    return moment.timestamp()


def server_now(connection: psycopg.Connection[Any]) -> float:
    return float(scalar(connection, "SELECT extract(epoch FROM clock_timestamp())"))


def soak_clean(admin: psycopg.Connection[Any]) -> None:
    """What an earlier run (of the soak or another section) left: tasks, the soak's keyspaces,
    terms and schedule; then every measured table compacted, so sizes start from their rows."""
    admin.execute("TRUNCATE tenure.task, tenure.task_lease_log CASCADE")  # with the tasks' dependencies
    for keyspace in (CLAIMS, QUEUE):
        retire_keyspace(admin, keyspace)
        for instance in Driver(admin).claim_instances(keyspace):
            Driver(admin).claim_release(keyspace, instance.instance_id)
    admin.execute("DELETE FROM tenure.schedule WHERE name = %s", (SCHEDULE_NAME,))
    admin.execute("DELETE FROM tenure.heartbeat WHERE utype = %s", (UTYPE,))  # its terms go with it
    for table in TABLES:
        admin.execute(f"VACUUM FULL ANALYZE tenure.{table}")


def sample(admin: psycopg.Connection[Any]) -> dict[str, tuple[int, int]]:
    """Rows and total size (with indexes and TOAST) of every measured table."""
    query = " UNION ALL ".join(
        f"SELECT '{t}', count(*), pg_total_relation_size('tenure.{t}') FROM tenure.{t}" for t in TABLES
    )
    return {str(name): (int(rows), int(size)) for name, rows, size in admin.execute(query).fetchall()}


def soak(
    admin: psycopg.Connection[Any],
    conninfo: str,
    *,
    seconds: float,
    age: float | None,
    workdir: Path,
) -> SoakLog:
    age = default_age(seconds) if age is None else age
    every = retention_every(age)
    # Several samples per retention run, at a period that does not divide it: samples in step
    # with the runs would always see the same phase of the sawtooth (a 300 s run never saw
    # a peak at 2.5 s against 5 s).
    sample_every = max(0.3, min(5.0, seconds / 60, every * 0.37))
    print(
        f"  retention soak: {seconds:.0f} s; {ELECTORS} electors (I 0.2 s, T 0.6 s), the primary restarted"
        f" every {CHURN_EVERY:.0f} s; {TASKS_PER_SECOND} tasks/s and a schedule every 1 s through one task"
        f" worker; {CLAIMERS} claimers on {CLAIM_KEYS} keys, one replaced every {2 * CHURN_EVERY:.0f} s;"
        f" {BATCHES_PER_SECOND} batches/s on {QUEUE_KEYS} keys through a submission pool; two maintainers,"
        f" every history's age {age:.0f} s, retention every {every:.0f} s; rows and sizes every"
        f" {sample_every:.2f} s (whole tables, with indexes)",
        flush=True,
    )
    soak_clean(admin)
    log = SoakLog(age=age)
    lock = threading.Lock()
    driver = Driver(admin)
    driver.claim_register(CLAIMS, [f"key-{n:02}" for n in range(CLAIM_KEYS)])
    driver.batch_configure(QUEUE, mode="unconstrained")
    driver.schedule_set(SCHEDULE_NAME, SCHEDULE_KIND, every=timedelta(seconds=1))

    def complete(task: Task) -> Outcome:
        with lock:
            log.completed.append(str(task.id))
        return Complete()

    ledger = SimulatedLedger(keeps_order=False, max_delay=0)

    def submit(batch: BatchGrant) -> None:
        ledger.submit(batch)
        with lock:
            log.submitted.append(str(batch.id))

    stopping = threading.Event()
    producer = psycopg.connect(conninfo, autocommit=True)
    produced = Driver(producer)
    counter = itertools.count()

    def enqueue_tasks() -> None:
        rows = produced.task_enqueue_many([{"kind": TASK_KIND} for _ in range(TASKS_PER_SECOND // 10)])
        with lock:
            log.tasks.update((str(row.id), epoch(row.next_action)) for row in rows if row.next_action)

    def enqueue_batches() -> None:
        before = server_now(producer)
        n = next(counter)
        rows = produced.batch_enqueue_many(
            QUEUE, [{"key": f"key-{n % QUEUE_KEYS}", "payload": f"{n}".encode()}]
        )
        with lock:
            log.batches.update((str(row.id), before) for row in rows)

    electors = [
        Elector(conninfo, UTYPE, interval=0.2, timeout=0.6, name=f"soak-{n}").start() for n in range(3)
    ]
    claimers = [
        Claimer(conninfo, CLAIMS, cycle=0.3, expiry=1.5, name=f"soak-claimer-{n}").start()
        for n in range(CLAIMERS)
    ]
    churns = itertools.count()

    def churn() -> None:
        step = next(churns)
        for n, elector in enumerate(electors):
            if elector.is_primary():
                elector.stop(resign=True)
                electors[n] = Elector(conninfo, UTYPE, interval=0.2, timeout=0.6, name=f"soak-{step}-{n}")
                electors[n].start()
                break
        if step % 2:
            n = step // 2 % CLAIMERS
            claimers[n].stop(release=True)
            claimers[n] = Claimer(conninfo, CLAIMS, cycle=0.3, expiry=1.5, name=f"soak-claimer-{step}")
            claimers[n].start()

    retention = Retention(
        task=timedelta(seconds=age),
        batch=timedelta(seconds=age),
        heartbeat=timedelta(seconds=age),
        claim=timedelta(seconds=age),
        replica=timedelta(seconds=age),
    )
    maintainers = [
        Maintainer(
            conninfo, tick_every=0.5, retention_every=every, retention=retention, name=f"soak-maintain-{n}"
        )
        for n in range(2)
    ]
    worker = TaskWorker(
        conninfo,
        {TASK_KIND: complete, SCHEDULE_KIND: complete},
        concurrency=8,
        lease=10,
        poll_interval=0.2,
        name="soak",
    )
    pool = SubmissionPool(
        conninfo,
        QUEUE,
        submit=submit,
        status=ledger.status,
        submitters=2,
        cycle=0.5,
        expiry=3.0,
        poll_interval=0.2,
        name="soak",
    )
    threads = [
        Repeating("tasks", 0.1, enqueue_tasks, stopping),
        Repeating("batches", 1 / BATCHES_PER_SECOND, enqueue_batches, stopping),
        Repeating("churn", CHURN_EVERY, churn, stopping),
    ]
    samples: Samples = []
    start = time.monotonic()
    try:
        for maintainer in maintainers:
            maintainer.start()
        worker.start()
        pool.start()
        for thread in threads:
            thread.start()
        while not stopping.is_set():
            samples.append((time.monotonic() - start, sample(admin)))
            left = seconds - (time.monotonic() - start)
            if left <= 0:
                break
            stopping.wait(min(sample_every, left))
    finally:
        stopping.set()
        for thread in threads:
            thread.join()
        pool.stop()
        worker.stop()
        for maintainer in maintainers:
            maintainer.stop()
        for claimer in claimers:
            claimer.stop(release=True)
        for elector in electors:
            elector.stop(resign=True)
        producer.close()
        Driver(admin).schedule_drop(SCHEDULE_NAME)
    for thread in threads:
        if thread.error is not None:
            raise RuntimeError(f"the soak's {thread.name} failed") from thread.error
    log.end = server_now(admin)
    for maintainer in maintainers:
        stats = maintainer.snapshot()
        log.maintainers.append({"name": maintainer.name, **asdict(stats)})
    report(samples, log, age=age, every=every, seconds=seconds)
    problems = verify(admin, log)
    print(
        "    checked against the clients' log: "
        + ("; ".join(problems) if problems else "nothing live was pruned")
    )
    print(f"  soak log: {log.write(workdir / 'soak.json')}")
    picture = rows_picture(workdir / "soak.png", samples, age=age)
    if picture is not None:
        print(f"  picture: {picture}")
    return log


def peak(samples: Samples, start: float, end: float) -> tuple[float, dict[str, tuple[int, int]]]:
    """The most rows and the largest size of each table over the samples from ``start`` to
    ``end`` (at least the first sample after ``start``), stamped with the last one's time.
    Rows climb between two retention runs and drop at each: a window of two retention periods
    holds one peak whatever the phase of the sampling, so two windows compare like with like."""
    window = [s for s in samples if start <= s[0] <= end] or [
        next((s for s in samples if s[0] >= start), samples[-1])
    ]
    return window[-1][0], {
        table: (max(s[table][0] for _, s in window), max(s[table][1] for _, s in window)) for table in TABLES
    }


def mib(size: int) -> str:
    return f"{size / 2**20:.2f} MiB"


def report(samples: Samples, log: SoakLog, *, age: float, every: float, seconds: float) -> None:
    window = 2 * every
    warm = peak(samples, age, age + window)
    middle = peak(samples, seconds / 2 - window, seconds / 2)
    end = peak(samples, samples[-1][0] - window, samples[-1][0])
    print(
        f"    {'table':<16}"
        + "".join(
            f"{f'{label} ({s[0]:.0f} s)':>25}"
            for label, s in (("warm-up", warm), ("middle", middle), ("end", end))
        )
        + "   end/middle rows  size"
    )
    print(
        f"    (the most rows and the largest size over the {window:.0f} s up to each point:"
        " 2 retention periods)"
    )
    for table in TABLES:
        cells = "".join(f" {s[1][table][0]:>10,} {mib(s[1][table][1]):>13}" for s in (warm, middle, end))
        (mid_rows, mid_size), (end_rows, end_size) = middle[1][table], end[1][table]
        rows_ratio = f"{end_rows / mid_rows:5.2f}" if mid_rows else "    -"
        print(f"    {table:<16}{cells}   {rows_ratio:>15} {end_size / mid_size:5.2f}")
    print(
        f"    churn: {len(log.tasks):,} tasks enqueued, {len(log.completed):,} completed"
        f" (with the schedule's);"
        f" {len(log.batches):,} batches enqueued, {len(log.submitted):,} submitted"
    )
    acting = [m for m in log.maintainers if m["retention_runs"] or m["ticks"]]
    for m in log.maintainers:
        pruned = ", ".join(f"{h} {n:,}" for h, n in sorted(m["pruned"].items()))
        print(
            f"    maintainer {m['name']}: {m['retention_runs']} retention runs, {m['ticks']} ticks"
            f" ({m['tasks_created']} schedule tasks), {m['failures']} failures; pruned: {pruned or 'nothing'}"
        )
    print(f"    maintainers that acted: {len(acting)} of {len(log.maintainers)}")


def verify(admin: psycopg.Connection[Any], log: SoakLog) -> list[str]:
    """What the database shows against the clients' log; an empty list when all holds.

    A task or batch that is gone must have been finished (completed by the processor,
    submitted to the ledger) and enqueued before the last age cut (end - age); every service
    type keeps its current term, live or resigned; a held claim keeps its log entry."""
    problems = []
    cut = log.end - log.age
    present = {
        str(r[0])
        for r in admin.execute("SELECT id FROM tenure.task WHERE id = ANY(%s::uuid[])", (list(log.tasks),))
    }
    completed = set(log.completed)
    gone = set(log.tasks) - present
    if gone - completed:
        problems.append(f"{len(gone - completed)} tasks gone that were never completed")
    if late := [t for t in gone if log.tasks[t] > cut]:
        problems.append(f"{len(late)} tasks gone that were enqueued after the last age cut")
    present = {
        str(r[0])
        for r in admin.execute("SELECT id FROM tenure.batch WHERE id = ANY(%s::uuid[])", (list(log.batches),))
    }
    gone = set(log.batches) - present
    if gone - set(log.submitted):
        problems.append(f"{len(gone - set(log.submitted))} batches gone that were never submitted")
    if late := [b for b in gone if log.batches[b] > cut]:
        problems.append(f"{len(late)} batches gone that were enqueued after the last age cut")
    lost_terms = scalar(
        admin,
        "SELECT count(*) FROM tenure.heartbeat h WHERE NOT EXISTS"
        " (SELECT FROM tenure.heartbeat_term t WHERE t.utype = h.utype AND t.term = h.term)",
    )
    if lost_terms:
        problems.append(f"{lost_terms} current terms gone")
    lost_claims = scalar(
        admin,
        "SELECT count(*) FROM tenure.claim_key k WHERE k.claimant IS NOT NULL AND NOT EXISTS"
        " (SELECT FROM tenure.claim_log l WHERE (l.keyspace, l.key, l.epoch) = (k.keyspace, k.key, k.epoch))",
    )
    if lost_claims:
        problems.append(f"{lost_claims} held claims without their log entry")
    return problems


def rows_picture(path: Path, samples: Samples, *, age: float) -> Path | None:
    plt = plots._pyplot(sys.stdout)
    if plt is None or len(samples) < 2:
        return None
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for table in TABLES:
        ax.plot([t for t, _ in samples], [s[table][0] for _, s in samples], label=f"tenure.{table}")
    ax.axvline(age, color="grey", linestyle=":", label="retention age")
    ax.set_xlabel("seconds since the soak started")
    ax.set_ylabel("rows")
    ax.set_title("retention soak: rows per table under steady churn, tenure maintain pruning")
    ax.legend(fontsize=7, ncol=2)
    return plots._save(plt, fig, path)
