"""``tenure replica``: hold the replica lock of an active/passive service, or show who is active."""

from __future__ import annotations

import argparse

from tenure.cli.common import Command, address, admin_connection, say, subcommands
from tenure.driver import Driver
from tenure.http.replica import ReplicaServer
from tenure.runtime.replicas import ReplicaManager
from tenure.runtime.shutdown import SIGNAL_CHECK, shutdown_signals

EXAMPLES = {
    "run": "example: tenure replica run --db postgresql://app@db/prod --http 127.0.0.1:8081 --interval 0.5",
    "status": "example: tenure replica status --db postgresql://app@db/prod --counter 0",
}


def cmd_replica_run(args: argparse.Namespace) -> int:
    manager = ReplicaManager(
        args.db,
        name=args.name,
        counter=args.counter,
        scope=args.scope,
        interval=args.interval,
        idle_timeout=args.idle_timeout,
        grace=args.grace,
        on_active=lambda epoch: say(f"active in epoch {epoch}"),
        on_passive=lambda reason: say(f"passive: {reason}"),
    )
    timing = manager.timing
    say(
        f"replica {manager.name}: interval {timing.interval:g} s, "
        f"idle_session_timeout {timing.idle_timeout:g} s, grace {timing.grace:g} s"
    )
    with manager, shutdown_signals() as stop:
        server = None
        if args.http:
            host, port = args.http
            server = ReplicaServer(manager, host=host, port=port).start()
            say(f"serving {server.url}/health/active and /health/live")
        if not stop.wait(2 * manager.timing.interval) and manager.lock_id is not None:
            answer = manager.last_answer
            who = (
                "" if answer is None or answer.acquired else f"; active: {answer.replica} (pid {answer.pid})"
            )
            say(f"lock id {manager.lock_id}{who}")
        while not stop.wait(SIGNAL_CHECK):  # a bounded wait: see wait_for_shutdown
            pass
        say("shutting down: releasing the lock")
        if server is not None:
            server.stop()
    say("released")
    return 0


def cmd_replica_status(args: argparse.Namespace) -> int:
    with admin_connection(args) as connection:
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


def _lock_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--counter", type=int, default=0, help="lock counter (0)")
    parser.add_argument("--scope", help="lock scope (the database's name)")


def register(command: Command) -> None:
    replica = command("replica", "run an active/passive replica lock holder, or show who is active")
    replica_command = subcommands(replica, "replica_command", EXAMPLES, options=_lock_options)

    replica_run = replica_command(
        "run", "hold the replica lock while active, print role changes, serve /health/active"
    )
    replica_run.add_argument("--name", help="replica name shown in pg_stat_activity (host name)")
    replica_run.add_argument(
        "--http",
        metavar="HOST:PORT",
        type=address,
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
