"""``tenure maintain``: the elected maintainer that ticks schedules and runs retention."""

from __future__ import annotations

import argparse

from tenure.cli.common import Command, address, duration, metrics_server, say
from tenure.runtime.maintain import MAINTAIN_TYPE, Maintainer, Retention
from tenure.runtime.shutdown import wait_for_shutdown


def cmd_maintain(args: argparse.Namespace) -> int:
    retention = Retention(
        task=args.task_age,
        batch=args.batch_age,
        heartbeat=args.heartbeat_age,
        claim=args.claim_age,
        replica=args.replica_age,
        limit=args.prune_limit,
    )
    maintainer = Maintainer(
        args.db,
        tick_every=args.tick_every,
        retention_every=args.retention_every,
        retention=retention,
        gauges_every=args.gauges_every,
        interval=args.interval,
        timeout=args.timeout,
        name=args.name,
        utype=args.utype,
        on_elected=lambda term: say(f"elected maintainer in term {term}"),
        on_demoted=lambda reason: say(f"no longer the maintainer: {reason}"),
    )
    say(
        f"maintainer {maintainer.instance_id} ({maintainer.name}) standing for {args.utype}: "
        f"tick every {args.tick_every} s, retention every {args.retention_every} s "
        f"(tasks {retention.task}, batches {retention.batch}, heartbeat {retention.heartbeat}, "
        f"claims {retention.claim}, replicas {retention.replica}; batches of {retention.limit})"
    )
    with maintainer, metrics_server(args.metrics, maintainer.metrics):
        wait_for_shutdown()
        say("shutting down: resigning")
    stats = maintainer.snapshot()
    pruned = ", ".join(f"{h} {n}" for h, n in sorted(stats.pruned.items())) or "nothing"
    say(
        f"stopped: {stats.ticks} ticks, {stats.tasks_created} schedule tasks created, pruned {pruned}, "
        f"{stats.failures} failed calls"
    )
    return 0


def register(command: Command) -> None:
    maintain = command("maintain", "run the elected maintainer: tick schedules, prune old history")
    maintain.add_argument("--tick-every", type=float, default=1.0, help="seconds between schedule ticks (1)")
    maintain.add_argument(
        "--retention-every", type=float, default=60.0, help="seconds between retention runs (60)"
    )
    maintain.add_argument(
        "--gauges-every",
        type=float,
        default=15.0,
        help="seconds between reads of the database gauges for --metrics: tasks per kind and status, "
        "each kind's settings against its use, each table's rows and dead rows (15; 0: none)",
    )
    maintain.add_argument("--task-age", type=duration, default="7d", help="finished tasks older than (7d)")
    maintain.add_argument("--batch-age", type=duration, default="7d", help="resolved batches older than (7d)")
    maintain.add_argument(
        "--heartbeat-age", type=duration, default="30d", help="ended terms older than (30d)"
    )
    maintain.add_argument("--claim-age", type=duration, default="30d", help="claim log older than (30d)")
    maintain.add_argument(
        "--replica-age", type=duration, default="30d", help="replica terms older than (30d)"
    )
    maintain.add_argument("--prune-limit", type=int, default=10_000, help="rows per prune call (10000)")
    maintain.add_argument("--interval", type=float, default=1.0, help="election heartbeat interval I (1)")
    maintain.add_argument("--timeout", type=float, default=3.0, help="election timeout T, > 2I (3)")
    maintain.add_argument(
        "--type", dest="utype", default=MAINTAIN_TYPE, help=f"service type ({MAINTAIN_TYPE})"
    )
    maintain.add_argument("--name", help="instance name shown in pg_stat_activity (host name)")
    maintain.add_argument(
        "--metrics", metavar="HOST:PORT", type=address, help="serve Prometheus metrics at /metrics there"
    )
    maintain.set_defaults(run=cmd_maintain)
