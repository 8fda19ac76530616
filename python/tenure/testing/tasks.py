"""A task worker (``tenure task worker``, or with ``asynchronous`` ``tenure task worker --async``)
as a child process, and the check of what task workers did, from the database's records."""

from __future__ import annotations

import sys
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg
from psycopg.rows import class_row

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
