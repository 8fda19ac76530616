"""``tenure bench`` runs every section end to end (at a tiny size: the figures are for
``make bench``, never asserted here), so the benchmark cannot rot between runs."""

from __future__ import annotations

import subprocess
import sys

import pytest

SMALL = [
    "--seconds", "1", "--clients", "2", "--kills", "2",
    "--backlogs", "2000", "--task-workers", "1", "--task-seconds", "1",
    "--enqueue-batches", "10", "--wake-tasks", "3",
    "--claim-keys", "40", "--claim-instances", "2",
    "--queue-keys", "2", "--queue-batches", "16", "--replica-trials", "1",
]  # fmt: skip


@pytest.mark.timeout(600)
def test_every_section_runs_and_reports(admin_conninfo: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tenure", "bench", "--db", admin_conninfo, *SMALL],
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    for shown in (
        "baseline  pgbench one-row UPDATE",
        "takeover after SIGKILL of the primary",
        "bare SKIP LOCKED",
        "notifications on",
        "logs: ",
    ):
        assert shown in result.stdout, f"no {shown!r} in:\n{result.stdout}\n{result.stderr}"
