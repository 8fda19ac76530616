"""Claims: the cost of a renew + take cycle of instances holding their fair share of a
keyspace, against one UPDATE extending the same rows of a plain table.
"""

from __future__ import annotations

import functools
import hashlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg

from tenure.bench.common import (
    Rate,
    Repeated,
    TableState,
    interleaved,
    pgbench_run,
    rates,
    ratio_spread,
    scalar,
    startup,
    table_state,
)
from tenure.driver import Driver
from tenure.testing.database import retire_keyspace

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


# One cycle of an instance that holds its fair share, as the Claimer makes it: renew all,
# then take more if there is room, in one call (one statement, one transaction).
CLAIM_CYCLE_SQL = f"SELECT count(*) FROM tenure.claim_cycle('{CLAIM_KEYSPACE}', {CLAIMANT}, '30 s');\n"


# The same cycle in two calls (two statements, two transactions), as before claim_cycle.
CLAIM_TWO_CALLS_SQL = (
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
    names = [f"key-{n}" for n in range(1, keys + 1)]
    for start in range(0, keys, 10_000):  # claim_register takes at most 10,000 keys per call
        driver.claim_register(CLAIM_KEYSPACE, names[start : start + 10_000])
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


def hot_share(before: TableState, after: TableState) -> str:
    """The share of a run's updates of a table that were HOT (n_tup_hot_upd / n_tup_upd of
    pg_stat_all_tables, the difference over the run)."""
    updates = after.updates - before.updates
    return f"{100 * (after.hot_updates - before.hot_updates) / updates:3.0f}%" if updates else "   -"


def claims_moved(admin: psycopg.Connection[Any]) -> int:
    """Claims granted so far in the bench keyspace: unchanged across a run = no key changed hands."""
    return int(scalar(admin, "SELECT count(*) FROM tenure.claim_log WHERE keyspace = %s", (CLAIM_KEYSPACE,)))


@dataclass(frozen=True)
class ClaimRun:
    """One pgbench run of a claims row."""

    rate: Rate  # cycles (or baseline UPDATEs) per second after the run's first second
    latency_ms: float  # pgbench's latency average, whole run
    statement_ms: list[float]
    hot: str  # hot_share over the run
    pages: str  # heap pages before -> after
    void: str  # why the figure is void ("" when it is not)


def claim_run(
    admin: psycopg.Connection[Any],
    conninfo: str,
    runs: dict[str, tuple[str, str]],
    label: str,
    _round: int,
    *,
    held: dict[UUID, int],
    seconds: float,
    workdir: Path,
) -> ClaimRun:
    """One run of the row ``label`` (its table and script in ``runs``), the tables compacted
    first; void if a key changed hands (the instances no longer hold ``held``)."""
    table, script = runs[label]
    for compact in dict.fromkeys((table, "tenure.claim_key", "tenure.claim_instance")):
        admin.execute(f"VACUUM FULL ANALYZE {compact}")  # compact, whatever ran before
    admin.execute("CHECKPOINT")
    granted = claims_moved(admin)
    start = table_state(admin, table)
    run = pgbench_run(conninfo, script, clients=len(held), seconds=seconds, workdir=workdir, per_command=True)
    end = table_state(admin, table)
    settled = {row.instance_id: row.keys_held for row in Driver(admin).claim_instances(CLAIM_KEYSPACE)}
    void = ""
    if claims_moved(admin) != granted or settled != held:
        void = f"keys changed hands during the run, so the figure is void: {held} -> {settled}"
        print(f"    ({sum(held.values()):,} keys, {label}: {void})")
    return ClaimRun(
        Rate(run.steady_tps, run.startup),
        run.latency_ms,
        run.statement_ms,
        hot_share(start, end),
        f"{start.pages:,} -> {end.pages:,}",
        void,
    )


def show_run(count: int, label: str, run: ClaimRun) -> str:
    return f"{count:,} keys, {label} {run.rate.rate:,.0f} cycles/s"


def claim_costs(
    admin: psycopg.Connection[Any],
    conninfo: str,
    *,
    keys: list[int],
    instances: int,
    seconds: float,
    workdir: Path,
    repeat: int = 1,
) -> None:
    """Cycles of claim_renew + claim_take by instances that hold their fair share, against one
    UPDATE extending the same rows of a plain table, both tables compacted before each run;
    steady rates (each run's first second apart: after the CHECKPOINT its first writes carry
    full-page images), ``repeat`` interleaved rounds per key count, medians."""
    header = (
        f"claims: {instances} instances at their fair share, one pgbench client each, {seconds:.0f} s a run"
        f"{f', medians of {repeat} interleaved rounds' if repeat > 1 else ''};",
        "a cycle = claim_cycle (one call: extends every claim of the caller with its instance row and",
        "returns its keys; no take at the fair share), and for reference claim_renew + claim_take in two",
        "calls (the take finds no room, or is skipped while another instance takes); baseline = one UPDATE",
        "extending the client's rows of a plain table (key primary key, index on owner; same keys, owners",
        "and row order; no constraint, no trigger, no foreign key, nothing returned); keys renewed/s =",
        "cycles/s x keys / instances; HOT = updates of the table written (the plain one; claim_instance,",
        "whose row a cycle writes: its claims follow it) that were HOT, over the run; issue 14's goal: ratio",
        "at least 0.7 at any key count; each table compacted (VACUUM FULL) before its run;",
        "cycles/s after each run's first second, its start-up apart (HOT, ms, pages: the last run):",
    )
    print("\n".join(f"  {'  ' if n else ''}{line}" for n, line in enumerate(header)))
    runs = {
        "baseline UPDATE": ("tenure_bench.claims_plain", CLAIMS_PLAIN_SQL),
        "claim_cycle": ("tenure.claim_instance", CLAIM_CYCLE_SQL),
        "renew, take": ("tenure.claim_instance", CLAIM_TWO_CALLS_SQL),
    }
    lines: list[str] = []
    for count in keys:
        held = claims_settle(admin, keys=count, instances=instances)
        share = max(held.values())
        admin.execute(CLAIMS_PLAIN_LOAD, {"instances": instances, "keyspace": CLAIM_KEYSPACE})
        per_cycle = count / instances  # keys renewed per cycle, on average over the clients
        measured = interleaved(
            list(runs),
            functools.partial(claim_run, admin, conninfo, runs, held=held, seconds=seconds, workdir=workdir),
            repeat=repeat,
            show=functools.partial(show_run, count),
        )
        base = rates([run.rate for run in measured["baseline UPDATE"]]).median
        for label, done in measured.items():
            rate = rates([run.rate for run in done])
            last = done[-1]
            statements = " + ".join(f"{ms:.2f}" for ms in last.statement_ms)
            latency = Repeated(tuple(run.latency_ms for run in done)).median
            ratio = rate.median / base if base else float("nan")
            spread = ""
            if repeat > 1:
                reference = rates([run.rate for run in measured["baseline UPDATE"]]).values
                spread = f"  {rate.describe()}{ratio_spread(rate.values, reference)}"
            lines.append(
                f"    {count:7,d}  {share:5,d}  {label:15s}  {rate.median:8.0f}"
                f"  {rate.median * per_cycle:12,.0f}/s  {latency:10.2f} ms  {ratio:5.2f}  {last.hot}"
                f"  {statements:16s}  {last.pages:<16s}  {startup([run.rate for run in done]):>6s}{spread}"
                f"{' (void)' if any(run.void for run in done) else ''}"
            )
    print(
        "       keys  share  run              cycles/s  keys renewed/s  latency/cycle  ratio   HOT"
        f"  ms per statement  heap pages        start-up{'  runs' if repeat > 1 else ''}"
    )
    for line in lines:
        print(line, flush=True)
    claims_clean(admin)
