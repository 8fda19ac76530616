"""A rolling upgrade of a live fleet, and its rollback, under a steady stream of tasks.

Three members (an elector, a claimer and a task worker each, with fenced writes under
the term and under each claim) run the v0.1.0 package, from the commit that cut
``@v0.1.0``, in its own virtual environment, against a database deployed at ``@v0.1.0``
from that commit. Under them the current plan is deployed from this tree; the members
are replaced one by one by members of today's package; then, for the rollback, one by
one by v0.1.0 members again, and the schema is reverted to ``@v0.1.0`` under them.

Checked from the members' own logs against the database: no term, (task, epoch) or
(key, epoch) granted twice, every grant as the database recorded it, no acknowledged
outcome or fenced write lost, every task done exactly once, no member crashed or ended
other than by its SIGTERM. The costs per phase (leaderless seconds, task delays) are
printed; docs/upgrades.md quotes them.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from tenure.testing.upgrade import (
    APP_ROLE,
    ROOT,
    Enqueuer,
    Fleet,
    LockWatch,
    MemberLog,
    Phase,
    ReadBack,
    check,
    costs,
    dump,
    liveness,
    read_back,
    release_database,
    release_venv,
    scratch_database,
    sqitch,
    table,
)

RELEASE = "v0.1.0"
MEMBERS = 3
STEADY = 4.0  # seconds of each steady phase
LOCK_TIMEOUT = 10.0  # for the deploy and the revert, as docs/upgrades.md advises


@pytest.mark.timeout(900)
def test_rolling_upgrade_and_rollback_under_load(admin_conninfo: str, tmp_path: Path) -> None:
    old = release_venv(RELEASE)
    old_python, new_python = old / "bin" / "python", Path(sys.executable)
    phases: list[Phase] = []

    @contextmanager
    def phase(name: str, note: str = "") -> Iterator[Phase]:
        current = Phase(name, time.time(), note=note)
        phases.append(current)
        yield current
        current.end = time.time()

    def steady(name: str) -> None:
        with phase(name):
            time.sleep(STEADY)

    with release_database(admin_conninfo, "tenure_rolling", release=RELEASE, tree=old / "src") as conninfo:
        app = make_conninfo(conninfo, user=APP_ROLE)
        with Fleet(app, tmp_path) as fleet, Enqueuer(conninfo) as enqueuer, LockWatch(conninfo) as locks:
            for n in range(MEMBERS):
                fleet.start(old_python, f"old{n}")
            steady(f"{RELEASE} fleet, schema @{RELEASE}")
            with phase("deploy (sqitch deploy)"):
                sqitch(conninfo, "deploy", "--verify", cwd=ROOT, lock_timeout=LOCK_TIMEOUT)
            steady(f"{RELEASE} fleet, schema head")
            for n in range(MEMBERS):
                with phase(f"replace old{n} by new{n}") as current:
                    _, led = fleet.replace(n, new_python, f"new{n}")
                    current.note = "(was primary)" if led else ""
                    time.sleep(1.0)
            steady("new fleet, schema head")
            for n in range(MEMBERS):
                with phase(f"replace new{n} by back{n}") as current:
                    _, led = fleet.replace(n, old_python, f"back{n}")
                    current.note = "(was primary)" if led else ""
                    time.sleep(1.0)
            with phase(f"revert (sqitch revert --to @{RELEASE})"):
                sqitch(conninfo, "revert", "-y", "--to", f"@{RELEASE}", cwd=ROOT, lock_timeout=LOCK_TIMEOUT)
            steady(f"{RELEASE} fleet, schema @{RELEASE} again")
            enqueuer.stop()
            with phase("drain"):
                wait_until_done(conninfo, len(enqueuer.ids))
        logs = fleet.logs()
        db = read_back(conninfo)
    dump(tmp_path / "events.jsonl", logs)
    report = table(costs(logs, phases, db, locks))
    (tmp_path / "costs.txt").write_text(report + "\n")
    (tmp_path / "phases.json").write_text(json.dumps([vars(p) for p in phases]))
    print(f"\n{report}\n{len(enqueuer.ids)} tasks; events in {tmp_path / 'events.jsonl'}")

    versions = {m.name: m.started.get("version") for m in logs}
    assert versions["old0"] == "0.1.0" and versions["back0"] == "0.1.0", versions
    assert versions["new0"] != "0.1.0", versions
    assert enqueuer.failures == [], f"enqueues failed: {enqueuer.failures[:3]}"
    assert_grants_made(logs, db)
    problems = check(logs, enqueuer.ids, db) + liveness(logs, phases[:-1])
    assert problems == [], f"{len(problems)} broken promises, the first: " + "\n".join(problems[:10])


def wait_until_done(conninfo: str, expected: int, wait: float = 60.0) -> None:
    with psycopg.connect(conninfo, autocommit=True) as db:
        end = time.monotonic() + wait
        while time.monotonic() < end:
            row = db.execute("SELECT count(*) FROM tenure.task WHERE status = 'done'").fetchone()
            if row and row[0] >= expected:
                return
            time.sleep(0.2)


def assert_grants_made(logs: list[MemberLog], db: ReadBack) -> None:
    """The run had something to check: terms, leases, claims and writes of both releases."""
    for release in ("0.1.0", "new"):
        ran = [m for m in logs if (m.started.get("version") == "0.1.0") == (release == "0.1.0")]
        seen = {e["event"] for m in ran for e in m.events}
        assert {"leased", "outcome", "claimed", "claim_write"} <= seen, (release, seen)
    assert {e["event"] for m in logs for e in m.events} >= {"elected", "term_write"}
    assert len(db.terms) > 1, "the primacy never changed hands"


def test_the_checks_fail_on_a_doctored_log() -> None:
    """Each promise the upgrade test checks, broken once in a small log: the check names it."""
    e, c, w = "e" * 8, "c" * 8, "w" * 8
    started: dict[str, Any] = {
        "event": "started",
        "version": "0.1.0",
        "elector": e,
        "claimer": c,
        "worker": w,
    }
    events: list[dict[str, Any]] = [
        started,
        {"event": "elected", "term": 1},
        {"event": "term_write", "term": 1, "seq": 1},
        {"event": "claimed", "keys": {"k0": 1}},
        {"event": "claim_write", "key": "k0", "epoch": 1, "seq": 2},
        {"event": "leased", "task": "t1", "epoch": 1},
        {"event": "outcome", "task": "t1", "epoch": 1},
        {"event": "stopped"},
    ]
    events = [{**event, "wall": 20.0 + n} for n, event in enumerate(events)]
    db = ReadBack(
        terms={1: e},
        leases={("t1", 1): w},
        claims={("k0", 1): c},
        tasks={"t1": ("done", 1, 0.0)},
        first_leased={"t1": 0.5},
        task_effects=[("t1", 1, w)],
        term_writes=[(1, e, 1)],
        claim_writes=[("k0", 1, c, 2)],
    )
    member = MemberLog("m", events, 0)
    assert check([member], ["t1"], db) == []

    def fails(doctored_events: list[dict[str, Any]], doctored_db: ReadBack, returncode: int = 0) -> str:
        problems = check([MemberLog("m", doctored_events, returncode)], ["t1"], doctored_db)
        assert problems, "the check found nothing wrong"
        return problems[0]

    other = {**started, "elector": "x" * 8, "claimer": "y" * 8, "worker": "z" * 8}
    twice = check([member, MemberLog("n", [other, *events[1:]], 0)], ["t1"], db)
    assert any("term 1 granted to 2 instances" in p for p in twice), twice
    assert any("task lease ('t1', 1) granted to 2" in p for p in twice), twice
    assert any("claim ('k0', 1) granted to 2" in p for p in twice), twice
    assert "is lost" in fails(events, ReadBack(**{**vars(db), "term_writes": []}))
    assert "is lost" in fails(events, ReadBack(**{**vars(db), "claim_writes": []}))
    assert "outcome of t1/1 is lost" in fails(
        events, ReadBack(**{**vars(db), "tasks": {"t1": ("pending", 2, 0.0)}})
    )
    assert "done 2 times" in fails(
        events, ReadBack(**{**vars(db), "task_effects": [("t1", 1, w), ("t1", 1, w)]})
    )
    assert "the database says" in fails(events, ReadBack(**{**vars(db), "terms": {1: "x" * 8}}))
    assert "crashed" in fails([*events[:-1], {"event": "crash", "error": "boom"}, events[-1]], db)
    assert "exited with 1" in fails(events[:-1], db, returncode=1)
    assert liveness([member], [Phase("busy", 20.0, 30.0)]) == []
    assert liveness([member], [Phase("quiet", 0.0, 10.0)]) == [
        "phase 'quiet': no claim_write, outcome, term_write in 10.0 s"
    ]


# A change that locks its tables one statement at a time can deadlock with a fleet's call
# holding one of them: the change waits for the call's lock on one table while holding a
# lock the call then asks for on another (or on the same table, in a stronger mode). Each
# case: the call's first statement, the change deployed under it (it waits on a lock),
# the call's second statement, its commit; the deploy must succeed and the call too.
LOCK_ORDER_CASES = [
    pytest.param(
        "task_cascades",
        "SELECT FROM tenure.task LIMIT 1",  # a worker's call reads tasks, then writes one
        "UPDATE tenure.task SET state = state WHERE false",
        id="task_cascades",
    ),
    pytest.param(
        "claims_follow_instance",
        "UPDATE tenure.claim_instance SET renewed_at = renewed_at WHERE false",  # a renewal: its row,
        "UPDATE tenure.claim_key SET expires_at = expires_at WHERE false",  # then its keys
        id="claims_follow_instance",
    ),
]


# A client backend of the database waits on a lock (the deploy, behind the call).
WAITING_SQL = """SELECT EXISTS (SELECT FROM pg_stat_activity WHERE datname = current_database()
                                  AND wait_event_type = 'Lock' AND backend_type = 'client backend')"""


@pytest.mark.timeout(180)
@pytest.mark.parametrize(("change", "first", "then"), LOCK_ORDER_CASES)
def test_a_change_takes_its_locks_before_a_running_call_can_deadlock_it(
    admin_conninfo: str, change: str, first: str, then: str
) -> None:
    outcome: dict[str, Any] = {}
    with scratch_database(admin_conninfo, f"tenure_lock_order_{change}") as conninfo:
        sqitch(conninfo, "deploy", "--to", f"{change}^", cwd=ROOT)
        with psycopg.connect(conninfo) as call, psycopg.connect(conninfo, autocommit=True) as watch:
            call.execute("SET statement_timeout = '30s'")
            call.execute(first)
            deploy = threading.Thread(target=deploy_to, args=(conninfo, change, outcome))
            deploy.start()
            deadline = time.monotonic() + 60
            while watch.execute(WAITING_SQL).fetchone() != (True,):
                assert time.monotonic() < deadline and deploy.is_alive(), (
                    f"the deploy never waited: {outcome}"
                )
                time.sleep(0.05)
            call.execute(then)  # before the fix: "deadlock detected" here, or in the deploy
            call.commit()
            deploy.join(120)
        assert not deploy.is_alive() and outcome.get("error") is None, outcome
        with psycopg.connect(conninfo) as check:
            row = check.execute(
                "SELECT change FROM sqitch.changes ORDER BY committed_at DESC LIMIT 1"
            ).fetchone()
            assert row == (change,)


def deploy_to(conninfo: str, change: str, outcome: dict[str, Any]) -> None:
    try:
        sqitch(conninfo, "deploy", "--to", change, cwd=ROOT, lock_timeout=LOCK_TIMEOUT)
    except subprocess.CalledProcessError as error:
        outcome["error"] = repr(error)
