"""``tenure dashboard``: the web pages over tenure's views (tenure.dashboard), served until
interrupted. Its packages (Starlette, Jinja2, uvicorn) are the ``dashboard`` extra, imported
only when this command runs."""

from __future__ import annotations

import argparse
import os
import sys
from datetime import timedelta

from tenure.cli.common import Command, address

TOKEN_VARIABLE = "TENURE_DASHBOARD_TOKEN"


def cmd_dashboard(args: argparse.Namespace) -> int:
    try:
        from tenure.dashboard import Settings, is_loopback, serve
    except ImportError as missing:
        print(
            "tenure: the dashboard needs the 'dashboard' extra (from a clone of tenure: "
            f"pip install './python[dashboard]'; from the wheel: pip install 'WHEEL[dashboard]'): {missing}",
            file=sys.stderr,
        )
        return 2
    host, port = args.http
    token = args.token or os.environ.get(TOKEN_VARIABLE) or None
    where = f"[{host}]" if ":" in host else host
    mode = "actions with the token" if token else "read-only"
    if not is_loopback(host):
        mode += "; beyond this machine: the token travels in clear unless a TLS proxy is in front"

    def announce() -> None:
        print(
            f"tenure dashboard at http://{where}:{port}/ ({mode}); Ctrl-C stops it",
            flush=True,
        )

    settings = Settings(
        token=token,
        refresh=args.refresh,
        allow_privileged_role=args.allow_privileged_role,
        session_lifetime=timedelta(seconds=args.session_lifetime),
        hosts=tuple(args.allow_host),
        trusted_proxies=tuple(args.trusted_proxy),
    )
    serve(args.db, host=host, port=port, settings=settings, allow_remote=args.allow_remote, announce=announce)
    return 0


def _refresh(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not 0 <= seconds <= 3600:
        raise argparse.ArgumentTypeError(f"expected 0 (never) to 3600 seconds, got {text!r}")
    return seconds


def _lifetime(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not 1 <= seconds <= 7 * 86400:
        raise argparse.ArgumentTypeError(f"expected 1 to 604800 seconds, got {text!r}")
    return seconds


def register(command: Command) -> None:
    dashboard = command("dashboard", "web pages of primaries, replicas, claims, tasks, batches and schedules")
    dashboard.add_argument(
        "--http",
        type=address,
        default=("127.0.0.1", 8080),
        metavar="HOST:PORT",
        help="where to listen (127.0.0.1:8080; beyond loopback only with --allow-remote and a token)",
    )
    dashboard.add_argument(
        "--allow-remote",
        action="store_true",
        help="listen on an address beyond loopback (needs a token; the token and the pages travel in "
        "clear over HTTP: put a TLS proxy in front, see docs/dashboard.md)",
    )
    dashboard.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a name the Host header may carry besides localhost, 127.0.0.1, ::1 and the --http host "
        "(the name a proxy or the operators use; repeat for more); any other Host gets HTTP 400",
    )
    dashboard.add_argument(
        "--trusted-proxy",
        action="append",
        default=[],
        metavar="ADDRESS",
        help="the address of a proxy in front (127.0.0.1 for one on this machine; repeat for more) whose "
        "X-Forwarded-For and X-Forwarded-Proto name the client; from anyone else they are ignored",
    )
    dashboard.add_argument(
        "--token",
        help=f"allow operator actions to whoever signs in with it, 16 characters at least (better: "
        f"${TOKEN_VARIABLE}, which ps does not show; without one the dashboard is read-only)",
    )
    dashboard.add_argument(
        "--session-lifetime",
        type=_lifetime,
        default=14400.0,
        metavar="SECONDS",
        help="how long a sign-in lasts (14400: 4 hours); signing out ends it at once",
    )
    dashboard.add_argument(
        "--refresh",
        type=_refresh,
        default=5.0,
        metavar="SECONDS",
        help="pages reload every SECONDS (5; 0: never)",
    )
    dashboard.add_argument(
        "--allow-privileged-role",
        action="store_true",
        help="start even when the database role is a superuser or may write tenure's tables directly "
        "(refused otherwise: connect as a member of tenure_worker); for a development database whose "
        "only login is the superuser, or to look at a database where no such role exists yet",
    )
    dashboard.set_defaults(run=cmd_dashboard)
