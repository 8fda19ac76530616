"""The ``tenure`` command."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import logging
import os
import sys
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import psycopg

from tenure.bench import SECTIONS
from tenure.claimer import Claimer
from tenure.deploy import SqitchMissing, project_dir, run_sqitch
from tenure.driver import Driver, TaskRow
from tenure.elector import Elector
from tenure.errors import TenureError
from tenure.health import PrimaryEndpoint, PrimaryWatch, ask_primary
from tenure.metrics import Metrics, MetricsServer
from tenure.queue import SubmissionPool
from tenure.replica import ReplicaManager, ReplicaServer
from tenure.shutdown import wait_for_shutdown
from tenure.status import collect, render
from tenure.tasks import TaskWorker

EXAMPLES = {
    "elect": "example: tenure elect --db postgresql://app@db/prod --type scheduler --interval 1 --timeout 3 "
    "--http 127.0.0.1:8080",
    "primary": "example: tenure primary --db postgresql://app@db/prod --type scheduler",
    "check-primary": "example: tenure check-primary --url http://127.0.0.1:8080/primary && run-the-job",
    "demo": "example: tenure demo --db postgresql://postgres@127.0.0.1:5432/tenure_demo",
    "bench": "example: tenure bench --db postgresql://postgres@127.0.0.1:5432/tenure_bench --kills 20",
    "task": "example: tenure task list --db postgresql://app@db/prod --status dead",
    "claim": "example: tenure claim list --db postgresql://app@db/prod --keyspace services",
    "batch": "example: tenure batch keys --db postgresql://app@db/prod --keyspace ledger --halted",
    "status": "example: tenure status --db postgresql://app@db/prod --watch 2",
    "deploy": "example: tenure deploy --db postgresql://postgres@db.example.org/prod",
    "revert": "example: tenure revert --db postgresql://postgres@db.example.org/prod --to @v0.1.0 --yes",
    "verify": "example: tenure verify --db postgresql://postgres@db.example.org/prod",
    "replica": "example: tenure replica status --db postgresql://app@db/prod",
}

BATCH_EXAMPLES = {
    "configure": "example: tenure batch configure --keyspace ledger --mode parallel --key po-17",
    "enqueue": "example: tenure batch enqueue --keyspace ledger --key po-17 --payload 'price 3.00' "
    "--state-key po-17/price",
    "keys": "example: tenure batch keys --keyspace ledger --halted",
    "list": "example: tenure batch list --keyspace ledger --status invalid",
    "skip": "example: tenure batch skip --keyspace ledger 0b6c1f9e-4d7a-4c8e-9a55-0f1e2d3c4b5a",
    "retry": "example: tenure batch retry --keyspace ledger 0b6c1f9e-4d7a-4c8e-9a55-0f1e2d3c4b5a",
    "run": "example: tenure batch run --keyspace ledger --module myapp.ledger --submitters 8 --depth 2",
}

REPLICA_EXAMPLES = {
    "run": "example: tenure replica run --db postgresql://app@db/prod --http 127.0.0.1:8081 --interval 0.5",
    "status": "example: tenure replica status --db postgresql://app@db/prod --counter 0",
}

CLAIM_EXAMPLES = {
    "register": "example: tenure claim register --keyspace services service-1 service-2 service-3",
    "retire": "example: tenure claim retire --keyspace services service-3",
    "list": "example: tenure claim list --keyspace services --instances",
    "run": "example: tenure claim run --keyspace services --cycle 1 --expiry 3",
}

TASK_EXAMPLES = {
    "enqueue": 'example: tenure task enqueue --kind email --data \'{"to": "a@example.org"}\' --delay 60 '
    "--key order-17",
    "list": "example: tenure task list --kind email --state waiting --due",
    "show": "example: tenure task show 0b6c1f9e-4d7a-4c8e-9a55-0f1e2d3c4b5a",
    "eject": "example: tenure task eject 0b6c1f9e-4d7a-4c8e-9a55-0f1e2d3c4b5a --lease 30",
    "requeue": "example: tenure task requeue 0b6c1f9e-4d7a-4c8e-9a55-0f1e2d3c4b5a",
    "purge": "example: tenure task purge --older-than 604800 --include-dead",
    "worker": "example: tenure task worker --module myapp.tasks --concurrency 8 --lease 30",
}


@contextmanager
def _metrics_server(address: tuple[str, int] | None, metrics: Metrics) -> Iterator[None]:
    """Serve ``metrics`` at http://HOST:PORT/metrics while the block runs, if an address is given."""
    if address is None:
        yield
        return
    host, port = address
    with MetricsServer(metrics, host=host, port=port) as server:
        _say(f"serving {server.url}")
        yield


