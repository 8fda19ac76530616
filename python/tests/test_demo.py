"""Each part of ``tenure demo`` runs and its own checks hold (the replicas part runs in
test_replica_processes.py, beside the HAProxy it needs)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from tenure.demo.batches import run_queue_demo
from tenure.demo.claims import run_claims_demo
from tenure.demo.heartbeat import run_demo
from tenure.demo.tasks import run_task_demo


def test_demo_runs_and_its_checks_hold(admin_conninfo: str, tmp_path: Path, capsys: Any) -> None:
    assert run_demo(admin_conninfo, workdir=tmp_path) is True
    output = capsys.readouterr().out
    assert "took over in term 2" in output
    assert re.search(r"takeover: [0-9.]+ s after the kill; bound T \+ I = 2.000 s", output)
    assert "no two primaries at any instant" in output
    assert f"picture: {tmp_path / 'leadership.png'}" in output
    assert (tmp_path / "leadership.png").read_bytes().startswith(b"\x89PNG")


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
