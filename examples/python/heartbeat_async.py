"""Heartbeat election from asyncio: become primary, make a write fenced by the term
inside `leading()`, which cancels its body the moment the term is lost, and resign;
then the resigned term can no longer fence a write. The database comes from PGHOST,
PGPORT, PGDATABASE and PGUSER (a member of tenure_worker)."""

import asyncio
import sys

import psycopg

import tenure
from tenure.aio import AsyncDriver, AsyncElector, aconnect


async def run_jobs(conn: psycopg.AsyncConnection, elector: AsyncElector, term: int) -> None:
    """The primary's work: it commits only while this instance is the primary in `term`."""
    async with conn.transaction():
        await AsyncDriver(conn).heartbeat_fence(elector.instance_id, "scheduler", term)  # else NotPrimary
        await conn.execute("INSERT INTO scheduler_runs VALUES (%s, %s)", (elector.instance_id, term))


async def main() -> None:
    conn = await aconnect("", application_name="async heartbeat example", deadline=5)
    await conn.execute("CREATE TABLE IF NOT EXISTS scheduler_runs (instance uuid, term bigint)")
    # leading() waits up to 10 s to lead; if the term ends while its body runs, the body
    # is cancelled at its next await and NotPrimary is raised here instead.
    async with (
        AsyncElector("", "scheduler", interval=0.5, timeout=1.5) as elector,
        elector.leading(timeout=10) as term,
    ):
        await run_jobs(conn, elector, term)
        print(f"primary in term {term}: fenced write committed")
    # Leaving the block resigned: a follower takes over at its next poll, and the term is stale.
    try:
        await run_jobs(conn, elector, term)
    except tenure.NotPrimary as refused:
        print(f"after resigning: {refused.message}")
    else:
        sys.exit(f"a write fenced by the resigned term {term} committed")


asyncio.run(main())
