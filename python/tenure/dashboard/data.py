"""What each page of the dashboard shows: one function per area, reading tenure's public
views (and the history views) in one read-only snapshot, returning plain dicts. The HTML
page and its JSON twin are both made from the same dict.

Every query here is a fixed text; what a user names (a task id, a filter) is a parameter.

Every answer is bounded, whatever the fleet holds: each list is one page of at most
:data:`PAGE_SIZE` rows cut by a LIMIT in SQL (``?page=N`` for the next ones, at most
:data:`MAX_PAGE` deep), a chart at most :data:`CHART_ROWS` counts, and long texts (a task's
data, an error) an excerpt of :data:`EXCERPT` characters with their full size.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import psycopg
from psycopg.rows import dict_row

from tenure.driver import Driver

Rows = list[dict[str, Any]]

# Terms a timeline draws at most.
TIMELINE_ROWS = 2000
# Rows of each list on one page, and the deepest page (OFFSET stays bounded).
PAGE_SIZE = 100
MAX_PAGE = 1000
# Characters of a task's data, an error or a batch's detail that a page shows.
EXCERPT = 2000
# Counts a chart draws at most (60 buckets of 20 series).
CHART_ROWS = 1200
# Names listed in one line of the overview's problems.
NAMES_SHOWN = 20
# A task's statuses: the unfinished ones first (a cancelled task is finished).
STATUSES = ("pending", "waiting", "done", "dead", "cancelled")
UNFINISHED = ("pending", "waiting")
# What the statements of one page may take together, by the server's statement_timeout:
# a page that takes longer is cancelled (the dashboard answers 503) rather than left to
# hold a connection while requests pile up behind it.
PAGE_SECONDS = 10.0


class NotFound(LookupError):
    """What a page was asked for does not exist (HTTP 404)."""


def snapshot(
    connection: psycopg.Connection[Any], read: Callable[[Reader], dict[str, Any]], *, page: int = 1
) -> dict[str, Any]:
    """Run ``read`` in one REPEATABLE READ READ ONLY transaction, so that every section of
    a page agrees with the others; add the server time the snapshot was taken at and which
    page of the lists it shows."""
    with connection.transaction():
        connection.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        reader = Reader(connection, page, deadline=time.monotonic() + PAGE_SECONDS)
        taken_at = reader.driver.server_time()
        found = read(reader)
        return {"taken_at": taken_at, **found, "page": reader.paging()}


class Reader:
    """Rows of a snapshot: the operator views through the driver, the rest as fixed queries."""

    def __init__(
        self, connection: psycopg.Connection[Any], page: int = 1, *, deadline: float | None = None
    ) -> None:
        self.connection = connection
        self.driver = Driver(connection)
        self.page = page
        self.deadline = deadline  # time.monotonic() by which the page's statements must be done
        self.more = False  # a list of this page had more rows than it shows

    def rows(self, query: str, params: tuple[Any, ...] | dict[str, Any] = ()) -> Rows:
        with self.connection.cursor(row_factory=dict_row) as cursor:
            if self.deadline is not None:
                left_ms = max(int((self.deadline - time.monotonic()) * 1000), 1)
                cursor.execute("SELECT set_config('statement_timeout', %s, true)", (f"{left_ms}ms",))
            cursor.execute(query.encode(), params)
            return cursor.fetchall()

    def page_rows(self, query: str, params: dict[str, Any] | None = None) -> Rows:
        """One page of ``query`` (which ends with its ORDER BY): LIMIT and OFFSET in SQL."""
        found = self.rows(
            f"{query} LIMIT %(page_limit)s OFFSET %(page_offset)s",
            {**(params or {}), "page_limit": PAGE_SIZE + 1, "page_offset": (self.page - 1) * PAGE_SIZE},
        )
        if len(found) > PAGE_SIZE:
            self.more = True
        return found[:PAGE_SIZE]

    def paging(self) -> dict[str, Any]:
        return {"number": self.page, "size": PAGE_SIZE, "more": self.more}

    def one(self, query: str, params: tuple[Any, ...] | dict[str, Any] = ()) -> dict[str, Any]:
        rows = self.rows(query, params)
        return rows[0] if rows else {}


def _since(window: timedelta) -> str:
    return f"now() - interval '{int(window.total_seconds())} seconds'"


def _buckets(reader: Reader, table_expr: str, time_col: str, group_col: str, window: timedelta) -> Rows:
    """Counts per (group, time bucket) of ``table_expr`` rows over the last ``window``, in
    60 buckets, for a chart. ``table_expr``, ``time_col`` and ``group_col`` are this
    module's own fixed texts, never a user's."""
    step = max(1, int(window.total_seconds()) // 60)
    return reader.rows(
        f"SELECT {group_col} AS grp, "
        f"date_bin(make_interval(secs => %s), {time_col}, now() - make_interval(secs => %s)) AS bucket, "
        f"count(*) AS n FROM {table_expr} WHERE {time_col} >= {_since(window)} "
        "GROUP BY 1, 2 ORDER BY 1, 2 LIMIT %s",
        (step, step * 60, CHART_ROWS),
    )


def overview(reader: Reader, window: timedelta) -> dict[str, Any]:
    """Per area: counts, errors, and anything stuck."""
    heartbeat = reader.one(
        "SELECT count(*) AS types, count(*) FILTER (WHERE live) AS live, "
        "coalesce((array_agg(utype ORDER BY utype) FILTER (WHERE NOT live))[:%s], '{}') AS without_primary, "
        "count(*) FILTER (WHERE NOT live) AS without_primary_count "
        "FROM tenure.heartbeat_status",
        (NAMES_SHOWN,),
    )
    replicas = reader.one(
        "SELECT count(*) AS locks, count(*) FILTER (WHERE pid IS NOT NULL) AS active, "
        "coalesce((array_agg(scope || '/' || counter ORDER BY scope, counter) "
        "FILTER (WHERE pid IS NULL))[:%s], '{}') AS without_active, "
        "count(*) FILTER (WHERE pid IS NULL) AS without_active_count "
        "FROM tenure.replicas",
        (NAMES_SHOWN,),
    )
    claims = reader.one(
        "SELECT count(*) AS keyspaces, coalesce(sum(keys), 0)::bigint AS keys, "
        "coalesce(sum(claimed), 0)::bigint AS claimed, coalesce(sum(unclaimed), 0)::bigint AS unclaimed, "
        "max(longest_unclaimed) AS longest_unclaimed, "
        "coalesce(sum(live_instances), 0)::bigint AS live_instances "
        "FROM tenure.claim_keyspaces"
    )
    tasks = reader.one(
        "SELECT count(*) FILTER (WHERE status = 'pending') AS pending, "
        "count(*) FILTER (WHERE leased) AS leased, count(*) FILTER (WHERE due) AS due, "
        "count(*) FILTER (WHERE status = 'waiting') AS waiting, "
        "count(*) FILTER (WHERE status = 'dead') AS dead, "
        "count(*) FILTER (WHERE status = 'pending' AND owner IS NOT NULL AND next_action < now()) "
        "AS leases_past_due, now() - min(next_action) FILTER (WHERE due) AS oldest_due_age "
        "FROM tenure.tasks"
    )
    kinds = reader.one(
        "SELECT count(*) AS kinds, count(*) FILTER (WHERE paused) AS paused, "
        "coalesce((array_agg(kind ORDER BY kind) FILTER (WHERE paused))[:%s], '{}') AS paused_kinds, "
        "count(*) FILTER (WHERE max_running > 0 AND running >= max_running) AS at_limit "
        "FROM tenure.task_kinds",
        (NAMES_SHOWN,),
    )
    batches = reader.one(
        "SELECT count(*) AS queues, coalesce(sum(queued), 0)::bigint AS queued, "
        "coalesce(sum(pending), 0)::bigint AS pending, coalesce(sum(unknown), 0)::bigint AS unknown, "
        "coalesce(sum(invalid), 0)::bigint AS invalid, max(oldest_waiting_age) AS oldest_waiting_age, "
        "coalesce(sum(cardinality(halted_keys)), 0)::bigint AS halted_keys FROM tenure.batch_queues"
    )
    schedules = reader.one(
        "SELECT count(*) AS schedules, count(*) FILTER (WHERE paused) AS paused, "
        "count(*) FILTER (WHERE next_slot < now() - interval '1 minute') AS overdue, "
        "count(*) FILTER (WHERE last_task_status = 'dead') AS last_run_dead FROM tenure.schedules"
    )
    problems: list[dict[str, str]] = []

    def problem(area: str, what: str) -> None:
        problems.append({"area": area, "problem": what})

    for utype in heartbeat["without_primary"]:
        problem("heartbeat", f"service type {utype} has no live primary")
    if heartbeat["without_primary_count"] > len(heartbeat["without_primary"]):
        left = heartbeat["without_primary_count"] - len(heartbeat["without_primary"])
        problem("heartbeat", f"{left} more service types have no live primary")
    for lock in replicas["without_active"]:
        problem("replicas", f"replica lock {lock} has no active replica")
    if replicas["without_active_count"] > len(replicas["without_active"]):
        left = replicas["without_active_count"] - len(replicas["without_active"])
        problem("replicas", f"{left} more replica locks have no active replica")
    if claims["unclaimed"]:
        problem("claims", f"{claims['unclaimed']} keys have no live claim")
    if tasks["dead"]:
        problem("tasks", f"{tasks['dead']} dead tasks")
    if tasks["leases_past_due"]:
        problem("tasks", f"{tasks['leases_past_due']} leases past due (their workers stopped renewing)")
    if batches["halted_keys"]:
        problem("batches", f"{batches['halted_keys']} batch keys halted by an invalid batch")
    if batches["unknown"]:
        problem("batches", f"{batches['unknown']} batches in status unknown")
    if schedules["overdue"]:
        problem("schedules", f"{schedules['overdue']} schedules overdue by more than a minute")
    if schedules["last_run_dead"]:
        problem("schedules", f"{schedules['last_run_dead']} schedules whose last task is dead")
    return {
        "heartbeat": heartbeat,
        "replicas": replicas,
        "claims": claims,
        "tasks": tasks,
        "task_kinds": kinds,
        "batches": batches,
        "schedules": schedules,
        "problems": problems,
    }


def heartbeat(reader: Reader, window: timedelta) -> dict[str, Any]:
    """Every service type's primary, term and time left; the terms of the window."""
    return {
        "types": reader.page_rows(
            "SELECT *, valid_until - now() AS time_left FROM tenure.heartbeat_status ORDER BY utype"
        ),
        "terms": reader.rows(
            "SELECT utype, term, instance_id, started_at, ended_at, end_reason FROM tenure.heartbeat_terms "
            f"WHERE coalesce(ended_at, 'infinity') >= {_since(window)} ORDER BY utype, term LIMIT %s",
            (TIMELINE_ROWS,),
        ),
    }


