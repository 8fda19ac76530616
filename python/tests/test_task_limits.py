"""The concurrency limits of the task controls, across worker processes, checked from the records.

Four worker processes, threaded and async mixed, run three kinds at once: ``solo`` (at
most 1 leased at a time), ``trio`` (at most 3) and ``keyed`` (at most 2 per limit key,
one key with many tasks and several with few); each task sleeps a little, so that the
limits bind while the workers have slots to spare. Afterwards:

- from the lease history (``tenure.task_lease_log``: when each epoch was leased; the
  task's ``finished_at`` ends its last epoch, the next lease an earlier one), the most
  tasks of a kind, and of a key, leased at once never exceeds the limit;
- from the processors' own records (a row each writes in its completion's fenced
  transaction, with the machine's monotonic clock at its start and end), the most
  running at once never exceeds it either;
- every task is done, exactly once: one row per task, of the epoch that completed;
- nothing starves: every key is served, none only after every other key was done.

TENURE_LIMIT_SCALE multiplies the number of tasks (default 1: a few seconds).
"""

from __future__ import annotations

import os
import time
from collections import Counter, defaultdict
from collections.abc import Hashable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar
from uuid import UUID

import limit_app
import psycopg
import pytest
from limit_app import RUNS_SQL

from tenure import Driver
from tenure.runtime.tasks import TaskWorker
from tenure.testing.tasks import TaskWorkerProcess

SCALE = int(os.environ.get("TENURE_LIMIT_SCALE", "1"))
SECONDS = 0.03  # each task's work
LEASE, POLL = 5.0, 0.5
MAX_RUNNING = {"solo": 1, "trio": 3}
PER_KEY = 2
# The keyed kind: one key with many tasks, enqueued first (oldest), then a few keys with few.
KEYS = {"heavy": 12 * SCALE, **{f"light-{n}": 4 * SCALE for n in range(4)}}
TASKS = {"solo": 10 * SCALE, "trio": 24 * SCALE, "keyed": sum(KEYS.values())}
# (asynchronous, concurrency) per worker process: 16 slots, more than the limits let run.
WORKERS = [(False, 4), (True, 4), (False, 4), (True, 4)]
HERE = Path(__file__).resolve().parent

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)


def most_at_once(intervals: Iterable[tuple[T, T]]) -> int:
    """The most intervals [start, end) that overlap at any moment."""
    events = sorted(
        (moment, change) for start, end in intervals for moment, change in ((start, 1), (end, -1))
    )
    running = most = 0
    for _, change in events:  # at one moment, ends (-1) sort before starts
        running += change
        most = max(most, running)
    return most


def most_at_once_by(intervals: Iterable[tuple[K, T, T]]) -> dict[K, int]:
    grouped: dict[K, list[tuple[T, T]]] = defaultdict(list)
    for group, start, end in intervals:
        grouped[group].append((start, end))
    return {group: most_at_once(spans) for group, spans in grouped.items()}


def wait_until_done(admin: psycopg.Connection[Any], kind: str, tasks: int, timeout: float = 30.0) -> bool:
    end = time.monotonic() + timeout
    query = "SELECT count(*) FROM tenure.task WHERE kind = %s AND status = 'done'"
    while time.monotonic() < end:
        row = admin.execute(query, (kind,)).fetchone()
        if row and row[0] == tasks:
            return True
        time.sleep(0.05)
    return False


def test_the_overlap_count_sees_an_overflow() -> None:
    """The checker itself: touching intervals do not overlap; three nested ones do."""
    assert most_at_once([(0, 1), (1, 2), (2, 3)]) == 1
    assert most_at_once([(0, 10), (1, 3), (2, 4), (5, 6)]) == 3
    assert most_at_once_by([("a", 0, 2), ("b", 1, 3), ("a", 1, 3)]) == {"a": 2, "b": 1}


