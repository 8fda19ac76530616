"""The rolling upgrade of a live fleet (python/tests/test_rolling_upgrade.py): a database
deployed at a release from the commit that cut it, fleet members run by either release's
package (:mod:`tenure.testing.upgrade_member`), a steady stream of tasks, the schema
deployed and reverted under them, and the checks of the members' logs against the
database, with what the upgrade cost (leaderless seconds, task delays) per phase.

:func:`check` and :func:`costs` take plain data (the members' events and the rows read
back by :func:`read_back`), so a doctored log proves them able to fail without a fleet.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from tenure.testing.child import ChildProcess
from tenure.testing.database import worker_login_role_sql

ROOT = Path(__file__).resolve().parents[3]
MEMBER = Path(__file__).resolve().parent / "upgrade_member.py"
APP_ROLE = "tenure_rolling_app"
KEYS = [f"k{n}" for n in range(8)]

APP_SQL = f"""{worker_login_role_sql(APP_ROLE)}
CREATE SCHEMA rolling;
GRANT USAGE ON SCHEMA rolling TO {APP_ROLE};
CREATE TABLE rolling.term_writes (term bigint, instance_id uuid, seq bigint,
                                  done_at timestamptz DEFAULT clock_timestamp());
CREATE TABLE rolling.claim_writes (key text, epoch bigint, instance_id uuid, seq bigint,
                                   done_at timestamptz DEFAULT clock_timestamp());
CREATE TABLE rolling.task_effects (task_id uuid, epoch bigint, owner uuid,
                                   done_at timestamptz DEFAULT clock_timestamp());
GRANT INSERT ON rolling.term_writes, rolling.claim_writes, rolling.task_effects TO {APP_ROLE};
"""


def release_venv(release: str) -> Path:
    """The virtual environment with the package of ``release`` (``.venv-v0.1.0``), made by
    scripts/install-release-venv.sh if it is missing; its ``src`` holds that commit's tree."""
    subprocess.run([str(ROOT / "scripts" / "install-release-venv.sh"), release], check=True)
    return ROOT / f".venv-{release}"


def sqitch(conninfo: str, *args: str, cwd: Path, lock_timeout: float | None = None) -> None:
    """Run sqitch on the database of ``conninfo`` with the project in ``cwd``; with
    ``lock_timeout`` (seconds), a statement of a change that waits longer for a lock fails
    (docs/upgrades.md, "Rolling upgrade of a live fleet")."""
    info = conninfo_to_dict(conninfo)
    target = f"db:pg://{info['user']}@{info['host']}:{info['port']}/{info['dbname']}"
    env = dict(os.environ, SQITCH_FULLNAME="tenure tests", SQITCH_EMAIL="tests@localhost")
    if lock_timeout is not None:
        env["PGOPTIONS"] = f"-c lock_timeout={int(lock_timeout * 1000)}"
    subprocess.run(["sqitch", "--quiet", *args, target], cwd=cwd, env=env, check=True)


@contextmanager
def scratch_database(admin_conninfo: str, dbname: str) -> Iterator[str]:
    """A new, empty database ``dbname`` on the server of ``admin_conninfo`` (one left by an
    earlier run is dropped first); its superuser conninfo. Dropped on exit."""
    drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(dbname))
    with psycopg.connect(admin_conninfo, autocommit=True) as admin:
        admin.execute(drop)
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))
    try:
        yield make_conninfo(admin_conninfo, dbname=dbname)
    finally:
        with psycopg.connect(admin_conninfo, autocommit=True) as admin:
            admin.execute(drop)


@contextmanager
def release_database(admin_conninfo: str, dbname: str, *, release: str, tree: Path) -> Iterator[str]:
    """A new database ``dbname`` on the server of ``admin_conninfo``, deployed at ``@release``
    from ``tree`` (the release's own commit), with the fleet's role, tables and keys; its
    superuser conninfo. Dropped on exit."""
    with scratch_database(admin_conninfo, dbname) as conninfo:
        sqitch(conninfo, "deploy", "--verify", "--to", f"@{release}", cwd=tree)
        with psycopg.connect(conninfo, autocommit=True) as connection:
            connection.execute(APP_SQL)
            connection.execute("SELECT tenure.claim_register('rolling', %s)", (KEYS,))
        yield conninfo