def _stamp() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def _say(message: str) -> None:
    print(f"{_stamp()} {message}", flush=True)


def cmd_elect(args: argparse.Namespace) -> int:
    elector = Elector(
        args.db,
        args.utype,
        interval=args.interval,
        timeout=args.timeout,
        name=args.name,
        on_elected=lambda term: _say(f"elected primary of {args.utype} in term {term}"),
        on_demoted=lambda reason: _say(f"no longer primary of {args.utype}: {reason}"),
    )
    _say(
        f"instance {elector.instance_id} ({elector.name}) standing for {args.utype}: "
        f"I = {args.interval} s, T = {args.timeout} s"
    )
    with elector:
        if args.http:
            host, port = args.http
            endpoint = PrimaryEndpoint(elector, host=host, port=port).start()
            _say(f"serving {endpoint.url}/primary")
        wait_for_shutdown()
        _say("shutting down: resigning")
        if args.http:
            endpoint.stop()
    _say("resigned")
    return 0


def cmd_primary(args: argparse.Namespace) -> int:
    with psycopg.connect(args.db, autocommit=True) as connection:
        entry = Driver(connection).get_primary(args.utype)
    if entry is None:
        print(f"{args.utype}: no live primary")
        return 3
    print(
        f"{args.utype}: primary {entry.instance_id} in term {entry.term}, "
        f"last heartbeat {entry.renewed_at.isoformat()}, valid until {entry.valid_until.isoformat()}"
    )
    return 0


def cmd_check_primary(args: argparse.Namespace) -> int:
    if args.watch:
        with PrimaryWatch(args.url, interval=args.interval, window=args.window) as watch:
            last = None
            while not wait_for_shutdown(timeout=args.interval):
                now = watch.is_primary()
                if now != last:
                    _say("primary" if now else "not primary")
                    last = now
        return 0
    try:
        valid_for = ask_primary(args.url, timeout=args.window)
    except OSError as error:
        print(f"no answer from {args.url}: {error}", file=sys.stderr)
        return 2
    print("primary" if valid_for > 0 else "not primary")
    return 0 if valid_for > 0 else 1


def cmd_demo(args: argparse.Namespace) -> int:
    from tenure.demo import run_demo
    from tenure.demo_queue import run_queue_demo
    from tenure.demo_tasks import run_task_demo

    workdir = Path(tempfile.mkdtemp(prefix="tenure-demo-"))
    ok = run_demo(
        args.db, instances=args.instances, interval=args.interval, timeout=args.timeout, workdir=workdir
    )
    tasks_ok = run_task_demo(args.db, workdir=workdir)
    queue_ok = run_queue_demo(args.db, workdir=workdir)
    from tenure.demo_replicas import run_replica_demo

    replicas_ok = run_replica_demo(args.db, workdir=workdir)
    from tenure.demo_failover import run_failover_demo

    failover_ok = run_failover_demo(workdir=workdir)
    return 0 if ok and tasks_ok and queue_ok and replicas_ok and failover_ok else 1


def cmd_bench(args: argparse.Namespace) -> int:
    from tenure.bench import run_bench

    return run_bench(
        args.db,
        sections=args.sections,
        seconds=args.seconds,
        clients=args.clients,
        kills=args.kills,
        backlogs=args.backlogs,
        workers=args.task_workers,
        task_seconds=args.task_seconds,
        enqueue_batches=args.enqueue_batches,
        wake_tasks=args.wake_tasks,
        claim_keys=args.claim_keys,
        claim_instances=args.claim_instances,
        queue_keys=args.queue_keys,
        queue_batches=args.queue_batches,
        replica_trials=args.replica_trials,
    )


def _sections(text: str) -> list[str]:
    """A comma-separated list of bench sections."""
    chosen = [part.strip() for part in text.split(",") if part.strip()]
    unknown = sorted(set(chosen) - set(SECTIONS))
    if not chosen or unknown:
        raise argparse.ArgumentTypeError(f"choose from {','.join(SECTIONS)}; unknown: {','.join(unknown)}")
    return chosen


