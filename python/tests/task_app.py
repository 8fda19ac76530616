"""A task application for the process tests: a two-step state machine whose steps
write to an audit table in the same transaction as the task's transition.

flow/new      "submits to a remote system", then waits for it: released, due in 0.2 s
flow/waiting  "confirms with the remote system" and completes
slow          holds its task for a while (for takeover timing), then completes
quick         completes at once without writes: its outcome rides in the worker's
              batched round trips (task_cycle), not in a transaction of its own

ASYNC_PROCESSORS are the same steps as coroutines, with async writes, for
``tenure task worker --async`` (the AsyncTaskWorker).

The flow's steps also act outside the database (the "remote system"): each makes its
effect only while its task is not lost, and records it in the effect log named by
TENURE_TASK_EFFECTS (tenure.testing.tasks.EffectLog; none when unset).
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import psycopg

from tenure.runtime.tasks import AsyncProcessor, Complete, Processor, Release, Task
from tenure.testing.tasks import EffectLog

EFFECTS = EffectLog(Path(os.environ["TENURE_TASK_EFFECTS"])) if "TENURE_TASK_EFFECTS" in os.environ else None


def act(task: Task, step: str) -> None:
    """The step's effect outside the database, made only while the task is held (the
    outcome of a lost task is discarded by the worker whatever it is)."""
    if EFFECTS is not None:
        EFFECTS.effect(task, step)


def audit(task: Task, step: str) -> Any:
    def write(db: psycopg.Connection[Any]) -> None:
        db.execute(
            "INSERT INTO task_audit (task_id, epoch, owner, step) VALUES (%s, %s, %s, %s)",
            (task.id, task.epoch, task.owner, step),
        )

    return write


def submit(task: Task) -> Release:
    act(task, "submit")
    return Release(delay=0.2, state="waiting", writes=audit(task, "submit"))


def confirm(task: Task) -> Complete:
    act(task, "confirm")
    return Complete(state="confirmed", writes=audit(task, "confirm"))


def slow(task: Task) -> Complete:
    time.sleep(float(task.data.get("seconds", 3)))
    return Complete(writes=audit(task, "slow"))


def quick(task: Task) -> Complete:
    return Complete(state="quick")


PROCESSORS: dict[str | tuple[str, str], Processor] = {
    ("flow", "new"): submit,
    ("flow", "waiting"): confirm,
    "slow": slow,
    "quick": quick,
}


def aaudit(task: Task, step: str) -> Any:
    async def write(db: psycopg.AsyncConnection[Any]) -> None:
        await db.execute(
            "INSERT INTO task_audit (task_id, epoch, owner, step) VALUES (%s, %s, %s, %s)",
            (task.id, task.epoch, task.owner, step),
        )

    return write


async def asubmit(task: Task) -> Release:
    act(task, "submit")
    return Release(delay=0.2, state="waiting", writes=aaudit(task, "submit"))


async def aconfirm(task: Task) -> Complete:
    act(task, "confirm")
    return Complete(state="confirmed", writes=aaudit(task, "confirm"))


async def aslow(task: Task) -> Complete:
    await asyncio.sleep(float(task.data.get("seconds", 3)))
    return Complete(writes=aaudit(task, "slow"))


async def aquick(task: Task) -> Complete:
    return Complete(state="quick")


ASYNC_PROCESSORS: dict[str | tuple[str, str], AsyncProcessor] = {
    ("flow", "new"): asubmit,
    ("flow", "waiting"): aconfirm,
    "slow": aslow,
    "quick": aquick,
}

AUDIT_SQL = """
CREATE TABLE task_audit (
    task_id uuid        NOT NULL,
    epoch   bigint      NOT NULL,
    owner   uuid        NOT NULL,
    step    text        NOT NULL,
    done_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
GRANT INSERT ON task_audit TO tenure_demo_app;
"""
