"""The maintainer and the schedules' Python side, checked from the database.

- Two maintainers: exactly one ticks, the other stays standby; when the first leaves,
  the standby takes over.
- Retention calls each prune function the database has, in bounded batches until one
  removes fewer rows than the limit, with the configured ages, and only from the
  elected maintainer. The prune functions here are stand-ins of the test's own (the
  real ones belong to the retention change); histories without one are skipped.
- ``tenure maintain`` processes under SIGKILL and SIGSTOP of the active one, a server
  crash-restart and an outage of every maintainer, with ``tenure task worker``
  processes running a decorated processor module: a schedule every second with
  catch-up ``'all'`` has exactly one task for every slot between the first and the
  last (read from the tasks' idempotency keys and data), and each is done once.
- ``@schedule`` / ``Schedules`` / ``sync_schedules`` are idempotent and feed a TaskWorker.
- ``tenure schedule`` commands.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tenure import (
    Complete,
    Driver,
    InvalidArgument,
    InvalidConfiguration,
    Maintainer,
    Retention,
    Schedules,
    Task,
    TaskWorker,
    schedule,
    sync_schedules,
)
from tenure.cli import build_parser
from tenure.cli import main as cli
from tenure.cli.common import duration
from tenure.driver import PRUNE_HISTORIES
from tenure.testing.aio import Flavour
from tenure.testing.child import ChildProcess
from tenure.testing.heartbeat import wait_for_primary
from tenure.testing.tasks import TaskWorkerProcess

I, T = 0.3, 1.0
UTYPE = "tenure.maintain"
ROOT = Path(__file__).resolve().parents[2]


def wait_until(condition: Any, wait: float = 20.0, what: str = "condition") -> None:
    end = time.monotonic() + wait
    while time.monotonic() < end:
        if condition():
            return
        time.sleep(0.05)
    raise TimeoutError(f"no {what} within {wait} s")


def every_second(driver: Driver, name: str = "pulse", *, catch_up: str = "all") -> None:
    driver.schedule_set(name, name, every=1, catch_up=catch_up, catch_up_limit=1000)


def slots_of(admin: psycopg.Connection[Any], name: str) -> list[datetime]:
    """Every slot that has a task, once per task (from the idempotency key, checked against the data)."""
    slots = []
    for key, data in admin.execute(
        "SELECT idempotency_key, data FROM tenure.task WHERE data->>'schedule' = %s", (name,)
    ):
        assert data["slot"] is not None, "no run-now task in these tests"
        slot = datetime.fromisoformat(data["slot"].replace("Z", "+00:00"))
        assert key == f"tenure.schedule/{name}/{data['slot']}", (key, data)
        slots.append(slot)
    return sorted(slots)


def check_every_slot_once(slots: list[datetime]) -> None:
    counts = Counter(slots)
    twice = [s for s, n in counts.items() if n > 1]
    assert not twice, f"slots with more than one task: {twice}"
    missed = [
        slots[0] + timedelta(seconds=n)
        for n in range(int((slots[-1] - slots[0]).total_seconds()) + 1)
        if slots[0] + timedelta(seconds=n) not in counts
    ]
    assert not missed, f"slots without a task: {missed}"


# -- in-process maintainers ------------------------------------------------------------------


def maintainer(flavour: Flavour, conninfo: str, **options: Any) -> Maintainer:
    options = {"tick_every": 0.1, "retention_every": 3600.0, "interval": I, "timeout": T, **options}
    return flavour(Maintainer, conninfo, **options)


def test_two_maintainers_exactly_one_ticks(
    app_conninfo: str, admin: psycopg.Connection[Any], flavour: Flavour
) -> None:
    driver = Driver(admin)
    every_second(driver)
    first, second = maintainer(flavour, app_conninfo, name="m1"), maintainer(flavour, app_conninfo, name="m2")
    with first, second:
        wait_until(lambda: first.is_primary() or second.is_primary(), what="a maintainer elected")
        active, standby = (first, second) if first.is_primary() else (second, first)
        wait_until(lambda: active.snapshot().tasks_created >= 3, what="three schedule tasks")
        assert not standby.is_primary()
        assert standby.snapshot().ticks == 0, "the standby never ticks"
        assert active.snapshot().ticks >= 3
        ticks = active.metrics.registry.get_sample_value("tenure_schedule_ticks_total")
        assert ticks is not None and ticks >= 3
        created = active.metrics.registry.get_sample_value(
            "tenure_schedule_tasks_created_total", {"schedule": "pulse"}
        )
        assert created == active.snapshot().tasks_created
        assert standby.metrics.registry.get_sample_value("tenure_schedule_ticks_total") == 0

        active.stop()  # resigns: the standby takes over at once
        assert standby.wait_until_primary(20)
        before = standby.snapshot().tasks_created
        wait_until(lambda: standby.snapshot().tasks_created >= before + 2, what="ticks of the successor")
    check_every_slot_once(slots_of(admin, "pulse"))
    assert first.snapshot().tasks_created + second.snapshot().tasks_created == len(slots_of(admin, "pulse"))


PRUNE_STUB = """
CREATE TABLE public.prune_rows (id serial PRIMARY KEY);
CREATE TABLE public.prune_calls (
    at timestamptz DEFAULT clock_timestamp(), app text, older_than interval, lim integer, removed bigint);
