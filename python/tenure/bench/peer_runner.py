"""The peers' side of ``tenure bench --sections peers``: pgqueuer and procrastinate, each
installed in a schema of its own, loaded with no-op jobs and drained by worker processes.

This file runs with the peers' virtual environment (``.venv-peers``, made by
``scripts/install-peers.sh``) as a plain script, never as part of the ``tenure`` package:
tenure's own environment has neither pgqueuer nor procrastinate, and nothing in tenure
imports this file. :mod:`tenure.bench.peers` starts it as separate processes::

    python peer_runner.py --db CONNINFO --schema S pgqueuer-asyncpg install
    python peer_runner.py --db CONNINFO --schema S pgqueuer-asyncpg enqueue 20000
    python peer_runner.py --db CONNINFO --schema S pgqueuer-asyncpg work --batch 10
    python peer_runner.py --db CONNINFO --schema S pgqueuer-asyncpg pace --rate 500 --seconds 10 --out FILE

``install`` drops the schema with everything in it and installs the peer afresh;
``enqueue`` adds the jobs in one transaction; ``work`` prepares one worker process with a
no-op job function (imports done, connections open), prints ``ready``, waits for a line on
its standard input, then runs its worker loop until SIGTERM. The bench loads the backlog
between the two, so every process starts draining at once, and on a full queue: no
process starts late in the window, and no peer is woken by a notification per job of a
backlog loaded in bulk (procrastinate sends one per row, and drains 5x slower while
20,000 of them arrive). ``pace`` is the latency section's producer: single jobs at a fixed
rate through pgqueuer's own enqueue, paced by ``pacing.py`` (a sibling file, standard library
only): it connects, prints ``ready``, reads the moment its first job is due (server epoch
seconds) from its standard input, enqueues and writes the jobs' ids and moments to ``--out``.

Every runner dies with the process that started it (``PR_SET_PDEATHSIG``): a bench killed
mid-run used to leave its pgqueuer workers running, and draining the next run's queue.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import Any

ENTRYPOINT = "bench"  # the one job kind both peers run, a no-op


def connect_args(conninfo: str) -> dict[str, str]:
    """libpq keywords of ``conninfo`` (key=value or URL), environment defaults left to the driver."""
    from psycopg.conninfo import conninfo_to_dict

    return {key: str(value) for key, value in conninfo_to_dict(conninfo).items() if value is not None}


async def ready_then_go(stop: asyncio.Event) -> None:
    """Stop on SIGTERM or SIGINT; print ``ready``, then return once standard input has a line."""
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    print("ready", flush=True)
    await loop.run_in_executor(None, sys.stdin.readline)


def die_with_parent() -> None:
    """Have the kernel SIGKILL this process when the one that started it ends, however it ends
    (Linux's PR_SET_PDEATHSIG; elsewhere nothing); exit at once if it has already ended."""
    if sys.platform.startswith("linux"):
        pr_set_pdeathsig = 1
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")
    if os.getppid() == 1:  # the parent died before prctl: this process was handed to init
        sys.exit("peer_runner: the process that started it is gone")


# pgqueuer ------------------------------------------------------------------------------


async def pgqueuer_driver(conninfo: str, driver: str) -> tuple[Any, Callable[[], Awaitable[None]]]:
    """A pgqueuer driver on a new connection, and how to close that connection."""
    if driver == "asyncpg":
        import asyncpg  # type: ignore[import-not-found]
        from pgqueuer import AsyncpgDriver  # type: ignore[import-not-found]

        args = connect_args(conninfo)
        keywords = {
            "host": "host",
            "port": "port",
            "user": "user",
            "password": "password",
            "dbname": "database",
        }
        connection = await asyncpg.connect(**{keywords[k]: v for k, v in args.items() if k in keywords})
        return AsyncpgDriver(connection), connection.close
    import psycopg
    from pgqueuer import PsycopgDriver

    aconnection = await psycopg.AsyncConnection.connect(conninfo, autocommit=True)
    return PsycopgDriver(aconnection), aconnection.close


async def pgqueuer_main(conninfo: str, driver: str, action: str, args: argparse.Namespace) -> None:
    from pgqueuer import Job, QueueManager
    from pgqueuer.queries import Queries  # type: ignore[import-not-found]

    if action == "install":
        import psycopg

        with psycopg.connect(conninfo, autocommit=True) as admin:
            admin.execute(f'DROP SCHEMA IF EXISTS "{args.schema}" CASCADE')
    db, close = await pgqueuer_driver(conninfo, driver)
    try:
        queries = Queries(db)
        if action == "install":
            await queries.install()
        elif action == "enqueue":
            await queries.enqueue([ENTRYPOINT] * args.jobs, [None] * args.jobs, [0] * args.jobs)
        elif action == "pace":
            await pgqueuer_pace(conninfo, driver, queries, args)
        else:
            manager = QueueManager(queries)

            async def noop(job: Job) -> None:
                if args.hold:  # the memory section: every job stays in flight this long
                    await asyncio.sleep(args.hold)

            manager.entrypoint(ENTRYPOINT)(noop)
            stop = asyncio.Event()
            await ready_then_go(stop)
            run = asyncio.create_task(manager.run(batch_size=args.batch))
            await stop.wait()
            manager.shutdown.set()
            await run
    finally:
        await close()


async def pgqueuer_pace(conninfo: str, driver: str, queries: Any, args: argparse.Namespace) -> None:
    """The latency section's producer: ``args.senders`` connections each enqueueing single jobs
    (``Queries.enqueue``, one call and one commit per job, the payload its due moment), paced."""
    import pacing  # type: ignore[import-not-found]  # the sibling file, on sys.path as the script's directory
    from pgqueuer.queries import Queries

    closers = []
    senders = []
    try:
        for _ in range(args.senders):
            db, close = await pgqueuer_driver(conninfo, driver)
            closers.append(close)
            sender = Queries(db)

            async def enqueue(due: float, sender: Any = sender) -> str:
                (job,) = await sender.enqueue(ENTRYPOINT, f"{due:.6f}".encode(), 0)
                return str(job)

            senders.append(enqueue)

        async def now() -> float:
            rows = await queries.driver.fetch("SELECT extract(epoch FROM clock_timestamp())::float8 AS now")
            return float(rows[0]["now"])

        await pacing.run(senders, now, args)
    finally:
        for close in closers:
            await close()


# procrastinate -------------------------------------------------------------------------


async def procrastinate_main(conninfo: str, action: str, args: argparse.Namespace) -> None:
    import procrastinate  # type: ignore[import-not-found]
    from psycopg.conninfo import make_conninfo

    if action == "install":
        import psycopg

        with psycopg.connect(conninfo, autocommit=True) as admin:
            admin.execute(f'DROP SCHEMA IF EXISTS "{args.schema}" CASCADE')
            admin.execute(f'CREATE SCHEMA "{args.schema}"')
    # Every object of procrastinate's schema is created and found through the search_path.
    scoped = make_conninfo(conninfo, options=f"-c search_path={args.schema}")
    max_size = max(2, args.concurrency + 2) if action == "work" else 2
    connector = procrastinate.PsycopgConnector(conninfo=scoped, min_size=1, max_size=max_size)
    app = procrastinate.App(connector=connector)

    async def noop() -> None:
        pass

    task = app.task(name=ENTRYPOINT)(noop)
    async with app.open_async():
        if action == "install":
            await app.schema_manager.apply_schema_async()
        elif action == "enqueue":
            await task.batch_defer_async(*({} for _ in range(args.jobs)))
        else:
            stop = asyncio.Event()
            await ready_then_go(stop)
            run = asyncio.create_task(
                app.run_worker_async(concurrency=args.concurrency, install_signal_handlers=False)
            )
            await stop.wait()
            run.cancel()  # procrastinate's own graceful stop, as on SIGTERM
            with contextlib.suppress(asyncio.CancelledError):
                await run


PEERS = ("pgqueuer-asyncpg", "pgqueuer-psycopg", "procrastinate")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--db", required=True, help="conninfo or URL")
    parser.add_argument("--schema", required=True, help="the peer's own schema, dropped by install")
    parser.add_argument("peer", choices=PEERS)
    actions = parser.add_subparsers(dest="action", required=True)
    actions.add_parser("install")
    enqueue = actions.add_parser("enqueue")
    enqueue.add_argument("jobs", type=int)
    work = actions.add_parser("work")
    work.add_argument("--batch", type=int, default=10, help="pgqueuer: jobs per dequeue (10)")
    work.add_argument("--concurrency", type=int, default=1, help="procrastinate: jobs at once (1)")
    work.add_argument("--hold", type=float, default=0.0, help="pgqueuer: seconds each job takes (0)")
    paced = actions.add_parser("pace", help="pgqueuer: single jobs at a fixed rate (pacing.py)")
    paced.add_argument("--rate", type=float, required=True, help="jobs/s of all the pacing processes")
    paced.add_argument("--seconds", type=float, required=True, help="length of the schedule")
    paced.add_argument("--senders", type=int, default=16, help="connections enqueueing at once (16)")
    paced.add_argument("--grace", type=float, default=10.0, help="seconds past the schedule to send (10)")
    paced.add_argument("--share", type=int, default=0, help="this process takes jobs i %% shares == share")
    paced.add_argument("--shares", type=int, default=1, help="pacing processes in all (1)")
    paced.add_argument("--out", required=True, help="file for the jobs' ids and moments")
    args = parser.parse_args(argv)
    die_with_parent()
    args.concurrency = getattr(args, "concurrency", 1)
    if args.peer.startswith("pgqueuer"):
        os.environ["PGQUEUER_SCHEMA"] = args.schema  # before pgqueuer reads its settings
        coroutine = pgqueuer_main(args.db, args.peer.removeprefix("pgqueuer-"), args.action, args)
    else:
        coroutine = procrastinate_main(args.db, args.action, args)
    asyncio.run(coroutine)
    return 0


if __name__ == "__main__":
    sys.exit(main())
