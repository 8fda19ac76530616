"""A supervised command for the shim's fault tests, demo and bench: a stand-in for a
service in any language run by ``tenure elect --exec`` or ``tenure claim run --exec``.

Run by path (``python fenced_child.py --db URL --log-dir DIR``), it imports the standard
library and psycopg only, as a program in another language would use only its own
PostgreSQL client. From the grant in its environment (``TENURE_INSTANCE_ID`` with
``TENURE_TYPE`` and ``TENURE_TERM``, or with ``TENURE_KEYSPACE``, ``TENURE_KEY`` and
``TENURE_EPOCH``) it makes a fenced write every ``--every`` seconds: the fence
(``tenure.heartbeat_fence`` or ``tenure.claim_fence``) and a row in ``tenure_demo.work``
or ``tenure_demo.claim_work`` in one transaction.

It logs to ``DIR/PID.jsonl``, one JSON line per event, each with ``mono``
(``time.monotonic()``: CLOCK_MONOTONIC is system-wide, so the times of every process on
the host compare) and ``wall`` (``time.time()``): ``start`` first (with its pid and the
kernel's start time of the process, so a watcher cannot mistake a reused pid for it),
then ``write`` after each acknowledged commit (``sent``: when the transaction began),
``refused`` when the fence refused, ``failed`` on any other error, ``sigterm`` when SIGTERM
arrived and ``exit`` as its last act, on SIGTERM: it never leaves by itself. With
``--ignore-term`` it logs SIGTERM and carries on: only SIGKILL ends it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

import psycopg

FENCES = {
    "TN101": "not primary",
    "TN103": "claim lost",
}


def process_start_time(pid: int) -> int:
    """The kernel's start time of ``pid`` (field 22 of /proc/PID/stat, in clock ticks)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2 :].split()[19])


class Log:
    """One JSON line per event, appended with one write(2) each."""

    def __init__(self, directory: Path, first: dict[str, Any]) -> None:
        line = self._line("start", first)  # composed before the file exists: it is never empty for long
        self._fd = os.open(directory / f"{os.getpid()}.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.write(self._fd, line)

    @staticmethod
    def _line(event: str, fields: dict[str, Any]) -> bytes:
        record = {"event": event, "mono": time.monotonic(), "wall": time.time(), **fields}
        return (json.dumps(record) + "\n").encode()

    def __call__(self, event: str, **fields: Any) -> None:
        os.write(self._fd, self._line(event, fields))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="fenced_child.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", required=True, help="conninfo of a role that may call the fence and insert")
    parser.add_argument("--log-dir", type=Path, required=True)
    parser.add_argument("--every", type=float, default=0.05, help="seconds between fenced writes")
    parser.add_argument("--ignore-term", action="store_true", help="log SIGTERM and go on")
    args = parser.parse_args(argv)

    env = os.environ
    instance = env["TENURE_INSTANCE_ID"]
    if "TENURE_TERM" in env:
        grant: dict[str, Any] = {"utype": env["TENURE_TYPE"], "term": int(env["TENURE_TERM"])}
        fence = "SELECT tenure.heartbeat_fence(%s, %s, %s)"
        fence_args: tuple[Any, ...] = (instance, grant["utype"], grant["term"])
        write = "INSERT INTO tenure_demo.work (utype, instance_id, term) VALUES (%s, %s, %s)"
        write_args: tuple[Any, ...] = (grant["utype"], instance, grant["term"])
    else:
        grant = {
            "keyspace": env["TENURE_KEYSPACE"],
            "key": env["TENURE_KEY"],
            "epoch": int(env["TENURE_EPOCH"]),
        }
        fence = "SELECT tenure.claim_fence(%s, %s, %s, %s)"
        fence_args = (grant["keyspace"], instance, grant["key"], grant["epoch"])
        write = (
            "INSERT INTO tenure_demo.claim_work (keyspace, key, epoch, instance_id) VALUES (%s, %s, %s, %s)"
        )
        write_args = (grant["keyspace"], grant["key"], grant["epoch"], instance)

    pid = os.getpid()
    log = Log(args.log_dir, {"pid": pid, "started": process_start_time(pid), "instance": instance, **grant})

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        log("sigterm")
        if not args.ignore_term:
            log("exit", reason="SIGTERM")
            os._exit(128 + signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_sigterm)

    connection: psycopg.Connection[Any] | None = None
    while True:
        time.sleep(args.every)
        sent = time.monotonic()
        try:
            if connection is None or connection.closed or connection.broken:
                connection = psycopg.connect(
                    args.db, connect_timeout=2, application_name=f"fenced child {pid}"
                )
            with connection.transaction():
                connection.execute(fence, fence_args)
                connection.execute(write, write_args)
            log("write", sent=sent)
        except psycopg.Error as error:
            sqlstate = getattr(error, "sqlstate", None)
            if sqlstate in FENCES:
                log("refused", sent=sent, sqlstate=sqlstate)
            else:
                log(
                    "failed",
                    sent=sent,
                    error=str(error).splitlines()[0] if str(error) else type(error).__name__,
                )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
