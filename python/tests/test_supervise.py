"""The supervision of commands (tenure.runtime.supervise): the Supervisor and the warden on
real processes, and the commands run for an elector's term and a claimer's keys against a
real database. The shims' faults (SIGKILL, SIGSTOP, killed connections) under several
processes are in test_supervise_processes.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tenure.errors import InvalidConfiguration
from tenure.runtime.claims import Claimer
from tenure.runtime.heartbeat import Elector
from tenure.runtime.supervise import (
    WARDEN,
    ClaimedCommands,
    ElectedCommand,
    Supervisor,
    Warden,
    check_kill_grace,
    command_line,
    exit_status,
)

# A child that writes its environment's grant to a file, then waits; on SIGTERM it notes it and exits 3.
CHILD = """
import os, signal, sys, time
out = sys.argv[1]
def term(*_):
    with open(out, "a") as f:
        f.write(f"term {os.getpid()}\\n")
    sys.exit(3)
signal.signal(signal.SIGTERM, term if sys.argv[2] == "polite" else signal.SIG_IGN)
with open(out, "a") as f:
    env = os.environ
    grant = env.get("TENURE_TERM") or env.get("TENURE_KEY", "") + ":" + env.get("TENURE_EPOCH", "")
    f.write(f"start {os.getpid()} {grant}\\n")
while True:
    time.sleep(0.05)