def _address(text: str) -> tuple[str, int]:
    """HOST:PORT (or :PORT, for 127.0.0.1) for an HTTP endpoint."""
    host, _, port = text.rpartition(":")
    if not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT with a port from 0 to 65535, got {text!r}")
    return host or "127.0.0.1", int(port)


def _counts(text: str) -> list[int]:
    """A comma-separated list of positive integers, for the bench's sizes."""
    try:
        counts = [int(part) for part in text.split(",")]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers separated by commas, got {text!r}")
    return counts


def _task_line(row: TaskRow) -> str:
    owner = f"owner {row.owner} epoch {row.epoch}" if row.owner else f"epoch {row.epoch}"
    when = row.next_action.isoformat(timespec="seconds") if row.next_action else "-"
    return (
        f"{row.id}  {row.kind:<12} {row.state:<12} {row.status:<8} next {when}  "
        f"attempts {row.attempts}  {owner}"
    )


def cmd_task(args: argparse.Namespace) -> int:
    with psycopg.connect(args.db, autocommit=True) as connection:
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
    module = importlib.import_module(args.module)
    processors = getattr(module, "PROCESSORS", None)
    if not isinstance(processors, dict) or not processors:
        print(
            f"tenure: module {args.module} has no PROCESSORS dict of kind (or (kind, state)) -> processor",
            file=sys.stderr,
        )
        return 2
    worker = TaskWorker(
        args.db,
        processors,
        concurrency=args.concurrency,
        lease=args.lease,
        poll_interval=args.poll_interval,
        listen=not args.no_listen,
        shutdown_grace=args.grace,
        name=args.name,
    )
    with worker, _metrics_server(args.metrics, worker.metrics):
        _say(
            f"task worker {worker.instance_id} ({worker.name}) started: kinds {', '.join(worker.kinds)}; "
            f"concurrency {args.concurrency}, lease {args.lease} s, poll every {args.poll_interval} s"
        )
        wait_for_shutdown()
        _say(f"shutting down: finishing or releasing {worker.in_flight()} tasks in flight")
    stats = worker.stats
    _say(
        f"stopped: {stats.acquired} acquired, {stats.completed} completed, {stats.failed} failed, "
        f"{stats.lost} leases lost, {stats.discarded} results discarded"
    )
    return 0


def cmd_claim(args: argparse.Namespace) -> int:
    with psycopg.connect(args.db, autocommit=True) as connection:
        driver = Driver(connection)
        if args.claim_command == "register":
            print(f"{driver.claim_register(args.keyspace, args.keys)} keys registered in {args.keyspace}")
        elif args.claim_command == "retire":
            print(f"{driver.claim_retire(args.keyspace, args.keys)} keys retired from {args.keyspace}")
        elif args.claim_command == "list":
            if args.instances:
                for i in driver.claim_instances(args.keyspace):
                    state = "live" if i.live else "gone"
                    print(
                        f"{i.keyspace}  {i.instance_id}  {state}  holds {i.keys_held} of a fair share of "
                        f"{i.fair_share}, renewed {i.renewed_at.isoformat(timespec='seconds')}"
                    )
            else:
                for c in driver.claims(args.keyspace):
                    holder = f"{c.claimant} epoch {c.epoch}" if c.live else f"unclaimed for {c.unclaimed_for}"
                    print(f"{c.keyspace}  {c.key:<24} {holder}")
    return 0


def cmd_claim_run(args: argparse.Namespace) -> int:
    claimer = Claimer(
        args.db,
        args.keyspace,
        cycle=args.cycle,
        expiry=args.expiry,
        name=args.name,
        on_gained=lambda keys: _say(f"gained {len(keys)}: {', '.join(sorted(keys))}"),
        on_lost=lambda keys: _say(f"lost {len(keys)}: {', '.join(sorted(keys))}"),
    )
    _say(
        f"claimer {claimer.instance_id} ({claimer.name}) in {args.keyspace}: "
        f"cycle {args.cycle} s, expiry {args.expiry} s"
    )
    with claimer, _metrics_server(args.metrics, claimer.metrics):
        wait_for_shutdown()
        _say("shutting down: releasing every claim")
    _say("released")
    return 0