class Member(ChildProcess):
    """A fleet member (:mod:`tenure.testing.upgrade_member`) run by ``python``."""

    def __init__(self, python: Path | str, conninfo: str, name: str, log: Path) -> None:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        super().__init__([str(python), "-P", str(MEMBER), "--db", conninfo, "--name", name], log, env=env)
        self.name = name

    def wait_started(self, wait: float = 30.0) -> dict[str, Any]:
        self.wait_for_output(r'"event": "started"', wait)
        return next(e for e in self.events() if e["event"] == "started")


@dataclass
class Enqueuer:
    """Enqueues a task due now every ``every`` seconds on a connection of its own, in a thread;
    ``ids`` are those the database acknowledged, ``failures`` the errors."""

    conninfo: str
    every: float = 0.04
    ids: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    _stopping: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> Enqueuer:
        self._thread = threading.Thread(target=self._run, name="enqueuer", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        with psycopg.connect(self.conninfo, autocommit=True) as connection:
            next_at = time.monotonic()
            while not self._stopping.is_set():
                try:
                    row = connection.execute(
                        "SELECT id FROM tenure.task_enqueue(p_kind => 'rolling')"
                    ).fetchone()
                    assert row is not None
                    self.ids.append(str(row[0]))
                except psycopg.Error as error:
                    self.failures.append(str(error)[:200])
                next_at = max(next_at + self.every, time.monotonic())
                self._stopping.wait(next_at - time.monotonic())


@dataclass
class LockWatch:
    """Samples, every ``every`` seconds in a thread, the backends of the database that wait for a
    lock (a deploy's ALTER TABLE behind the fleet, or the fleet behind it): ``waits`` maps
    (pid, query start) to [first seen, last seen (time.time()), application_name, query]."""

    conninfo: str
    every: float = 0.05
    waits: dict[tuple[int, float], list[Any]] = field(default_factory=dict)
    _stopping: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> LockWatch:
        self._thread = threading.Thread(target=self._run, name="lock-watch", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        with psycopg.connect(self.conninfo, autocommit=True) as connection:
            while not self._stopping.wait(self.every):
                now = time.time()
                for pid, started, app, query in connection.execute(
                    "SELECT pid, extract(epoch FROM query_start)::float8, application_name, left(query, 120) "
                    "FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
                ):
                    self.waits.setdefault((pid, started), [now, now, app, query])[1] = now

    def longest(self, start: float, end: float) -> tuple[float, int]:
        """The longest lock wait seen in [start, end) (at least as long as sampled) and how many
        statements waited."""
        inside = [
            (last - first, app)
            for first, last, app, _ in self.waits.values()
            if start <= last and first < end
        ]
        return max((w for w, _ in inside), default=0.0), len(inside)


@dataclass
class Phase:
    name: str
    start: float  # time.time()
    end: float = 0.0
    note: str = ""


@dataclass
class ReadBack:
    """The database's side, read after the run: who was granted what, and the fenced rows."""

    terms: dict[int, str]  # term -> instance id (heartbeat_term)
    leases: dict[tuple[str, int], str]  # (task, epoch) -> owner (task_lease_log)
    claims: dict[tuple[str, int], str]  # (key, epoch) -> claimant (claim_log)
    tasks: dict[str, tuple[str, int, float]]  # id -> (status, epoch, created_at epoch seconds)
    first_leased: dict[str, float]  # task -> leased_at of its first lease (epoch seconds)
    task_effects: list[tuple[str, int, str]]  # (task, epoch, owner)
    term_writes: list[tuple[int, str, int]]  # (term, instance, seq)
    claim_writes: list[tuple[str, int, str, int]]  # (key, epoch, instance, seq)


def read_back(conninfo: str) -> ReadBack:
    with psycopg.connect(conninfo, autocommit=True) as db:

        def rows(query: str) -> list[tuple[Any, ...]]:
            return db.execute(query).fetchall()

        return ReadBack(
            terms={t: str(i) for t, i in rows("SELECT term, instance_id FROM tenure.heartbeat_term")},
            leases={
                (str(t), e): str(o)
                for t, e, o in rows("SELECT task_id, epoch, owner FROM tenure.task_lease_log")
            },
            claims={
                (k, e): str(c)
                for k, e, c in rows(
                    "SELECT key, epoch, claimant FROM tenure.claim_log WHERE keyspace = 'rolling'"
                )
            },
            tasks={
                str(i): (s, e, c)
                for i, s, e, c in rows(
                    "SELECT id, status, epoch, extract(epoch FROM created_at)::float8 FROM tenure.task"
                )
            },
            first_leased={
                str(t): a
                for t, a in rows(
                    "SELECT task_id, extract(epoch FROM min(leased_at))::float8 "
                    "FROM tenure.task_lease_log GROUP BY task_id"
                )
            },
            task_effects=[
                (str(t), e, str(o))
                for t, e, o in rows("SELECT task_id, epoch, owner FROM rolling.task_effects")
            ],
            term_writes=[
                (t, str(i), s) for t, i, s in rows("SELECT term, instance_id, seq FROM rolling.term_writes")
            ],
            claim_writes=[
                (k, e, str(i), s)
                for k, e, i, s in rows("SELECT key, epoch, instance_id, seq FROM rolling.claim_writes")
            ],
        )


@dataclass
class MemberLog:
    """A member's events and how its process ended (None: still running)."""

    name: str
    events: list[dict[str, Any]]
    returncode: int | None

    @property
    def started(self) -> dict[str, Any]:
        return next((e for e in self.events if e["event"] == "started"), {})


def check(members: Sequence[MemberLog], enqueued: Sequence[str], db: ReadBack) -> list[str]:
    """What the members were told, against the database: the broken promises, one line each."""
    problems: list[str] = []
    granted_terms: dict[int, set[str]] = defaultdict(set)
    granted_leases: dict[tuple[str, int], set[str]] = defaultdict(set)
    granted_claims: dict[tuple[str, int], set[str]] = defaultdict(set)
    term_rows = {(i, s): t for t, i, s in db.term_writes}
    claim_rows = {(i, s): (k, e) for k, e, i, s in db.claim_writes}
    effects: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for task, epoch, owner in db.task_effects:
        effects[task].append((epoch, owner))
    for member in members:
        started = member.started
        if not started:
            problems.append(f"{member.name}: never started")
            continue
        elector, claimer, worker = started["elector"], started["claimer"], started["worker"]
        if member.returncode not in (None, 0):
            problems.append(f"{member.name} ({started['version']}): exited with {member.returncode}")
        if member.returncode == 0 and member.events[-1]["event"] != "stopped":
            problems.append(f"{member.name}: exited without stopping")
        for event in member.events:
            kind = event["event"]
            grant = f"{event.get('task', event.get('key'))}/{event.get('epoch')}"
            if kind == "crash":
                problems.append(f"{member.name} ({started['version']}): a thread crashed: {event['error']}")
            elif kind == "elected":
                granted_terms[event["term"]].add(elector)
            elif kind == "leased":
                granted_leases[(event["task"], event["epoch"])].add(worker)
            elif kind == "claimed":
                for key, epoch in event["keys"].items():
                    granted_claims[(key, epoch)].add(claimer)
            elif kind == "term_write" and term_rows.get((elector, event["seq"])) != event["term"]:
                problems.append(
                    f"{member.name}: acknowledged write {event['seq']} in term {event['term']} is lost"
                )
            elif kind == "claim_write" and claim_rows.get((claimer, event["seq"])) != (
                event["key"],
                event["epoch"],
            ):
                problems.append(
                    f"{member.name}: acknowledged write {event['seq']} under claim {grant} is lost"
                )
            elif kind == "outcome":
                row = db.tasks.get(event["task"])
                if row is None or row[0] != "done" or row[1] != event["epoch"]:
                    problems.append(f"{member.name}: acknowledged outcome of {grant} is lost: {row}")
                if (event["epoch"], worker) not in effects.get(event["task"], []):
                    problems.append(f"{member.name}: the writes of acknowledged outcome {grant} are lost")
    grants: list[tuple[str, dict[Any, set[str]], dict[Any, str]]] = [
        ("term", granted_terms, db.terms),
        ("task lease", granted_leases, db.leases),
        ("claim", granted_claims, db.claims),
    ]
    for what, granted, recorded in grants:
        for grant, holders in granted.items():
            if len(holders) > 1:
                problems.append(f"{what} {grant} granted to {len(holders)} instances: {sorted(holders)}")
            elif recorded.get(grant) not in holders:
                problems.append(
                    f"{what} {grant} granted to {min(holders)}, the database says {recorded.get(grant)}"
                )
    holder_of_term = db.terms
    for term, instance, seq in db.term_writes:
        if holder_of_term.get(term) != instance:
            problems.append(
                f"fenced write {seq} of {instance} in term {term}, held by {holder_of_term.get(term)}"
            )
    for key, epoch, instance, seq in db.claim_writes:
        if db.claims.get((key, epoch)) != instance:
            problems.append(
                f"fenced write {seq} of {instance} under {key}/{epoch}, held by {db.claims.get((key, epoch))}"
            )
    for task in enqueued:
        row = db.tasks.get(task)
        done = effects.get(task, [])
        if row is None or row[0] != "done":
            problems.append(f"task {task} is not done: {row}")
        elif len(done) != 1 or done[0][0] != row[1]:
            problems.append(f"task {task} done {len(done)} times (epochs {done}, final epoch {row[1]})")
    return problems


def liveness(members: Sequence[MemberLog], phases: Sequence[Phase]) -> list[str]:
    """The phases in which the fleet stopped working: no fenced write under a term or a claim,
    or no task outcome acknowledged, from start to end of the phase."""
    problems = []
    for phase in phases:
        seen = {e["event"] for m in members for e in m.events if phase.start <= e["wall"] <= phase.end}
        missing = {"term_write", "claim_write", "outcome"} - seen
        if missing:
            problems.append(
                f"phase {phase.name!r}: no {', '.join(sorted(missing))} in {phase.end - phase.start:.1f} s"
            )
    return problems


@dataclass
class Cost:
    phase: str
    seconds: float
    leaderless: float  # seconds in the phase without an instance that believed itself primary
    tasks: int  # tasks created during the phase
    max_delay: float  # the longest a task created in it waited for its first lease
    median_delay: float
    warnings: int  # failed calls the members logged during the phase
    keys_given_up: int = 0  # keys an instance gave up while it went on (a lost renewal, a newcomer's share)
    lock_wait: float = 0.0  # the longest a statement waited for a lock in the phase (sampled)
    lock_waiters: int = 0  # statements seen waiting for a lock
    note: str = ""


def primacy(members: Sequence[MemberLog], end: float) -> list[tuple[float, float]]:
    """The intervals (wall clock) in which some member believed itself primary, merged."""
    spans = []
    for member in members:
        since: float | None = None
        for event in member.events:
            if event["event"] == "elected" and since is None:
                since = event["wall"]
            elif event["event"] in ("demoted", "stopped") and since is not None:
                spans.append((since, event["wall"]))
                since = None
        if since is not None:
            spans.append((since, end))
    merged: list[tuple[float, float]] = []
    for start, stop in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], stop))
        else:
            merged.append((start, stop))
    return merged


