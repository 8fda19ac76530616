"""The processors of ``tenure bench``'s task workers: one no-op processor for kind ``bench``.

Run with ``tenure task worker --module tenure.bench.app``; every task it leases is
completed at once, so the bench measures tenure's cost and nothing else.
"""

from __future__ import annotations

from tenure.runtime.tasks import Complete, Outcome, Processor, Task


def complete(task: Task) -> Outcome:
    return Complete()


PROCESSORS: dict[str | tuple[str, str], Processor] = {"bench": complete}
