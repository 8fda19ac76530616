"""The ``tenure`` command: one module per area (``heartbeat``, ``tasks``, ``claims``,
``batches``, ``replicas``, ``schedules``) plus ``maintain``, ``status``, ``dashboard`` and ``deploy``,
each registering its commands on the shared parser; ``common`` holds what they share.

``tenure demo`` and ``tenure bench`` import their packages only when run, so no other
command loads the demos or the benchmark.
"""

from __future__ import annotations

import argparse
import getpass
import logging
import os
import sys
import tempfile
from importlib.metadata import version as package_version
from pathlib import Path

import psycopg
from psycopg.conninfo import conninfo_to_dict

from tenure.cli import (
    batches,
    claims,
    dashboard,
    deploy,
    heartbeat,
    maintain,
    replicas,
    schedules,
    status,
    tasks,
)
from tenure.cli.common import address, db_option
from tenure.deploy import SqitchMissing, plan_release
from tenure.errors import TenureError

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
    "maintain": "example: tenure maintain --db postgresql://app@db/prod --task-age 7d --retention-every 60",
    "schedule": "example: tenure schedule list --db postgresql://app@db/prod",
    "dashboard": "example: tenure dashboard --db postgresql://dashboard@db/prod --http 127.0.0.1:8080 "
    "(operator actions: set TENURE_DASHBOARD_TOKEN or --token)",
}
GROUPS = (
    "check-primary",
    "task",
    "claim",
    "batch",
    "replica",
    "schedule",
)  # --db on their subcommands instead


def cmd_demo(args: argparse.Namespace) -> int:
    from tenure.demo import interactive, run_all

    workdir = Path(tempfile.mkdtemp(prefix="tenure-demo-"))
    ok = run_all(
        args.db, workdir=workdir, instances=args.instances, interval=args.interval, timeout=args.timeout
    )
    if args.dashboard and interactive():
        try:
            from tenure.demo.live import run_live
        except ImportError as missing:
            print(f"tenure demo: no dashboard, it needs the 'dashboard' extra: {missing}", file=sys.stderr)
        else:
            host, port = args.http
            run_live(args.db, workdir=workdir, host=host, port=port)
    return 0 if ok else 1


def cmd_bench(args: argparse.Namespace) -> int:
    from tenure.bench import main as bench

    return bench(args.options)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tenure",
        description="High availability for services that share one PostgreSQL database.",
        epilog="The database is given by --db (a conninfo string or URL), else $TENURE_DB, else the "
        "libpq environment (PGHOST, PGPORT, PGUSER, PGDATABASE).",
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"tenure {package_version('tenure')} (schema: sqitch plan {plan_release()})",
        help="print the package's version and the schema release it deploys, and exit",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log what the runtime does")
    parser.add_argument(
        "--db-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="how long a command that reads or repairs state waits for the database: to connect, for each "
        "statement and for the whole command (30)",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help, description=help, epilog=EXAMPLES[name])
        if name not in GROUPS:
            db_option(sub)
        return sub

    heartbeat.register(command)
    demo = command("demo", "run every part of the demo: each area under a fault, then a database failover")
    demo.add_argument("--instances", type=int, default=3)
    demo.add_argument("--interval", type=float, default=0.5)
    demo.add_argument("--timeout", type=float, default=1.5)
    demo.add_argument(
        "--http",
        type=address,
        default=("127.0.0.1", 8080),
        metavar="HOST:PORT",
        help="where the dashboard listens at the end (127.0.0.1:8080; another free port if taken)",
    )
    demo.add_argument(
        "--no-dashboard",
        dest="dashboard",
        action="store_false",
        help="end after the checks; without it, in a terminal and not in CI, the demo ends with the "
        "dashboard over a fleet still at work, until Ctrl-C",
    )
    demo.set_defaults(run=cmd_demo)
    # The bench parses its own options (tenure bench --help lists them) so that its
    # package is imported only when it runs.
    bench = commands.add_parser(
        "bench",
        help="measure throughput, takeover and wake-up times against baselines (see tenure bench --help)",
        add_help=False,
        prefix_chars="\0",
    )
    bench.add_argument("options", nargs=argparse.REMAINDER)
    bench.set_defaults(run=cmd_bench)
    tasks.register(command)
    claims.register(command)
    status.register(command)
    batches.register(command)
    deploy.register(command)
    replicas.register(command)
    maintain.register(command)
    schedules.register(command)
    dashboard.register(command)
    return parser


def main(argv: list[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    # Everything after --exec is the supervised command, options included: argparse would
    # take them for its own (and drops the "--" that usually separates them).
    command = None
    if "--exec" in words:
        at = words.index("--exec")
        words, command = [*words[: at + 1]], words[at + 1 :]
    args = build_parser().parse_args(words)
    if command is not None:
        args.exec = command
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        if isinstance(getattr(args, "db", None), str):
            conninfo_to_dict(args.db)  # a misspelt keyword is refused here, before anything starts
        return int(args.run(args))
    except (TenureError, SqitchMissing) as error:
        print(f"tenure: {error}", file=sys.stderr)
        return 2
    except psycopg.OperationalError as error:
        return refuse(f"cannot reach the database: {one_line(error)}")
    except (
        psycopg.errors.InvalidSchemaName,
        psycopg.errors.UndefinedTable,
        psycopg.errors.UndefinedFunction,
    ) as error:
        return refuse(
            one_line(error),
            hint="tenure is not deployed in this database, or an older version is: run tenure deploy",
        )
    except psycopg.errors.InsufficientPrivilege as error:
        return refuse(one_line(error), hint=f"GRANT tenure_worker TO {role_of(args)}")
    except psycopg.ProgrammingError as error:
        if error.sqlstate is not None:
            raise
        return refuse(
            f"--db (or $TENURE_DB) is not a valid conninfo: {one_line(error)}",
            hint="KEY=VALUE pairs libpq knows (host=db port=5432 dbname=app user=app) or a postgresql:// URL",
        )


def refuse(message: str, *, hint: str | None = None) -> int:
    """One line on stderr and exit 2: what went wrong and, when known, what to do."""
    print(f"tenure: {message}" + (f" (hint: {hint})" if hint else ""), file=sys.stderr)
    return 2


def one_line(error: psycopg.Error) -> str:
    """The server's primary message without the statement it quotes, or libpq's message on one line."""
    primary = error.diag.message_primary
    return primary or " ".join(line.strip() for line in str(error).splitlines() if line.strip())


def role_of(args: argparse.Namespace) -> str:
    """The role a command connected as, as libpq chose it (conninfo, PGUSER, the system user)."""
    user = conninfo_to_dict(getattr(args, "db", "") or "").get("user")
    return str(user or os.environ.get("PGUSER") or getpass.getuser())


if __name__ == "__main__":
    sys.exit(main())