def costs(
    members: Sequence[MemberLog], phases: Sequence[Phase], db: ReadBack, locks: LockWatch | None = None
) -> list[Cost]:
    """Per phase: leaderless seconds (from the members' own logs) and the delay of the tasks
    created in it from when they were due to their first lease (from the database)."""
    covered = primacy(members, max(p.end for p in phases))
    warnings = [e["wall"] for m in members for e in m.events if e["event"] in ("warning", "write_failed")]
    # Keys given up while the instance went on (a lost renewal, or handed over to a newcomer
    # at the fair share), not those released by its own stop.
    given_up = []
    for member in members:
        end = member.events[-1]["wall"] if member.events else 0.0
        given_up += [
            (e["wall"], len(e["keys"]))
            for e in member.events
            if e["event"] == "unclaimed" and end - e["wall"] > 0.5
        ]
    result = []
    for phase in phases:
        held = sum(max(0.0, min(b, phase.end) - max(a, phase.start)) for a, b in covered)
        delays = sorted(
            db.first_leased[task] - created
            for task, (_, _, created) in db.tasks.items()
            if phase.start <= created < phase.end and task in db.first_leased
        )
        result.append(
            Cost(
                phase=phase.name,
                seconds=phase.end - phase.start,
                leaderless=max(0.0, phase.end - phase.start - held),
                tasks=len(delays),
                max_delay=delays[-1] if delays else 0.0,
                median_delay=delays[len(delays) // 2] if delays else 0.0,
                warnings=sum(phase.start <= w < phase.end for w in warnings),
                keys_given_up=sum(k for w, k in given_up if phase.start <= w < phase.end),
                lock_wait=locks.longest(phase.start, phase.end)[0] if locks else 0.0,
                lock_waiters=locks.longest(phase.start, phase.end)[1] if locks else 0,
                note=phase.note,
            )
        )
    return result


def table(rows: Sequence[Cost]) -> str:
    lines = [
        f"{'phase':<38} seconds  leaderless  tasks  median delay  max delay  warnings  keys given up"
        "  lock waits (longest)"
    ]
    for c in rows:
        lines.append(
            f"{c.phase:<38} {c.seconds:7.1f}  {c.leaderless:10.2f}  {c.tasks:5d}  {c.median_delay:12.3f}"
            f"  {c.max_delay:9.3f}  {c.warnings:8d}  {c.keys_given_up:13d}"
            f"  {c.lock_waiters:5d} ({c.lock_wait:.2f} s)  {c.note}"
        )
    return "\n".join(lines)


class Fleet:
    """The members of a rolling upgrade, each run by the package of one release; every member
    ever started stays in ``started``, for the checks. Closing stops those still running."""

    def __init__(self, conninfo: str, workdir: Path) -> None:
        self.conninfo = conninfo
        self.workdir = workdir
        self.running: list[Member] = []
        self.started: list[Member] = []

    def start(self, python: Path | str, name: str) -> Member:
        member = Member(python, self.conninfo, name, self.workdir / f"{name}.log")
        self.started.append(member)
        self.running.append(member)
        member.wait_started()
        return member

    def replace(self, index: int, python: Path | str, name: str) -> tuple[Member, bool]:
        """Start ``name`` by ``python``, then stop member ``index`` (SIGTERM: it resigns, releases
        its claims and tasks); whether the stopped one was primary."""
        old = self.running[index]
        self.start(python, name)
        led = [e["event"] for e in old.events() if e["event"] in ("elected", "demoted")]
        old.stop()
        self.running.remove(old)
        self.running.insert(index, self.running.pop())
        return old, bool(led) and led[-1] == "elected"

    def logs(self) -> list[MemberLog]:
        return [MemberLog(m.name, m.events(), m.process.poll()) for m in self.started]

    def __enter__(self) -> Fleet:
        return self

    def __exit__(self, *exc: object) -> None:
        for member in self.started:
            member.stop()


def dump(path: Path, members: Sequence[MemberLog]) -> None:
    """The members' events in one file, for a failing test's report."""
    with open(path, "w") as out:
        for member in members:
            for event in member.events:
                out.write(json.dumps({"member": member.name, **event}) + "\n")
