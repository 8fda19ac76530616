"""The processors of ``tenure bench``'s task workers: one no-op processor for kind ``bench``.

Run with ``tenure task worker --module tenure.bench.app`` (``--async``: the same processor as
a coroutine, ASYNC_PROCESSORS, on the AsyncTaskWorker); every task it leases is completed at
once, so the bench measures tenure's cost and nothing else.
"""

from __future__ import annotations

from tenure.runtime.tasks import AsyncProcessor, Complete, Outcome, Processor, Task


def complete(task: Task) -> Outcome:
    return Complete()


PROCESSORS: dict[str | tuple[str, str], Processor] = {"bench": complete}


async def acomplete(task: Task) -> Outcome:
    return Complete()


ASYNC_PROCESSORS: dict[str | tuple[str, str], AsyncProcessor] = {"bench": acomplete}
