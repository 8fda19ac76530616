"""Deploy, revert and verify tenure's schema with sqitch, from the project bundled in the package.

A wheel carries the sqitch project (sqitch.conf, sqitch.plan, db/) as ``tenure/sqitch``, copied at build
time from the repository (python/setup.py); an editable install uses the repository's own. The database is
given as a libpq conninfo string or URL and reaches sqitch as libpq environment variables with the target
``db:pg:``, so every form libpq accepts (Unix sockets, services, TLS options) works the same way.
"""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
from pathlib import Path

from psycopg.conninfo import conninfo_to_dict

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
    package = Path(__file__).resolve().parent
    for candidate in (package / "sqitch", package.parents[1]):
        if (candidate / "sqitch.plan").is_file() and (candidate / "db" / "deploy").is_dir():
            return candidate
    raise SqitchMissing(
        f"no sqitch project next to {package}: the package was built without it. "
        "Build the wheel from the repository (pip wheel ./python) so that it carries sqitch.plan and db/."
    )


def plan_release() -> str:
    """The schema this package deploys: its plan's last release tag, and how many changes follow it."""
    try:
        lines = (project_dir() / "sqitch.plan").read_text().splitlines()
    except SqitchMissing:
        return "no sqitch project"
    entries = [line.split()[0] for line in lines if line and not line.startswith(("%", "#"))]
    tags = [index for index, name in enumerate(entries) if name.startswith("@")]
    if not tags:
        return f"{len(entries)} changes, no release tag"
    after = len(entries) - tags[-1] - 1
    return entries[tags[-1]] + (f" and {after} change{'s' * (after != 1)} after it" if after else "")


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
