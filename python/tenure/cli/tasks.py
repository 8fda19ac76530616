"""``tenure task``: enqueue, list, inspect, cancel, reprioritise, eject, requeue and purge tasks, pause
and limit kinds (``tenure task kind``), or run a task worker."""

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
from datetime import timedelta
from typing import Any

from tenure.cli.common import (
    Command,
    address,
    admin_connection,
    duration,
    integer,
    metrics_server,
    say,
    subcommands,
    text_table,
)
from tenure.driver import Driver, TaskKind, TaskRow
from tenure.errors import InvalidArgument, InvalidConfiguration
from tenure.runtime.shutdown import wait_for_shutdown
from tenure.runtime.supervise import check_kill_grace, command_line
from tenure.runtime.tasks import AsyncTaskWorker, TaskLogic, TaskWorker, tune_gc

EXAMPLES = {
    "enqueue": 'example: tenure task enqueue --kind email --data \'{"to": "a@example.org"}\' --delay 60 '
    "--key order-17\n"
    "example: tenure task enqueue --kind invoice --priority 10 --limit-key customer-42 "
    "--after 0b6c1f9e-4d7a-4c8e-9a55-0f1e2d3c4b5a",
    "list": "example: tenure task list --kind email --state waiting --due",
    "show": "example: tenure task show 0b6c1f9e-4d7a-4c8e-9a55-0f1e2d3c4b5a",
    "cancel": "example: tenure task cancel 0b6c1f9e-4d7a-4c8e-9a55-0f1e2d3c4b5a",
    "priority": "example: tenure task priority 0b6c1f9e-4d7a-4c8e-9a55-0f1e2d3c4b5a 10",
    "kind": "example: tenure task kind set email --max-running 5 --rate 100 --per 1m\n"
    "example: tenure task kind show",
    "eject": "example: tenure task eject 0b6c1f9e-4d7a-4c8e-9a55-0f1e2d3c4b5a --lease 30",
    "requeue": "example: tenure task requeue 0b6c1f9e-4d7a-4c8e-9a55-0f1e2d3c4b5a",
    "purge": "example: tenure task purge --older-than 604800 --include-dead",
    "worker": "example: tenure task worker --module myapp.tasks --concurrency 8 --lease 30\n"
    "example: tenure task worker --kind email --kind sms --exec -- ./handle-task\n"
    "example: tenure task worker --kind email --http http://127.0.0.1:8080/tasks",
}
KIND_EXAMPLES = {
    "set": "example: tenure task kind set email --max-running 5 --max-running-per-key 1\n"
    "example: tenure task kind set sms --rate 6 --per 1s\n"
    "example: tenure task kind set email --pause\n"
    "example: tenure task kind set email --resume --max-running 0 --rate 0",
    "show": "example: tenure task kind show email --json",
}
KIND_COLUMNS = (
    "kind",
    "paused",
    "running",
    "max_running",
    "max_running_per_key",
    "rate",
    "rate_used",
    "due",
    "changed_at",
)


def _task_line(row: TaskRow) -> str:
    owner = f"owner {row.owner} epoch {row.epoch}" if row.owner else f"epoch {row.epoch}"
    when = row.next_action.isoformat(timespec="seconds") if row.next_action else "-"
    extras = "".join(
        (
            f"  priority {row.priority}" if row.priority else "",
            f"  limit key {row.limit_key}" if row.limit_key is not None else "",
            f"  after {row.after_left} more" if row.status == "waiting" else "",
        )
    )
    return (
        f"{row.id}  {row.kind:<12} {row.state:<12} {row.status:<9} next {when}  "
        f"attempts {row.attempts}  {owner}{extras}"
    )


def _seconds(period: timedelta) -> str:
    return f"{period.total_seconds():g} s"


def _rate(row: TaskKind) -> str:
    if row.rate is None:
        return "-"
    return f"{row.rate} per {_seconds(row.rate_period)}" if row.rate_period is not None else str(row.rate)