def cmd_batch(args: argparse.Namespace) -> int:
    with psycopg.connect(args.db, autocommit=True) as connection:
        driver = Driver(connection)
        if args.batch_command == "configure":
            driver.batch_configure(
                args.keyspace, mode=args.mode, implicit_deps=not args.no_implicit_deps, key=args.key
            )
            print(f"{args.keyspace}{'/' + args.key if args.key else ''}: mode {args.mode}")
        elif args.batch_command == "enqueue":
            payload = args.payload.encode() if args.payload is not None else sys.stdin.buffer.read()
            batch = driver.batch_enqueue(
                args.keyspace,
                args.key,
                payload,
                state_keys=args.state_key,
                depends_on=args.depends_on,
                id=args.id,
            )
            print(f"{batch.id} {args.key} #{batch.seq} {'enqueued' if batch.created else 'already there'}")
        elif args.batch_command == "keys":
            rows = [r for r in driver.batch_keys(args.keyspace) if r.halted or not args.halted]
            for r in rows:
                age = f"oldest waiting {r.oldest_waiting_age}" if r.oldest_waiting_age is not None else ""
                holder = str(r.claimant) if r.claimed else "unclaimed"
                print(
                    f"{r.keyspace}  {r.key:<20} {r.mode:<13} queued {r.queued} pending {r.pending} "
                    f"unknown {r.unknown} invalid {r.invalid} committed {r.committed}  {holder}  {age}"
                    f"{'  HALTED' if r.halted else ''}"
                )
            if args.json:
                print(json.dumps([dataclasses.asdict(r) for r in rows], default=str, indent=2))
        elif args.batch_command == "list":
            batches = driver.batches(args.keyspace, key=args.key, status=args.status, limit=args.limit)
            for b in batches:
                print(
                    f"{b.id}  {b.key} #{b.seq}  {b.status:<9} attempts {b.attempts}  "
                    f"enqueued {b.enqueued_at.isoformat(timespec='seconds')}  {b.detail or ''}"
                )
            if args.json:
                print(json.dumps([dataclasses.asdict(b) for b in batches], default=str, indent=2))
        elif args.batch_command in ("skip", "retry"):
            repair = driver.batch_skip if args.batch_command == "skip" else driver.batch_retry
            if not repair(args.keyspace, args.id):
                print(f"batch {args.id} is not invalid: left as it is")
                return 1
            print(f"batch {args.id} {'skipped' if args.batch_command == 'skip' else 'queued again'}")
    return 0


def cmd_batch_run(args: argparse.Namespace) -> int:
    module = importlib.import_module(args.module)
    submit, status = getattr(module, "SUBMIT", None), getattr(module, "STATUS", None)
    if not callable(submit) or not callable(status):
        print(
            f"tenure: module {args.module} needs SUBMIT(batch) and STATUS(batch) -> "
            "'committed' | 'invalid' | 'unknown' | None",
            file=sys.stderr,
        )
        return 2
    pool = SubmissionPool(
        args.db,
        args.keyspace,
        submit=submit,
        status=status,
        submitters=args.submitters,
        depth=args.depth,
        cycle=args.cycle,
        expiry=args.expiry,
        poll_interval=args.poll_interval,
        listen=not args.no_listen,
        name=args.name,
    )
    with pool, _metrics_server(args.metrics, pool.metrics):
        _say(
            f"queue {args.keyspace}: instance {pool.claimer.instance_id} ({pool.claimer.name}), "
            f"{args.submitters} submitters, depth {args.depth}, cycle {args.cycle} s, expiry {args.expiry} s"
        )
        wait_for_shutdown()
        _say("shutting down: releasing every claim")
    _say(f"stopped: {pool.submitted} submitted, {pool.skipped} skipped after losing their key")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    with psycopg.connect(args.db, autocommit=True) as connection:
        while True:
            status = collect(connection)
            if args.json:
                print(json.dumps(status.as_json(), indent=2), flush=True)
            else:
                if args.watch:
                    print("\033[H\033[2J", end="")  # clear the terminal
                print(render(status), flush=True)
            if not args.watch:
                return 0
            if wait_for_shutdown(timeout=args.watch):
                return 0