@pytest.fixture
def workers(
    app_conninfo: str, admin: psycopg.Connection[Any], tmp_path: Path
) -> Iterator[list[TaskWorkerProcess]]:
    admin.execute(RUNS_SQL)
    # Set before the workers start: a kind gaining settings while workers wait can deadlock
    # the setter against them (reported with this test; not what it is about).
    driver = Driver(admin)
    for kind, limit in MAX_RUNNING.items():
        driver.task_kind_set(kind, max_running=limit)
    driver.task_kind_set("keyed", max_running_per_key=PER_KEY)

    def spawn(n: int) -> TaskWorkerProcess:
        asynchronous, concurrency = WORKERS[n]
        return TaskWorkerProcess(
            app_conninfo,
            "limit_app",
            tmp_path / f"worker-{n}.log",
            lease=LEASE,
            poll_interval=POLL,
            concurrency=concurrency,
            env=dict(os.environ, PYTHONPATH=str(HERE)),
            asynchronous=asynchronous,
        )

    with ThreadPoolExecutor(len(WORKERS)) as pool:  # they start (and stop) side by side
        spawning = [pool.submit(spawn, n) for n in range(len(WORKERS))]
        wait(spawning)
        started = [future.result() for future in spawning if future.exception() is None]
        try:
            for future in spawning:
                future.result()  # the first that failed to start, if any
            yield started
        finally:
            list(pool.map(TaskWorkerProcess.stop, started))


@pytest.mark.timeout(120 + 60 * SCALE)
def test_limits_hold_across_worker_processes(
    workers: list[TaskWorkerProcess], admin: psycopg.Connection[Any]
) -> None:
    driver = Driver(admin)
    began = time.monotonic()
    work = {"seconds": SECONDS}
    # The heavy key's tasks first: oldest due first alone would serve them before any other key's.
    for key, count in KEYS.items():
        driver.task_enqueue_many([{"kind": "keyed", "limit_key": key, "data": work} for _ in range(count)])
    driver.task_enqueue_many(
        [{"kind": kind, "data": work} for kind in MAX_RUNNING for _ in range(TASKS[kind])]
    )
    total = sum(TASKS.values())
    deadline = time.monotonic() + 60 * SCALE

    def done() -> int:
        row = admin.execute("SELECT count(*) FROM tenure.task WHERE status = 'done'").fetchone()
        return int(row[0]) if row else 0

    while done() < total and time.monotonic() < deadline:
        time.sleep(0.1)
    took = time.monotonic() - began
    assert done() == total, f"only {done()} of {total} tasks done after {took:.1f} s: something starved"
    with ThreadPoolExecutor(len(workers)) as pool:
        list(pool.map(TaskWorkerProcess.stop, workers))
    assert all(worker.process.returncode == 0 for worker in workers), [w.output()[-2000:] for w in workers]

    tasks = {
        task_id: (kind, key, epoch, finished_at)
        for task_id, kind, key, epoch, finished_at in admin.execute(
            "SELECT id, kind, limit_key, epoch, finished_at FROM tenure.task"
        )
    }
    # Exactly once: one processor's record per task, of the epoch that completed it.
    runs = admin.execute("SELECT task_id, epoch, started, ended FROM limit_runs").fetchall()
    per_task = Counter(task_id for task_id, *_ in runs)
    twice = sum(count > 1 for count in per_task.values())
    assert set(per_task) == set(tasks) and twice == 0, (
        f"{len(per_task)} of {len(tasks)} tasks recorded, {twice} more than once"
    )
    assert all(epoch == tasks[task_id][2] for task_id, epoch, *_ in runs), (
        "a record of an epoch that did not finish"
    )

    # The lease history: each epoch from its lease to the next epoch's lease, the last to the task's end.
    leases: dict[UUID, list[tuple[int, datetime]]] = defaultdict(list)
    for task_id, epoch, leased_at in admin.execute(
        "SELECT task_id, epoch, leased_at FROM tenure.task_lease_log"
    ):
        leases[task_id].append((epoch, leased_at))
    spans: list[tuple[str, str | None, datetime, datetime]] = []
    for task_id, granted in leases.items():
        kind, key, last_epoch, finished_at = tasks[task_id]
        granted.sort()
        assert granted[-1][0] == last_epoch and finished_at is not None
        ends = [leased_at for _, leased_at in granted[1:]] + [finished_at]
        spans += [(kind, key, leased_at, end) for (_, leased_at), end in zip(granted, ends, strict=True)]
    leased = most_at_once_by((kind, start, end) for kind, _, start, end in spans)
    leased_per_key = most_at_once_by((key, start, end) for kind, key, start, end in spans if kind == "keyed")
    # The processors' own records, by the machine's monotonic clock.
    ran = most_at_once_by((tasks[task_id][0], started, ended) for task_id, _, started, ended in runs)
    ran_per_key = most_at_once_by(
        (tasks[task_id][1], started, ended)
        for task_id, _, started, ended in runs
        if tasks[task_id][0] == "keyed"
    )
    epochs = Counter(len(granted) for granted in leases.values())
    print(
        f"{total} tasks in {took:.1f} s; leases per task {dict(epochs)}; most leased at once {leased}, "
        f"per key {leased_per_key}; most running at once {ran}, per key {ran_per_key}"
    )
    for kind, limit in MAX_RUNNING.items():
        assert leased[kind] <= limit, f"{leased[kind]} tasks of {kind} leased at once, over its limit {limit}"
        assert ran[kind] <= limit, f"{ran[kind]} tasks of {kind} ran at once, over its limit {limit}"
    for key in KEYS:
        assert leased_per_key[key] <= PER_KEY, f"{leased_per_key[key]} tasks of key {key} leased at once"
        assert ran_per_key[key] <= PER_KEY, f"{ran_per_key[key]} tasks of key {key} ran at once"
    # The limits bound: with slots to spare, each was reached.
    assert leased["trio"] == 3 and leased_per_key["heavy"] == PER_KEY, (leased, leased_per_key)

    # No key waited for all the others (whether keys take turns: test_keys_take_turns).
    first_lease = {key: min(start for _, k, start, _ in spans if k == key) for key in KEYS}
    keyed_order = sorted(start for kind, _, start, _ in spans if kind == "keyed")
    turn = {key: keyed_order.index(first) + 1 for key, first in first_lease.items()}
    print(f"each key's first lease, counted in the kind's leases: {turn}")
    last_end = {key: max(end for _, k, _, end in spans if k == key) for key in KEYS}
    for key, first in first_lease.items():
        others_done = max(end for other, end in last_end.items() if other != key)
        assert first < others_done, f"key {key} was first served only after every other key was done"
    rows = admin.execute("SELECT kind, running FROM tenure.task_kinds ORDER BY kind").fetchall()
    assert rows == [("keyed", 0), ("solo", 0), ("trio", 0)]


