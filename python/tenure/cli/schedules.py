"""``tenure schedule``: list, set, pause, resume, drop a schedule, or run one now."""

from __future__ import annotations

import argparse
import dataclasses
import json

from tenure.cli.common import Command, admin_connection, cell, subcommands, text_table
from tenure.driver import Driver, ScheduleInfo, ScheduleRow

EXAMPLES = {
    "list": "example: tenure schedule list --db postgresql://app@db/prod --json",
    "set": "example: tenure schedule set nightly-backup --kind backup --cron '0 3 * * *' "
    '--tz Europe/Zurich --data \'{"target": "s3"}\'',
    "pause": "example: tenure schedule pause nightly-backup",
    "resume": "example: tenure schedule resume nightly-backup",
    "drop": "example: tenure schedule drop nightly-backup",
    "run-now": "example: tenure schedule run-now nightly-backup",
}
COLUMNS = ("name", "kind", "when", "timezone", "paused", "next_slot", "last_slot", "last_task_status")


def _when(row: ScheduleRow | ScheduleInfo) -> str:
    if row.cron is not None:
        return row.cron
    return f"every {int(row.every.total_seconds())} s" if row.every is not None else "-"


def table(rows: list[ScheduleRow]) -> str:
    """The schedules as a text table, one line per schedule."""
    return text_table(COLUMNS, ({**dataclasses.asdict(row), "when": _when(row)} for row in rows))


def _info_line(verb: str, info: ScheduleInfo) -> str:
    state = "paused" if info.paused else f"next slot {cell(info.next_slot)}"
    return f"schedule {info.name} {verb}: kind {info.kind}, {_when(info)} {info.timezone}, {state}"


def cmd_schedule(args: argparse.Namespace) -> int:
    with admin_connection(args) as connection:
        driver = Driver(connection)
        command = args.schedule_command
        if command == "list":
            rows = driver.schedules()
            if args.json:
                print(json.dumps([dataclasses.asdict(r) for r in rows], default=str, indent=2))
            elif rows:
                print(table(rows))
            else:
                print("no schedules")
        elif command == "set":
            info = driver.schedule_set(
                args.name,
                args.kind or args.name,
                cron=args.cron,
                every=args.every,
                timezone=args.tz,
                data=json.loads(args.data) if args.data else None,
                max_attempts=args.max_attempts,
                catch_up=args.catch_up,
                catch_up_limit=args.catch_up_limit,
            )
            print(_info_line("set", info))
        elif command == "pause":
            print(_info_line("paused", driver.schedule_pause(args.name)))
        elif command == "resume":
            print(_info_line("resumed", driver.schedule_resume(args.name)))
        elif command == "drop":
            print(_info_line("dropped", driver.schedule_drop(args.name)))
        elif command == "run-now":
            print(f"schedule {args.name}: task {driver.schedule_run_now(args.name)} enqueued now")
    return 0


def register(command: Command) -> None:
    group = command("schedule", "list, set, pause, resume or drop schedules, or run one now")
    schedule_command = subcommands(group, "schedule_command", EXAMPLES, run=cmd_schedule)

    listing = schedule_command("list", "print every schedule (the view tenure.schedules) as a table")
    listing.add_argument("--json", action="store_true", help="print the rows as JSON instead")
    setting = schedule_command("set", "create or change a schedule (keeps its progress when unchanged)")
    setting.add_argument("name")
    setting.add_argument("--kind", help="kind of the tasks it creates (its name)")
    when = setting.add_mutually_exclusive_group(required=True)
    when.add_argument("--cron", help="5-field cron expression, such as '0 3 * * *'")
    when.add_argument("--every", type=float, help="fixed interval in whole seconds")
    setting.add_argument("--tz", default="UTC", help="time zone of the cron expression (UTC)")
    setting.add_argument("--data", help="JSON data of its tasks")
    setting.add_argument("--max-attempts", type=int, default=5)
    setting.add_argument("--catch-up", choices=["latest", "all"], default="latest")
    setting.add_argument("--catch-up-limit", type=int, default=10, help="slots per tick with 'all' (10)")
    for name, help in (
        ("pause", "pause a schedule: no task until it is resumed"),
        ("resume", "resume a schedule; the slots missed while paused are skipped"),
        ("drop", "delete a schedule; its tasks stay"),
        ("run-now", "enqueue one extra task of a schedule now, outside its slots"),
    ):
        schedule_command(name, help).add_argument("name")
