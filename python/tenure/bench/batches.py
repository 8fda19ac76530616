"""The submission queue's figures for ``tenure bench``.

Throughput: batches committed per second end to end (selected, submitted to an
in-process simulated ledger that applies at once, resolved by the monitor) by one
:class:`~tenure.runtime.batches.SubmissionPool` with 8 submitters, for 4 and for 1,000 keys, in
each mode, one-round (depth 1) against multi-round (depth 4). The baseline, measured
in the same run, is a naive queue with the same ledger and the same number of
threads: a plain table taken FIFO with ``FOR UPDATE SKIP LOCKED`` and marked done,
which keeps no per-key order, no fairness and no fencing.

Each rate is the steady one, between 10% and 90% of the run's batches committed; the
start-up (from the pool's start, its claims on every key included, to 10% committed, less
the time the steady rate takes for 10%) is reported apart. A run whose steady window is
shorter than ``min_window`` seconds is too short to hold still (4,000 batches at 2,500/s
leave a window of 1.3 s, sampled every 50 ms, and rows moved 2.5x between runs): in the
first round such a row is run again with more batches per key, and keeps that size in
later rounds. With ``repeat`` every row runs in that many interleaved rounds; the figures
are the medians, with the spread.

Fairness under a flood: 50 keys, one of which enqueued 5,000 batches (``flood``) before the
49 others enqueued a fiftieth of that (100) each. Submissions are cut into consecutive windows of 10 per key
(500) while every key still has batches waiting; Jain's index of the submissions per
key in a window is 1 when every key got the same and 1/50 when one key got them all.
"""

from __future__ import annotations

import functools
import itertools
import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg

from tenure.bench.common import Repeated, grown_size, interleaved, ratio_spread
from tenure.driver import BatchGrant, Driver
from tenure.runtime.batches import PREFETCH, SubmissionPool
from tenure.testing import plots
from tenure.testing.database import retire_keyspace
from tenure.testing.ledger import SimulatedLedger

NAIVE_DDL = """
CREATE TABLE IF NOT EXISTS tenure_bench.naive_batch (
    id bigserial PRIMARY KEY, key text NOT NULL, seq bigint NOT NULL, payload bytea NOT NULL,
    status text NOT NULL DEFAULT 'queued');
CREATE INDEX IF NOT EXISTS naive_batch_queued ON tenure_bench.naive_batch (id) WHERE status = 'queued';
"""
NAIVE_TAKE = """
UPDATE tenure_bench.naive_batch SET status = 'pending'
 WHERE id = (SELECT id FROM tenure_bench.naive_batch WHERE status = 'queued'
              ORDER BY id FOR UPDATE SKIP LOCKED LIMIT 1)
RETURNING id, key, seq, payload
"""
FLOOD_KEYS, FLOOD_BATCHES = 50, 5_000


@dataclass
class RecordingLedger:
    """A ledger that applies every batch at once and records who was submitted when."""

    ledger: SimulatedLedger = field(default_factory=lambda: SimulatedLedger(keeps_order=False, max_delay=0))
    submissions: list[tuple[float, str]] = field(default_factory=list)

    def submit(self, batch: BatchGrant) -> None:
        self.ledger.submit(batch)
        self.submissions.append((time.monotonic(), batch.key))  # list.append is atomic

    def status(self, batch: BatchGrant) -> str | None:
        return self.ledger.status(batch)


def jain(counts: list[int]) -> float:
    """Jain's fairness index: (sum x)^2 / (n * sum x^2)."""
    squares = sum(x * x for x in counts)
    return sum(counts) ** 2 / (len(counts) * squares) if squares else 1.0


def window_fairness(submissions: list[tuple[float, str]], keys: list[str], per_key: int) -> list[float]:
    """Jain's index per window of ``per_key * len(keys)`` consecutive submissions, while
    every key still has batches to come (up to the first key's last submission)."""
    order = [key for _, key in sorted(submissions)]
    last = {key: i for i, key in enumerate(order)}
    until = min(last.get(key, len(order)) for key in keys)
    size = per_key * len(keys)
    windows = [order[start : start + size] for start in range(0, until - size + 1, size)]
    return [jain([Counter(window)[key] for key in keys]) for window in windows]


