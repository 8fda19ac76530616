"""``tenure claim``: register, retire and list keys, or hold a fair share of a keyspace."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager

from tenure.cli.common import (
    Command,
    address,
    admin_connection,
    exec_options,
    metrics_server,
    say,
    subcommands,
)
from tenure.driver import Driver
from tenure.http.claims import ClaimsEndpoint
from tenure.runtime.claims import Claimer
from tenure.runtime.shutdown import wait_for_shutdown
from tenure.runtime.supervise import ClaimedCommands, check_kill_grace, command_line

EXAMPLES = {
    "register": "example: tenure claim register --keyspace services service-1 service-2 service-3",
    "retire": "example: tenure claim retire --keyspace services service-3",
    "list": "example: tenure claim list --keyspace services --instances",
    "run": "example: tenure claim run --keyspace services --cycle 1 --expiry 3 --exec -- ./serve-key.sh "
    "(or --http 127.0.0.1:8701 for a program that runs its own loop)",
}


def cmd_claim(args: argparse.Namespace) -> int:
    with admin_connection(args) as connection:
        driver = Driver(connection)
        if args.claim_command == "register":
            print(f"{driver.claim_register(args.keyspace, args.keys)} keys registered in {args.keyspace}")
        elif args.claim_command == "retire":
            print(f"{driver.claim_retire(args.keyspace, args.keys)} keys retired from {args.keyspace}")
        elif args.claim_command == "list":
            if args.instances:
                for i in driver.claim_instances(args.keyspace):
                    state = "live" if i.live else "gone"
                    print(
                        f"{i.keyspace}  {i.instance_id}  {state}  holds {i.keys_held} of a fair share of "
                        f"{i.fair_share}, renewed {i.renewed_at.isoformat(timespec='seconds')}"
                    )
            else:
                for c in driver.claims(args.keyspace):
                    holder = f"{c.claimant} epoch {c.epoch}" if c.live else f"unclaimed for {c.unclaimed_for}"
                    print(f"{c.keyspace}  {c.key:<24} {holder}")
    return 0


def cmd_claim_run(args: argparse.Namespace) -> int:
    argv = command_line(args.exec)
    kill_grace = args.kill_grace if args.kill_grace is not None else args.cycle / 2
    if argv is not None:
        check_kill_grace(kill_grace, args.cycle, margin_name="the cycle")
    claimer = Claimer(
        args.db,
        args.keyspace,
        cycle=args.cycle,
        expiry=args.expiry,
        name=args.name,
        on_gained=lambda keys: say(f"gained {len(keys)}: {', '.join(sorted(keys))}"),
        on_lost=lambda keys: say(f"lost {len(keys)}: {', '.join(sorted(keys))}"),
    )
    say(
        f"claimer {claimer.instance_id} ({claimer.name}) in {args.keyspace}: "
        f"cycle {args.cycle} s, expiry {args.expiry} s"
    )
    status = 0
    # The endpoint outlives the claimer, so a long-poll hears of the release.
    with held_server(args.http, claimer), claimer, metrics_server(args.metrics, claimer.metrics):
        if argv is None:
            wait_for_shutdown()
        else:
            commands = ClaimedCommands(
                claimer,
                argv,
                kill_grace=kill_grace,
                restart=args.restart,
                label=f"claim {args.keyspace}",
                say=say,
            )
            status = commands.run()
        say("shutting down: releasing every claim")
    say("released")
    return status


@contextmanager
def held_server(address: tuple[str, int] | None, claimer: Claimer) -> Iterator[None]:
    """Serve the keys held at http://HOST:PORT/held while the block runs, if an address is given."""
    if address is None:
        yield
        return
    host, port = address
    with ClaimsEndpoint(claimer, host=host, port=port) as endpoint:
        say(f"serving {endpoint.url}/held")
        yield


def register(command: Command) -> None:
    claim = command("claim", "register, retire and list keys, or hold a fair share of them")
    claim_command = subcommands(claim, "claim_command", EXAMPLES, run=cmd_claim)

    register = claim_command("register", "register keys so instances can claim them")
    register.add_argument("--keyspace", required=True)
    register.add_argument("keys", nargs="+")
    retire = claim_command("retire", "retire keys: their claims end and they can no longer be claimed")
    retire.add_argument("--keyspace", required=True)
    retire.add_argument("keys", nargs="+")
    claims = claim_command("list", "list keys with their claimants, or the instances with their shares")
    claims.add_argument("--keyspace")
    claims.add_argument("--instances", action="store_true", help="list instances, keys held and fair share")
    run = claim_command("run", "hold a fair share of a keyspace's keys and print gains and losses")
    run.add_argument("--keyspace", required=True)
    run.add_argument("--cycle", type=float, default=1.0, help="seconds between renew-and-take cycles (1)")
    run.add_argument("--expiry", type=float, default=3.0, help="claim expiry in seconds, > 2 cycles (3)")
    run.add_argument("--name", help="instance name shown in pg_stat_activity")
    run.add_argument(
        "--metrics", metavar="HOST:PORT", type=address, help="serve Prometheus metrics at /metrics there"
    )
    run.add_argument(
        "--http",
        metavar="HOST:PORT",
        type=address,
        help="serve GET /held (the keys held with their epochs, with a long-poll: ?wait=SECONDS&version=N), "
        "/health/live and /metrics there",
    )
    exec_options(
        run, "for each key this instance holds (one process per key)", "cycle / 2, and below the cycle"
    )
    run.set_defaults(run=cmd_claim_run)
