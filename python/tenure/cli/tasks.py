"""``tenure task``: enqueue, list, inspect, eject, requeue and purge tasks, or run a task worker."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import importlib
import json
import shlex
import signal
import sys
import uuid
from contextlib import AbstractAsyncContextManager, nullcontext
from typing import Any

from tenure.cli.common import Command, address, admin_connection, metrics_server, say, subcommands
from tenure.driver import Driver, TaskRow
from tenure.errors import InvalidConfiguration
from tenure.runtime.shutdown import wait_for_shutdown
from tenure.runtime.supervise import check_kill_grace, command_line
from tenure.runtime.tasks import AsyncTaskWorker, TaskLogic, TaskWorker

EXAMPLES = {
    "enqueue": 'example: tenure task enqueue --kind email --data \'{"to": "a@example.org"}\' --delay 60 '
    "--key order-17",
    "list": "example: tenure task list --kind email --state waiting --due",
    "show": "example: tenure task show 0b6c1f9e-4d7a-4c8e-9a55-0f1e2d3c4b5a",
    "eject": "example: tenure task eject 0b6c1f9e-4d7a-4c8e-9a55-0f1e2d3c4b5a --lease 30",
    "requeue": "example: tenure task requeue 0b6c1f9e-4d7a-4c8e-9a55-0f1e2d3c4b5a",
    "purge": "example: tenure task purge --older-than 604800 --include-dead",
    "worker": "example: tenure task worker --module myapp.tasks --concurrency 8 --lease 30\n"
    "example: tenure task worker --kind email --kind sms --exec -- ./handle-task\n"
    "example: tenure task worker --kind email --http http://127.0.0.1:8080/tasks",
}


def _task_line(row: TaskRow) -> str:
    owner = f"owner {row.owner} epoch {row.epoch}" if row.owner else f"epoch {row.epoch}"
    when = row.next_action.isoformat(timespec="seconds") if row.next_action else "-"
    return (
        f"{row.id}  {row.kind:<12} {row.state:<12} {row.status:<8} next {when}  "
        f"attempts {row.attempts}  {owner}"
    )


def cmd_task(args: argparse.Namespace) -> int:
    with admin_connection(args) as connection:
        driver = Driver(connection)
        if args.task_command == "enqueue":
            data = json.loads(args.data) if args.data else None
            enqueued = driver.task_enqueue(
                args.kind,
                data,
                state=args.state,
                delay=args.delay,
                idempotency_key=args.key,
                max_attempts=args.max_attempts,
            )
            print(
                f"{enqueued.id} {'enqueued' if enqueued.created else 'already there'}, "
                f"due {enqueued.next_action.isoformat()}"
            )
        elif args.task_command == "list":
            rows = driver.tasks(
                kind=args.kind,
                state=args.state,
                status=args.status,
                owner=args.owner,
                due=True if args.due else None,
                limit=args.limit,
            )
            for row in rows:
                print(_task_line(row))
            if args.json:
                print(json.dumps([dataclasses.asdict(r) for r in rows], default=str, indent=2))
        elif args.task_command == "show":
            found = driver.task(args.id)
            if found is None:
                print(f"no task {args.id}", file=sys.stderr)
                return 3
            print(json.dumps(dataclasses.asdict(found), default=str, indent=2))
        elif args.task_command == "eject":
            owner = args.owner or uuid.uuid4()
            lease = driver.task_eject(args.id, owner, lease=args.lease)
            if lease is None:
                print(f"task {args.id} is finished: nothing to take over")
                return 1
            until = lease.lease_until.isoformat()
            print(f"task {args.id} now held by {owner} in epoch {lease.epoch} until {until}")
        elif args.task_command == "requeue":
            if not driver.task_requeue(args.id, delay=args.delay):
                print(f"task {args.id} is not dead: left as it is")
                return 1
            print(f"task {args.id} requeued")
        elif args.task_command == "purge":
            purged = driver.task_purge(older_than=args.older_than, include_dead=args.include_dead)
            print(f"{purged} tasks purged")
    return 0


def cmd_task_worker(args: argparse.Namespace) -> int:
    if args.module is None:
        return _shim_worker(args)
    if args.kinds:
        raise InvalidConfiguration(
            "--kind is for --exec and --http: with --module, the kinds are the keys of its PROCESSORS"
        )
    if args.kill_grace is not None:
        raise InvalidConfiguration("--kill-grace is for --exec")
    module = importlib.import_module(args.module)
    processors = getattr(module, "PROCESSORS", None)
    if not isinstance(processors, dict) or not processors:
        print(
            f"tenure: module {args.module} has no PROCESSORS dict of kind (or (kind, state)) -> processor",
            file=sys.stderr,
        )
        return 2
    options = _worker_options(args)
    if args.use_async:
        # The module's ASYNC_PROCESSORS (coroutine functions), or its PROCESSORS if it has none.
        asynchronous = AsyncTaskWorker(args.db, getattr(module, "ASYNC_PROCESSORS", processors), **options)
        asyncio.run(_run_async(asynchronous, args))
        worker: TaskLogic = asynchronous
    else:
        worker = TaskWorker(args.db, processors, **options)
        with worker, metrics_server(args.metrics, worker.metrics):
            _started(worker, args)
            wait_for_shutdown()
            say(f"shutting down: finishing or releasing {worker.in_flight()} tasks in flight")
    _stopped(worker)
    return 0


def _worker_options(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "concurrency": args.concurrency,
        "lease": args.lease,
        "poll_interval": args.poll_interval,
        "listen": not args.no_listen,
        "shutdown_grace": args.grace,
        "name": args.name,
    }


def _stopped(worker: TaskLogic) -> None:
    stats = worker.stats
    say(
        f"stopped: {stats.acquired} acquired, {stats.completed} completed, {stats.released} released, "
        f"{stats.failed} failed (of these, {stats.already_recorded} recorded by the handlers themselves), "
        f"{stats.lost} leases lost, {stats.discarded} results discarded"
    )


def _shim_worker(args: argparse.Namespace) -> int:
    """``--exec`` (a command per task, on threads) or ``--http`` (a handler, under asyncio)."""
    from tenure.runtime.task_commands import TaskCommand, TaskHandler

    if not args.kinds:
        raise InvalidConfiguration(
            f"{'--exec' if args.exec is not None else '--http'} needs the kinds of task to lease: "
            "--kind K [--kind K2 ...]"
        )
    options = _worker_options(args)
    if args.http is not None:
        if args.kill_grace is not None:
            raise InvalidConfiguration("--kill-grace is for --exec: with --http, the request is cut at once")
        handler = TaskHandler(args.http, concurrency=args.concurrency)
        asynchronous = AsyncTaskWorker(args.db, dict.fromkeys(args.kinds, handler), **options)
        asyncio.run(_run_async(asynchronous, args, handler))
        _stopped(asynchronous)
        return 0
    if args.use_async:
        raise InvalidConfiguration("--exec runs on threads: leave out --async")
    argv = command_line(args.exec)
    assert argv is not None
    kill_grace = args.kill_grace if args.kill_grace is not None else args.lease / 6
    check_kill_grace(kill_grace, args.lease / 3, margin_name="a third of the lease")
    with TaskCommand(argv, kill_grace=kill_grace) as command:
        worker = TaskWorker(args.db, dict.fromkeys(args.kinds, command), **options)
        command.attach(worker)
        with worker, metrics_server(args.metrics, worker.metrics):
            _started(worker, args)
            wait_for_shutdown()
            say(f"shutting down: finishing or releasing {worker.in_flight()} tasks in flight")
    _stopped(worker)
    return 0


def _started(worker: TaskLogic, args: argparse.Namespace) -> None:
    if args.exec is not None:
        how = f"; each task runs {shlex.join(command_line(args.exec) or [])}"
    elif args.http is not None:
        how = f"; each task is POSTed to {args.http}"
    else:
        how = "; asyncio" if args.use_async else ""
    say(
        f"task worker {worker.instance_id} ({worker.name}) started: kinds {', '.join(worker.kinds)}; "
        f"concurrency {args.concurrency}, lease {args.lease} s, poll every {args.poll_interval} s" + how
    )


async def _run_async(
    worker: AsyncTaskWorker, args: argparse.Namespace, handler: AbstractAsyncContextManager[Any] | None = None
) -> None:
    """The async worker on this process's event loop until SIGTERM or SIGINT."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    with metrics_server(args.metrics, worker.metrics):
        async with handler if handler is not None else nullcontext(), worker:
            _started(worker, args)
            await stop.wait()
            say(f"shutting down: finishing or releasing {worker.in_flight()} tasks in flight")