def test_keys_take_turns(app_conninfo: str, admin: psycopg.Connection[Any]) -> None:
    """With fewer slots than keys, each key's first task is leased before any key's second,
    although one key's tasks are all older: 'the keys in turn'. Calls are told apart by the
    transaction that wrote their leases (they take turns on the kind's row)."""
    admin.execute(RUNS_SQL)
    driver = Driver(admin)
    driver.task_kind_set("turns", max_running_per_key=1)
    work = {"seconds": 0.02}
    driver.task_enqueue_many([{"kind": "turns", "limit_key": "heavy", "data": work} for _ in range(6)])
    lights = [f"light-{n}" for n in range(4)]
    driver.task_enqueue_many([{"kind": "turns", "limit_key": key, "data": work} for key in lights * 2])
    with TaskWorker(app_conninfo, {"turns": limit_app.run}, concurrency=2, lease=5, poll_interval=0.1):
        assert wait_until_done(admin, "turns", 14)
    calls: dict[str, list[tuple[datetime, str]]] = defaultdict(list)
    for xid, leased_at, key in admin.execute(
        "SELECT l.xmin::text, l.leased_at, t.limit_key FROM tenure.task_lease_log l "
        "JOIN tenure.task t ON t.id = l.task_id WHERE t.kind = 'turns'"
    ):
        calls[xid].append((leased_at, key))
    in_order = sorted(calls.values(), key=min)
    served: dict[str, list[int]] = defaultdict(list)  # per key, the calls that leased its tasks
    for number, call in enumerate(in_order, 1):
        for _, key in call:
            served[key].append(number)
    firsts = {key: numbers[0] for key, numbers in served.items()}
    seconds = {key: numbers[1] for key, numbers in served.items()}
    print(f"calls that leased each key's tasks: {dict(served)}")
    assert max(firsts.values()) <= min(seconds.values()), (
        f"a key's second task before another's first: {served}"
    )