def cmd_sqitch(args: argparse.Namespace) -> int:
    if args.command == "revert" and not args.yes and not sys.stdin.isatty():
        # Without a terminal sqitch takes its default answer, which is yes: never revert unasked.
        print(
            "tenure: revert drops tenure's tables and their state; stdin is not a terminal, so nobody can "
            "be asked: pass --yes to confirm. Nothing was changed.",
            file=sys.stderr,
        )
        return 2
    options = ["--to", args.to] if getattr(args, "to", None) else []
    if args.command == "deploy":
        options.append("--verify")
    if args.command == "revert" and args.yes:
        options.append("-y")
    print(f"tenure: sqitch {args.command} of the project in {project_dir()}", file=sys.stderr, flush=True)
    return run_sqitch(args.db, args.command, *options)


def cmd_replica_run(args: argparse.Namespace) -> int:
    manager = ReplicaManager(
        args.db,
        name=args.name,
        counter=args.counter,
        scope=args.scope,
        interval=args.interval,
        idle_timeout=args.idle_timeout,
        grace=args.grace,
        on_active=lambda epoch: _say(f"active in epoch {epoch}"),
        on_passive=lambda reason: _say(f"passive: {reason}"),
    )
    timing = manager.timing
    _say(
        f"replica {manager.name}: interval {timing.interval:g} s, "
        f"idle_session_timeout {timing.idle_timeout:g} s, grace {timing.grace:g} s"
    )
    with manager:
        server = None
        if args.http:
            host, port = args.http
            server = ReplicaServer(manager, host=host, port=port).start()
            _say(f"serving {server.url}/health/active and /health/live")
        stopping = wait_for_shutdown(timeout=2 * manager.timing.interval)
        if not stopping and manager.lock_id is not None:
            answer = manager.last_answer
            who = (
                "" if answer is None or answer.acquired else f"; active: {answer.replica} (pid {answer.pid})"
            )
            _say(f"lock id {manager.lock_id}{who}")
        if not stopping:
            wait_for_shutdown()
        _say("shutting down: releasing the lock")
        if server is not None:
            server.stop()
    _say("released")
    return 0