def register(command: Command) -> None:
    task = command("task", "enqueue, list, inspect, eject, requeue and purge tasks, or run a task worker")
    task_command = subcommands(task, "task_command", EXAMPLES, run=cmd_task)

    enqueue = task_command("enqueue", "enqueue one task")
    enqueue.add_argument("--kind", required=True)
    enqueue.add_argument("--state", default="new")
    enqueue.add_argument("--data", help="JSON data of the task")
    enqueue.add_argument("--delay", type=float, default=0.0, help="seconds until it is due (0)")
    enqueue.add_argument("--key", help="idempotency key: enqueueing the same key twice makes one task")
    enqueue.add_argument("--max-attempts", type=int, default=5)
    listing = task_command("list", "list tasks by kind, state, status, owner, due")
    listing.add_argument("--kind")
    listing.add_argument("--state")
    listing.add_argument("--status", choices=["pending", "done", "dead"])
    listing.add_argument("--owner", type=uuid.UUID)
    listing.add_argument("--due", action="store_true", help="only tasks that can be acquired now")
    listing.add_argument("--limit", type=int, default=100)
    listing.add_argument("--json", action="store_true", help="also print the rows as JSON")
    show = task_command("show", "print one task as JSON")
    show.add_argument("id", type=uuid.UUID)
    eject = task_command("eject", "take a task over at once; its current owner's writes are refused from now")
    eject.add_argument("id", type=uuid.UUID)
    eject.add_argument("--lease", type=float, default=30.0, help="seconds of the new lease (30)")
    eject.add_argument("--owner", type=uuid.UUID, help="instance id of the new owner (a new one)")
    requeue = task_command("requeue", "give a dead task another life")
    requeue.add_argument("id", type=uuid.UUID)
    requeue.add_argument("--delay", type=float, default=0.0)
    purge = task_command("purge", "delete finished tasks older than an age")
    purge.add_argument("--older-than", type=float, required=True, help="seconds since they finished")
    purge.add_argument("--include-dead", action="store_true")
    worker = task_command(
        "worker",
        "run a task worker: the processors of a Python module, a command per task (--exec) or a local "
        "HTTP handler (--http)",
    )
    worker.formatter_class = argparse.RawDescriptionHelpFormatter
    handled_by = worker.add_mutually_exclusive_group(required=True)
    handled_by.add_argument("--module", help="importable module with a PROCESSORS dict")
    handled_by.add_argument(
        "--http",
        metavar="URL",
        help="POST each task as JSON to this local handler (kept-alive connections); the body of its "
        "answer is the outcome. The request is cut when the lease is lost",
    )
    handled_by.add_argument(
        "--exec",
        action="store_const",
        const=[],  # main() puts the words after --exec here
        help="run CMD for each task, in its own process group, the task as JSON on its stdin and its "
        "outcome as JSON on its stdout; SIGTERM when the lease is lost, SIGKILL kill-grace later "
        "(the last option: --exec -- CMD [ARGS...])",
    )
    worker.add_argument(
        "--kind",
        dest="kinds",
        action="append",
        metavar="KIND",
        help="a kind of task to lease, with --exec or --http (repeat for more)",
    )
    worker.add_argument(
        "--kill-grace",
        type=float,
        help="with --exec: seconds between SIGTERM and SIGKILL (lease / 6; below lease / 3)",
    )
    worker.add_argument("--concurrency", type=int, default=4)
    worker.add_argument("--lease", type=float, default=30.0, help="lease in seconds (30)")
    worker.add_argument("--poll-interval", type=float, default=1.0, help="seconds between polls (1)")
    worker.add_argument("--no-listen", action="store_true", help="poll only, no LISTEN/NOTIFY")
    worker.add_argument("--grace", type=float, default=5.0, help="seconds to finish tasks on shutdown (5)")
    worker.add_argument("--name", help="instance name shown in pg_stat_activity")
    worker.add_argument(
        "--metrics", metavar="HOST:PORT", type=address, help="serve Prometheus metrics at /metrics there"
    )
    worker.add_argument(
        "--async",
        dest="use_async",
        action="store_true",
        help="run the AsyncTaskWorker under asyncio: the module's ASYNC_PROCESSORS (or PROCESSORS) "
        "are coroutine functions",
    )
    worker.set_defaults(run=cmd_task_worker)
