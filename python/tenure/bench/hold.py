"""The processors of the bench's memory section: kind ``bench-hold``, whose tasks each take
:data:`HOLD_SECONDS` (a sleep), so that a worker holds as many tasks in flight as its
``--concurrency`` lets it. Run with ``tenure task worker --module tenure.bench.hold``
(``--async``: ASYNC_PROCESSORS)."""

from __future__ import annotations

import asyncio
import os
import time

from tenure.runtime.tasks import AsyncProcessor, Complete, Outcome, Processor, Task

HOLD_KIND = "bench-hold"
# Longer than leasing 1,000 tasks takes, on a durable cluster too; the bench's --memory-hold
# reaches the worker process through the environment.
HOLD_SECONDS = float(os.environ.get("TENURE_BENCH_HOLD", "20"))


def hold(task: Task) -> Outcome:
    time.sleep(HOLD_SECONDS)
    return Complete()


PROCESSORS: dict[str | tuple[str, str], Processor] = {HOLD_KIND: hold}


async def ahold(task: Task) -> Outcome:
    await asyncio.sleep(HOLD_SECONDS)
    return Complete()


ASYNC_PROCESSORS: dict[str | tuple[str, str], AsyncProcessor] = {HOLD_KIND: ahold}
