"""A task application for the process test of the task controls' limits (test_task_limits).

Every kind runs the same step: it sleeps for ``data["seconds"]`` (so that limits bind),
then completes with one write, in the completion's fenced transaction, of when its
processor ran: ``time.monotonic()`` at its start and end (before the completion is sent,
so within the lease), a clock that every process of the machine shares. The write lands
once per task, and only for the epoch that completed.

ASYNC_PROCESSORS are the same step as a coroutine, for ``tenure task worker --async``.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import psycopg

from tenure.runtime.tasks import AsyncProcessor, Complete, Processor, Task

KINDS = ("solo", "trio", "keyed")

RUNS_SQL = """
CREATE TABLE limit_runs (
    task_id uuid             NOT NULL,
    epoch   bigint           NOT NULL,
    owner   uuid             NOT NULL,
    pid     integer          NOT NULL,
    started double precision NOT NULL,
    ended   double precision NOT NULL
);
GRANT INSERT ON limit_runs TO tenure_demo_app;
"""

INSERT = "INSERT INTO limit_runs (task_id, epoch, owner, pid, started, ended) VALUES (%s, %s, %s, %s, %s, %s)"


def run(task: Task) -> Complete:
    started = time.monotonic()
    time.sleep(float(task.data["seconds"]))
    ran = (task.id, task.epoch, task.owner, os.getpid(), started, time.monotonic())

    def write(db: psycopg.Connection[Any]) -> None:
        db.execute(INSERT, ran)

    return Complete(writes=write)


async def arun(task: Task) -> Complete:
    started = time.monotonic()
    await asyncio.sleep(float(task.data["seconds"]))
    ran = (task.id, task.epoch, task.owner, os.getpid(), started, time.monotonic())

    async def write(db: psycopg.AsyncConnection[Any]) -> None:
        await db.execute(INSERT, ran)

    return Complete(writes=write)


PROCESSORS: dict[str | tuple[str, str], Processor] = dict.fromkeys(KINDS, run)
ASYNC_PROCESSORS: dict[str | tuple[str, str], AsyncProcessor] = dict.fromkeys(KINDS, arun)
