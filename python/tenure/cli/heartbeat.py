"""``tenure elect``, ``tenure primary``, ``tenure check-primary``: heartbeat election from a shell."""

from __future__ import annotations

import argparse
import contextlib
import sys

from tenure.cli.common import Command, address, admin_connection, exec_options, say
from tenure.driver import Driver
from tenure.http.primary import PrimaryEndpoint, PrimaryWatch, ask_primary
from tenure.runtime.heartbeat import Elector
from tenure.runtime.shutdown import shutdown_signals, wait_for_shutdown
from tenure.runtime.supervise import ElectedCommand, check_kill_grace, command_line


def cmd_elect(args: argparse.Namespace) -> int:
    argv = command_line(args.exec)
    kill_grace = args.kill_grace if args.kill_grace is not None else args.interval / 2
    if argv is not None:
        check_kill_grace(kill_grace, args.interval, margin_name="the heartbeat interval I")
    elector = Elector(
        args.db,
        args.utype,
        interval=args.interval,
        timeout=args.timeout,
        name=args.name,
        on_elected=lambda term: say(f"elected primary of {args.utype} in term {term}"),
        on_demoted=lambda reason: say(f"no longer primary of {args.utype}: {reason}"),
    )
    say(
        f"instance {elector.instance_id} ({elector.name}) standing for {args.utype}: "
        f"I = {args.interval} s, T = {args.timeout} s"
    )
    status = 0
    with contextlib.ExitStack() as serving:
        if args.http:  # serves until after the resignation, so a long-poll hears of it
            host, port = args.http
            endpoint = serving.enter_context(PrimaryEndpoint(elector, host=host, port=port))
            say(f"serving {endpoint.url}/primary and {endpoint.url}/held")
        with elector:
            if argv is None:
                wait_for_shutdown()
            else:
                commands = ElectedCommand(
                    elector,
                    argv,
                    kill_grace=kill_grace,
                    restart=args.restart,
                    label=f"elect {args.utype}",
                    say=say,
                )
                status = commands.run()
            say("shutting down: resigning")
    say("resigned")
    return status


def cmd_primary(args: argparse.Namespace) -> int:
    with admin_connection(args) as connection:
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
        with (
            PrimaryWatch(args.url, interval=args.interval, window=args.window) as watch,
            shutdown_signals() as stop,
        ):
            last = None
            while not stop.wait(args.interval):
                now = watch.is_primary()
                if now != last:
                    say("primary" if now else "not primary")
                    last = now
        return 0
    try:
        valid_for = ask_primary(args.url, timeout=args.window)
    except OSError as error:
        print(f"no answer from {args.url}: {error}", file=sys.stderr)
        return 2
    print("primary" if valid_for > 0 else "not primary")
    return 0 if valid_for > 0 else 1


def register(command: Command) -> None:
    elect = command("elect", "run an elector for a service type and print its role changes")
    elect.add_argument("--type", dest="utype", required=True, help="service type to elect a primary for")
    elect.add_argument("--interval", type=float, default=1.0, help="heartbeat interval I in seconds (1)")
    elect.add_argument("--timeout", type=float, default=3.0, help="timeout T in seconds, > 2I (3)")
    elect.add_argument("--name", help="instance name shown in pg_stat_activity (host name)")
    elect.add_argument(
        "--http",
        metavar="HOST:PORT",
        type=address,
        help="serve GET /primary, /held (the term, with a long-poll: ?wait=SECONDS&version=N), "
        "/health/live and /metrics there",
    )
    exec_options(elect, "while this instance is primary", "I / 2, and below I")
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
