"""``tenure batch``: configure a submission queue, enqueue, inspect and repair batches, or serve one."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import importlib
import inspect
import json
import signal
import sys
import urllib.parse
import uuid
from typing import Any

import httpx

from tenure.cli.common import Command, address, admin_connection, metrics_server, say, subcommands
from tenure.driver import Driver
from tenure.http.batches import handler_pool
from tenure.runtime.batches import PREFETCH, AsyncSubmissionPool, SubmissionPool, Submissions
from tenure.runtime.shutdown import wait_for_shutdown

EXAMPLES = {
    "configure": "example: tenure batch configure --keyspace ledger --mode parallel --key po-17",
    "enqueue": "example: tenure batch enqueue --keyspace ledger --key po-17 --payload 'price 3.00' "
    "--state-key po-17/price",
    "keys": "example: tenure batch keys --keyspace ledger --halted",
    "list": "example: tenure batch list --keyspace ledger --status invalid",
    "skip": "example: tenure batch skip --keyspace ledger 0b6c1f9e-4d7a-4c8e-9a55-0f1e2d3c4b5a",
    "retry": "example: tenure batch retry --keyspace ledger 0b6c1f9e-4d7a-4c8e-9a55-0f1e2d3c4b5a",
    "run": "example: tenure batch run --keyspace ledger --module myapp.ledger --submitters 8 --depth 2 "
    "(or --http http://127.0.0.1:8080/ledger for a handler in any language)",
}


def cmd_batch(args: argparse.Namespace) -> int:
    with admin_connection(args) as connection:
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


def _pool_options(args: argparse.Namespace) -> dict[str, Any]:
    """The submission pool's options from the command line, whoever submits."""
    return {
        "submitters": args.submitters,
        "depth": args.depth,
        "prefetch": args.prefetch,
        "cycle": args.cycle,
        "expiry": args.expiry,
        "poll_interval": args.poll_interval,
        "listen": not args.no_listen,
        "name": args.name,
    }


def cmd_batch_run(args: argparse.Namespace) -> int:
    if args.http is not None:
        return _run_http(args)
    module = importlib.import_module(args.module)
    submit, status = getattr(module, "SUBMIT", None), getattr(module, "STATUS", None)
    if not callable(submit) or not callable(status):
        print(
            f"tenure: module {args.module} needs SUBMIT(batch) and STATUS(batch) -> "
            "'committed' | 'invalid' | 'unknown' | None (coroutine functions: served on asyncio)",
            file=sys.stderr,
        )
        return 2
    options = {"submit": submit, "status": status, **_pool_options(args)}
    if inspect.iscoroutinefunction(submit) or inspect.iscoroutinefunction(status):
        asyncio.run(_run_async(args, options))  # coroutines: an AsyncSubmissionPool on asyncio
        return 0
    pool = SubmissionPool(args.db, args.keyspace, **options)
    with pool, metrics_server(args.metrics, pool.metrics):
        _serving(args, pool)
        wait_for_shutdown()
        say("shutting down: releasing every claim")
    _stopped(pool)
    return 0


def _run_http(args: argparse.Namespace) -> int:
    url = urllib.parse.urlsplit(args.http)
    if url.scheme not in ("http", "https") or not url.hostname:
        print(
            f"tenure: --http needs the handler's base URL, like http://127.0.0.1:8080, got {args.http!r}",
            file=sys.stderr,
        )
        return 2
    if not args.http_timeout > 0:
        print(f"tenure: --http-timeout must be positive, got {args.http_timeout}", file=sys.stderr)
        return 2
    asyncio.run(_run_async(args, _pool_options(args), handler=args.http))
    return 0


async def _run_async(
    args: argparse.Namespace, options: dict[str, Any], *, handler: str | None = None
) -> None:
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(signum, stop.set)
    async with contextlib.AsyncExitStack() as stack:
        if handler is None:
            pool = AsyncSubmissionPool(args.db, args.keyspace, **options)
        else:
            limits = httpx.Limits(
                max_connections=args.submitters + 1, max_keepalive_connections=args.submitters + 1
            )
            client = await stack.enter_async_context(
                httpx.AsyncClient(timeout=args.http_timeout, limits=limits, trust_env=False)
            )
            pool = handler_pool(args.db, args.keyspace, url=handler, client=client, **options)
        await _serve_async(args, pool, stop)


async def _serve_async(args: argparse.Namespace, pool: AsyncSubmissionPool, stop: asyncio.Event) -> None:
    async with pool:
        with metrics_server(args.metrics, pool.metrics):
            _serving(args, pool)
            await stop.wait()
            say("shutting down: releasing every claim")
    _stopped(pool)


def _serving(args: argparse.Namespace, pool: Submissions) -> None:
    say(
        f"queue {args.keyspace}: instance {pool.claimer.instance_id} ({pool.claimer.name}), "
        f"{args.submitters} submitters, depth {args.depth}, prefetch {args.prefetch}, "
        f"cycle {args.cycle} s, expiry {args.expiry} s"
        f"{', asyncio' if isinstance(pool, AsyncSubmissionPool) else ''}"
        f"{f', handler {args.http}' if getattr(args, 'http', None) else ''}"
    )


def _stopped(pool: Submissions) -> None:
    say(f"stopped: {pool.submitted} submitted, {pool.skipped} skipped after losing their key")


def _keyspace_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--keyspace", required=True, help="the queue (a claims keyspace)")


def register(command: Command) -> None:
    batch = command("batch", "configure a submission queue, enqueue, inspect and repair batches, or serve it")
    batch_command = subcommands(batch, "batch_command", EXAMPLES, run=cmd_batch, options=_keyspace_option)

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
    handler = batch_run.add_mutually_exclusive_group(required=True)
    handler.add_argument("--module", help="importable module with SUBMIT(batch) and STATUS(batch) functions")
    handler.add_argument(
        "--http",
        metavar="URL",
        help="a local HTTP handler in any language: each batch is POSTed as JSON to URL/submit, and "
        'URL/status answers {"status": "committed" | "invalid" | "unknown" | null} (docs/batches.md)',
    )
    batch_run.add_argument(
        "--http-timeout", type=float, default=10.0, help="seconds a handler may take to answer a POST (10)"
    )
    batch_run.add_argument("--submitters", type=int, default=8, help="submitter threads (8)")
    batch_run.add_argument("--depth", type=int, default=1, help="rounds per selection: 1 = one-round (1)")
    batch_run.add_argument(
        "--prefetch",
        type=int,
        default=PREFETCH,
        help=f"batches per submitter each selection asks for ({PREFETCH})",
    )
    batch_run.add_argument("--cycle", type=float, default=1.0, help="seconds between claim cycles (1)")
    batch_run.add_argument(
        "--expiry", type=float, default=3.0, help="claim expiry in seconds, > 2 cycles (3)"
    )
    batch_run.add_argument("--poll-interval", type=float, default=0.2, help="seconds between polls (0.2)")
    batch_run.add_argument("--no-listen", action="store_true", help="poll only, no LISTEN/NOTIFY")
    batch_run.add_argument("--name", help="instance name shown in pg_stat_activity")
    batch_run.add_argument(
        "--metrics", metavar="HOST:PORT", type=address, help="serve Prometheus metrics at /metrics there"
    )
    batch_run.set_defaults(run=cmd_batch_run)
