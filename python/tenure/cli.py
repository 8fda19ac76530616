"""The ``tenure`` command."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import psycopg

from tenure.driver import Driver
from tenure.elector import Elector
from tenure.errors import TenureError
from tenure.health import PrimaryEndpoint, PrimaryWatch, ask_primary
from tenure.shutdown import wait_for_shutdown

EXAMPLES = {
    "elect": "example: tenure elect --db postgresql://app@db/prod --type scheduler --interval 1 --timeout 3 "
    "--http 127.0.0.1:8080",
    "primary": "example: tenure primary --db postgresql://app@db/prod --type scheduler",
    "check-primary": "example: tenure check-primary --url http://127.0.0.1:8080/primary && run-the-job",
    "demo": "example: tenure demo --db postgresql://postgres@127.0.0.1:5432/tenure_demo",
    "bench": "example: tenure bench --db postgresql://postgres@127.0.0.1:5432/tenure_bench --kills 20",
}


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
            host, _, port = args.http.rpartition(":")
            endpoint = PrimaryEndpoint(elector, host=host or "127.0.0.1", port=int(port)).start()
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

    workdir = Path(tempfile.mkdtemp(prefix="tenure-demo-"))
    ok = run_demo(
        args.db, instances=args.instances, interval=args.interval, timeout=args.timeout, workdir=workdir
    )
    return 0 if ok else 1


def cmd_bench(args: argparse.Namespace) -> int:
    from tenure.bench import run_bench

    return run_bench(args.db, seconds=args.seconds, clients=args.clients, kills=args.kills)


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
        if name != "check-primary":
            sub.add_argument("--db", default=os.environ.get("TENURE_DB", ""), help="conninfo or URL")
        return sub

    elect = command("elect", "run an elector for a service type and print its role changes")
    elect.add_argument("--type", dest="utype", required=True, help="service type to elect a primary for")
    elect.add_argument("--interval", type=float, default=1.0, help="heartbeat interval I in seconds (1)")
    elect.add_argument("--timeout", type=float, default=3.0, help="timeout T in seconds, > 2I (3)")
    elect.add_argument("--name", help="instance name shown in pg_stat_activity (host name)")
    elect.add_argument("--http", metavar="HOST:PORT", help="serve GET /primary and /health/live there")
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

    bench = command("bench", "measure heartbeat throughput and takeover times against baselines")
    bench.add_argument("--seconds", type=float, default=10.0, help="length of each throughput run (10)")
    bench.add_argument("--clients", type=int, default=8, help="concurrent electors / pgbench clients (8)")
    bench.add_argument("--kills", type=int, default=20, help="primaries to kill for the takeover times (20)")
    bench.set_defaults(run=cmd_bench)
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


if __name__ == "__main__":
    sys.exit(main())