"""


def child(tmp_path: Path, manner: str = "polite") -> tuple[list[str], Path]:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    out = tmp_path / "child.log"
    out.touch()
    return [sys.executable, str(script), str(out), manner], out


def wait_until(condition: Any, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.01)


def lines(out: Path, word: str) -> list[str]:
    return [line for line in out.read_text().splitlines() if line.startswith(word)]


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_the_safe_window_ends_the_command(tmp_path: Path) -> None:
    argv, out = child(tmp_path)
    held = {"until": time.monotonic() + 60}
    with Supervisor(argv, kill_grace=0.5, label="test") as supervisor:
        started = supervisor.spawn("k", lambda: held["until"], {"TENURE_TERM": "7"})
        assert started is not None
        wait_until(lambda: lines(out, "start"))  # its SIGTERM handler is in place
        until = held["until"] = time.monotonic() + 0.5
        supervisor.wake()  # a renewal moved the deadline (here: back)
        assert started.done.wait(5)
    assert started.terminated is not None and started.terminated >= until
    assert started.reason == "its safe window passed"
    assert started.status == 3  # its own SIGTERM handler ran
    assert lines(out, "start") == [f"start {started.pid} 7"]
    assert lines(out, "term") == [f"term {started.pid}"]


def test_a_lost_grant_stops_the_command_at_once_and_sigkill_follows_the_grace(tmp_path: Path) -> None:
    argv, out = child(tmp_path, "deaf")
    held: dict[str, float | None] = {"until": time.monotonic() + 60}
    with Supervisor(argv, kill_grace=0.4, label="test") as supervisor:
        started = supervisor.spawn("k", lambda: held["until"], {})
        assert started is not None
        wait_until(lambda: lines(out, "start"))
        held["until"] = None
        lost = time.monotonic()
        supervisor.wake()
        assert started.done.wait(5)
        ended = time.monotonic()
    assert started.terminated is not None and started.terminated - lost < 0.2
    assert started.status == 128 + signal.SIGKILL  # from the shim or its warden, both at the same time
    assert 0.4 <= ended - started.terminated < 2.0
    assert lines(out, "term") == []


def test_a_spawn_for_an_ended_grant_starts_nothing(tmp_path: Path) -> None:
    argv, _ = child(tmp_path)
    with Supervisor(argv, kill_grace=0.3, label="test") as supervisor:
        assert supervisor.spawn("k", lambda: None, {}) is None
        assert supervisor.spawn("k", lambda: time.monotonic() - 1, {}) is None
        assert supervisor.children() == []


def test_what_a_command_leaves_in_its_group_dies_with_it(tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild"
    argv = ["sh", "-c", f"sleep 60 & echo $! > {pid_file}; exit 5"]
    with Supervisor(argv, kill_grace=0.3, label="test") as supervisor:
        started = supervisor.spawn("k", lambda: time.monotonic() + 60, {})
        assert started is not None and started.done.wait(5)
    assert started.status == 5 and not started.stopped_by_us
    grandchild = int(pid_file.read_text())
    wait_until(lambda: gone(grandchild), timeout=5)


def test_stop_ends_every_command_within_the_grace(tmp_path: Path) -> None:
    argv, out = child(tmp_path, "deaf")
    supervisor = Supervisor(argv, kill_grace=0.3, label="test").start()
    children = [supervisor.spawn(str(n), lambda: time.monotonic() + 60, {}) for n in range(3)]
    wait_until(lambda: len(lines(out, "start")) == 3)
    began = time.monotonic()
    supervisor.stop()
    assert time.monotonic() - began < 2.0
    for started in children:
        assert started is not None and started.done.is_set() and gone(started.pid)


def test_the_warden_alone_enforces_deadlines_and_stops_everything_when_its_pipe_closes() -> None:
    warden = subprocess.Popen(
        [sys.executable, "-I", "-S", str(WARDEN), "0.3"], stdin=subprocess.PIPE, start_new_session=True
    )
    assert warden.stdin is not None
    late = subprocess.Popen(["sleep", "60"], process_group=0)
    told = subprocess.Popen(["sleep", "60"], process_group=0)  # the shim sent SIGTERM itself
    watched = subprocess.Popen(["sleep", "60"], process_group=0)
    orphan = subprocess.Popen(["sleep", "60"], process_group=0)
    try:
        deadline = time.monotonic() + 0.5
        warden.stdin.write(f"watch {late.pid} {deadline!r}\nwatch {watched.pid} {deadline!r}\n".encode())
        later = deadline + 60
        warden.stdin.write(f"watch {watched.pid} {later!r}\nwatch {orphan.pid} {later!r}\n".encode())
        warden.stdin.write(f"watch {told.pid} {deadline!r}\nterm {told.pid} {deadline!r}\n".encode())
        warden.stdin.flush()
        assert told.wait(5) == -signal.SIGKILL  # no second SIGTERM from the warden
        assert late.wait(5) == -signal.SIGTERM
        assert time.monotonic() >= deadline
        assert watched.poll() is None  # its deadline moved on
        warden.stdin.close()  # as if the shim died
        assert watched.wait(5) == -signal.SIGTERM and orphan.wait(5) == -signal.SIGTERM
        assert warden.wait(5) == 0
    finally:
        for process in (late, told, watched, orphan, warden):
            if process.poll() is None:
                process.kill()
                process.wait()


def test_a_frozen_warden_never_blocks_the_shim_and_is_replaced() -> None:
    warden = Warden(0.3, label="test")
    target = subprocess.Popen(["sleep", "60"], process_group=0)
    try:
        warden.watch(target.pid, time.monotonic() + 60)
        frozen = warden.pid
        assert frozen is not None
        os.kill(frozen, signal.SIGSTOP)
        began = time.monotonic()
        for n in range(5000):  # far more than its pipe holds
            warden.watch(target.pid, time.monotonic() + 60 + n)
        assert time.monotonic() - began < 5.0
        assert warden.pid not in (None, frozen)
        with pytest.raises(ProcessLookupError):
            os.kill(frozen, 0)  # killed and reaped
        # The new warden was told the deadline: it holds it as the old one would have.
        warden.watch(target.pid, time.monotonic() + 0.3)
        assert target.wait(5) == -signal.SIGTERM
    finally:
        warden.close()
        if target.poll() is None:
            target.kill()
            target.wait()


def test_kill_grace_and_command_are_checked() -> None:
    check_kill_grace(0.5, 1.0, margin_name="I")
    for grace in (0.0, 1.0, 2.0):
        with pytest.raises(InvalidConfiguration, match="below I"):
            check_kill_grace(grace, 1.0, margin_name="I")
    assert command_line(None) is None
    assert command_line(["--", "sh", "-c", "true"]) == ["sh", "-c", "true"]
    with pytest.raises(InvalidConfiguration, match="needs a command"):
        command_line(["--"])
    with pytest.raises(InvalidConfiguration, match="not an executable"):
        command_line(["--", "/no/such/program"])
    assert exit_status(-9) == 137 and exit_status(4) == 4


def run_in_thread(commands: Any) -> tuple[threading.Event, list[int]]:
    stop = threading.Event()
    result: list[int] = []
    threading.Thread(target=lambda: result.append(commands.run(stop)), daemon=True).start()
    return stop, result


def test_an_elected_command_runs_per_term_and_stops_when_the_term_is_lost(
    app_conninfo: str, admin: psycopg.Connection[Any], tmp_path: Path
) -> None:
    argv, out = child(tmp_path)
    with Elector(app_conninfo, "job", interval=0.2, timeout=0.7) as elector:
        commands = ElectedCommand(elector, argv, kill_grace=0.1, restart=False, label="test")
        stop, result = run_in_thread(commands)
        assert elector.wait_until_primary(10)
        wait_until(lambda: lines(out, "start"))
        first = elector.term
        assert lines(out, "start")[0].endswith(f" {first}")
        # The term ends (its renewal fails): the command is stopped, and the next term gets a new one.
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE application_name LIKE 'tenure elector%'"
        )
        wait_until(lambda: len(lines(out, "start")) == 2)
        assert commands.exits[0].reason == "its grant ended"
        assert lines(out, "start")[1].endswith(f" {elector.term}") and elector.term != first
        stop.set()
        wait_until(lambda: bool(result))
    assert result == [3]  # the status of the last command stopped
    assert len(lines(out, "term")) == 2


def test_a_command_that_exits_ends_the_shim_unless_restarted(app_conninfo: str, tmp_path: Path) -> None:
    for restart in (False, True):
        marks = tmp_path / f"runs-{restart}"
        argv = ["sh", "-c", f'echo "$TENURE_TERM" >> {marks}; exit 4']
        with Elector(app_conninfo, f"job-{restart}", interval=0.2, timeout=0.7) as elector:
            commands = ElectedCommand(elector, argv, kill_grace=0.1, restart=restart, label="test")
            stop, result = run_in_thread(commands)
            if restart:
                wait_until(lambda: marks.exists() and len(marks.read_text().split()) >= 2)  # noqa: B023
                stop.set()
            wait_until(lambda: bool(result))  # noqa: B023
            assert result == [4]
            runs = marks.read_text().split()
            assert len(set(runs)) == 1  # every run in the same term
            assert len(runs) >= 2 if restart else len(runs) == 1


def test_claimed_commands_run_one_per_key(app_conninfo: str, tmp_path: Path) -> None:
    argv, out = child(tmp_path)
    with psycopg.connect(app_conninfo, autocommit=True) as connection:
        connection.execute("SELECT tenure.claim_register('slots', ARRAY['a', 'b', 'c'])")
    with Claimer(app_conninfo, "slots", cycle=0.2, expiry=0.7) as claimer:
        commands = ClaimedCommands(claimer, argv, kill_grace=0.1, restart=False, label="test")
        stop, result = run_in_thread(commands)
        wait_until(lambda: len(lines(out, "start")) == 3)
        held = claimer.held()
        assert sorted(line.split()[2] for line in lines(out, "start")) == sorted(
            f"{key}:{epoch}" for key, epoch in held.items()
        )
        stop.set()
        wait_until(lambda: bool(result))
    assert len(lines(out, "term")) == 3


def test_the_cli_exits_with_the_commands_status(app_conninfo: str, tmp_path: Path) -> None:
    tenure = Path(sys.executable).with_name("tenure")
    done = subprocess.run(
        [str(tenure), "elect", "--db", app_conninfo, "--type", "cli", "--interval", "0.2", "--timeout", "0.7",
         "--exec", "--", "sh", "-c", 'test -n "$TENURE_INSTANCE_ID" && test "$TENURE_TYPE" = cli && exit 9'],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert done.returncode == 9, done.stderr + done.stdout
    assert "exited by itself, status 9" in done.stdout and "resigned" in done.stdout
    refused = subprocess.run(
        [str(tenure), "elect", "--db", app_conninfo, "--type", "cli", "--interval", "0.2", "--timeout", "0.7",
         "--kill-grace", "0.5", "--exec", "--", "true"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert refused.returncode == 2 and "--kill-grace must be above 0 and below" in refused.stderr


# A child that logs its start and its SIGTERM with the system-wide monotonic clock.
TIMED_CHILD = """
import os, signal, sys, time
out = sys.argv[1]
def log(word):
    with open(out, "a") as f:
        f.write(f"{word} {os.getpid()} {time.monotonic()!r}\\n")
