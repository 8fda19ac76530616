"""``tenure dashboard``: the web pages over tenure's views (tenure.dashboard), served until
interrupted. Its packages (Starlette, Jinja2, uvicorn) are the ``dashboard`` extra, imported
only when this command runs."""

from __future__ import annotations

import argparse
import os
import sys

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
    if not is_loopback(host) and token is None:
        print(f"tenure: serving {host} beyond this machine, read-only (no --token)", file=sys.stderr)
    where = f"[{host}]" if ":" in host else host

    mode = "actions with the token" if token else "read-only"

    def announce() -> None:
        print(
            f"tenure dashboard at http://{where}:{port}/ ({mode}); Ctrl-C stops it",
            flush=True,
        )

    settings = Settings(token=token, refresh=args.refresh, allow_privileged_role=args.allow_privileged_role)
    serve(args.db, host=host, port=port, settings=settings, announce=announce)
    return 0


def _refresh(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not 0 <= seconds <= 3600:
        raise argparse.ArgumentTypeError(f"expected 0 (never) to 3600 seconds, got {text!r}")
    return seconds


def register(command: Command) -> None:
    dashboard = command("dashboard", "web pages of primaries, replicas, claims, tasks, batches and schedules")
    dashboard.add_argument(
        "--http",
        type=address,
        default=("127.0.0.1", 8080),
        metavar="HOST:PORT",
        help="where to listen (127.0.0.1:8080; loopback unless told otherwise)",
    )
    dashboard.add_argument(
        "--token",
        help=f"allow operator actions to whoever signs in with it (else ${TOKEN_VARIABLE}; "
        "without one the dashboard is read-only)",
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
