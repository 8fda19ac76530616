"""Task workers as real processes under SIGKILL and SIGSTOP, checked from the database.

Four workers run 2,000 tasks of a two-step state machine whose second step waits on
a "remote system" (the task is released and due again a little later), and 1,000
tasks that complete at once, whose outcomes ride in batched round trips. Workers are
killed and frozen at random moments. Afterwards: every task reached its final state;
the audit table, written through each step's transition, shows every step accepted
exactly once; and each accepted write fell inside its own lease, by the server's
clock, before the next owner's lease began.

The database's fence refuses what a thawed worker sends late; the safe window protects
what a processor does outside it. The flow's steps log each such effect with its
monotonic time (tenure.testing.tasks.EffectLog). After the chaos, two more tasks freeze
their worker inside a step, before its check, and it is resumed only once another
worker took the task over and acted: no effect may come after its worker's safe window,
nor after the first effect of a later epoch of its task.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg
import pytest
from task_app import AUDIT_SQL

from tenure import Driver
from tenure.errors import LeaseLost
from tenure.testing.tasks import (
    Effect,
    Freeze,
    TaskWorkerProcess,
    check_effects,
    check_task_records,
    read_effects,
    read_task_records,
)

TASKS = int(os.environ.get("TENURE_CHAOS_TASKS", "2000"))
QUICK = TASKS // 2
FROZEN_IN_STEP = 2  # flow tasks that freeze their worker inside a step
LEASE, POLL = 1.0, 0.2
# Process scheduling on a loaded two-core machine adds to the bound.
SLACK = 0.5
HERE = Path(__file__).resolve().parent


def succeeded(freeze: Freeze, effects: list[Effect]) -> bool:
    """Whether a later epoch of the frozen task made an effect."""
    return any(effect.task_id == freeze.task_id and effect.epoch > freeze.epoch for effect in effects)


def spawn_worker(conninfo: str, log: Path, *, asynchronous: bool = False) -> TaskWorkerProcess:
    """A worker running task_app, logging its effects in the log's directory."""
    return TaskWorkerProcess(
        conninfo,
        "task_app",
        log,
        lease=LEASE,
        poll_interval=POLL,
        env=dict(os.environ, PYTHONPATH=str(HERE), TENURE_TASK_EFFECTS=str(log.parent / "effects.jsonl")),
        asynchronous=asynchronous,
    )


