"""The tenure command, run as a person would."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from tenure import Driver
from tenure.cli import EXAMPLES, build_parser
from tenure.cli import main as cli_main
from tenure.cli.batches import EXAMPLES as BATCH_EXAMPLES
from tenure.cli.claims import EXAMPLES as CLAIM_EXAMPLES
from tenure.cli.tasks import EXAMPLES as TASK_EXAMPLES

TENURE = [sys.executable, "-m", "tenure"]


@pytest.mark.parametrize(
    "command",
    [
        None,
        *EXAMPLES,
        *(f"task {name}" for name in TASK_EXAMPLES),
        *(f"claim {name}" for name in CLAIM_EXAMPLES),
        *(f"batch {name}" for name in BATCH_EXAMPLES),
    ],
)
def test_every_command_has_help_with_an_example(command: str | None) -> None:
    args = [*TENURE, *(command.split() if command else []), "--help"]
    result = subprocess.run(args, capture_output=True, text=True, check=True)
    assert "usage: tenure" in result.stdout
    if command:
        assert "example: tenure" in result.stdout


def test_subcommands_and_examples_match() -> None:
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert set(commands.choices) == set(EXAMPLES)


def test_elect_prints_role_changes_and_resigns_on_sigterm(app_conninfo: str, tmp_path: Path) -> None:
    log = tmp_path / "elect.log"
    with open(log, "w") as out:
        process = subprocess.Popen(
            [
                *TENURE,
                "elect",
                "--db",
                app_conninfo,
                "--type",
                "cli",
                "--interval",
                "0.2",
                "--timeout",
                "0.7",
                "--http",
                "127.0.0.1:0",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 15
        while "elected primary of cli in term 1" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "elected primary of cli in term 1" in log.read_text()
        url = re.search(r"serving (http://\S+/primary)", log.read_text())
        assert url is not None
        check = subprocess.run(
            [*TENURE, "check-primary", "--url", url.group(1)], capture_output=True, text=True
        )
        assert (check.returncode, check.stdout.strip()) == (0, "primary")
        primary = subprocess.run(
            [*TENURE, "primary", "--db", app_conninfo, "--type", "cli"], capture_output=True, text=True
        )
        assert primary.returncode == 0 and "in term 1" in primary.stdout
        process.send_signal(signal.SIGTERM)
        assert process.wait(15) == 0
    finally:
        if process.poll() is None:
            process.kill()
    output = log.read_text()
    assert "no longer primary of cli: stopped" in output and output.rstrip().endswith("resigned")
    after = subprocess.run(
        [*TENURE, "primary", "--db", app_conninfo, "--type", "cli"], capture_output=True, text=True
    )
    assert after.returncode == 3 and "no live primary" in after.stdout
    unreachable = subprocess.run(
        [*TENURE, "check-primary", "--url", url.group(1)], capture_output=True, text=True
    )
    assert unreachable.returncode == 2


def test_a_bad_endpoint_address_is_refused_before_anything_starts() -> None:
    result = subprocess.run(
        [*TENURE, "claim", "run", "--keyspace", "k", "--metrics", "127.0.0.1:http"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert "expected HOST:PORT with a port from 0 to 65535, got '127.0.0.1:http'" in result.stderr


def test_elect_refuses_bad_timing_with_a_clear_error(app_conninfo: str) -> None:
    result = subprocess.run(
        [*TENURE, "elect", "--db", app_conninfo, "--type", "cli", "--interval", "1", "--timeout", "2"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert "T must be longer than twice the interval" in result.stderr


def test_task_commands(app_conninfo: str) -> None:
    def tenure(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*TENURE, "task", *args, "--db", app_conninfo], capture_output=True, text=True)

    first = tenure("enqueue", "--kind", "cli", "--data", '{"n": 1}', "--key", "k-1")
    again = tenure("enqueue", "--kind", "cli", "--key", "k-1")
    assert first.returncode == 0 and "enqueued" in first.stdout and "already there" in again.stdout
    task_id = first.stdout.split()[0]
    listing = tenure("list", "--kind", "cli", "--due")
    assert task_id in listing.stdout and "new" in listing.stdout
    shown = tenure("show", task_id)
    assert '"data": {\n    "n": 1\n  }' in shown.stdout
    ejected = tenure("eject", task_id, "--lease", "60")
    assert ejected.returncode == 0 and "epoch 1" in ejected.stdout
    assert tenure("requeue", task_id).returncode == 1, "a pending task is not requeued"
    assert tenure("show", "00000000-0000-0000-0000-000000000000").returncode == 3
    assert "0 tasks purged" in tenure("purge", "--older-than", "0").stdout
    missing = subprocess.run(
        [*TENURE, "task", "worker", "--db", app_conninfo, "--module", "json"], capture_output=True, text=True
    )
    assert missing.returncode == 2 and "PROCESSORS" in missing.stderr


def test_task_control_commands(app_conninfo: str, admin: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """Kinds paused and limited, tasks cancelled, reprioritised and run after others, from the
    command line (in this process: a python per command would cost a second each)."""

    def run(*args: str, code: int = 0) -> str:
        assert cli_main(["task", *args, "--db", app_conninfo]) == code, capsys.readouterr()
        out, err = capsys.readouterr()
        return out + err

    assert "no kind has settings" in run("kind", "show")
    line = run("kind", "set", "cli-mail", "--max-running", "3", "--rate", "10", "--per", "1m")
    assert line.strip() == "kind cli-mail: not paused, running 0, max running 3, rate 10 per 60 s (used 0)"
    assert "paused, running 0, max running 3" in run("kind", "set", "cli-mail", "--pause")
    run("kind", "set", "cli-sms", "--max-running-per-key", "1")
    table = run("kind", "show").splitlines()
    assert table[0].split()[:4] == ["kind", "paused", "running", "max_running"]
    assert table[1].split()[:5] == ["cli-mail", "yes", "0", "3", "-"] and "10 per 60 s" in table[1]
    assert table[2].split()[:5] == ["cli-sms", "no", "0", "-", "1"]
    (row,) = json.loads(run("kind", "show", "cli-mail", "--json"))
    assert (row["kind"], row["paused"], row["max_running"], row["rate"]) == ("cli-mail", True, 3, 10)
    assert "kind cli-none: no settings" in run("kind", "show", "cli-none")
    for bad, why in (
        (["--max-running", "-1"], "max_running"),
        (["--rate", "5", "--per", "0"], "period"),
    ):
        refused = run("kind", "set", "cli-mail", *bad, code=2)
        assert refused.startswith("tenure: ") and why in refused, refused
    assert "nothing to change for kind 'cli-mail'" in run("kind", "set", "cli-mail", code=2)
    assert "expected a duration" in cli_error(["task", "kind", "set", "k", "--rate", "1", "--per", "soon"])
    huge = cli_error(["task", "kind", "set", "k", "--max-running", "99999999999"])
    assert "expected a whole number from -2147483648 to 2147483647, got 99999999999" in huge
    assert "from -2147483648" in cli_error(["task", "priority", str(uuid.uuid4()), "-2147483649"])
    assert "not allowed with argument --pause" in cli_error(
        ["task", "kind", "set", "k", "--pause", "--resume"]
    )
    line = run("kind", "set", "cli-mail", "--resume", "--max-running", "0", "--rate", "0")
    assert line.strip() == "kind cli-mail: no settings left (not paused, no limits)"
    assert [r.kind for r in Driver(admin).task_kinds()] == ["cli-sms"]

    first = run("enqueue", "--kind", "cli-mail", "--priority", "-5", "--limit-key", "customer-1").split()[0]
    other = run("enqueue", "--kind", "cli-mail").split()[0]
    second = run("enqueue", "--kind", "cli-mail", "--after", first, "--after", other).split()
    assert "waiting for 2 of the tasks it runs after" in " ".join(second), second
    waiting = run("list", "--kind", "cli-mail", "--status", "waiting")
    assert second[0] in waiting and "after 2 more" in waiting and first not in waiting
    pending = run("list", "--kind", "cli-mail", "--status", "pending")
    assert "priority -5  limit key customer-1" in pending
    assert run("priority", first, "7").strip() == f"task {first} now has priority 7"
    assert Driver(admin).task(uuid.UUID(first)).priority == 7  # type: ignore[union-attr]
    assert run("cancel", first).strip() == f"task {first} cancelled"
    assert "has already finished" in run("cancel", first, code=1)
    assert "has already finished" in run("priority", first, "1", code=1)
    dependent = Driver(admin).task(uuid.UUID(second[0]))
    assert dependent is not None and dependent.status == "dead" and first in (dependent.last_error or "")
    assert second[0] in run("list", "--status", "dead")
    assert first in run("list", "--status", "cancelled")
    late = run("enqueue", "--kind", "cli-mail", "--after", first)
    assert "dead: " in late and first in late, late
    unknown = str(uuid.uuid4())
    assert unknown in run("enqueue", "--kind", "cli-mail", "--after", unknown, code=2)
    assert run("cancel", unknown, code=2).startswith("tenure: ")
    assert run("priority", unknown, "1", code=2).startswith("tenure: ")


def cli_error(argv: list[str]) -> str:
    """What argparse says when it refuses ``argv`` (it exits 2)."""
    with pytest.raises(SystemExit) as exited, contextlib.redirect_stderr(io.StringIO()) as err:
        cli_main(argv)
    assert exited.value.code == 2
    return err.getvalue()


def test_claim_commands(app_conninfo: str, tmp_path: Path) -> None:
    def tenure(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*TENURE, "claim", *args, "--db", app_conninfo], capture_output=True, text=True)

    assert "3 keys registered" in tenure("register", "--keyspace", "cli", "a", "b", "c").stdout
    log = tmp_path / "claim.log"
    with open(log, "w") as out:
        process = subprocess.Popen(
            [
                *TENURE,
                "claim",
                "run",
                "--db",
                app_conninfo,
                "--keyspace",
                "cli",
                "--cycle",
                "0.2",
                "--expiry",
                "0.7",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 15
        while "gained 3: a, b, c" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "gained 3: a, b, c" in log.read_text()
        listing = tenure("list", "--keyspace", "cli")
        assert listing.stdout.count("epoch 1") == 3
        assert "holds 3 of a fair share of 3" in tenure("list", "--keyspace", "cli", "--instances").stdout
        assert "1 keys retired" in tenure("retire", "--keyspace", "cli", "c").stdout
        deadline = time.monotonic() + 15
        while "lost 1: c" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "lost 1: c" in log.read_text(), "a retired key is lost at the next renewal"
        process.send_signal(signal.SIGTERM)
        assert process.wait(15) == 0
    finally:
        if process.poll() is None:
            process.kill()
    assert log.read_text().rstrip().endswith("released")
    assert tenure("list", "--keyspace", "cli").stdout.count("unclaimed for") == 2


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_batch_commands(app_conninfo: str, tmp_path: Path, asynchronous: bool) -> None:
    def tenure(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*TENURE, "batch", *args, "--db", app_conninfo, "--keyspace", "cli-ledger"],
            capture_output=True,
            text=True,
        )

    assert tenure("configure", "--mode", "serial").returncode == 0
    for price in ("price 2.75", "bad 3.00", "price 3.25"):
        assert "enqueued" in tenure("enqueue", "--key", "po-1", "--payload", price).stdout
    bad = tenure("enqueue", "--key", "po-1", "--payload", "x", "--depends-on", str(uuid.uuid4()))
    assert bad.returncode == 2 and "depends on a batch that does not exist" in bad.stderr
    assert "queued 3" in tenure("keys").stdout
    applied, log = tmp_path / "ledger.txt", tmp_path / "run.log"
    with open(log, "w") as out:
        process = subprocess.Popen(
            [
                *TENURE,
                "batch",
                "run",
                "--db",
                app_conninfo,
                "--keyspace",
                "cli-ledger",
                "--module",
                "batch_app",
                "--cycle",
                "0.2",
                "--expiry",
                "0.7",
                "--poll-interval",
                "0.05",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={
                **os.environ,
                "PYTHONPATH": str(Path(__file__).parent),
                "BATCH_APP_LOG": str(applied),
                **({"BATCH_APP_ASYNC": "1"} if asynchronous else {}),
            },
        )
    try:
        deadline = time.monotonic() + 15
        while "HALTED" not in tenure("keys", "--halted").stdout and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "invalid 1 committed 1" in tenure("keys", "--halted").stdout
        (invalid,) = [line.split()[0] for line in tenure("list", "--status", "invalid").stdout.splitlines()]
        assert applied.read_text() == "po-1 1 price 2.75\npo-1 2 bad 3.00\n", (
            "the key halts at the invalid one"
        )
        missing = tenure("retry", str(uuid.uuid4()))
        assert missing.returncode == 2 and "no batch" in missing.stderr
        assert "skipped" in tenure("skip", invalid).stdout
        assert tenure("skip", invalid).returncode == 1, "skipped already: nothing to do"
        while "committed 2" not in tenure("keys").stdout and time.monotonic() < deadline:
            time.sleep(0.1)
        assert applied.read_text().splitlines()[-1] == "po-1 3 price 3.25"
        process.send_signal(signal.SIGTERM)
        assert process.wait(15) == 0
    finally:
        if process.poll() is None:
            process.kill()
    assert "stopped: 3 submitted" in log.read_text()
    assert (", asyncio" in log.read_text()) == asynchronous


def test_status_shows_every_area_as_text_and_json(app_conninfo: str, admin: Any) -> None:
    driver = Driver(admin)
    primary = uuid.uuid4()
    driver.update_heartbeat(primary, "billing", timeout=30, interval=10)
    driver.claim_register("shards", ["s1", "s2", "s3"])
    driver.claim_take("shards", uuid.uuid4(), expiry=60, limit=2)
    driver.task_enqueue("email", {"to": "a@example.org"})
    driver.task_kind_set("email", paused=True, max_running=3, rate=10, rate_period=60)
    driver.batch_enqueue("ledger", "po-1", b"x")
    driver.replica_register()
    assert driver.replica_acquire("replica-a").acquired  # held by this session until the test ends
    admin.execute("SELECT pg_stat_force_next_flush()")  # its table statistics, once it is idle

    def tenure(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*TENURE, "status", "--db", app_conninfo, *args], capture_output=True, text=True
        )

    text = tenure()
    assert text.returncode == 0, text.stderr
    assert re.search(rf"billing\s+live\s+primary {str(primary)[:8]}  term 1", text.stdout)
    assert "shards               3 keys: 2 claimed, 1 unclaimed" in text.stdout
    assert re.search(r"email\s+new\s+pending\s+1\s+leased\s+0\s+due\s+1", text.stdout)
    assert re.search(r"ledger\s+1 keys  queued 1  pending 0", text.stdout)
    assert re.search(r"email\s+PAUSED  running 0 of 3  rate 0 of 10 per 60.0 s  due 1", text.stdout)
    assert re.search(r"active replica-a  epoch 1  pid \d+  since", text.stdout), text.stdout
    assert re.search(r"\n  task +[\d.]+ k?B +1 rows  dead +\d+ of +\d+  vacuumed ", text.stdout), text.stdout
    report = json.loads(tenure("--json").stdout)
    assert report["primaries"][0]["instance_id"] == str(primary) and report["primaries"][0]["live"]
    assert report["claim_keyspaces"][0]["unclaimed"] == 1
    assert report["tasks"][0]["due"] == 1
    assert report["task_kinds"][0]["rate_period"] == 60 and report["task_kinds"][0]["paused"]
    assert report["batch_queues"][0]["queued"] == 1
    assert report["replicas"][0]["replica"] == "replica-a"
    tables = {r["table_name"]: r for r in report["tables"]}
    assert tables["task"]["autovacuum_at"] >= 50 and tables["task_lease_log"]["total_bytes"] > 0

    watch = subprocess.Popen(
        [*TENURE, "status", "--db", app_conninfo, "--watch", "0.2"], stdout=subprocess.PIPE, text=True
    )
    try:
        time.sleep(3)
        watch.send_signal(signal.SIGINT)
        output, _ = watch.communicate(timeout=15)
    finally:
        if watch.poll() is None:
            watch.kill()
    assert watch.returncode == 0
    assert output.count("tenure status at") >= 2, "it refreshes"


def test_a_command_facing_a_silent_database_fails_with_one_line_within_its_bound(app_conninfo: str) -> None:
    """A server that accepts the connection and never answers (a paused network, a frozen
    server: the kernel still acknowledges TCP) costs a command --db-timeout, not for ever,
    whether it falls silent before the connection is made or during a statement."""
    from proxy import PausingProxy

    from tenure.cli.common import admin_connection

    params = conninfo_to_dict(app_conninfo)
    with PausingProxy(str(params["host"]), int(str(params["port"]))) as proxy:
        via_proxy = make_conninfo(app_conninfo, host="127.0.0.1", port=proxy.port)
        proxy.pause()
        began = time.monotonic()
        result = subprocess.run(
            [*TENURE, "--db-timeout", "2", "status", "--db", via_proxy],
            capture_output=True,
            text=True,
            timeout=60,
        )
        took = time.monotonic() - began
        assert result.returncode == 2, result.stdout + result.stderr
        assert result.stderr.startswith("tenure: cannot reach the database"), result.stderr
        assert took < 15, took
        proxy.resume()
        # Silent during a statement: the watchdog abandons the socket at the bound.
        args = argparse.Namespace(db=via_proxy, db_timeout=2.0, command="status")
        began = time.monotonic()
        with (
            pytest.raises(psycopg.OperationalError, match="no answer within 2 s"),
            admin_connection(args) as connection,
        ):
            connection.execute("SELECT 1")
            proxy.pause()
            connection.execute("SELECT 2")
        assert time.monotonic() - began < 10


@pytest.fixture
def outsider_conninfo(admin: Any, admin_conninfo: str) -> Iterator[str]:
    """A login role of this cluster that was never granted tenure_worker."""
    role = f"tenure_cli_outsider_{uuid.uuid4().hex[:8]}"
    admin.execute(f'CREATE ROLE "{role}" LOGIN')
    try:
        yield make_conninfo(admin_conninfo, user=role)
    finally:
        admin.execute(f'DROP ROLE "{role}"')


@pytest.fixture
def undeployed_conninfo(admin: Any, admin_conninfo: str) -> Iterator[str]:
    """A database of this cluster without tenure's schema."""
    name = f"tenure_cli_empty_{uuid.uuid4().hex[:8]}"
    admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield make_conninfo(admin_conninfo, dbname=name)
    finally:
        admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


