"""The paced producer of ``tenure bench --sections latency``: single jobs, one enqueue each, on a
fixed schedule, whatever the queue does (an open loop).

Standard library only: it runs in tenure's interpreter (:func:`tenure.bench.latency.main`'s
``produce``, tenure's AsyncDriver) and in the peers' (``peer_runner.py ... pace``, pgqueuer's own
client), which imports it as a sibling file; each brings the function that enqueues one job.

Job ``i`` is due at ``start + i / rate`` by the server's clock. Every process of ``shares``
takes the jobs ``i`` with ``i % shares == share``, and hands them, in order, to ``senders``
coroutines, one connection each: a free sender sleeps until the next job is due and enqueues
it; a job whose moment has passed (every sender was busy) is sent at once, and the schedule
of the jobs after it does not move, so a slow queue cannot slow the offered load down
(coordinated omission). A queue that cannot take the rate at all would keep the producer
sending long after its schedule: a job still unsent ``grace`` seconds after the schedule's
end is not sent, and recorded as such (:data:`UNSENT`). The server's clock is read once at
the start, around a round trip, and the schedule is kept on this host's monotonic clock from
there; every moment written out is in the server's epoch seconds. A producer connects,
prints ``ready`` and reads the moment job 0 is due from its standard input, so every
process of a run starts on one schedule however long each took to start.
"""

from __future__ import annotations

import asyncio
import itertools
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

# Enqueue one job carrying its due moment (server epoch seconds); return the job's id as text.
Enqueue = Callable[..., Awaitable[str]]

UNSENT = "unsent"  # the id of a job not sent by the end of the grace (its sent moment: nan)


async def server_offset(now: Callable[[], Awaitable[float]], *, tries: int = 5) -> float:
    """The server's epoch seconds minus this host's monotonic clock, from the shortest of
    ``tries`` round trips of ``now`` (the server's clock), taken at the round trip's middle."""
    best: tuple[float, float] | None = None
    for _ in range(tries):
        before = time.monotonic()
        server = await now()
        after = time.monotonic()
        if best is None or after - before < best[0]:
            best = (after - before, server - (before + after) / 2)
    assert best is not None
    return best[1]


async def warm(senders: Sequence[Enqueue], *, due: float) -> None:
    """One job through each sender, not on the schedule and not recorded: a connection's first
    calls cost more (the driver's type lookups, the server's plans), and the schedule is to
    meet connections in their steady state."""
    await asyncio.gather(*(enqueue(due) for enqueue in senders))


async def ready_then_start() -> float:
    """Print ``ready``; return the moment job 0 is due (server epoch seconds), read from the
    standard input."""
    print("ready", flush=True)
    line = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    return float(line)


async def pace(
    senders: Sequence[Enqueue],
    *,
    offset: float,
    rate: float,
    start: float,
    seconds: float,
    grace: float,
    share: int = 0,
    shares: int = 1,
) -> list[tuple[str, float, float, float]]:
    """Enqueue this process's share of ``rate * seconds`` jobs due from ``start`` (server epoch
    seconds; ``offset`` maps this host's monotonic clock onto it) through ``senders``, until
    ``grace`` seconds after the last is due; return one (id, due, sent, acknowledged) per job,
    in server epoch seconds (:data:`UNSENT` and nan for a job not sent)."""
    total = int(rate * seconds)
    jobs = itertools.count(share, shares)  # shared by the senders: each takes the next one due
    records: list[tuple[str, float, float, float]] = []
    cutoff = start + seconds + grace - offset  # on the monotonic clock

    async def send(enqueue: Enqueue) -> None:
        for i in jobs:
            if i >= total:
                return
            due = start + i / rate
            delay = due - offset - time.monotonic()
            if time.monotonic() > cutoff:
                records.append((UNSENT, due, float("nan"), float("nan")))
                continue
            if delay > 0:
                await asyncio.sleep(delay)
            sent = time.monotonic() + offset
            job = await enqueue(due)
            records.append((job, due, sent, time.monotonic() + offset))

    await asyncio.gather(*(send(enqueue) for enqueue in senders))
    return records


async def run(senders: Sequence[Enqueue], now: Callable[[], Awaitable[float]], args: Any) -> None:
    """A pacing process's whole run, once its ``senders`` are connected: the server's clock
    found (``now`` reads it), every sender warmed, the start awaited, the schedule paced
    (``args``: rate, seconds, grace, share, shares, out, as both pacers parse them) and the
    records written to ``args.out``."""
    offset = await server_offset(now)
    await warm(senders, due=await now())
    start = await ready_then_start()
    records = await pace(
        senders,
        offset=offset,
        rate=args.rate,
        start=start,
        seconds=args.seconds,
        grace=args.grace,
        share=args.share,
        shares=args.shares,
    )
    write(Path(args.out), records)


def write(path: Path, records: list[tuple[str, float, float, float]]) -> None:
    """One line per job: id, due, sent, acknowledged (server epoch seconds)."""
    path.write_text("".join(f"{job} {due:.6f} {sent:.6f} {acked:.6f}\n" for job, due, sent, acked in records))


def read(path: Path) -> list[tuple[str, float, float, float]]:
    records = []
    for line in path.read_text().splitlines():
        job, due, sent, acked = line.split()
        records.append((job, float(due), float(sent), float(acked)))
    return records
