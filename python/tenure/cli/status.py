"""``tenure status``: one screen of what tenure is doing, read from its public views.

Every section is one view, so the same picture is a ``SELECT * FROM tenure.<view>``
away in psql: heartbeat_status, replicas, claim_keyspaces, claim_instances, task_status,
task_kinds, batch_queues, table_vacuum.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import psycopg

from tenure.cli.common import Command, admin_connection
from tenure.driver import Driver
from tenure.runtime.shutdown import shutdown_signals

# Each section of the screen and the view it shows, in that order.
SECTIONS = {
    "primaries": "heartbeat_status",
    "replicas": "replicas",
    "claim_keyspaces": "claim_keyspaces",
    "claim_instances": "claim_instances",
    "tasks": "task_status",
    "task_kinds": "task_kinds",
    "batch_queues": "batch_queues",
    "tables": "table_vacuum",
}


@dataclass(frozen=True)
class Status:
    taken_at: datetime
    sections: dict[str, list[dict[str, Any]]]

    def as_json(self) -> dict[str, Any]:
        return {
            "taken_at": self.taken_at.isoformat(),
            **{
                name: [{k: _plain(v) for k, v in row.items()} for row in rows]
                for name, rows in self.sections.items()
            },
        }


def collect(connection: psycopg.Connection[Any]) -> Status:
    """Read every section from one snapshot, so that they agree with each other."""
    driver = Driver(connection)
    with connection.transaction():
        connection.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        return Status(driver.server_time(), {name: driver.view_rows(view) for name, view in SECTIONS.items()})


def _plain(value: Any) -> Any:
    if isinstance(value, timedelta):
        return round(value.total_seconds(), 3)
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, UUID):
        return str(value)
    return value


def _age(value: timedelta | None) -> str:
    if value is None:
        return "-"
    seconds = value.total_seconds()
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _short(value: UUID | None) -> str:
    return str(value)[:8] if value is not None else "-"


def render(status: Status) -> str:
    s = status.sections
    lines = [f"tenure status at {status.taken_at:%Y-%m-%d %H:%M:%S} (server clock, UTC)", ""]

    lines.append("primaries (heartbeat election)")
    for r in s["primaries"]:
        state = "live" if r["live"] else "NONE (expired)"
        lines.append(
            f"  {r['utype']:<20} {state:<15} primary {_short(r['instance_id'])}  term {r['term']}  "
            f"heartbeat {_age(r['heartbeat_age'])} ago  "
            f"(I {_age(r['heartbeat_interval'])}, T {_age(r['timeout'])})"
        )
    if not s["primaries"]:
        lines.append("  (no service type has stood for election)")

    lines += ["", "replicas (advisory-lock leadership)"]
    for r in s["replicas"]:
        if r["pid"] is not None:
            holder = (
                f"active {r['replica'] or r['application_name'] or '?'}  epoch {r['epoch']}  pid {r['pid']}"
                f"{'  since ' + format(r['since'], '%H:%M:%S') if r['since'] else ''}"
            )
        elif r["reserved_until"] is not None:
            holder = f"NONE active; reserved for its last holder until {r['reserved_until']:%H:%M:%S.%f}"
        else:
            holder = "NONE active"
        lines.append(f"  {r['scope']}/{r['counter']:<14} lock {r['lock_id']:<11} {holder}")
    if not s["replicas"]:
        lines.append("  (no replica lock registered)")

    lines += ["", "claims"]
    instances: dict[str, list[dict[str, Any]]] = {}
    for r in s["claim_instances"]:
        instances.setdefault(r["keyspace"], []).append(r)
    for r in s["claim_keyspaces"]:
        lines.append(
            f"  {r['keyspace']:<20} {r['keys']} keys: {r['claimed']} claimed, {r['unclaimed']} unclaimed"
            f"{' (longest ' + _age(r['longest_unclaimed']) + ')' if r['unclaimed'] else ''}; "
            f"{r['live_instances']} live instances"
        )
        for i in instances.get(r["keyspace"], []):
            if i["live"]:
                lines.append(
                    f"    instance {_short(i['instance_id'])}  holds {i['keys_held']} of a fair share of "
                    f"{i['fair_share']}"
                )
    if not s["claim_keyspaces"]:
        lines.append("  (no keys registered)")

    lines += ["", "tasks (kind, state, status: count, leased, due, oldest due)"]
    for r in s["tasks"]:
        lines.append(
            f"  {r['kind']:<16} {r['state']:<14} {r['status']:<9} {r['tasks']:>7}  leased {r['leased']:>5}  "
            f"due {r['due']:>6}  oldest due {_age(r['oldest_due_age'])}"
            f"{'  DEAD' if r['status'] == 'dead' else ''}"
        )
    if not s["tasks"]:
        lines.append("  (no tasks)")

    lines += ["", "task kinds (paused or limited: running against the limits)"]
    for r in s["task_kinds"]:
        lines.append(f"  {r['kind']:<16} {_kind_settings(r)}")
    if not s["task_kinds"]:
        lines.append("  (no kind paused or limited)")

    lines += ["", "batch queues"]
    for r in s["batch_queues"]:
        halted = f"  HALTED: {', '.join(r['halted_keys'])}" if r["halted_keys"] else ""
        lines.append(
            f"  {r['keyspace']:<20} {r['keys']} keys  queued {r['queued']}  pending {r['pending']}  "
            f"unknown {r['unknown']}  invalid {r['invalid']}  committed {r['committed']}  "
            f"oldest waiting {_age(r['oldest_waiting_age'])}{halted}"
        )
    if not s["batch_queues"]:
        lines.append("  (no batches)")

    lines += [
        "",
        "tables (not empty, largest first: rows, dead rows against autovacuum's count, last vacuum)",
    ]
    tables = [r for r in s["tables"] if r["live_rows"] or r["dead_rows"]]
    for r in sorted(tables, key=lambda r: -r["total_bytes"]):
        lines.append(
            f"  {r['table_name']:<20} {_size(r['total_bytes']):>9}  {r['live_rows']:>9} rows  "
            f"dead {r['dead_rows']:>8} {_autovacuum(r)}  vacuumed {_since(status.taken_at, r['last_vacuum'])}"
        )
    if not tables:
        lines.append("  (every table empty)")
    return "\n".join(lines)


def _size(total_bytes: int) -> str:
    size = float(total_bytes)
    for unit in ("B", "kB", "MB"):
        if size < 1024:
            return f"{size:.0f} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GB"


def _autovacuum(r: dict[str, Any]) -> str:
    if r["autovacuum_at"] is None:
        return "(autovacuum OFF)"
    due = "  AUTOVACUUM DUE" if r["dead_rows"] > r["autovacuum_at"] else ""
    return f"of {r['autovacuum_at']:>8}{due}"


def _since(now: datetime, then: datetime | None) -> str:
    return "never" if then is None else f"{_age(now - then)} ago"


def _kind_settings(r: dict[str, Any]) -> str:
    parts = ["PAUSED"] if r["paused"] else []
    limit = f" of {r['max_running']}" if r["max_running"] is not None else ""
    parts.append(f"running {r['running']}{limit}")
    if r["max_running_per_key"] is not None:
        parts.append(f"per key {r['max_running_per_key']}")
    if r["rate"] is not None:
        parts.append(f"rate {r['rate_used']} of {r['rate']} per {_age(r['rate_period'])}")
    parts.append(f"due {r['due']}")
    return "  ".join(parts)


def cmd_status(args: argparse.Namespace) -> int:
    with shutdown_signals() as stop:
        while True:
            with admin_connection(args) as connection:  # a connection per refresh: a restart is no error
                status = collect(connection)
            if args.json:
                print(json.dumps(status.as_json(), indent=2), flush=True)
            else:
                if args.watch:
                    print("\033[H\033[2J", end="")  # clear the terminal
                print(render(status), flush=True)
            if not args.watch or stop.wait(args.watch):
                return 0


def register(command: Command) -> None:
    status = command(
        "status",
        "one screen of primaries, claims, tasks, task kinds, batch queues and tables, from tenure's views",
    )
    status.add_argument(
        "--watch", type=float, metavar="SECONDS", help="refresh every SECONDS until interrupted"
    )
    status.add_argument("--json", action="store_true", help="print the same as JSON, for scripts")
    status.set_defaults(run=cmd_status)