DROP FUNCTION IF EXISTS tenure.task_prune(interval, integer);
CREATE FUNCTION tenure.task_prune(p_older_than interval, p_limit integer)
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE v_removed bigint;
BEGIN
    DELETE FROM public.prune_rows WHERE id IN (SELECT id FROM public.prune_rows ORDER BY id LIMIT p_limit);
    GET DIAGNOSTICS v_removed = ROW_COUNT;
    INSERT INTO public.prune_calls (app, older_than, lim, removed)
        VALUES (current_setting('application_name'), p_older_than, p_limit, v_removed);
    RETURN v_removed;
END $$;
GRANT EXECUTE ON FUNCTION tenure.task_prune(interval, integer) TO tenure_worker;
INSERT INTO public.prune_rows SELECT FROM generate_series(1, 25);
"""


def test_retention_prunes_in_bounded_batches_from_the_maintainer_only(
    app_conninfo: str, admin: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture, flavour: Flavour
) -> None:
    admin.execute(PRUNE_STUB)
    present = {
        h
        for h in PRUNE_HISTORIES
        if admin.execute("SELECT to_regprocedure(%s)", (f"tenure.{h}_prune(interval, integer)",)).fetchone()
        != (None,)
    }
    assert "task" in present
    retention = Retention(task=timedelta(days=3), limit=10)
    first = maintainer(flavour, app_conninfo, name="r1", retention=retention)
    second = maintainer(flavour, app_conninfo, name="r2", retention=retention)
    with first, second:
        wait_until(
            lambda: first.snapshot().retention_runs + second.snapshot().retention_runs >= 1,
            what="a retention run",
        )
        active = first if first.snapshot().retention_runs else second
        calls = admin.execute(
            "SELECT app, older_than, lim, removed FROM public.prune_calls ORDER BY at"
        ).fetchall()
    assert [(c[1], c[2], c[3]) for c in calls] == [(timedelta(days=3), 10, 10)] * 2 + [
        (timedelta(days=3), 10, 5)
    ]
    assert {c[0] for c in calls} == {f"tenure maintain retention {active.name}"}, (
        "only the elected one prunes"
    )
    assert admin.execute("SELECT count(*) FROM public.prune_rows").fetchone() == (0,)
    assert active.prunable is not None and set(active.prunable) == present
    assert active.snapshot().pruned["task"] == 25
    assert active.metrics.registry.get_sample_value("tenure_rows_pruned_total", {"history": "task"}) == 25
    for history in set(PRUNE_HISTORIES) - present:
        assert f"no tenure.{history}_prune" in caplog.text


def test_retention_settings_are_checked() -> None:
    assert Retention().task == timedelta(days=7) and Retention().claim == timedelta(days=30)
    assert Retention().limit == 10_000
    with pytest.raises(InvalidConfiguration, match="limit"):
        Retention(limit=0)
    with pytest.raises(InvalidConfiguration, match="negative"):
        Retention(task=timedelta(days=-1))


# -- tenure maintain processes under faults --------------------------------------------------


class MaintainProcess(ChildProcess):
    def __init__(self, conninfo: str, log: Path) -> None:
        super().__init__(
            [
                sys.executable,
                "-m",
                "tenure",
                "maintain",
                "--db",
                conninfo,
                "--interval",
                str(I),
                "--timeout",
                str(T),
                "--tick-every",
                "0.2",
                "--retention-every",
                "3600",
            ],
            log,
        )
        from uuid import UUID

        self.instance_id = UUID(self.wait_for_output(r"maintainer ([0-9a-f-]{36})").group(1))


@pytest.fixture
def spawn(app_conninfo: str, tmp_path: Path) -> Iterator[Any]:
    started: list[MaintainProcess] = []

    def start() -> MaintainProcess:
        process = MaintainProcess(app_conninfo, tmp_path / f"maintain-{len(started)}.log")
        started.append(process)
        return process

    try:
        yield start
    finally:
        for process in started:
            process.stop()


PULSE_APP = """
from tenure import Complete, Schedules, Task