def cmd_replica_status(args: argparse.Namespace) -> int:
    with psycopg.connect(args.db, autocommit=True) as connection:
        driver = Driver(connection)
        rows = (
            driver.replicas()
            if args.all
            else [r for r in [driver.replica_holder(counter=args.counter, scope=args.scope)] if r]
        )
    if not rows:
        print("no replica lock registered")
        return 3
    for r in rows:
        if r.pid is None:
            reserved = f", reserved for {r.reserved_until.isoformat()}" if r.reserved_until else ""
            print(f"{r.scope}/{r.counter} lock {r.lock_id}: no active replica{reserved}")
        else:
            since = r.since.isoformat() if r.since else "?"
            print(
                f"{r.scope}/{r.counter} lock {r.lock_id}: active replica {r.replica} in epoch {r.epoch}, "
                f"pid {r.pid} ({r.application_name}), since {since}"
            )
    return 0 if all(r.pid is not None for r in rows) else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tenure",
        description="High availability for services that share one PostgreSQL database.",
        epilog="The database is given by --db (a conninfo string or URL), else $TENURE_DB, else the "
        "libpq environment (PGHOST, PGPORT, PGUSER, PGDATABASE).",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log what the runtime does")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help, description=help, epilog=EXAMPLES[name])
        if name not in ("check-primary", "task", "claim", "batch", "replica"):
            sub.add_argument("--db", default=os.environ.get("TENURE_DB", ""), help="conninfo or URL")
        return sub

    elect = command("elect", "run an elector for a service type and print its role changes")
    elect.add_argument("--type", dest="utype", required=True, help="service type to elect a primary for")
    elect.add_argument("--interval", type=float, default=1.0, help="heartbeat interval I in seconds (1)")
    elect.add_argument("--timeout", type=float, default=3.0, help="timeout T in seconds, > 2I (3)")
    elect.add_argument("--name", help="instance name shown in pg_stat_activity (host name)")
    elect.add_argument(
        "--http",
        metavar="HOST:PORT",
        type=_address,
        help="serve GET /primary, /health/live and /metrics there",
    )
    elect.set_defaults(run=cmd_elect)

    primary = command("primary", "print the live primary of a service type (exit 3 when there is none)")
    primary.add_argument("--type", dest="utype", required=True)
    primary.set_defaults(run=cmd_primary)

    check = command(
        "check-primary", "ask a local elector's /primary endpoint (exit 0 primary, 1 not, 2 no answer)"
    )
    check.add_argument("--url", required=True, help="the elector's /primary URL")
    check.add_argument("--window", type=float, default=2.0, help="T - I: how long a yes stays valid (2)")
    check.add_argument("--watch", action="store_true", help="keep asking and print changes until SIGTERM")
    check.add_argument("--interval", type=float, default=0.5, help="seconds between questions with --watch")
    check.set_defaults(run=cmd_check_primary)

    demo = command("demo", "run demo service instances, kill the primary, print the timeline")
    demo.add_argument("--instances", type=int, default=3)
    demo.add_argument("--interval", type=float, default=0.5)
    demo.add_argument("--timeout", type=float, default=1.5)
    demo.set_defaults(run=cmd_demo)

    bench = command(
        "bench", "measure heartbeat, task and claim throughput, takeover and wake-up times against baselines"
    )
    bench.add_argument(
        "--seconds", type=float, default=10.0, help="length of each heartbeat and claim run (10)"
    )
    bench.add_argument(
        "--clients", type=int, default=8, help="concurrent electors / pgbench clients, also for enqueue (8)"
    )
    bench.add_argument("--kills", type=int, default=20, help="primaries to kill for the takeover times (20)")
    bench.add_argument(
        "--backlogs",
        type=_counts,
        default=[100_000, 1_000_000],
        help="task backlogs to complete from (100000,1000000)",
    )
    bench.add_argument(
        "--task-workers",
        type=_counts,
        default=[1, 4, 8],
        help="task worker processes / pgbench clients completing tasks (1,4,8)",
    )
    bench.add_argument(
        "--task-seconds", type=float, default=10.0, help="length of each task completion and enqueue run (10)"
    )
    bench.add_argument(
        "--enqueue-batches",
        type=_counts,
        default=[100, 1000],
        help="tasks per task_enqueue_many call (100,1000)",
    )
    bench.add_argument(
        "--wake-tasks", type=int, default=50, help="tasks enqueued one by one for the wake-up latency (50)"
    )
    bench.add_argument(
        "--claim-keys",
        type=_counts,
        default=[1_000, 10_000],
        help="keys registered for the claim renew + take cost, one run per count (1000,10000)",
    )
    bench.add_argument(
        "--claim-instances",
        type=int,
        default=8,
        help="instances sharing the keys, one pgbench client each (8)",
    )
    bench.add_argument(
        "--queue-keys", type=_counts, default=[4, 1000], help="keys of the submission-queue runs (4,1000)"
    )
    bench.add_argument(
        "--queue-batches",
        type=int,
        default=2000,
        help="batches per submission-queue run, at least 4 per key (2000)",
    )
    bench.add_argument(
        "--sections",
        type=_sections,
        default=list(SECTIONS),
        help=f"comma-separated parts to run ({','.join(SECTIONS)})",
    )
    bench.add_argument(
        "--replica-trials",
        type=int,
        default=20,
        help="SIGKILLs of the active replica behind HAProxy, per setting, for the failover times (20)",
    )
    bench.set_defaults(run=cmd_bench)

    task = command("task", "enqueue, list, inspect, eject, requeue and purge tasks, or run a task worker")
    task_commands = task.add_subparsers(dest="task_command", required=True, metavar="TASK_COMMAND")

    def task_command(name: str, help: str) -> argparse.ArgumentParser:
        sub = task_commands.add_parser(name, help=help, description=help, epilog=TASK_EXAMPLES[name])
        sub.add_argument("--db", default=os.environ.get("TENURE_DB", ""), help="conninfo or URL")
        sub.set_defaults(run=cmd_task)
        return sub

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
    worker = task_command("worker", "run a task worker for the processors of a Python module")
    worker.add_argument("--module", required=True, help="importable module with a PROCESSORS dict")
    worker.add_argument("--concurrency", type=int, default=4)
    worker.add_argument("--lease", type=float, default=30.0, help="lease in seconds (30)")
    worker.add_argument("--poll-interval", type=float, default=1.0, help="seconds between polls (1)")
    worker.add_argument("--no-listen", action="store_true", help="poll only, no LISTEN/NOTIFY")
    worker.add_argument("--grace", type=float, default=5.0, help="seconds to finish tasks on shutdown (5)")
    worker.add_argument("--name", help="instance name shown in pg_stat_activity")
    worker.add_argument(
        "--metrics", metavar="HOST:PORT", type=_address, help="serve Prometheus metrics at /metrics there"
    )
    worker.set_defaults(run=cmd_task_worker)

    claim = command("claim", "register, retire and list keys, or hold a fair share of them")
    claim_commands = claim.add_subparsers(dest="claim_command", required=True, metavar="CLAIM_COMMAND")

    def claim_command(name: str, help: str) -> argparse.ArgumentParser:
        sub = claim_commands.add_parser(name, help=help, description=help, epilog=CLAIM_EXAMPLES[name])
        sub.add_argument("--db", default=os.environ.get("TENURE_DB", ""), help="conninfo or URL")
        sub.set_defaults(run=cmd_claim)
        return sub

    register = claim_command("register", "register keys so instances can claim them")
    register.add_argument("--keyspace", required=True)
    register.add_argument("keys", nargs="+")
    retire = claim_command("retire", "retire keys: their claims end and they can no longer be claimed")
    retire.add_argument("--keyspace", required=True)
    retire.add_argument("keys", nargs="+")
    claims = claim_command("list", "list keys with their claimants, or the instances with their shares")
    claims.add_argument("--keyspace")
    claims.add_argument("--instances", action="store_true", help="list instances, keys held and fair share")
    run = claim_command("run", "hold a fair share of a keyspace's keys and print gains and losses")
    run.add_argument("--keyspace", required=True)
    run.add_argument("--cycle", type=float, default=1.0, help="seconds between renew-and-take cycles (1)")
    run.add_argument("--expiry", type=float, default=3.0, help="claim expiry in seconds, > 2 cycles (3)")
    run.add_argument("--name", help="instance name shown in pg_stat_activity")
    run.add_argument(
        "--metrics", metavar="HOST:PORT", type=_address, help="serve Prometheus metrics at /metrics there"
    )
    run.set_defaults(run=cmd_claim_run)

    status = command("status", "one screen of primaries, claims, tasks and batch queues, from tenure's views")
    status.add_argument(
        "--watch", type=float, metavar="SECONDS", help="refresh every SECONDS until interrupted"
    )
    status.add_argument("--json", action="store_true", help="print the same as JSON, for scripts")
    status.set_defaults(run=cmd_status)

    batch = command("batch", "configure a submission queue, enqueue, inspect and repair batches, or serve it")
    batch_commands = batch.add_subparsers(dest="batch_command", required=True, metavar="BATCH_COMMAND")

    def batch_command(name: str, help: str) -> argparse.ArgumentParser:
        sub = batch_commands.add_parser(name, help=help, description=help, epilog=BATCH_EXAMPLES[name])
        sub.add_argument("--db", default=os.environ.get("TENURE_DB", ""), help="conninfo or URL")
        sub.add_argument("--keyspace", required=True, help="the queue (a claims keyspace)")
        sub.set_defaults(run=cmd_batch)
        return sub

    configure = batch_command("configure", "set the submission mode of a queue, or of one key")
    configure.add_argument("--mode", required=True, choices=["unconstrained", "serial", "parallel"])
    configure.add_argument("--key", help="only this key (default: the whole queue)")
    configure.add_argument(
        "--no-implicit-deps", action="store_true", help="an invalid batch does not halt its key"
    )
    batch_enqueue = batch_command("enqueue", "enqueue one batch after every earlier batch of its key")
    batch_enqueue.add_argument("--key", required=True)
    batch_enqueue.add_argument("--payload", help="payload text (default: read bytes from standard input)")
    batch_enqueue.add_argument(
        "--state-key", action="append", default=[], help="a state key it reads or writes (parallel mode)"
    )
    batch_enqueue.add_argument(
        "--depends-on", action="append", type=uuid.UUID, default=[], help="id of a batch it depends on"
    )
    batch_enqueue.add_argument("--id", type=uuid.UUID, help="its id: enqueueing the same id twice makes one")
    keys = batch_command("keys", "depth per key: batches per status, oldest waiting age, halted keys")
    keys.add_argument("--halted", action="store_true", help="only keys an invalid batch halts")
    keys.add_argument("--json", action="store_true", help="also print the rows as JSON")
    batch_list = batch_command("list", "list batches by key and status, in per-key order")
    batch_list.add_argument("--key")
    batch_list.add_argument(
        "--status", choices=["queued", "pending", "committed", "invalid", "unknown", "skipped"]
    )
    batch_list.add_argument("--limit", type=int, default=100)
    batch_list.add_argument("--json", action="store_true", help="also print the rows as JSON")
    skip = batch_command("skip", "let a halted key go past its invalid batch (never submitted again)")
    skip.add_argument("id", type=uuid.UUID)
    retry = batch_command("retry", "queue an invalid batch again, in its place in its key's order")
    retry.add_argument("id", type=uuid.UUID)
    batch_run = batch_command("run", "serve a queue: claim keys, submit their batches in order, resolve them")
    batch_run.add_argument(
        "--module", required=True, help="importable module with SUBMIT(batch) and STATUS(batch) functions"
    )
    batch_run.add_argument("--submitters", type=int, default=8, help="submitter threads (8)")
    batch_run.add_argument("--depth", type=int, default=1, help="rounds per selection: 1 = one-round (1)")
    batch_run.add_argument("--cycle", type=float, default=1.0, help="seconds between claim cycles (1)")
    batch_run.add_argument(
        "--expiry", type=float, default=3.0, help="claim expiry in seconds, > 2 cycles (3)"
    )
    batch_run.add_argument("--poll-interval", type=float, default=0.2, help="seconds between polls (0.2)")
    batch_run.add_argument("--no-listen", action="store_true", help="poll only, no LISTEN/NOTIFY")
    batch_run.add_argument("--name", help="instance name shown in pg_stat_activity")
    batch_run.add_argument(
        "--metrics", metavar="HOST:PORT", type=_address, help="serve Prometheus metrics at /metrics there"
    )
    batch_run.set_defaults(run=cmd_batch_run)
    deploy = command(
        "deploy",
        "deploy (or upgrade) tenure's schema into a database with sqitch, from the project this package "
        "carries; needs sqitch and a role that may create roles and schemas",
    )
    deploy.add_argument("--to", metavar="CHANGE", help="deploy up to this change or @tag (default: all)")
    deploy.set_defaults(run=cmd_sqitch)
    revert = command("revert", "revert tenure's schema with sqitch: to a change or @tag, or all of it")
    revert.add_argument("--to", metavar="CHANGE", help="revert down to this change or @tag (default: all)")
    revert.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    revert.set_defaults(run=cmd_sqitch)
    verify = command("verify", "check with sqitch's verify scripts that tenure's schema is deployed intact")
    verify.set_defaults(run=cmd_sqitch)
    replica = command("replica", "run an active/passive replica lock holder, or show who is active")
    replica_commands = replica.add_subparsers(
        dest="replica_command", required=True, metavar="REPLICA_COMMAND"
    )

    def replica_command(name: str, help: str) -> argparse.ArgumentParser:
        sub = replica_commands.add_parser(name, help=help, description=help, epilog=REPLICA_EXAMPLES[name])
        sub.add_argument("--db", default=os.environ.get("TENURE_DB", ""), help="conninfo or URL")
        sub.add_argument("--counter", type=int, default=0, help="lock counter (0)")
        sub.add_argument("--scope", help="lock scope (the database's name)")
        return sub

    replica_run = replica_command(
        "run", "hold the replica lock while active, print role changes, serve /health/active"
    )
    replica_run.add_argument("--name", help="replica name shown in pg_stat_activity (host name)")
    replica_run.add_argument(
        "--http",
        metavar="HOST:PORT",
        type=_address,
        help="serve GET /health/active, /health/live and /metrics",
    )
    replica_run.add_argument("--interval", type=float, default=0.5, help="ping / acquisition interval (0.5)")
    replica_run.add_argument(
        "--idle-timeout", type=float, help="idle_session_timeout of the lock session (3 intervals)"
    )
    replica_run.add_argument(
        "--grace",
        type=float,
        help="seconds to reclaim the lock after a lost connection (4 intervals; 0: none)",
    )
    replica_run.set_defaults(run=cmd_replica_run)
    status = replica_command(
        "status", "print the active replica: pid, application, epoch, since (exit 1: none)"
    )
    status.add_argument("--all", action="store_true", help="every registered replica lock")
    status.set_defaults(run=cmd_replica_status)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.run(args))
    except TenureError as error:
        print(f"tenure: {error}", file=sys.stderr)
        return 2
    except psycopg.OperationalError as error:
        print(f"tenure: cannot reach the database: {error}", file=sys.stderr)
        return 2
    except SqitchMissing as error:
        print(f"tenure: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