STATE_COMMANDS = (["status"], ["primary", "--type", "cli"], ["task", "list"])


def refusal(command: list[str], conninfo: str) -> str:
    """Run a state command that must fail with exit 2 and one line; returns that line."""
    result = subprocess.run([*TENURE, *command, "--db", conninfo], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("tenure: "), result.stderr
    return result.stderr


def test_state_commands_on_a_database_without_tenure_say_to_deploy(undeployed_conninfo: str) -> None:
    for command in STATE_COMMANDS:
        line = refusal(command, undeployed_conninfo)
        assert "does not exist" in line and "run tenure deploy" in line, line


def test_state_commands_as_a_role_without_tenure_worker_say_what_to_grant(outsider_conninfo: str) -> None:
    role = conninfo_to_dict(outsider_conninfo)["user"]
    for command in STATE_COMMANDS:
        line = refusal(command, outsider_conninfo)
        assert "permission denied" in line and f"GRANT tenure_worker TO {role}" in line, line


def test_a_misspelt_conninfo_keyword_is_refused_in_one_line(app_conninfo: str) -> None:
    line = refusal(["status"], f"hostt=127.0.0.1 {app_conninfo}")
    assert 'not a valid conninfo: invalid connection option "hostt"' in line, line
    line = refusal(["primary", "--type", "cli"], "postgresql://127.0.0.1/db?sslmod=off")
    assert 'invalid URI query parameter: "sslmod"' in line, line