def replicas(reader: Reader, window: timedelta) -> dict[str, Any]:
    """Every replica lock: the active replica, epoch, reservation; acquisitions of the window."""
    return {
        "locks": reader.page_rows("SELECT * FROM tenure.replicas ORDER BY scope, counter"),
        # the latest terms that reach into the window, in order
        "terms": reader.rows(
            "SELECT * FROM (SELECT scope, counter, lock_id, epoch, replica, pid, acquired_at, "
            "lead(acquired_at) OVER (PARTITION BY lock_id ORDER BY epoch) AS ended_at "
            "FROM tenure.replica_terms) t "
            f"WHERE coalesce(ended_at, 'infinity') >= {_since(window)} "
            "ORDER BY acquired_at DESC LIMIT %s",
            (TIMELINE_ROWS,),
        )[::-1],
        "acquisitions": _buckets(
            reader, "tenure.replica_terms", "acquired_at", "scope || '/' || counter", window
        ),
    }


def claims(reader: Reader, window: timedelta) -> dict[str, Any]:
    """Per keyspace: keys, instances and what they hold; handovers over the window."""
    return {
        "keyspaces": reader.page_rows("SELECT * FROM tenure.claim_keyspaces ORDER BY keyspace"),
        "instances": reader.page_rows("SELECT * FROM tenure.claim_instances ORDER BY keyspace, instance_id"),
        "unclaimed": reader.page_rows(
            "SELECT keyspace, key, epoch, unclaimed_for FROM tenure.claims WHERE NOT live "
            "ORDER BY unclaimed_for DESC NULLS LAST, keyspace, key"
        ),
        "handovers": _buckets(reader, "tenure.claim_grants", "claimed_at", "keyspace", window),
    }