schedules = Schedules()


@schedules.schedule(every=1, catch_up="all", catch_up_limit=1000)
def pulse(task: Task) -> Complete:
    return Complete(data={**task.data, "done_by": str(task.owner)})


PROCESSORS = schedules.processors()
"""


def test_one_task_per_slot_across_kill_freeze_and_server_restart(
    spawn: Any, admin_conninfo: str, app_conninfo: str, tmp_path: Path
) -> None:
    """Maintainers and task workers as processes; the schedule comes from a decorated
    processor module that the workers run (``tenure task worker --module``)."""
    (tmp_path / "pulse_app.py").write_text(PULSE_APP)
    sys.path.insert(0, str(tmp_path))
    try:
        pulse_app = importlib.import_module("pulse_app")
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("pulse_app", None)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    workers = [
        TaskWorkerProcess(
            app_conninfo, "pulse_app", tmp_path / f"worker-{n}.log", lease=2.0, poll_interval=0.2, env=env
        )
        for n in range(2)
    ]
    admin = psycopg.connect(admin_conninfo, autocommit=True)
    try:
        driver = Driver(admin)
        sync_schedules(driver, pulse_app.schedules)
        processes = {p.instance_id: p for p in (spawn(), spawn())}
        active, _ = wait_for_primary(driver, UTYPE)
        wait_until(lambda: len(slots_of(admin, "pulse")) >= 2, what="the first slots")

        # SIGKILL the active maintainer: the standby takes over and catches up.
        processes[active].signal(signal.SIGKILL)
        processes[active].process.wait(10)
        successor, _ = wait_for_primary(driver, UTYPE, other_than=active)
        standby = spawn()
        processes[standby.instance_id] = standby
        count = len(slots_of(admin, "pulse"))
        wait_until(lambda: len(slots_of(admin, "pulse")) >= count + 2, what="slots after the kill")

        # SIGSTOP the active one for longer than T: the standby takes over; SIGCONT.
        frozen = processes[successor]
        frozen.signal(signal.SIGSTOP)
        wait_for_primary(driver, UTYPE, other_than=successor)
        time.sleep(T)
        frozen.signal(signal.SIGCONT)
        count = len(slots_of(admin, "pulse"))
        wait_until(lambda: len(slots_of(admin, "pulse")) >= count + 3, what="slots after the freeze")
        frozen.wait_for_output("no longer the maintainer")

        # A server crash-restart: every maintainer and worker reconnects.
        admin.close()
        subprocess.run(
            [str(ROOT / "scripts" / "pgcluster.sh"), "restart", os.environ["TENURE_PG_DIR"]],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        admin = psycopg.connect(admin_conninfo, autocommit=True)
        driver = Driver(admin)
        count = len(slots_of(admin, "pulse"))
        wait_until(lambda: len(slots_of(admin, "pulse")) >= count + 3, what="slots after the restart")

        # Every maintainer down for several slots (the last one frozen, the others
        # stopped): once it is back, catch-up 'all' creates each slot missed meanwhile.
        last = processes[wait_for_primary(driver, UTYPE)[0]]
        for process in processes.values():
            if process is not last:
                process.stop()
        last.signal(signal.SIGSTOP)
        time.sleep(3.5)
        last.signal(signal.SIGCONT)
        count = len(slots_of(admin, "pulse"))
        wait_until(lambda: len(slots_of(admin, "pulse")) >= count + 5, what="the missed slots caught up")

        for process in processes.values():
            process.stop()
        assert "stopped:" in last.output()
        slots = slots_of(admin, "pulse")
        check_every_slot_once(slots)
        assert len(slots) >= 12
        # The cursor is just past the last slot: nothing was skipped at the end either.
        (row,) = [r for r in driver.schedules() if r.name == "pulse"]
        assert row.last_slot == slots[-1] and row.next_slot == slots[-1] + timedelta(seconds=1)

        # The workers complete every slot's task, each exactly once.
        def open_tasks() -> int:
            found = admin.execute(
                "SELECT count(*) FROM tenure.task WHERE kind = 'pulse' AND status <> 'done'"
            ).fetchone()
            return int(found[0]) if found else -1

        wait_until(lambda: open_tasks() == 0, wait=60, what="every slot's task done")
        done = admin.execute(
            "SELECT count(*), count(DISTINCT data->>'slot'), count(data->>'done_by') FROM tenure.task"
            " WHERE kind = 'pulse' AND status = 'done'"
        ).fetchone()
        assert done == (len(slots), len(slots), len(slots))
    finally:
        for worker in workers:
            worker.stop()
        admin.close()


# -- decorator, registry, sync -----------------------------------------------------------------


def test_decorated_schedules_sync_idempotently_and_feed_a_task_worker(
    app_conninfo: str, admin: psycopg.Connection[Any]
) -> None:
    ran: list[Any] = []
    registry = Schedules()

    @registry.schedule(every=1, catch_up="all", data={"size": 3})
    def heartbeat_report(task: Task) -> Complete:
        ran.append(task.data)
        return Complete()

    @schedule("0 3 * * *", tz="Europe/Zurich", name="nightly-backup", kind="backup", max_attempts=2)
    def backup(task: Task) -> Complete:
        ran.append(task.data)
        return Complete()

    registry.add(backup)
    assert registry.processors() == {"heartbeat_report": heartbeat_report, "backup": backup}
    driver = Driver(admin)
    first = {info.name: info for info in sync_schedules(driver, registry)}
    assert set(first) == {"heartbeat_report", "nightly-backup"}
    nightly = first["nightly-backup"]
    assert (nightly.kind, nightly.cron, nightly.timezone, nightly.max_attempts) == (
        "backup",
        "0 3 * * *",
        "Europe/Zurich",
        2,
    )
    assert nightly.next_slot is not None and nightly.next_slot.astimezone(UTC).minute == 0
    assert first["heartbeat_report"].every == timedelta(seconds=1)

    time.sleep(1.2)
    created = driver.schedule_tick()
    assert created and {c.name for c in created} == {"heartbeat_report"}
    moved = {r.name: r.next_slot for r in driver.schedules()}
    assert moved["heartbeat_report"] is not None
    assert moved["heartbeat_report"] > first["heartbeat_report"].next_slot  # type: ignore[operator]

    # Syncing again (a restart) keeps the progress: no slot runs twice, none is reset.
    again = {info.name: info for info in registry.sync(driver)}
    assert again["heartbeat_report"].next_slot == moved["heartbeat_report"]
    assert again["nightly-backup"].next_slot == nightly.next_slot
    assert len(driver.schedules()) == 2

    # The registry's processors run the schedule's tasks with a TaskWorker.
    with TaskWorker(app_conninfo, registry.processors(), lease=5.0, poll_interval=0.2):
        wait_until(lambda: len(ran) >= len(created), what="the scheduled tasks to run")
    assert all(d["schedule"] == "heartbeat_report" and d["size"] == 3 for d in ran)
    assert {d["slot"] for d in ran} == {c.slot.strftime("%Y-%m-%dT%H:%M:%SZ") for c in created}
    check_every_slot_once(slots_of(admin, "heartbeat_report"))


def test_schedule_decorator_refuses_bad_declarations() -> None:
    with pytest.raises(InvalidArgument):
        schedule("* * * * *", every=5)
    with pytest.raises(InvalidArgument):
        schedule()

    @schedule(every=5)
    def one(task: Task) -> Complete:
        return Complete()

    @schedule(every=7, name="other", kind="one")
    def two(task: Task) -> Complete:
        return Complete()

    with pytest.raises(InvalidArgument, match="already processed"):
        Schedules(one, two)
    with pytest.raises(InvalidArgument, match="no @schedule"):
        Schedules(lambda task: Complete())
    assert Schedules(one, one).processors() == {"one": one}


# -- the CLI -----------------------------------------------------------------------------------


def test_schedule_commands(app_conninfo: str, admin: psycopg.Connection[Any], capsys: Any) -> None:
    def run(*args: str) -> str:
        assert cli(["schedule", args[0], "--db", app_conninfo, *args[1:]]) == 0
        return str(capsys.readouterr().out)

    out = run(
        "set",
        "nightly",
        "--kind",
        "backup",
        "--cron",
        "0 3 * * *",
        "--tz",
        "Europe/Zurich",
        "--data",
        '{"a": 1}',
    )
    assert "schedule nightly set: kind backup, 0 3 * * * Europe/Zurich" in out
    run("set", "ping", "--every", "10", "--catch-up", "all", "--catch-up-limit", "5")
    table = run("list").splitlines()
    assert table[0].split()[:3] == ["name", "kind", "when"]
    assert table[1].startswith("nightly") and "backup" in table[1] and "Europe/Zurich" in table[1]
    assert table[2].startswith("ping") and "every 10 s" in table[2]
    rows = json.loads(run("list", "--json"))
    assert [(r["name"], r["catch_up"], r["catch_up_limit"]) for r in rows] == [
        ("nightly", "latest", 10),
        ("ping", "all", 5),
    ]
    assert "paused" in run("pause", "ping")
    assert [r.paused for r in Driver(admin).schedules()] == [False, True]
    assert "next slot" in run("resume", "ping")
    out = run("run-now", "nightly")
    task_id = out.split("task ")[1].split()[0]
    (data,) = admin.execute("SELECT data FROM tenure.task WHERE id = %s", (task_id,)).fetchone() or (None,)
    assert data == {"a": 1, "schedule": "nightly", "slot": None}
    assert "dropped" in run("drop", "ping")
    assert [r.name for r in Driver(admin).schedules()] == ["nightly"]
    assert cli(["schedule", "pause", "--db", app_conninfo, "no-such"]) == 2  # TN201, reported


def test_maintain_command_reads_ages() -> None:
    assert duration("7d") == timedelta(days=7)
    assert duration("12h") == timedelta(hours=12) and duration("90") == timedelta(seconds=90)
    with pytest.raises(argparse.ArgumentTypeError):
        duration("a week")
    args = build_parser().parse_args(["maintain", "--db", "x", "--claim-age", "2d", "--prune-limit", "500"])
    assert (args.task_age, args.claim_age, args.replica_age) == (
        timedelta(days=7),
        timedelta(days=2),
        timedelta(days=30),
    )
    assert (args.tick_every, args.retention_every, args.prune_limit) == (1.0, 60.0, 500)
