"""Deploy, revert and verify tenure's schema with sqitch, from the project bundled in the package.

A wheel carries the sqitch project (sqitch.conf, sqitch.plan, db/) as ``tenure/sqitch``, copied at build
time from the repository (python/setup.py); an editable install uses the repository's own. The database is
given as a libpq conninfo string or URL and reaches sqitch as libpq environment variables with the target
``db:pg:``, so every form libpq accepts (Unix sockets, services, TLS options) works the same way.
"""

from __future__ import annotations

import argparse
import getpass
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

from psycopg.conninfo import conninfo_to_dict

from tenure.cli.common import Command
from tenure.errors import InvalidArgument

# libpq's connection parameters that have an environment variable (libpq docs, "Environment Variables").
_ENVIRONMENT = {
    "host": "PGHOST",
    "hostaddr": "PGHOSTADDR",
    "port": "PGPORT",
    "dbname": "PGDATABASE",
    "user": "PGUSER",
    "password": "PGPASSWORD",
    "passfile": "PGPASSFILE",
    "channel_binding": "PGCHANNELBINDING",
    "service": "PGSERVICE",
    "options": "PGOPTIONS",
    "application_name": "PGAPPNAME",
    "sslmode": "PGSSLMODE",
    "requiressl": "PGREQUIRESSL",
    "sslcompression": "PGSSLCOMPRESSION",
    "sslcert": "PGSSLCERT",
    "sslkey": "PGSSLKEY",
    "sslrootcert": "PGSSLROOTCERT",
    "sslcrl": "PGSSLCRL",
    "sslcrldir": "PGSSLCRLDIR",
    "sslsni": "PGSSLSNI",
    "requirepeer": "PGREQUIREPEER",
    "ssl_min_protocol_version": "PGSSLMINPROTOCOLVERSION",
    "ssl_max_protocol_version": "PGSSLMAXPROTOCOLVERSION",
    "gssencmode": "PGGSSENCMODE",
    "krbsrvname": "PGKRBSRVNAME",
    "gsslib": "PGGSSLIB",
    "connect_timeout": "PGCONNECT_TIMEOUT",
    "client_encoding": "PGCLIENTENCODING",
    "target_session_attrs": "PGTARGETSESSIONATTRS",
    "load_balance_hosts": "PGLOADBALANCEHOSTS",
}


class SqitchMissing(RuntimeError):
    """sqitch is not installed, or the sqitch project is not where it should be."""


def project_dir() -> Path:
    """The sqitch project: bundled in the installed package, else the repository of an editable install."""
    package = Path(__file__).resolve().parents[1]  # tenure/, from tenure/cli/deploy.py
    for candidate in (package / "sqitch", package.parents[1]):
        if (candidate / "sqitch.plan").is_file() and (candidate / "db" / "deploy").is_dir():
            return candidate
    raise SqitchMissing(
        f"no sqitch project next to {package}: the package was built without it. "
        "Build the wheel from the repository (pip wheel ./python) so that it carries sqitch.plan and db/."
    )


def sqitch_environment(conninfo: str) -> dict[str, str]:
    """The environment for sqitch: this process's, with the conninfo's parameters as PG* variables."""
    try:
        params = conninfo_to_dict(conninfo)
    except Exception as error:
        raise InvalidArgument(f"--db: not a valid conninfo string or URL: {error}") from error
    unknown = sorted(set(params) - set(_ENVIRONMENT))
    if unknown:
        raise InvalidArgument(
            f"--db: parameters {', '.join(unknown)} have no libpq environment variable, so sqitch cannot "
            f"be given them; set them in a service file (service=...) or leave them out"
        )
    env = dict(os.environ)
    env.update({_ENVIRONMENT[key]: str(value) for key, value in params.items()})
    user = getpass.getuser()
    env.setdefault("SQITCH_FULLNAME", user)
    env.setdefault("SQITCH_EMAIL", f"{user}@{socket.gethostname()}")
    return env


def run_sqitch(conninfo: str, command: str, *options: str) -> int:
    """Run ``sqitch COMMAND OPTIONS db:pg:`` in the project directory; returns sqitch's exit code."""
    sqitch = shutil.which("sqitch")
    if sqitch is None:
        raise SqitchMissing(
            "sqitch is not installed (not on PATH). On Debian: apt-get install sqitch libdbd-pg-perl; "
            "elsewhere see https://sqitch.org/download/"
        )
    env = sqitch_environment(conninfo)
    project = project_dir()
    return subprocess.run([sqitch, command, *options, "db:pg:"], cwd=project, env=env, check=False).returncode


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


def register(command: Command) -> None:
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
