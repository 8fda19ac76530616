"""A checkout that only root can read (a clone under /root, or in a ``mktemp -d`` directory,
mode 0700) still runs ``make demo`` and ``make test``: what runs as the ``postgres`` user
(PostgreSQL, Patroni and its reaper, pgbouncer) reads nothing from the checkout, and never
starts in it. Each test runs tenure from a copy of the package in such a directory."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "python" / "tenure"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="only root runs the servers as another user")


@pytest.fixture
def closed_checkout() -> Iterator[Path]:
    """A copy of the tenure package in a directory only root may enter."""
    directory = Path(tempfile.mkdtemp(prefix="tenure-test-closed-"))
    try:
        assert directory.stat().st_mode & 0o777 == 0o700
        shutil.copytree(PACKAGE, directory / "tenure", ignore=shutil.ignore_patterns("__pycache__"))
        yield directory
    finally:
        shutil.rmtree(directory)


def run_from(checkout: Path, script: str, *, timeout: float) -> subprocess.CompletedProcess[str]:
    """script, by this interpreter, with tenure imported from checkout and checkout as cwd."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        cwd=checkout,
        env=dict(os.environ, PYTHONPATH=str(checkout)),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.usefixtures("needs_patroni")
@pytest.mark.timeout(240)
def test_a_patroni_node_starts_from_a_checkout_postgres_cannot_read(closed_checkout: Path) -> None:
    result = run_from(
        closed_checkout,
        """
        import tenure
        from tenure.testing.patroni import PatroniCluster

        print("tenure from", tenure.__file__)
        options = dict(nodes=1, synchronous_mode=False, synchronous_mode_strict=False, start_timeout=90)
        with PatroniCluster(**options) as cluster:
            print("leader", cluster.wait_ready(30))
        """,
        timeout=200,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert f"tenure from {closed_checkout}/tenure/__init__.py" in result.stdout, output
    assert "leader n1" in result.stdout, output
    assert "Permission denied" not in output, output


@pytest.mark.usefixtures("needs_pgbouncer")
def test_pgbouncer_starts_from_a_checkout_postgres_cannot_read(closed_checkout: Path) -> None:
    host, port = os.environ["PGHOST"], os.environ["PGPORT"]
    result = run_from(
        closed_checkout,
        f"""
        import psycopg
        from tenure.testing.pgbouncer import PgBouncer

        with PgBouncer(upstream_host={host!r}, upstream_port={port}) as bouncer:
            with psycopg.connect(bouncer.conninfo("postgres", user="postgres")) as connection:
                print("through pgbouncer", connection.execute("SELECT 1").fetchone())
        """,
        timeout=60,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0 and "through pgbouncer (1,)" in result.stdout, output
    assert "Permission denied" not in output, output


def test_a_throwaway_cluster_starts_and_stops_from_a_closed_directory(closed_checkout: Path) -> None:
    """scripts/pgcluster.sh, called from a directory postgres cannot enter (make test's cwd in
    such a clone), runs initdb and pg_ctl as postgres from elsewhere: no warning, no failure."""
    cluster = Path(tempfile.mkdtemp(prefix="tenure-test-closed-pg."))
    cluster.chmod(0o755)
    script = str(ROOT / "scripts" / "pgcluster.sh")
    try:
        started = subprocess.run(
            [script, "start", str(cluster)], cwd=closed_checkout, capture_output=True, text=True, timeout=120
        )
        assert started.returncode == 0, started.stdout + started.stderr
        assert "Permission denied" not in started.stderr, started.stderr
    finally:
        stopped = subprocess.run(
            [script, "stop", str(cluster)], cwd=closed_checkout, capture_output=True, text=True, timeout=60
        )
    assert stopped.returncode == 0 and "Permission denied" not in stopped.stderr, stopped.stderr
    assert not cluster.exists()
