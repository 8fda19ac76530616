"""What every ``tenure`` command shares: the --db option, subcommand groups, HOST:PORT
arguments, timestamped output and an optional metrics endpoint."""

from __future__ import annotations

import argparse
import os
import re
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from tenure.connect import Deadlines, connect
from tenure.metrics import Metrics, MetricsServer

Command = Callable[[str, str], argparse.ArgumentParser]  # (name, help) -> its parser
Run = Callable[[argparse.Namespace], int]


def db_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", default=os.environ.get("TENURE_DB", ""), help="conninfo or URL")


def subcommands(
    parent: argparse.ArgumentParser,
    dest: str,
    examples: dict[str, str],
    *,
    run: Run | None = None,
    options: Callable[[argparse.ArgumentParser], None] | None = None,
    groups: Collection[str] = (),
) -> Command:
    """A group of subcommands under ``parent`` (``tenure task enqueue`` ...): each gets its
    example from ``examples``, the --db option, the group's own ``options`` and, when
    given, the group's ``run`` (a subcommand may set its own). The names in ``groups``
    are groups of their own (``tenure task kind set``): they get only their example, and
    their subcommands the rest."""
    group = parent.add_subparsers(dest=dest, required=True, metavar=dest.upper())

    def add(name: str, help: str) -> argparse.ArgumentParser:
        sub = group.add_parser(name, help=help, description=help, epilog=examples[name])
        if name in groups:
            return sub
        db_option(sub)
        if options is not None:
            options(sub)
        if run is not None:
            sub.set_defaults(run=run)
        return sub

    return add


def address(text: str) -> tuple[str, int]:
    """HOST:PORT (or :PORT, for 127.0.0.1) for an HTTP endpoint."""
    host, _, port = text.rpartition(":")
    if not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT with a port from 0 to 65535, got {text!r}")
    return host or "127.0.0.1", int(port)


UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def duration(text: str) -> timedelta:
    """A duration or age such as ``7d``, ``12h``, ``30m``, ``90s`` or a number of seconds."""
    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text)
    if found is None:
        raise argparse.ArgumentTypeError(
            f"expected a duration such as 7d, 12h, 30m, 90s or seconds, got {text!r}"
        )
    return timedelta(seconds=float(found.group(1)) * UNITS[found.group(2) or "s"])


def cell(value: object) -> str:
    """A value in a text table: "-" for none, times to the second, booleans as yes and no."""
    if value is None:
        return "-"
    if isinstance(value, datetime):
        return value.isoformat(timespec="seconds")
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def text_table(columns: Sequence[str], rows: Iterable[dict[str, object]]) -> str:
    """Rows as a text table under a header of their column names, one line per row."""
    lines = [list(columns), *([cell(row[column]) for column in columns] for row in rows)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(columns))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in lines
    )


def integer(text: str) -> int:
    """A whole number that fits PostgreSQL's integer, which every count, limit and priority
    of tenure's functions is (a larger one would reach no function at all)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if not -(2**31) <= value < 2**31:
        raise argparse.ArgumentTypeError(
            f"expected a whole number from -2147483648 to 2147483647, got {text}"
        )
    return value


@contextmanager
def admin_connection(args: argparse.Namespace) -> Iterator[psycopg.Connection[Any]]:
    """The connection of a command that reads or repairs state, bounded as the runtimes' are:
    ``tenure --db-timeout`` seconds (30) for the connect, each statement (statement_timeout),
    unacknowledged TCP data and keepalives, and a watchdog that abandons the socket when the
    block overruns it: a frozen server, which acknowledges TCP and runs no timeout of its
    own, would otherwise hold the command for ever."""
    timeout = args.db_timeout
    deadlines = Deadlines(f"tenure {args.command}")
    started = time.monotonic()
    try:
        with (
            connect(args.db, application_name=f"tenure {args.command}", deadline=timeout) as connection,
            deadlines.bounded(connection, timeout),
        ):
            yield connection
    except psycopg.OperationalError as error:
        if time.monotonic() - started < timeout - 0.1:
            raise
        raise psycopg.OperationalError(
            f"no answer within {timeout:g} s (tenure --db-timeout SECONDS to wait longer): {error}"
        ) from error
    finally:
        deadlines.close()


def say(message: str) -> None:
    """One line of a long-running command's output, with the time it happened."""
    print(f"{datetime.now(UTC).isoformat(timespec='milliseconds')} {message}", flush=True)


@contextmanager
def metrics_server(address: tuple[str, int] | None, metrics: Metrics) -> Iterator[None]:
    """Serve ``metrics`` at http://HOST:PORT/metrics while the block runs, if an address is given."""
    if address is None:
        yield
        return
    host, port = address
    with MetricsServer(metrics, host=host, port=port) as server:
        say(f"serving {server.url}")
        yield


def exec_options(parser: argparse.ArgumentParser, while_: str, default_grace: str) -> None:
    """--exec CMD..., --kill-grace and --restart: a command supervised ``while_`` a grant is held."""
    parser.add_argument(
        "--kill-grace",
        type=float,
        help=f"seconds between SIGTERM and SIGKILL when a command must stop ({default_grace})",
    )
    parser.add_argument(
        "--restart",
        action="store_true",
        help="start the command again when it exits by itself (else this instance gives up its grant and "
        "exits with the command's status)",
    )
    parser.add_argument(
        "--exec",
        action="store_const",
        const=[],  # main() puts the words after --exec here
        help=f"run CMD {while_}, in its own process group, its grant in its environment; it gets SIGTERM "
        "as soon as the grant ends or its safe window passes, SIGKILL kill-grace later "
        "(the last option: --exec -- CMD [ARGS...])",
    )
