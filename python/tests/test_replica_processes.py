"""Replicas with real processes behind a real HAProxy (Debian's), checked from the records.

Three demo replicas share the database; HAProxy sends a client's continuous writes to
the one whose ``/health/active`` answers 200. The active replica is killed with SIGKILL,
its lock session is ended with pg_terminate_backend, and it is frozen with SIGSTOP (then
resumed): each time the load balancer routes to a new active replica. Failed requests
and the time until requests succeed again are counted (and printed, not asserted: speed
belongs to ``make bench``). Afterwards the records must show that every accepted write
was made by the lock holder of its epoch inside its term, so no two replicas ever
accepted writes at the same time. REPLICA_ROUNDS (default 1) repeats the three faults.
The failover test runs twice: against replicas on threads (ReplicaManager) and against
replicas on asyncio (AsyncReplicaManager).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from proxy import PausingProxy
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from tenure.cli.replicas import EXAMPLES as REPLICA_EXAMPLES
from tenure.demo.replicas import run_replica_demo
from tenure.driver import Driver
from tenure.errors import NotPrimary
from tenure.testing.database import setup
from tenure.testing.haproxy import HAProxy
from tenure.testing.replicas import (
    WRITE,
    Answer,
    Client,
    ReplicaProcess,
    ReplicaSettings,
    check_replica_records,
    read_replica_records,
    wait_for_active,
)

SETTINGS = ReplicaSettings(interval=0.2, idle_timeout=0.6, grace=0.6, check_interval=0.1)
ROUNDS = int(os.environ.get("REPLICA_ROUNDS", "1"))
TENURE = [sys.executable, "-m", "tenure"]


@pytest.fixture(params=["sync", "async"])
def replicas(
    admin_conninfo: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[list[ReplicaProcess]]:
    """Three demo replicas: ReplicaManager services, or (async) AsyncReplicaManager ones on asyncio."""
    conninfo = setup(admin_conninfo)
    spawned = [
        ReplicaProcess(conninfo, f"r{n}", tmp_path / f"r{n}.log", settings=SETTINGS, flavour=request.param)
        for n in (1, 2, 3)
    ]
    try:
        yield spawned
    finally:
        for replica in spawned:
            replica.stop()


def believes_active(replica: ReplicaProcess) -> bool:
    state = False
    for event in replica.events():
        if event["event"] in ("active", "passive"):
            state = event["event"] == "active"
    return state


def success_after_termination(client: Client, active: ReplicaProcess, at: float, wait: float = 30) -> Answer:
    """The first request another replica answered after ``at``, when the active one's lock session
    was terminated then; or, when the termination's 57P01 never reached it (a statement was in
    flight: psycopg says the server closed the connection), the first answered after it took its
    lock back, as it then does (docs/replicas.md)."""
    end = time.monotonic() + wait
    while time.monotonic() < end:
        found = client.first_success_after(at, other_than=active.replica)
        if found is not None:
            return found
        events = [e for e in active.events() if e.get("mono", 0) >= at]
        unseen = [
            e["mono"]
            for e in events
            if e["event"] == "passive" and "server closed the connection unexpectedly" in e["reason"]
        ]
        back = [e["mono"] for e in events if e["event"] == "active" and unseen and e["mono"] >= unseen[0]]
        if back:
            found = client.first_success_after(back[0])
            if found is not None:
                return found
        time.sleep(0.01)
    raise TimeoutError(f"no successful request {wait} s after the fault")


def test_failover_behind_haproxy(
    replicas: list[ReplicaProcess], admin: Any, admin_conninfo: str, tmp_path: Path
) -> None:
    driver = Driver(admin)
    figures: list[str] = []
    with HAProxy(
        [(r.name, r.port) for r in replicas], tmp_path, check_interval=SETTINGS.check_interval
    ) as lb:
        active = wait_for_active(replicas, admin)
        client = Client(lb.url).start()
        try:
            client.wait_success_after(time.monotonic())
            for round in range(ROUNDS):
                for fault in ("SIGKILL", "pg_terminate_backend", "SIGSTOP"):
                    time.sleep(0.5)
                    assert active.process.poll() is None
                    at = time.monotonic()
                    if fault == "SIGKILL":
                        active.signal(signal.SIGKILL)
                    elif fault == "pg_terminate_backend":
                        holder = driver.replica_holder()
                        assert holder is not None and holder.replica == active.replica
                        admin.execute("SELECT pg_terminate_backend(%s)", (holder.pid,))
                    else:
                        active.signal(signal.SIGSTOP)
                    try:
                        if fault == "pg_terminate_backend":
                            success = success_after_termination(client, active, at)
                        else:
                            success = client.wait_success_after(at, other_than=active.replica)
                    except TimeoutError as timeout:
                        tails = {r.replica: r.output().splitlines()[-8:] for r in replicas}
                        raise AssertionError(
                            f"round {round + 1}, {fault} of {active.replica}: {timeout}; the replicas' "
                            f"last lines: {json.dumps(tails, indent=1)}"
                        ) from None
                    if success.replica == active.replica:
                        figures.append(
                            f"round {round + 1} {fault}: 57P01 unseen, {active.replica} took its lock back"
                        )
                    failed = client.failed_between(at, success.done)
                    figures.append(
                        f"round {round + 1} {fault}: {failed} failed requests, "
                        f"{success.done - at:.3f} s until {success.replica} answered"
                    )
                    successor = next(r for r in replicas if r.replica == success.replica)
                    if fault == "SIGSTOP":
                        time.sleep(SETTINGS.idle_timeout)
                        resumed = time.monotonic()
                        active.signal(signal.SIGCONT)
                        time.sleep(4 * SETTINGS.interval)
                        after = [e for e in active.events() if e["mono"] >= resumed]
                        assert not believes_active(active), f"the frozen one woke up active: {after}"
                        assert active.health() == 503
                    if fault == "SIGKILL":
                        # Keep three replicas for the next faults: a new one on the same port.
                        replicas[replicas.index(active)] = ReplicaProcess(
                            setup(admin_conninfo),
                            active.name,
                            tmp_path / f"{active.name}-{round}.log",
                            settings=SETTINGS,
                            port=active.port,
                            flavour=active.flavour,
                        )
                    active = successor
                    assert sum(believes_active(r) for r in replicas if r.process.poll() is None) == 1
            # A write from a session that does not hold the lock, as a replica that lost it
            # might still send one, is refused by the guard while another replica is active.
            with (
                psycopg.connect(setup(admin_conninfo), autocommit=True) as outsider,
                pytest.raises(NotPrimary),
                outsider.transaction(),
            ):
                Driver(outsider).replica_guard()
                outsider.execute(WRITE, ("outsider", "outsider"))
            time.sleep(0.5)
        finally:
            client.stop()
    print("\n" + "\n".join(figures))

    for replica in replicas:
        replica.stop()
    terms, writes = read_replica_records(admin)
    assert check_replica_records(terms, writes, client.answers) == []
    accepted = [a for a in client.answers if a.status == 200]
    assert len({a.replica for a in accepted}) >= 3, "writes were accepted by each successive active replica"
    assert len(terms) >= 1 + 3 * ROUNDS


def test_blip_shorter_than_grace_keeps_the_active_replica(
    admin: Any, admin_conninfo: str, tmp_path: Path
) -> None:
    """The active replica reaches the database through a proxy that cuts every connection and
    then passes nothing for 0.3 s (< grace 0.6 s): it stays the active replica, through HAProxy."""
    conninfo = setup(admin_conninfo)
    params = conninfo_to_dict(conninfo)
    spawned: list[ReplicaProcess] = []
    with PausingProxy(str(params["host"]), int(str(params["port"]))) as proxy:
        try:
            proxied = make_conninfo(conninfo, host="127.0.0.1", port=proxy.port)
            spawned.append(ReplicaProcess(proxied, "r1", tmp_path / "r1.log", settings=SETTINGS))
            first = wait_for_active(spawned, admin)
            spawned += [
                ReplicaProcess(conninfo, f"r{n}", tmp_path / f"r{n}.log", settings=SETTINGS) for n in (2, 3)
            ]
            with HAProxy(
                [(r.name, r.port) for r in spawned], tmp_path, check_interval=SETTINGS.check_interval
            ) as lb:
                client = Client(lb.url).start()
                try:
                    client.wait_success_after(time.monotonic())
                    for _ in range(2):
                        time.sleep(0.5)
                        at = time.monotonic()
                        proxy.pause()
                        proxy.reset()
                        time.sleep(0.3)
                        proxy.resume()
                        success = client.wait_success_after(at + 0.3)
                        assert success.replica == first.replica
                        print(
                            f"\nblip of 0.3 s: {client.failed_between(at, success.done)} failed requests, "
                            f"{success.done - at:.3f} s until {success.replica} answered again"
                        )
                    time.sleep(0.5)
                finally:
                    client.stop()
        finally:
            for replica in reversed(spawned):  # the passive ones first: none takes over at the end
                replica.stop()
    terms, writes = read_replica_records(admin)
    assert {t.replica for t in terms} == {first.replica}, "no other replica ever acquired the lock"
    assert len(terms) == 3, "the lock was reclaimed after each blip"
    assert [e["event"] for e in first.events() if e["event"] in ("active", "passive")][:5] == [
        "active",
        "passive",
        "active",
        "passive",
        "active",
    ]
    assert check_replica_records(terms, writes, client.answers) == []


@pytest.mark.parametrize("command", [f"replica {name}" for name in REPLICA_EXAMPLES])
def test_replica_commands_have_help_with_an_example(command: str) -> None:
    result = subprocess.run([*TENURE, *command.split(), "--help"], capture_output=True, text=True, check=True)
    assert "usage: tenure" in result.stdout and "example: tenure replica" in result.stdout


def test_replica_run_and_status(app_conninfo: str, tmp_path: Path) -> None:
    def status() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*TENURE, "replica", "status", "--db", app_conninfo], capture_output=True, text=True
        )

    assert status().returncode == 3 and "no replica lock registered" in status().stdout
    log = tmp_path / "replica.log"
    command = [*TENURE, "replica", "run", "--db", app_conninfo, "--interval", "0.2", "--http", "127.0.0.1:0"]
    second_log = tmp_path / "replica-2.log"
    with open(log, "w") as out:
        first = subprocess.Popen([*command, "--name", "one"], stdout=out, stderr=subprocess.STDOUT)
    second = first
    try:
        deadline = time.monotonic() + 15
        while "active in epoch 1" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "active in epoch 1" in log.read_text()
        with open(second_log, "w") as out:
            second = subprocess.Popen([*command, "--name", "two"], stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 15
        while "lock id" not in second_log.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert re.search(r"lock id \d+; active: one:\d+ \(pid \d+\)", second_log.read_text())
        url = re.search(r"serving (http://\S+)/health/active", log.read_text())
        assert url is not None
        with urllib.request.urlopen(url.group(1) + "/health/active", timeout=5) as response:
            body = json.loads(response.read())
        assert body["role"] == "active" and body["epoch"] == 1
        shown = status()
        assert shown.returncode == 0
        assert re.search(
            r"active replica one:\d+ in epoch 1, pid \d+ \(tenure replica one:\d+\), since", shown.stdout
        )
        first.send_signal(signal.SIGTERM)
        assert first.wait(15) == 0
        deadline = time.monotonic() + 15
        while "active in epoch 2" not in second_log.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "active in epoch 2" in second_log.read_text(), "a clean stop hands over at the next try"
        second.send_signal(signal.SIGTERM)
        assert second.wait(15) == 0
    finally:
        for process in (first, second):
            if process.poll() is None:
                process.kill()
    assert log.read_text().rstrip().endswith("released")
    after = status()
    assert after.returncode == 1 and "no active replica" in after.stdout


def test_replica_demo_runs_and_its_checks_hold(admin_conninfo: str, tmp_path: Path, capsys: Any) -> None:
    assert run_replica_demo(admin_conninfo, workdir=tmp_path, settings=SETTINGS) is True
    output = capsys.readouterr().out
    assert "SIGKILL replica-" in output
    assert re.search(r"answers through HAProxy [0-9.]+ s after the kill", output)
    assert "never two active replicas" in output
    assert (tmp_path / "replicas.png").read_bytes().startswith(b"\x89PNG")
