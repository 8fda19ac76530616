"""The built wheel, installed into a fresh venv, deploys tenure by itself; sqitch's absence is reported."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from conftest import HOST, PORT, ROOT, USER
from psycopg.conninfo import make_conninfo

from tenure import deploy
from tenure.cli import main


@pytest.fixture
def fresh_database() -> Iterator[str]:
    name = f"tenure_wheel_{uuid.uuid4().hex[:8]}"
    admin = make_conninfo(host=HOST, port=PORT, user=USER, dbname="postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield make_conninfo(host=HOST, port=PORT, user=USER, dbname=name)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def test_wheel_carries_the_sqitch_project_and_deploys_it(tmp_path: Path, fresh_database: str) -> None:
    # Build from a copy of the repository so that the worktree gets no build/ or egg-info.
    source = tmp_path / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", ".*cache", "build")
    shutil.copytree(ROOT / "python", source / "python", ignore=ignore)
    shutil.copytree(ROOT / "db", source / "db")
    for name in ("sqitch.conf", "sqitch.plan"):
        shutil.copy2(ROOT / name, source / name)
    wheels = tmp_path / "wheels"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "-w", wheels, source / "python"], check=True)
    (wheel,) = wheels.glob("tenure-*.whl")

    with zipfile.ZipFile(wheel) as archive:
        bundled = {n.removeprefix("tenure/sqitch/") for n in archive.namelist() if "/sqitch/" in n}
        expected = {"sqitch.conf", "sqitch.plan"} | {
            str(p.relative_to(ROOT))
            for part in ("deploy", "revert", "verify", "procedures")
            for p in (ROOT / "db" / part).glob("*.sql")
        }
        assert bundled == expected
        assert archive.read("tenure/sqitch/sqitch.plan") == (ROOT / "sqitch.plan").read_bytes()

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    subprocess.run([venv / "bin/pip", "--disable-pip-version-check", "-q", "install", wheel], check=True)
    # The package's version is the release its schema was tagged with.
    version = subprocess.run([venv / "bin/tenure", "--version"], capture_output=True, text=True, check=True)
    release = re.search(r'^version = "(.+)"$', (ROOT / "python/pyproject.toml").read_text(), re.M)
    assert release is not None
    shown = f"tenure {release[1]} (schema: sqitch plan @v{release[1]}"
    assert version.stdout.startswith(shown), version.stdout
    deployed = subprocess.run(
        [venv / "bin/tenure", "deploy", "--db", fresh_database],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    # The installed package deployed its own copy, not the repository's.
    assert f"project in {venv}/lib/" in deployed.stderr
    assert "+ batches_functions" in deployed.stdout
    verified = subprocess.run(
        [venv / "bin/tenure", "verify", "--db", fresh_database], cwd=tmp_path, capture_output=True, text=True
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "Verify successful" in verified.stdout
    with psycopg.connect(fresh_database) as conn:
        entry = conn.execute(
            "SELECT instance_id, term FROM tenure.update_heartbeat(gen_random_uuid(), 'wheel', '3 s', '1 s')"
        ).fetchone()
        assert entry is not None and entry[1] == 1


def test_deploy_reports_a_missing_sqitch(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(shutil, "which", lambda _: None)
    assert main(["deploy", "--db", "dbname=nowhere"]) == 2
    assert "sqitch is not installed" in capsys.readouterr().err


def test_deploy_refuses_a_conninfo_sqitch_cannot_be_given(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["deploy", "--db", "dbname=x keepalives=1"]) == 2
    assert "parameters keepalives have no libpq environment variable" in capsys.readouterr().err
    assert main(["deploy", "--db", "host=a b c"]) == 2
    assert "not a valid conninfo" in capsys.readouterr().err


def test_conninfo_reaches_sqitch_as_libpq_environment() -> None:
    env = deploy.sqitch_environment("postgresql://alice:s3cret@db.example.org:6543/prod?sslmode=require")
    assert {k: env[k] for k in ("PGHOST", "PGPORT", "PGUSER", "PGPASSWORD", "PGDATABASE", "PGSSLMODE")} == {
        "PGHOST": "db.example.org",
        "PGPORT": "6543",
        "PGUSER": "alice",
        "PGPASSWORD": "s3cret",
        "PGDATABASE": "prod",
        "PGSSLMODE": "require",
    }


def test_revert_without_a_terminal_needs_yes(capsys: pytest.CaptureFixture[str]) -> None:
    # pytest's stdin is not a terminal; sqitch would take "yes" as the answer there.
    assert main(["revert", "--db", "dbname=nowhere"]) == 2
    assert "pass --yes to confirm. Nothing was changed." in capsys.readouterr().err