def tasks(
    reader: Reader, window: timedelta, *, kind: str | None = None, status: str | None = None
) -> dict[str, Any]:
    """Tasks by kind, state and status; each kind's settings (paused, its limits and how
    much of them is in use); leases past due; dead tasks with their last error; with
    ``status``, the tasks of that status (unfinished ones in the order they are leased:
    highest priority, then oldest due first; finished ones latest first); leases granted
    and tasks finished over the window."""
    by_kind = {"kind": kind}
    found: dict[str, Any] = {
        "kind": kind,
        "status_filter": status,
        "status": reader.page_rows(
            "SELECT * FROM tenure.task_status WHERE %(kind)s::text IS NULL OR kind = %(kind)s "
            "ORDER BY kind, state, status",
            by_kind,
        ),
        "kinds": reader.page_rows(
            "SELECT kind, paused, max_running, max_running_per_key, rate, rate_period, running, due, "
            "rate_used, changed_at FROM tenure.task_kinds "
            "WHERE %(kind)s::text IS NULL OR kind = %(kind)s ORDER BY kind",
            by_kind,
        ),
        "past_due": reader.page_rows(
            "SELECT id, kind, state, owner, epoch, attempts, priority, limit_key, "
            "now() - next_action AS overdue_by FROM tenure.tasks "
            "WHERE status = 'pending' AND owner IS NOT NULL AND next_action < now() "
            "AND (%(kind)s::text IS NULL OR kind = %(kind)s) ORDER BY next_action",
            by_kind,
        ),
        "dead": reader.page_rows(
            "SELECT id, kind, state, attempts, max_attempts, priority, limit_key, "
            "left(last_error, %(excerpt)s) AS last_error, "
            "length(last_error) AS last_error_length, finished_at FROM tenure.tasks "
            "WHERE status = 'dead' AND (%(kind)s::text IS NULL OR kind = %(kind)s) "
            "ORDER BY finished_at DESC",
            {**by_kind, "excerpt": EXCERPT // 4},
        ),
        "leases": _buckets(reader, "tenure.task_leases", "leased_at", "how", window),
        "finished": _buckets(
            reader,
            # a waiting task has no finished_at: out of the window like a pending one
            "(SELECT * FROM tenure.tasks WHERE status <> 'pending') t",
            "finished_at",
            "status",
            window,
        ),
        "list": [],
    }
    if status is not None:
        order = "priority DESC, next_action, id" if status in UNFINISHED else "finished_at DESC, id"
        found["list"] = reader.page_rows(
            "SELECT id, kind, state, status, priority, limit_key, after_left, attempts, max_attempts, "
            "owner, leased, due, next_action, finished_at, "
            "left(last_error, %(excerpt)s) AS last_error, length(last_error) AS last_error_length "
            "FROM tenure.tasks WHERE status = %(status)s AND (%(kind)s::text IS NULL OR kind = %(kind)s) "
            f"ORDER BY {order}",
            {**by_kind, "status": status, "excerpt": EXCERPT // 4},
        )
    return found


def task(reader: Reader, task_id: UUID) -> dict[str, Any]:
    """One task, its leases (a page of them, latest first), the tasks it runs after and the
    tasks that run after it (a page of each), with their status. Its data and last error are
    excerpts of :data:`EXCERPT` characters, with their full size and the command that
    prints them whole."""
    found = reader.rows(
        "SELECT id, kind, state, status, owner, epoch, left(data::text, %(excerpt)s) AS data_excerpt, "
        "octet_length(data::text) AS data_bytes, attempts, max_attempts, "
        "left(last_error, %(excerpt)s) AS last_error, length(last_error) AS last_error_length, "
        "idempotency_key, priority, limit_key, after_left, "
        "created_at, last_change, next_action, leased_at, finished_at, leased, due "
        "FROM tenure.tasks WHERE id = %(id)s",
        {"id": task_id, "excerpt": EXCERPT},
    )
    if not found:
        raise NotFound(f"no task {task_id}")
    row = found[0]
    row["data_truncated"] = row["data_bytes"] > len(row["data_excerpt"].encode())
    row["last_error_truncated"] = (row["last_error_length"] or 0) > EXCERPT
    row["show_command"] = f"tenure task show {task_id}"
    leases = reader.page_rows(
        "SELECT epoch, owner, leased_at, how, "
        "lead(leased_at) OVER (ORDER BY epoch) AS ended_at FROM tenure.task_leases "
        "WHERE task_id = %(id)s ORDER BY epoch DESC",
        {"id": task_id},
    )
    # What it waits for, the ones not done first; and what waits for it.
    after = reader.page_rows(
        "SELECT d.after_id AS id, t.kind, d.after_status AS status, t.finished_at "
        "FROM tenure.task_dependencies d LEFT JOIN tenure.tasks t ON t.id = d.after_id "
        "WHERE d.task_id = %(id)s ORDER BY d.after_status IS DISTINCT FROM 'done' DESC, d.after_id",
        {"id": task_id},
    )
    dependents = reader.page_rows(
        "SELECT d.task_id AS id, t.kind, t.status, t.after_left FROM tenure.task_dependencies d "
        "JOIN tenure.tasks t ON t.id = d.task_id WHERE d.after_id = %(id)s ORDER BY d.task_id",
        {"id": task_id},
    )
    return {"task": row, "leases": leases[::-1], "after": after, "dependents": dependents}


def batches(reader: Reader, window: timedelta) -> dict[str, Any]:
    """Per queue and key: depth; halted keys with the batch that halts them; throughput."""
    return {
        "queues": reader.page_rows(
            "SELECT keyspace, keys, queued, pending, unknown, invalid, committed, "
            "halted_keys[:%(names)s] AS halted_keys, cardinality(halted_keys) AS halted_key_count, "
            "oldest_waiting_age FROM tenure.batch_queues ORDER BY keyspace",
            {"names": NAMES_SHOWN},
        ),
        "keys": reader.page_rows(
            "SELECT keyspace, key, mode, claimant, claimed, queued, pending, unknown, invalid, committed, "
            "oldest_waiting_age, halted FROM tenure.batch_keys "
            "WHERE queued + pending + unknown + invalid > 0 "
            "ORDER BY halted DESC, queued + pending + unknown DESC, keyspace, key"
        ),
        "halted": reader.page_rows(
            "SELECT DISTINCT ON (b.keyspace, b.key) b.keyspace, b.key, b.seq, b.id, b.attempts, "
            "left(b.detail, %(excerpt)s) AS detail, length(b.detail) AS detail_length, "
            "b.resolved_at FROM tenure.batches b JOIN tenure.batch_keys k USING (keyspace, key) "
            "WHERE k.halted AND b.status = 'invalid' ORDER BY b.keyspace, b.key, b.seq",
            {"excerpt": EXCERPT // 4},
        ),
        "throughput": _buckets(
            reader,
            "(SELECT * FROM tenure.batches WHERE status IN ('committed', 'invalid', 'skipped')) b",
            "resolved_at",
            "status",
            window,
        ),
    }


def schedules(reader: Reader, window: timedelta) -> dict[str, Any]:
    """Every schedule: next and last slot, its last run's status."""
    return {
        "schedules": reader.page_rows(
            "SELECT name, kind, cron, every, timezone, paused, next_slot, now() - next_slot AS overdue_by, "
            "last_slot, last_task_id, last_task_status, catch_up FROM tenure.schedules ORDER BY name"
        )
    }


def window_of(text: str | None, default: timedelta) -> timedelta:
    """The chart window from ?window=SECONDS (60 s to 7 days)."""
    if text is None or text == "":
        return default
    try:
        seconds = int(text)
    except ValueError:
        raise ValueError(f"window must be a whole number of seconds, got {text!r}") from None
    if not 60 <= seconds <= 7 * 86400:
        raise ValueError(f"window must be from 60 to 604800 seconds, got {seconds}")
    return timedelta(seconds=seconds)


def status_of(text: str | None) -> str | None:
    """The status a task list shows, from ?status= (none: no list)."""
    if text is None or text == "":
        return None
    if text not in STATUSES:
        raise ValueError(f"status must be one of {', '.join(STATUSES)}, got {text[:40]!r}")
    return text


def page_of(text: str | None) -> int:
    """The page of the lists from ?page=N (1 to MAX_PAGE)."""
    if text is None or text == "":
        return 1
    try:
        page = int(text)
    except ValueError:
        raise ValueError(f"page must be a whole number, got {text[:40]!r}") from None
    if not 1 <= page <= MAX_PAGE:
        raise ValueError(f"page must be from 1 to {MAX_PAGE}, got {page}")
    return page


def ago(now: datetime, when: datetime | None) -> timedelta | None:
    return None if when is None else now - when