def steady_rate(samples: list[tuple[float, int]], total: int) -> float:
    """Batches per second between 10% and 90% of ``total`` done (start-up and tail left out).
    ``samples`` (seconds, done) begin with the run's start, when nothing was done."""

    def when(target: float) -> float:
        for (t0, n0), (t1, n1) in itertools.pairwise(samples):
            if n1 >= target:
                return t0 + (t1 - t0) * (target - n0) / max(n1 - n0, 1)
        raise RuntimeError(f"never reached {target} of {total}")

    low, high = 0.1 * total, 0.9 * total
    return (high - low) / max(when(high) - when(low), 1e-9)


MAX_QUEUE_BATCHES = 100_000  # the most batches one run may be grown to


@dataclass(frozen=True)
class Steady:
    """One run: its steady rate, its start-up and its steady window, in seconds."""

    batches: int
    rate: float  # batches committed per second between 10% and 90% committed
    startup: float  # from the start (the pool's, or the naive threads') to 10% committed, less the
    # time the steady rate takes for 10%: what starting cost
    window: float  # from 10% to 90% committed
    counts: int  # how many counts fell inside the window: with fewer than MIN_COUNTS the rate
    # is an interpolation across the start-up or the tail, not a measure of the steady state
    every: float  # seconds between counts, on average


MIN_COUNTS = 3


def steady(samples: list[tuple[float, int]], total: int) -> Steady:
    """The run of ``samples`` (seconds, done), the first its start with nothing done."""
    rate = steady_rate(samples, total)
    window = 0.8 * total / rate
    first = next(t for t, n in samples if n >= 0.1 * total)
    counts = sum(0.1 * total < n < 0.9 * total for _, n in samples)
    every = (samples[-1][0] - samples[0][0]) / (len(samples) - 1)
    return Steady(total, rate, first - samples[0][0] - 0.1 * total / rate, window, counts, every)


def watch(count: Callable[[], int], total: int, *, started: float, timeout: float) -> list[tuple[float, int]]:
    """Count what is done every 0.05 s or more until ``total`` is; the first sample is
    (``started``, 0), the run's start, so that a run done before the first count still
    has its 10% and 90% between two samples."""
    samples = [(started, 0)]
    deadline = started + timeout
    while samples[-1][1] < total:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {samples[-1][1]} of {total} batches done in {timeout:.0f} s")
        time.sleep(0.05)
        samples.append((time.monotonic(), count()))
    return samples


def enqueue(admin: psycopg.Connection[Any], keyspace: str, plan: list[tuple[str, int]], mode: str) -> int:
    """Enqueue ``count`` batches per key in the order of ``plan``; parallel mode gives batch
    n of a key the state key n % 4, so up to four batches of a key can be in flight."""
    driver = Driver(admin)
    driver.batch_configure(keyspace, mode=mode)
    rows = [
        {"key": key, "payload": f"{key}:{n}".encode(), "state_keys": [f"s{n % 4}"]}
        for key, count in plan
        for n in range(count)
    ]
    for start in range(0, len(rows), 1000):
        driver.batch_enqueue_many(keyspace, rows[start : start + 1000])
    return len(rows)


@contextmanager
def serving(conninfo: str, keyspace: str, ledger: RecordingLedger, *, depth: int) -> Iterator[SubmissionPool]:
    pool = SubmissionPool(
        conninfo,
        keyspace,
        submit=ledger.submit,
        status=ledger.status,
        submitters=8,
        depth=depth,
        cycle=1.0,
        expiry=5.0,
        poll_interval=0.2,
        name="bench",
    )
    with pool:
        yield pool


def tenure_run(
    admin: psycopg.Connection[Any], conninfo: str, *, plan: list[tuple[str, int]], mode: str, depth: int
) -> tuple[list[tuple[float, int]], RecordingLedger]:
    keyspace = f"bench-{mode}-{len(plan)}-{depth}"
    retire_keyspace(admin, keyspace)
    total = enqueue(admin, keyspace, plan, mode)
    # like the baseline's table: no dead rows of earlier runs (the claims section retires 10,000 keys)
    admin.execute("VACUUM ANALYZE tenure.batch, tenure.batch_key, tenure.claim_key, tenure.claim_instance")

    def committed() -> int:
        query = "SELECT count(*) FROM tenure.batch WHERE keyspace = %s AND status = 'committed'"
        return int(admin.execute(query, (keyspace,)).fetchone()[0])  # type: ignore[index]

    ledger = RecordingLedger()
    started = time.monotonic()  # the pool's start (its claims on the keys) is part of the start-up
    with serving(conninfo, keyspace, ledger, depth=depth):
        samples = watch(committed, total, started=started, timeout=600)
    retire_keyspace(admin, keyspace)
    return samples, ledger