# The fault tests run against the threaded worker and against the AsyncTaskWorker
# (``tenure task worker --async``: async processors and async writes on one event loop).
@pytest.fixture(params=["sync", "async"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def workers(
    app_conninfo: str, admin: psycopg.Connection[Any], tmp_path: Path, mode: str
) -> Iterator[list[TaskWorkerProcess]]:
    admin.execute(AUDIT_SQL)
    started = [
        spawn_worker(app_conninfo, tmp_path / f"worker-{n}.log", asynchronous=mode == "async")
        for n in range(4)
    ]
    try:
        yield started
    finally:
        for worker in started:
            worker.stop()


def test_two_step_tasks_survive_kills_and_freezes(
    workers: list[TaskWorkerProcess],
    app_conninfo: str,
    admin: psycopg.Connection[Any],
    tmp_path: Path,
    mode: str,
) -> None:
    driver = Driver(admin)
    driver.task_enqueue_many([{"kind": "flow", "max_attempts": 50} for _ in range(TASKS)])
    driver.task_enqueue_many([{"kind": "quick", "max_attempts": 50} for _ in range(QUICK)])
    chaos = random.Random(os.environ.get("TENURE_CHAOS_SEED", "tenure"))
    kills = freezes = 0
    deadline = time.monotonic() + 240

    def done() -> int:
        row = admin.execute("SELECT count(*) FROM tenure.task WHERE status = 'done'").fetchone()
        return int(row[0]) if row else 0

    while done() < TASKS + QUICK and time.monotonic() < deadline:
        time.sleep(chaos.uniform(0.05, 0.4))
        if kills + freezes >= 12:
            continue
        alive = [w for w in workers if w.process.poll() is None]
        victim = chaos.choice(alive)
        if (kills + freezes) % 3 != 1:  # two kills for every freeze
            victim.process.send_signal(signal.SIGKILL)
            victim.process.wait()
            workers.append(
                spawn_worker(
                    app_conninfo, tmp_path / f"worker-{len(workers)}.log", asynchronous=mode == "async"
                )
            )
            kills += 1
        else:
            victim.process.send_signal(signal.SIGSTOP)
            time.sleep(LEASE + 0.5)
            victim.process.send_signal(signal.SIGCONT)
            freezes += 1
    assert done() == TASKS + QUICK, f"only {done()} of {TASKS + QUICK} tasks finished"
    assert kills + freezes > 0
    # Then, with nothing else due, tasks that freeze their worker inside a step, before it
    # checks its task: resumed once another worker took the task over and made its effect.
    effects_log = tmp_path / "effects.jsonl"
    driver.task_enqueue_many(
        [{"kind": "flow", "max_attempts": 50, "data": {"freeze": True}} for _ in range(FROZEN_IN_STEP)]
    )
    began = time.monotonic()
    deadline = began + 60
    while done() < TASKS + QUICK + FROZEN_IN_STEP and time.monotonic() < deadline:
        time.sleep(0.05)
        effects, frozen = read_effects(effects_log)
        for worker in workers:
            mine = [freeze for freeze in frozen if freeze.pid == worker.process.pid]
            if mine and worker.stopped() and all(succeeded(freeze, effects) for freeze in mine):
                worker.signal(signal.SIGCONT)
    for worker in workers:
        if worker.stopped():  # its successor finished before it was seen acting
            worker.signal(signal.SIGCONT)
    assert done() == TASKS + QUICK + FROZEN_IN_STEP, "the tasks freezing their workers did not finish"
    frozen_for = time.monotonic() - began
    for worker in workers:
        worker.stop()

    states = admin.execute("SELECT state, count(*) FROM tenure.task GROUP BY state ORDER BY state").fetchall()
    assert states == [("confirmed", TASKS + FROZEN_IN_STEP), ("quick", QUICK)]
    # A batched completion took effect under the last lease the task was given, after it began.
    stale = admin.execute(
        "SELECT t.id FROM tenure.task t JOIN tenure.task_lease_log l ON l.task_id = t.id "
        "WHERE t.kind = 'quick' GROUP BY t.id, t.epoch, t.finished_at "
        "HAVING t.epoch <> max(l.epoch) OR t.finished_at < max(l.leased_at)"
    ).fetchall()
    assert stale == [], f"completions not under the task's last lease: {stale[:5]}"
    leases, steps = read_task_records(admin)
    steps_made = 2 * (TASKS + FROZEN_IN_STEP)
    assert check_task_records(leases, steps, expected_steps=steps_made) == []

    # Outside the database: every step's effect made, none outside its worker's safe
    # window or after a successor's; the frozen steps found their tasks lost and held back.
    effects, frozen = read_effects(effects_log)
    problems = check_effects(leases, effects)
    assert problems == [], f"{len(problems)} effects out of place: {problems[:5]}"
    made = {(effect.task_id, effect.step) for effect in effects if not effect.held_back}
    assert len(made) == steps_made, f"{len(made)} distinct step effects made, not {steps_made}"
    assert len(frozen) == FROZEN_IN_STEP, f"{len(frozen)} steps froze their workers, not {FROZEN_IN_STEP}"
    held_back = {(effect.task_id, effect.epoch) for effect in effects if effect.held_back}
    assert {(freeze.task_id, freeze.epoch) for freeze in frozen} <= held_back, "a frozen step went on"

    # From the children's own logs: each incarnation announced its own instance id (and, in
    # the async mode, that it ran on asyncio), and every accepted write came from one of them.
    announced = [worker.instance_id for worker in workers]
    assert len(set(announced)) == len(announced), "a restarted worker reused an instance id"
    assert {step.owner for step in steps} <= set(announced), "a write by an unknown owner"
    if mode == "async":
        assert all(" started: " in w.output() and "; asyncio" in w.output() for w in workers)

    epochs = Counter(lease.task_id for lease in leases)
    redone = sum(1 for count in epochs.values() if count > 2)
    print(
        f"{mode}: {TASKS} tasks, {kills} kills, {freezes} freezes, {redone} tasks leased more than twice, "
        f"{len(held_back)} effects held back, {frozen_for:.1f} s for the steps freezing their workers"
    )


def test_tasks_of_a_killed_worker_are_taken_over_within_lease_plus_poll(
    workers: list[TaskWorkerProcess], app_conninfo: str, admin: psycopg.Connection[Any]
) -> None:
    driver = Driver(admin)
    driver.task_enqueue_many([{"kind": "slow", "data": {"seconds": 4}} for _ in range(4)])
    end = time.monotonic() + 20
    held: list[tuple[UUID, UUID, int]] = []
    while time.monotonic() < end and len(held) < 4:
        held = admin.execute(
            "SELECT id, owner, epoch FROM tenure.task WHERE kind = 'slow' AND owner IS NOT NULL"
        ).fetchall()
        time.sleep(0.05)
    assert len(held) == 4
    victim_id = held[0][1]
    victim = next(w for w in workers if w.instance_id == victim_id)
    mine = [task_id for task_id, owner, _ in held if owner == victim_id]
    killed_at = admin.execute("SELECT clock_timestamp()").fetchone()
    assert killed_at is not None
    victim.process.send_signal(signal.SIGKILL)
    victim.process.wait()
    end = time.monotonic() + 20
    while time.monotonic() < end:
        taken = admin.execute(
            "SELECT task_id, leased_at FROM tenure.task_lease_log WHERE task_id = ANY(%s) AND owner <> %s",
            (mine, victim_id),
        ).fetchall()
        if len(taken) == len(mine):
            break
        time.sleep(0.05)
    assert len(taken) == len(mine)
    for task_id, leased_at in taken:
        took = (leased_at - killed_at[0]).total_seconds()
        assert took <= LEASE + POLL + SLACK, f"task {task_id} taken {took:.3f} s after the kill"

    # What the killed worker may still have had on its way (a step's write with its
    # transition, in its old epoch) is refused now that another worker holds the task.
    task_id, _, epoch = held[0]
    with (
        psycopg.connect(app_conninfo) as stale,
        pytest.raises(LeaseLost),
        stale.transaction(),
    ):
        Driver(stale).task_complete(task_id, victim_id, epoch)
        stale.execute(
            "INSERT INTO task_audit (task_id, epoch, owner, step) VALUES (%s, %s, %s, 'stale')",
            (task_id, epoch, victim_id),
        )