def term(*_):
    log("term")
    sys.exit(0)
signal.signal(signal.SIGTERM, term)
log("start")
while True:
    time.sleep(0.05)
"""


def times(out: Path, word: str) -> list[float]:
    return [float(line.split()[2]) for line in lines(out, word)]


@pytest.mark.parametrize("stop_shim", [False, True], ids=["cut-off", "stopped-while-cut-off"])
def test_a_shim_cut_off_from_the_database_stops_its_command_by_the_end_of_the_safe_window(
    app_conninfo: str, tmp_path: Path, stop_shim: bool
) -> None:
    """The database falls silent (a paused network: statements held, nothing answered). The
    command must be stopped by the end of the safe window, by the shim's own timer, not by
    the elector's demotion (which comes when the hung renewal gives up, later); and a shim
    stopped meanwhile stops its command at once and exits within its bound."""
    from proxy import PausingProxy
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    I, T, grace = 0.3, 1.2, 0.15
    script = tmp_path / "child.py"
    script.write_text(TIMED_CHILD)
    out = tmp_path / "child.log"
    out.touch()
    params = conninfo_to_dict(app_conninfo)
    tenure = Path(sys.executable).with_name("tenure")
    with PausingProxy(str(params["host"]), int(str(params["port"]))) as proxy:
        via_proxy = make_conninfo(app_conninfo, host="127.0.0.1", port=proxy.port)
        shim = subprocess.Popen(
            [str(tenure), "elect", "--db", via_proxy, "--type", "cutoff", "--interval", str(I), "--timeout",
             str(T), "--kill-grace", str(grace), "--exec", "--", sys.executable, str(script), str(out)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        try:
            wait_until(lambda: lines(out, "start"), timeout=20)
            time.sleep(2 * I)  # a few renewals
            proxy.pause()
            paused = time.monotonic()
            if stop_shim:
                time.sleep(I)
                shim.send_signal(signal.SIGTERM)
                signalled = time.monotonic()
                status = shim.wait(timeout=30)
                exited = time.monotonic()
            wait_until(lambda: lines(out, "term"), timeout=20)
        finally:
            if shim.poll() is None:
                shim.kill()
            output = shim.communicate()[0]
    stopped = times(out, "term")[0]
    # The last renewal that succeeded was sent before the pause: its safe window ends by
    # paused + T - I. The command heard SIGTERM by then (plus scheduling slack).
    assert stopped <= paused + (T - I) + 0.25, output
    if stop_shim:
        assert stopped - signalled < 0.5, output  # the shim stopped its command first, at once
        assert status == 0, output  # the command's status (it exited 0 on SIGTERM)
        assert exited - signalled < 2 * (T - I) + 2.0, output  # the resignation is bounded too
    assert len(lines(out, "start")) == 1