def naive_run(
    admin: psycopg.Connection[Any], conninfo: str, *, plan: list[tuple[str, int]], threads: int = 8
) -> tuple[list[tuple[float, int]], RecordingLedger]:
    admin.execute("TRUNCATE tenure_bench.naive_batch")
    with admin.cursor() as cursor:
        cursor.executemany(
            "INSERT INTO tenure_bench.naive_batch (key, seq, payload) "
            "SELECT %s, g, 'x' FROM generate_series(1, %s) g",
            plan,
        )
    admin.execute("VACUUM ANALYZE tenure_bench.naive_batch")
    total = sum(count for _, count in plan)
    ledger = RecordingLedger()

    def work() -> None:
        with psycopg.connect(conninfo, autocommit=True) as connection:
            while True:
                row = connection.execute(NAIVE_TAKE).fetchone()
                if row is None:
                    return
                grant = BatchGrant(UUID(int=row[0]), row[1], row[2], bytes(row[3]), [], 1, 0, 1)
                ledger.submit(grant)
                status = ledger.status(grant)
                connection.execute(
                    "UPDATE tenure_bench.naive_batch SET status = %s WHERE id = %s", (status, row[0])
                )

    def done() -> int:
        query = "SELECT count(*) FROM tenure_bench.naive_batch WHERE status = 'committed'"
        return int(admin.execute(query).fetchone()[0])  # type: ignore[index]

    workers = [threading.Thread(target=work, daemon=True) for _ in range(threads)]
    started = time.monotonic()
    for worker in workers:
        worker.start()
    samples = watch(done, total, started=started, timeout=600)
    for worker in workers:
        worker.join()
    return samples, ledger


