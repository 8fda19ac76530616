"""A task worker (``tenure task worker``, or with ``asynchronous`` ``tenure task worker --async``)
as a child process; the check of what task workers did, from the database's records; and
the processors' log of the side effects they make outside the database, with its check."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg
from psycopg.rows import class_row

from tenure.runtime.tasks import Task
from tenure.testing.child import ChildProcess


class TaskWorkerProcess(ChildProcess):
    """``tenure task worker`` as a child process."""

    def __init__(
        self,
        conninfo: str,
        module: str,
        log_path: Path,
        *,
        lease: float,
        poll_interval: float,
        concurrency: int = 4,
        env: dict[str, str] | None = None,
        asynchronous: bool = False,
    ) -> None:
        super().__init__(
            [
                sys.executable,
                "-m",
                "tenure",
                "task",
                "worker",
                "--db",
                conninfo,
                "--module",
                module,
                "--concurrency",
                str(concurrency),
                "--lease",
                str(lease),
                "--poll-interval",
                str(poll_interval),
                "--grace",
                "1",
                *(["--async"] if asynchronous else []),
            ],
            log_path,
            env=env,
        )
        self.instance_id = UUID(self.wait_for_output(r"task worker ([0-9a-f-]{36})").group(1))


@dataclass(frozen=True)
class Lease:
    """A lease from ``tenure.task_lease_log``: who held the task in which epoch, from when."""

    task_id: UUID
    epoch: int
    owner: UUID
    leased_at: datetime


@dataclass(frozen=True)
class Step:
    """A step's write, made in the transaction of the step's fenced transition (a row of
    the tests' ``task_audit`` table), stamped by the server."""

    task_id: UUID
    epoch: int
    owner: UUID
    step: str
    done_at: datetime


def read_task_records(admin: psycopg.Connection[Any]) -> tuple[list[Lease], list[Step]]:
    """The lease log and the steps of ``task_audit``."""
    with admin.cursor(row_factory=class_row(Lease)) as cursor:
        cursor.execute("SELECT task_id, epoch, owner, leased_at FROM tenure.task_lease_log")
        leases = cursor.fetchall()
    with admin.cursor(row_factory=class_row(Step)) as cursor:
        cursor.execute("SELECT task_id, epoch, owner, step, done_at FROM task_audit")
        steps = cursor.fetchall()
    return leases, steps


def check_task_records(leases: list[Lease], steps: list[Step], *, expected_steps: int) -> list[str]:
    """Violations: an epoch of a task leased twice; not exactly ``expected_steps`` distinct
    (task, step) writes, each accepted once; a step written by someone else than the holder
    of its epoch, before that lease began, or once the next epoch's lease had begun (two
    owners at once)."""
    problems = []
    by_task: dict[UUID, dict[int, Lease]] = {}
    for lease in leases:
        granted = by_task.setdefault(lease.task_id, {})
        if lease.epoch in granted:
            problems.append(f"epoch {lease.epoch} of task {lease.task_id} leased twice")
        granted[lease.epoch] = lease
    counted = Counter((step.task_id, step.step) for step in steps)
    repeated = [pair for pair, count in counted.items() if count > 1]
    if repeated:
        problems.append(f"{len(repeated)} steps accepted more than once, e.g. {repeated[0]}")
    if len(counted) != expected_steps:
        problems.append(f"{len(counted)} distinct steps accepted, not {expected_steps}")
    for step in steps:
        held = by_task.get(step.task_id, {})
        own = held.get(step.epoch)
        later = [epoch for epoch in held if epoch > step.epoch]
        following = held[min(later)] if later else None
        what = f"{step.step} of {step.task_id} in epoch {step.epoch}"
        if own is None or own.owner != step.owner:
            problems.append(f"{what} written by {step.owner}, not the holder of that epoch")
        elif step.done_at < own.leased_at:
            problems.append(f"{what} written before its lease began")
        elif following is not None and step.done_at >= following.leased_at:
            problems.append(
                f"{what} written at {step.done_at}, after epoch {following.epoch} began at "
                f"{following.leased_at}: two owners at once"
            )
    return problems


# -- side effects outside the database ------------------------------------------------------


@dataclass(frozen=True)
class Effect:
    """A side effect a processor made outside the database (a line of an :class:`EffectLog`).

    ``at`` is the monotonic time (``time.monotonic``: CLOCK_MONOTONIC on Linux, one clock
    for every process of the machine) taken just before the processor checked it still
    held the task, the effect following that check; ``valid_until`` the end of the safe
    window the worker had given the task then. ``held_back``: the check found the task
    lost, and no effect was made."""

    task_id: UUID
    epoch: int
    owner: UUID
    step: str
    at: float
    valid_until: float
    held_back: bool = False


class EffectLog:
    """What the test application's processors call for each side effect they make outside
    the database: as a well-behaved processor does, it is made only if the task is not
    lost, and it is recorded as one JSON line appended to ``path`` (one ``write`` of a short
    line to a file opened for appending: the lines of concurrent processes do not mix).

    A task whose data has ``"freeze": true`` stops the whole worker process (SIGSTOP) the
    first time a processor reaches one of its effects, before the check, as a long pause
    of the machine would: the test resumes it once another worker took the task over."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def effect(self, task: Task, step: str) -> bool:
        """Make the step's effect unless the task is lost: whether it was made."""
        if task.data and task.data.get("freeze") and self._first_to_freeze(task):
            self._write({"event": "freeze", "task_id": str(task.id), "epoch": task.epoch, "pid": os.getpid()})
            # Sent to this thread: it stops before going on. (Sent to the process, another
            # thread may take it, and this one run on for a while before the stop reaches it.)
            signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)
        at = time.monotonic()
        held_back = task.is_lost()
        self._write(
            {
                "event": "held back" if held_back else "effect",
                "task_id": str(task.id),
                "epoch": task.epoch,
                "owner": str(task.owner),
                "step": step,
                "at": at,
                "valid_until": task.valid_until,
            }
        )
        return not held_back

    def _first_to_freeze(self, task: Task) -> bool:
        try:
            os.close(os.open(f"{self.path}.froze-{task.id}", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return False
        return True

    def _write(self, line: dict[str, Any]) -> None:
        descriptor = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(descriptor, (json.dumps(line) + "\n").encode())
        finally:
            os.close(descriptor)


@dataclass(frozen=True)
class Freeze:
    """A task's step stopped its worker process ``pid`` while holding it in ``epoch``."""

    pid: int
    task_id: UUID
    epoch: int


def read_effects(path: Path) -> tuple[list[Effect], list[Freeze]]:
    """The effects (made and held back) an :class:`EffectLog` recorded, and the freezes."""
    effects = []
    freezes = []
    for line in path.read_text().splitlines() if path.exists() else []:
        record = json.loads(line)
        if record["event"] == "freeze":
            freezes.append(Freeze(record["pid"], UUID(record["task_id"]), record["epoch"]))
            continue
        effects.append(
            Effect(
                task_id=UUID(record["task_id"]),
                epoch=record["epoch"],
                owner=UUID(record["owner"]),
                step=record["step"],
                at=record["at"],
                valid_until=record["valid_until"],
                held_back=record["event"] == "held back",
            )
        )
    return effects, freezes


def check_effects(leases: list[Lease], effects: list[Effect]) -> list[str]:
    """Violations: an effect made by someone else than the holder of its epoch, after the
    safe window its worker had given it, or after the first effect of a later epoch of
    the same task (a stale holder acting once its successor had begun)."""
    problems = []
    holders = {(lease.task_id, lease.epoch): lease.owner for lease in leases}
    made = sorted((effect for effect in effects if not effect.held_back), key=lambda effect: effect.at)
    firsts: dict[UUID, dict[int, Effect]] = {}  # per task, each epoch's first effect
    for effect in made:
        firsts.setdefault(effect.task_id, {}).setdefault(effect.epoch, effect)
    for effect in made:
        what = f"{effect.step} effect of {effect.task_id} in epoch {effect.epoch}"
        if holders.get((effect.task_id, effect.epoch)) != effect.owner:
            problems.append(f"{what} made by {effect.owner}, not the holder of that epoch")
        if effect.at >= effect.valid_until:
            problems.append(f"{what} made {effect.at - effect.valid_until:.3f} s after its safe window ended")
        successors = [
            first
            for epoch, first in firsts[effect.task_id].items()
            if epoch > effect.epoch and first.at < effect.at
        ]
        if successors:
            first = min(successors, key=lambda successor: successor.at)
            problems.append(
                f"{what} made {effect.at - first.at:.3f} s after epoch {first.epoch}'s first effect "
                f"({first.step}): a stale holder acted after its successor began"
            )
    return problems