def kind_table(rows: list[TaskKind]) -> str:
    """The settings of task kinds (the view tenure.task_kinds) as a text table, one line per kind."""
    return text_table(KIND_COLUMNS, ({**dataclasses.asdict(row), "rate": _rate(row)} for row in rows))


def kind_line(row: TaskKind) -> str:
    """One kind's settings after a change, in words."""
    limits = (row.max_running, row.max_running_per_key, row.rate)
    if not row.paused and all(limit is None for limit in limits):
        return f"kind {row.kind}: no settings left (not paused, no limits)"
    parts = ["paused" if row.paused else "not paused", f"running {row.running}"]
    if row.max_running is not None:
        parts.append(f"max running {row.max_running}")
    if row.max_running_per_key is not None:
        parts.append(f"max running per limit key {row.max_running_per_key}")
    if row.rate is not None:
        parts.append(f"rate {_rate(row)} (used {row.rate_used})")
    return f"kind {row.kind}: " + ", ".join(parts)


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
                priority=args.priority,
                limit_key=args.limit_key,
                after=args.after,
            )
            line = f"{enqueued.id} {'enqueued' if enqueued.created else 'already there'}"
            found = driver.task(enqueued.id) if args.after else None
            if found is not None and found.status == "waiting":
                line += f", waiting for {found.after_left} of the tasks it runs after"
            elif found is not None and found.status == "dead":
                line += f", dead: {found.last_error}"
            if enqueued.next_action is not None:
                line += f", due {enqueued.next_action.isoformat()}"
            print(line)
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
        elif args.task_command == "cancel":
            if not driver.task_cancel(args.id):
                print(f"task {args.id} has already finished: left as it is")
                return 1
            print(f"task {args.id} cancelled")
        elif args.task_command == "priority":
            if not driver.task_set_priority(args.id, args.priority):
                print(f"task {args.id} has already finished: priority left as it is")
                return 1
            print(f"task {args.id} now has priority {args.priority}")
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


