"""Each part of ``tenure demo`` runs and its own checks hold (the replicas part runs in
test_replica_processes.py, beside the HAProxy it needs)."""

from __future__ import annotations

import io
import os
import re
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from tenure.demo.batches import run_queue_demo
from tenure.demo.claims import run_claims_demo
from tenure.demo.heartbeat import run_demo
from tenure.demo.live import run_live
from tenure.demo.supervise import run_supervise_demo
from tenure.demo.tasks import run_task_demo
from tenure.testing.database import APP_ROLE


def test_demo_runs_and_its_checks_hold(admin_conninfo: str, tmp_path: Path, capsys: Any) -> None:
    assert run_demo(admin_conninfo, workdir=tmp_path) is True
    output = capsys.readouterr().out
    assert "took over in term 2" in output
    assert re.search(r"takeover: [0-9.]+ s after the kill; bound T \+ I = 2.000 s", output)
    assert "no two primaries at any instant" in output
    assert f"picture: {tmp_path / 'leadership.png'}" in output
    assert (tmp_path / "leadership.png").read_bytes().startswith(b"\x89PNG")


def test_supervise_demo_hands_a_command_over_under_a_kill(
    admin_conninfo: str, tmp_path: Path, capsys: Any
) -> None:
    assert run_supervise_demo(admin_conninfo, workdir=tmp_path) is True
    output = capsys.readouterr().out
    assert re.search(r"SIGKILL shim\d .*its warden's pipe closes", output)
    assert "the child gets SIGTERM from the warden" in output
    assert re.search(r"took over in term \d+", output)
    assert "never two children alive at once" in output
    # The timeline is sorted by time: the warden's SIGTERM and the child's exit come after the
    # kill, and before the next child starts.
    timeline = output[output.index("timeline") : output.index("handover:")]
    at = [timeline.index(step) for step in ("SIGKILL shim", "SIGTERM from the warden", "the child exits")]
    at.append(timeline.rindex("child starts in term"))
    assert at == sorted(at), timeline


def test_task_demo_recovers_the_killed_step(admin_conninfo: str, tmp_path: Path, capsys: Any) -> None:
    assert run_task_demo(admin_conninfo, workdir=tmp_path) is True
    output = capsys.readouterr().out
    assert "nothing (killed)" in output
    assert "every order charged once and shipped once" in output


def test_queue_demo_keeps_order_through_a_kill_a_flood_and_a_halt(
    admin_conninfo: str, tmp_path: Path, capsys: Any
) -> None:
    assert run_queue_demo(admin_conninfo, workdir=tmp_path) is True
    output = capsys.readouterr().out
    assert "applied 2.75 -> 3.00 -> 3.25" in output
    assert "applied 10.00 -> 12.00" in output
    assert "po-2 halted: the ledger rejected batch #2" in output
    assert "never submitted again" in output


def test_claims_demo_moves_the_killed_instances_keys(
    admin_conninfo: str, tmp_path: Path, capsys: Any
) -> None:
    assert run_claims_demo(admin_conninfo, workdir=tmp_path) is True
    output = capsys.readouterr().out
    assert "each holds 4 keys" in output
    assert "the survivors hold 6 keys each" in output
    assert "within)" in output
    assert (tmp_path / "claims.png").read_bytes().startswith(b"\x89PNG")


def _children() -> set[int]:
    """The pids of this process's children (live or not yet reaped)."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == os.getpid():
            found.add(int(stat.parent.name))
    return found


def _fleet_connections(admin: psycopg.Connection[Any]) -> int:
    row = admin.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE usename = %s AND datname = current_database()",
        (APP_ROLE,),
    ).fetchone()
    assert row is not None
    return int(row[0])


def test_the_demo_ends_with_the_dashboard_over_a_live_fleet_until_a_signal(
    admin_conninfo: str, admin: psycopg.Connection[Any], tmp_path: Path
) -> None:
    """run_live (what `make demo` ends with in a terminal) serves the dashboard over a fleet at
    work, and a SIGTERM stops the dashboard, the fleet and their connections."""
    before = _children()
    out = io.StringIO()
    seen: dict[str, Any] = {}
    failed: list[BaseException] = []

    def look() -> None:
        try:
            end = time.monotonic() + 60
            while (found := re.search(r"tenure dashboard: (http://\S+)/ ", out.getvalue())) is None:
                assert time.monotonic() < end, f"no URL printed: {out.getvalue()!r}"
                time.sleep(0.1)
            seen["url"] = url = found.group(1)
            with httpx.Client(base_url=url, timeout=10) as client:
                for path in ("/", "/heartbeat", "/claims", "/tasks"):
                    assert client.get(path).status_code == 200, path
                # Life: the primary hands over (rotate = 3 s), the claimers share the keys, orders ship.
                while True:
                    heartbeat = client.get("/heartbeat", params={"format": "json"}).json()
                    claims = client.get("/claims", params={"format": "json"}).json()
                    demo = [t for t in heartbeat["types"] if t["utype"] == "demo"]
                    live = [i for i in claims["instances"] if i["keyspace"] == "demo-services" and i["live"]]
                    shipped = admin.execute(
                        "SELECT count(*) FROM tenure_demo.ledger WHERE entry = 'shipped' AND order_no > 10000"
                    ).fetchone()
                    assert shipped is not None
                    if demo and demo[0]["live"] and demo[0]["term"] >= 2 and len(live) == 2 and shipped[0]:
                        break
                    assert time.monotonic() < end, (heartbeat["types"], claims["instances"], shipped)
                    time.sleep(0.5)
                # A handover stops the old primary before it starts the new one: wait for the six.
                while len(seen.setdefault("children", set())) != 6 and time.monotonic() < end:
                    seen["children"] = _children() - before
                    time.sleep(0.05)
                seen["connections"] = _fleet_connections(admin)
        except BaseException as error:
            failed.append(error)
        finally:
            os.kill(os.getpid(), signal.SIGTERM)

    looker = threading.Thread(target=look)
    looker.start()
    previous = signal.getsignal(signal.SIGTERM)
    with socket.create_server(("127.0.0.1", 0)) as taken:  # the port asked for is taken: another one
        busy = taken.getsockname()[1]
        run_live(admin_conninfo, workdir=tmp_path, port=busy, rotate=3.0, out=out)
    looker.join()
    assert not seen["url"].endswith(f":{busy}")
    assert not failed, failed
    assert signal.getsignal(signal.SIGTERM) is previous, "the demo's handler stays after it ends"
    assert len(seen["children"]) == 6, "2 electors, 2 claimers, 2 task workers"
    assert seen["connections"] >= 7
    assert "stopping the dashboard and the fleet" in out.getvalue()
    # Everything stopped: no child left, the URL answers no more, no connection of the role stays.
    assert _children() - before == set()
    with pytest.raises(httpx.ConnectError):
        httpx.get(seen["url"], timeout=2)
    end = time.monotonic() + 10
    while _fleet_connections(admin) and time.monotonic() < end:
        time.sleep(0.1)
    assert _fleet_connections(admin) == 0
