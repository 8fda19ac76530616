"""``tenure deploy``, ``revert`` and ``verify``: sqitch on the bundled project (``tenure.deploy``)."""

from __future__ import annotations

import argparse
import sys

from tenure.cli.common import Command
from tenure.deploy import project_dir, run_sqitch


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