def cmd_task_kind(args: argparse.Namespace) -> int:
    with admin_connection(args) as connection:
        driver = Driver(connection)
        if args.kind_command == "show":
            rows = [r for r in driver.task_kinds() if args.kind is None or r.kind == args.kind]
            if args.json:
                print(json.dumps([dataclasses.asdict(r) for r in rows], default=str, indent=2))
            elif rows:
                print(kind_table(rows))
            elif args.kind is not None:
                print(f"kind {args.kind}: no settings (not paused, no limits)")
            else:
                print("no kind has settings: none is paused or limited")
            return 0
        changes = {
            "paused": args.paused,
            "max_running": args.max_running,
            "max_running_per_key": args.max_running_per_key,
            "rate": args.rate,
            "rate_period": args.per,
        }
        if all(value is None for value in changes.values()):
            raise InvalidArgument(
                f"nothing to change for kind {args.kind!r}: give --pause, --resume, --max-running, "
                "--max-running-per-key or --rate N --per PERIOD"
            )
        print(kind_line(driver.task_kind_set(args.kind, **changes)))
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
    """Say that the worker started, and make the garbage collector cheap for it: this process
    is the worker's own."""
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
    tune_gc(args.concurrency)


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
    task = command(
        "task",
        "enqueue, list, inspect, cancel, reprioritise, eject, requeue and purge tasks, pause and limit "
        "kinds, or run a task worker",
    )
    task_command = subcommands(task, "task_command", EXAMPLES, run=cmd_task, groups={"kind"})

    enqueue = task_command("enqueue", "enqueue one task")
    enqueue.formatter_class = argparse.RawDescriptionHelpFormatter
    enqueue.add_argument("--kind", required=True)
    enqueue.add_argument("--state", default="new")
    enqueue.add_argument("--data", help="JSON data of the task")
    enqueue.add_argument("--delay", type=float, default=0.0, help="seconds until it is due (0)")
    enqueue.add_argument("--key", help="idempotency key: enqueueing the same key twice makes one task")
    enqueue.add_argument("--max-attempts", type=integer, default=5)
    enqueue.add_argument(
        "--priority",
        type=integer,
        default=0,
        metavar="N",
        help="higher is leased first among due tasks, then the oldest due (0; may be negative)",
    )
    enqueue.add_argument(
        "--limit-key",
        metavar="KEY",
        help="the key its kind's --max-running-per-key counts by, such as a customer id (none)",
    )
    enqueue.add_argument(
        "--after",
        type=uuid.UUID,
        action="append",
        metavar="ID",
        help="run only once this task is done (repeat for more); it waits meanwhile, and dies if "
        "one of them dies or is cancelled",
    )
    listing = task_command("list", "list tasks by kind, state, status, owner, due")
    listing.add_argument("--kind")
    listing.add_argument("--state")
    listing.add_argument("--status", choices=["pending", "waiting", "done", "dead", "cancelled"])
    listing.add_argument("--owner", type=uuid.UUID)
    listing.add_argument("--due", action="store_true", help="only tasks that can be acquired now")
    listing.add_argument("--limit", type=integer, default=100)
    listing.add_argument("--json", action="store_true", help="also print the rows as JSON")
    show = task_command("show", "print one task as JSON")
    show.add_argument("id", type=uuid.UUID)
    cancel = task_command(
        "cancel",
        "cancel a pending or waiting task: it never runs, or its holder's writes are refused from now "
        "(exit 1: it had finished)",
    )
    cancel.add_argument("id", type=uuid.UUID)
    priority = task_command(
        "priority", "change the priority of a pending or waiting task (exit 1: it had finished)"
    )
    priority.add_argument("id", type=uuid.UUID)
    priority.add_argument("priority", type=integer, help="higher is leased first (may be negative)")
    kind = task_command("kind", "pause, resume and limit a kind of task, or show the settings")
    kind.formatter_class = argparse.RawDescriptionHelpFormatter
    _register_kind(kind)
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
    worker.add_argument("--concurrency", type=integer, default=4)
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


def _register_kind(kind: argparse.ArgumentParser) -> None:
    kind_command = subcommands(kind, "kind_command", KIND_EXAMPLES, run=cmd_task_kind)
    setting = kind_command(
        "set",
        "change the settings given of a kind, leave the rest; 0 removes a limit.\n"
        "A change applies to the leases granted after it commits, across every worker;\n"
        "leases granted before run on",
    )
    setting.formatter_class = argparse.RawDescriptionHelpFormatter
    setting.add_argument("kind", metavar="KIND")
    pause = setting.add_mutually_exclusive_group()
    pause.add_argument(
        "--pause",
        dest="paused",
        action="store_const",
        const=True,
        help="lease no task of the kind until --resume (leased ones run on)",
    )
    pause.add_argument("--resume", dest="paused", action="store_const", const=False, help="lease again")
    setting.add_argument(
        "--max-running",
        type=integer,
        metavar="N",
        help="at most N tasks of the kind leased at once, across every worker (0 removes the limit)",
    )
    setting.add_argument(
        "--max-running-per-key",
        type=integer,
        metavar="N",
        help="at most N leased at once per limit key (tenure task enqueue --limit-key); keys with due "
        "tasks take turns (0 removes the limit)",
    )
    setting.add_argument(
        "--rate",
        type=integer,
        metavar="N",
        help="at most N leases of the kind per --per PERIOD, a sliding window across every worker "
        "(0 removes the rate limit)",
    )
    setting.add_argument(
        "--per",
        type=duration,
        metavar="PERIOD",
        help="the window of --rate: 1s, 1m, 1h, 1d or seconds (more than 0, at most a day)",
    )
    show = kind_command(
        "show", "print the settings of every kind that has some (the view tenure.task_kinds) as a table"
    )
    show.add_argument("kind", metavar="KIND", nargs="?", help="only this kind")
    show.add_argument("--json", action="store_true", help="print the rows as JSON instead")