def even_plan(keys: int, batches: int) -> list[tuple[str, int]]:
    return [(f"key-{k:04}", batches // keys) for k in range(keys)]


def flood_plan(flood: int) -> list[tuple[str, int]]:
    small = flood // FLOOD_KEYS
    return [("flood", flood)] + [(f"small-{k:02}", small) for k in range(1, FLOOD_KEYS)]


def show_run(count: int, label: str, run: Steady) -> str:
    return f"{count} keys, {label}: {run.rate:,.0f} /s, start-up {run.startup:.2f} s"


def queue_bench(
    admin: psycopg.Connection[Any],
    conninfo: str,
    *,
    keys: list[int],
    batches: int,
    workdir: Path,
    repeat: int = 1,
    min_window: float = 5.0,
    flood: int = FLOOD_BATCHES,
) -> None:
    admin.execute(NAIVE_DDL)
    print(
        f"  submission queue, 8 submitters selecting {PREFETCH} batches each at a time (the pool's default"
        " prefetch), a ledger that applies at once; batches committed per second"
    )
    print(
        "  end to end between 10% and 90% committed (start-up apart: the time to 10% less the steady time),"
    )
    print(
        "  against a naive FIFO SKIP LOCKED queue with 8 threads and the same ledger"
        f"{f'; medians of {repeat} interleaved rounds' if repeat > 1 else ''}"
        f"{f'; runs grown to a steady window of {min_window:g} s or more' if min_window > 0 else ''}:"
    )
    curves: dict[str, list[tuple[float, int]]] = {}
    labels = [("naive FIFO (baseline)", "", 0)] + [
        (f"{mode}, {'one-round' if depth == 1 else f'depth {depth}'}", mode, depth)
        for mode in ("unconstrained", "serial", "parallel")
        for depth in (1, 4)
    ]
    modes = {label: (mode, depth) for label, mode, depth in labels}
    for count in keys:
        per_key = {label: max(batches // count, 4) for label in modes}

        def measure(label: str, round_: int, count: int = count, per_key: dict[str, int] = per_key) -> Steady:
            mode, depth = modes[label]
            while True:
                plan = even_plan(count, count * per_key[label])
                total = sum(n for _, n in plan)
                if mode:
                    samples, _ = tenure_run(admin, conninfo, plan=plan, mode=mode, depth=depth)
                else:
                    samples, _ = naive_run(admin, conninfo, plan=plan)
                run = steady(samples, total)
                curves[f"{count} keys, {label}"] = samples
                # a run too short to measure grows in any round; one shorter than asked, in the first
                unmeasured = run.counts < MIN_COUNTS
                wanted = max(
                    min_window if round_ == 1 else 0.0, (MIN_COUNTS + 1) * run.every if unmeasured else 0.0
                )
                if total >= MAX_QUEUE_BATCHES or (run.window >= wanted and not unmeasured):
                    return run
                per_key[label] = grown_size(per_key[label], run.window, wanted, MAX_QUEUE_BATCHES // count)
                why = f"only {run.counts} counts inside it" if unmeasured else ""
                print(
                    f"    ({count} keys, {label}: {total:,} batches left a steady window of "
                    f"{run.window:.1f} s{f', {why}' if why else ''}; again with {count * per_key[label]:,})",
                    flush=True,
                )

        measured = interleaved(
            list(modes),
            measure,
            repeat=repeat,
            show=functools.partial(show_run, count),
        )
        base = Repeated(tuple(run.rate for run in measured[labels[0][0]])).median
        print(
            f"    {'keys':>5}  {'':<26} {'batches':>8}  {'batches/s':>10}  ratio   start-up   "
            f"{'runs' if repeat > 1 else ''}"
        )
        for label in modes:
            rates = Repeated(tuple(run.rate for run in measured[label]))
            startup = Repeated(tuple(run.startup for run in measured[label])).median
            print(
                f"    {count:>5}  {label:<26} {measured[label][-1].batches:>8,}  {rates.median:>8,.0f} /s  "
                f"{rates.median / base:5.2f}  {startup:6.2f} s   {rates.describe() if repeat > 1 else ''}"
                f"{ratio_spread(rates.values, tuple(run.rate for run in measured[labels[0][0]]))}",
                flush=True,
            )

    plan = flood_plan(flood)
    names = [key for key, _ in plan]
    print(
        f"  fairness under a flood: {FLOOD_KEYS} keys, 'flood' enqueued {flood} batches before the"
        f" {FLOOD_KEYS - 1} others {flood // FLOOD_KEYS} each; Jain's index per window of 10 submissions"
        " per key while every key waits (1 = even, 0.02 = one key only):"
    )
    runs = {
        "naive FIFO (baseline)": naive_run(admin, conninfo, plan=plan)[1],
        "tenure one-round": tenure_run(admin, conninfo, plan=plan, mode="unconstrained", depth=1)[1],
        "tenure multi-round, depth 4": tenure_run(admin, conninfo, plan=plan, mode="unconstrained", depth=4)[
            1
        ],
    }
    for label, ledger in runs.items():
        index = window_fairness(ledger.submissions, names, per_key=10)
        first = sorted(ledger.submissions)
        flood_share = sum(key == "flood" for _, key in first[: FLOOD_KEYS * 10]) / (FLOOD_KEYS * 10)
        mean = sum(index) / len(index) if index else float("nan")
        print(
            f"    {label:<28} Jain mean {mean:.2f}  min {min(index, default=float('nan')):.2f}"
            f" over {len(index)} windows; the flood key's share of the first 500 submissions "
            f"{flood_share:.0%}",
            flush=True,
        )
    started = {label: min(t for t, _ in ledger.submissions) for label, ledger in runs.items()}
    timelines = {
        label: [(t - started[label], key) for t, key in sorted(ledger.submissions)]
        for label, ledger in runs.items()
    }
    (workdir / "queue-flood.json").write_text(json.dumps(timelines))
    for picture in (
        plots.throughput(
            workdir / "queue-throughput.png",
            title="submission queue: batches committed per second, 8 submitters",
            series=curves,
            unit="batches/s",
        ),
        plots.per_key(
            workdir / "queue-flood.png",
            title=f"submissions per key while 'flood' has {flood} batches waiting",
            runs=timelines,
            highlight="flood",
        ),
    ):
        if picture is not None:
            print(f"  picture: {picture}")
