"""The failover part of ``tenure demo``, run once: a real 3-node Patroni cluster switches
over, loses its primary node to SIGKILL and has the next one frozen, under electors, task
workers, claimers, submission pools and replicas running as processes; every check of the
part holds (batches applied once and in order, replicas never active two at once, each area
serving again within its bound) and its picture is written."""

from __future__ import annotations

import io
import re
import shutil
import tempfile
from pathlib import Path

import pytest
from test_plots import is_png

from tenure.demo.failover import run_failover_demo

pytestmark = pytest.mark.usefixtures("needs_patroni")


def test_the_database_fails_over_under_the_services() -> None:
    # not pytest's tmp_path: the cluster's scratch goes in it and runs as postgres, which
    # cannot enter /tmp/pytest-of-root
    workdir = Path(tempfile.mkdtemp(prefix="tenure-test-demo-failover-"))
    out = io.StringIO()
    assert run_failover_demo(workdir=workdir, out=out), out.getvalue()
    text = out.getvalue()
    assert text.count("writable again") == 3, text
    assert "VIOLATION" not in text
    checked = re.search(
        r"all (\d+) acknowledged fenced writes and all (\d+) acknowledged task outcomes", text
    )
    assert checked is not None and int(checked[1]) > 0 and int(checked[2]) > 0, text
    claimed = re.search(r"all (\d+) acknowledged claim-fenced writes are there", text)
    assert claimed is not None and int(claimed[1]) > 0, text
    batches = re.search(r"all (\d+) acknowledged batches applied once and in order", text)
    assert batches is not None and int(batches[1]) > 0, text
    replicas = re.search(r"all (\d+) acknowledged replica writes are there", text)
    assert replicas is not None and int(replicas[1]) > 0, text
    assert text.count("serving again after writable: elector") == 3, text
    assert is_png(workdir / "failover.png")
    shutil.rmtree(workdir)  # kept when the test fails
