"""Tasks handled in any language: ``tenure task worker --exec`` and ``--http``.

The commands and the handler are one small Python script (written into the test's
directory) that does what each task's data asks: answer an outcome, print garbage, exit
with an error, hang, or record the task's transition itself in a transaction of its own
(fenced with the epoch it was given). The workers run in this process, the commands and
the handler as real processes, against a real PostgreSQL.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tenure.driver import Driver, TaskRow
from tenure.errors import InvalidConfiguration
from tenure.runtime.task_commands import TaskCommand, TaskHandler, parse_outcome
from tenure.runtime.tasks import AsyncTaskWorker, Complete, Fail, Next, Release, Task, TaskWorker
from tenure.testing.database import APP_ROLE

KIND = "shim"

HANDLER = r'''
"""A task handler for the tests: `handler.py exec` handles the task on its stdin,
`handler.py http PORTFILE` serves POSTs. What it does is the task's data["do"]."""
import json, os, select, signal, subprocess, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

def note(task, what):
    if task["data"].get("notes"):
        with open(task["data"]["notes"], "a") as notes:
            notes.write(json.dumps({"what": what, "state": task["state"], "pid": os.getpid()}) + "\n")

def record_itself(task, state):
    """Fence, write, complete: one transaction of the handler's own."""
    import psycopg
    with psycopg.connect(os.environ["TEST_DB"]) as db:
        db.execute("SELECT tenure.task_fence(%s, %s, %s)", (task["id"], task["owner"], task["epoch"]))
        db.execute("INSERT INTO shim_effects (task_id, epoch) VALUES (%s, %s)", (task["id"], task["epoch"]))
        db.execute("SELECT tenure.task_complete(%s, %s, %s, %s)",
                   (task["id"], task["owner"], task["epoch"], state))

def handle(task):
    """(HTTP status, body) for a task."""
    do = task["data"]["do"]
    note(task, "start")
    if do == "complete":
        env = {k: v for k, v in os.environ.items() if k.startswith("TENURE_")}
        return 200, {"outcome": "complete", "state": "finished", "data": {"got": task, "env": env}}
    if do == "route":
        if task["state"] == "new":
            return 200, {"outcome": "next", "state": "second", "data": dict(task["data"], step=1)}
        return 200, {"outcome": "complete", "state": "routed", "data": dict(task["data"], step=2)}
    if do == "release":
        return 200, {"outcome": "release", "delay": 600, "state": "later"}
    if do == "fail":
        return 200, {"outcome": "fail", "error": "the remote said no", "retry_delay": 600}
    if do == "garbage":
        return 200, "hello, world"
    if do == "typo":
        return 200, {"outcome": "fail", "error": "x", "retry-delay": 5}
    if do == "exit":
        sys.stderr.write("first line\nsomething went wrong: boom\n")
        sys.stderr.flush()
        sys.exit(3)
    if do == "status":
        return 500, "kaput"
    if do == "hang":
        # a process group: this one ignores SIGTERM, its child sleeps
        if task["data"].get("pids"):
            sleeper = subprocess.Popen(["sleep", "600"])
            with open(task["data"]["pids"], "w") as pids:
                pids.write(f"{os.getpid()} {sleeper.pid}\n")
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        time.sleep(task["data"].get("seconds", 600))
        note(task, "answered")
        return 200, {"outcome": "complete", "state": "too-late"}
    if do == "self":
        record_itself(task, "self-done")
        note(task, "recorded")
        time.sleep(task["data"].get("after", 0))
        note(task, "answered")
        return 200, {"outcome": "complete"}
    raise SystemExit(f"unknown do {do!r}")

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        task = json.loads(self.rfile.read(int(self.headers["content-length"])))
        if task["data"]["do"] == "watch":  # until the shim closes the connection
            note(task, "start")
            ready, _, _ = select.select([self.connection], [], [], 60)
            note(task, "cut" if ready and not self.connection.recv(1) else "not cut")
            self.close_connection = True
            return
        status, answer = handle(task)
        body = (answer if isinstance(answer, str) else json.dumps(answer)).encode()
        self.send_response(status)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass

if sys.argv[1] == "exec":
    status, answer = handle(json.load(sys.stdin))
    print(answer if isinstance(answer, str) else json.dumps(answer))
else:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    with open(sys.argv[2] + ".tmp", "w") as portfile:
        portfile.write(str(server.server_address[1]))
    os.rename(sys.argv[2] + ".tmp", sys.argv[2])
    server.serve_forever()
'''

EFFECTS_SQL = f"""
CREATE TABLE IF NOT EXISTS shim_effects (
    task_id uuid   NOT NULL,
    epoch   bigint NOT NULL,
    at      timestamptz NOT NULL DEFAULT clock_timestamp()
);
GRANT INSERT, SELECT ON shim_effects TO {APP_ROLE};
"""


def wait_for(condition: Callable[[], Any], timeout: float = 20.0, what: str = "the condition") -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if value := condition():
            return value
        time.sleep(0.02)
    raise AssertionError(f"{what} did not happen within {timeout} s")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # a zombie of ours does not count
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


@pytest.fixture
def handler(
    tmp_path: Path, admin: psycopg.Connection[Any], app_conninfo: str, monkeypatch: pytest.MonkeyPatch
) -> Path:
    admin.execute(EFFECTS_SQL)
    script = tmp_path / "handler.py"
    script.write_text(HANDLER)
    monkeypatch.setenv("TEST_DB", app_conninfo)  # the commands and the handler inherit it
    return script


@contextlib.contextmanager
def exec_worker(
    conninfo: str, script: Path, *, lease: float = 3.0, concurrency: int = 4
) -> Iterator[TaskWorker]:
    with TaskCommand([sys.executable, str(script), "exec"], kill_grace=lease / 6) as command:
        worker = TaskWorker(
            conninfo,
            {KIND: command},
            lease=lease,
            concurrency=concurrency,
            poll_interval=0.2,
            shutdown_grace=2,
        )
        command.attach(worker)
        with worker:
            yield worker


@contextlib.contextmanager
def http_handler(script: Path, tmp_path: Path) -> Iterator[str]:
    portfile = tmp_path / "port"
    process = subprocess.Popen([sys.executable, str(script), "http", str(portfile)])
    try:
        wait_for(portfile.exists, what="the handler's start")
        yield f"http://127.0.0.1:{portfile.read_text()}/tasks"
    finally:
        process.kill()
        process.wait()


@contextlib.asynccontextmanager
async def http_worker(conninfo: str, url: str, *, lease: float = 3.0) -> AsyncIterator[AsyncTaskWorker]:
    async with TaskHandler(url, concurrency=4) as task_handler:
        worker = AsyncTaskWorker(
            conninfo, {KIND: task_handler}, lease=lease, poll_interval=0.2, shutdown_grace=2
        )
        async with worker:
            yield worker


def enqueue(admin: psycopg.Connection[Any], data: dict[str, Any], **options: Any) -> uuid.UUID:
    return Driver(admin).task_enqueue(KIND, data, **options).id


def row(admin: psycopg.Connection[Any], task_id: uuid.UUID) -> TaskRow:
    found = Driver(admin).task(task_id)
    assert found is not None
    return found


def is_done(admin: psycopg.Connection[Any], task_id: uuid.UUID) -> Callable[[], bool]:
    return lambda: row(admin, task_id).status == "done"


def finished(admin: psycopg.Connection[Any], task_id: uuid.UUID) -> Callable[[], TaskRow | None]:
    """Until the task left this worker: done, dead, or waiting unowned with a new fact."""

    def check() -> TaskRow | None:
        now = row(admin, task_id)
        return (
            now
            if now.owner is None and (now.status != "pending" or now.last_action != now.created_at)
            else None
        )

    return check


async def await_for(condition: Callable[[], Any], timeout: float = 20.0, what: str = "the condition") -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if value := condition():
            return value
        await asyncio.sleep(0.02)
    raise AssertionError(f"{what} did not happen within {timeout} s")


def notes(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


# -- the outcome's format ------------------------------------------------------------------


def test_outcomes_are_parsed_strictly() -> None:
    assert parse_outcome(b'{"outcome": "complete"}', source="s") == Complete()
    assert parse_outcome(b'{"outcome": "complete", "state": "x", "data": [1]}\n', source="s") == Complete(
        state="x", data=[1]
    )
    assert parse_outcome(b'{"outcome": "next", "state": "b"}', source="s") == Next(state="b")
    assert parse_outcome(b'{"outcome": "release", "delay": 2.5}', source="s") == Release(delay=2.5)
    assert parse_outcome(b'{"outcome": "fail", "error": "e", "retry_delay": 3}', source="s") == Fail(
        "e", retry_delay=3
    )
    problems = {
        b"": "is not JSON",
        b"ok": "is not JSON",
        b"[1]": "is not a JSON object",
        b'{"outcome": "done"}': 'has no "outcome" of complete, next, release, fail',
        b'{"outcome": "next"}': "has a next outcome without state",
        b'{"outcome": "fail", "error": "e", "retry-delay": 1}': "does not take: retry-delay",
        b'{"outcome": "release", "delay": "soon"}': "has a delay that is not a number of seconds",
        b'{"outcome": "release", "delay": -1}': "is not a valid release outcome",
        b'{"outcome": "complete", "state": ""}': "is not a valid complete outcome",
        b'{"outcome": "fail", "error": 7}': "has a error that is not a string",
    }
    for answer, problem in problems.items():
        outcome = parse_outcome(answer, source="the command's stdout")
        assert isinstance(outcome, Fail), answer
        assert outcome.error.startswith("the command's stdout "), outcome.error
        assert problem in outcome.error, (answer, outcome.error)


def test_a_command_that_cannot_run_is_refused_at_start(tmp_path: Path) -> None:
    with pytest.raises(InvalidConfiguration, match="not an executable file, nor a program on PATH"):
        TaskCommand(["no-such-program-here"], kill_grace=1)
    (tmp_path / "not-executable").write_text("")
    with pytest.raises(InvalidConfiguration, match="not an executable file"):
        TaskCommand([str(tmp_path / "not-executable")], kill_grace=1)
    with pytest.raises(InvalidConfiguration, match="http:// or https://"):
        TaskHandler("localhost:8080", concurrency=1)


# -- --exec ----------------------------------------------------------------------------------


def test_exec_large_tasks_and_commands_that_ignore_their_stdin(handler: Path) -> None:
    """Without a database: a task far larger than a pipe's buffer reaches a command that
    reads it, and does not block one that never reads its stdin."""
    big = {"do": "complete", "blob": "x" * 300_000}

    def task() -> Task:
        return Task(
            id=uuid.uuid4(),
            kind=KIND,
            state="new",
            data=big,
            epoch=1,
            attempts=0,
            owner=uuid.uuid4(),
            valid_until=time.monotonic() + 60,
        )

    with TaskCommand([sys.executable, str(handler), "exec"], kill_grace=1) as reader:
        outcome = reader(task())
    assert isinstance(outcome, Complete) and outcome.data["got"]["data"] == big
    with TaskCommand(["/bin/echo", '{"outcome": "complete"}'], kill_grace=1) as ignorer:
        assert ignorer(task()) == Complete()


def test_exec_outcomes_of_every_kind(
    handler: Path, app_conninfo: str, admin: psycopg.Connection[Any], tmp_path: Path
) -> None:
    calls = tmp_path / "calls"
    ids = {
        do: enqueue(admin, {"do": do, "notes": str(calls)}) for do in ("complete", "route", "release", "fail")
    }
    with exec_worker(app_conninfo, handler) as worker:
        rows = {do: wait_for(finished(admin, task_id), what=do) for do, task_id in ids.items()}
        stats = worker.stats

    done = rows["complete"]
    assert (done.status, done.state) == ("done", "finished")
    got, env = done.data["got"], done.data["env"]
    assert got == {
        "id": str(ids["complete"]),
        "kind": KIND,
        "state": "new",
        "data": {"do": "complete", "notes": str(calls)},
        "attempt": 1,
        "owner": str(worker.instance_id),
        "epoch": done.epoch,
    }
    assert env["TENURE_TASK_ID"] == str(ids["complete"])
    assert env["TENURE_OWNER"] == str(worker.instance_id)
    assert env["TENURE_EPOCH"] == str(done.epoch)
    assert env["TENURE_TASK_ATTEMPT"] == "1"

    # next: the command ran again for the new state, under the same lease
    routed = rows["route"]
    assert (routed.status, routed.state, routed.data["step"]) == ("done", "routed", 2)
    assert [
        n["state"] for n in notes(calls) if n["what"] == "start" and n["state"] in ("new", "second")
    ].count("second") == 1
    released = rows["release"]
    assert (released.status, released.state, released.attempts) == ("pending", "later", 0)
    failed = rows["fail"]
    assert (failed.status, failed.attempts, failed.last_error) == ("pending", 1, "the remote said no")
    assert failed.next_action is not None and released.next_action is not None
    assert (stats.completed, stats.released, stats.failed, stats.routed, stats.lost) == (2, 1, 1, 1, 0)


def test_exec_bad_output_and_errors_are_failed_attempts(
    handler: Path, app_conninfo: str, admin: psycopg.Connection[Any], capfd: pytest.CaptureFixture[str]
) -> None:
    ids = {do: enqueue(admin, {"do": do}) for do in ("garbage", "typo", "exit")}
    with exec_worker(app_conninfo, handler) as worker:
        rows = {do: wait_for(finished(admin, task_id), what=do) for do, task_id in ids.items()}
        stats = worker.stats
    for found in rows.values():
        assert (found.status, found.attempts) == ("pending", 1)
    assert rows["garbage"].last_error is not None
    assert rows["garbage"].last_error.startswith("the command's stdout is not JSON")
    assert "'hello, world'" in rows["garbage"].last_error
    assert "does not take: retry-delay (it takes error, retry_delay)" in (rows["typo"].last_error or "")
    assert rows["exit"].last_error == (
        "the command exited with status 3; the end of its stderr: first line\nsomething went wrong: boom"
    )
    assert stats.failed == 3 and stats.lost == 0
    assert "something went wrong: boom" in capfd.readouterr().err  # the command's stderr reached ours


def test_exec_process_group_is_killed_when_the_lease_is_lost(
    handler: Path,
    app_conninfo: str,
    admin: psycopg.Connection[Any],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="tenure")
    pids_file = tmp_path / "pids"
    task_id = enqueue(admin, {"do": "hang", "pids": str(pids_file)})
    with exec_worker(app_conninfo, handler, lease=3.0) as worker:
        pids = [
            int(p)
            for p in wait_for(lambda: pids_file.exists() and pids_file.read_text(), what="start").split()
        ]
        assert all(alive(pid) for pid in pids)
        ejector = uuid.uuid4()
        Driver(admin).task_eject(task_id, ejector, lease=60)
        # the next extension (every second) is refused: SIGTERM (ignored), SIGKILL 0.5 s later,
        # to the command and the process it started
        wait_for(lambda: not any(alive(pid) for pid in pids), timeout=10, what="the group's death")
        wait_for(lambda: worker.in_flight() == 0, what="the slot's release")
        stats = worker.stats
    assert (stats.lost, stats.discarded, stats.completed, stats.failed) == (1, 1, 0, 0)
    after = row(admin, task_id)
    assert (after.owner, after.status, after.attempts) == (ejector, "pending", 0)
    assert any("lost the lease of task" in r.message for r in caplog.records)


def test_exec_process_group_is_killed_when_the_safe_window_passes_without_an_extension(
    handler: Path, app_conninfo: str, admin_conninfo: str, admin: psycopg.Connection[Any], tmp_path: Path
) -> None:
    """The extensions hang on a row lock: the database has not refused anything, and the
    shim still stops the group by the end of the safe window, before the lease can run out."""
    pids_file = tmp_path / "pids"
    task_id = enqueue(admin, {"do": "hang", "pids": str(pids_file)})
    with exec_worker(app_conninfo, handler, lease=3.0) as worker, psycopg.connect(admin_conninfo) as blocker:
        pids = [
            int(p)
            for p in wait_for(lambda: pids_file.exists() and pids_file.read_text(), what="start").split()
        ]
        blocker.execute("SELECT FROM tenure.task WHERE id = %s FOR UPDATE", (task_id,))
        locked = time.monotonic()
        # the safe window (2 s) ends at most 2 s after the lock; SIGKILL 0.5 s later
        wait_for(lambda: not any(alive(pid) for pid in pids), timeout=10, what="the group's death")
        took = time.monotonic() - locked
        lease_end = blocker.execute(
            "SELECT next_action - clock_timestamp() FROM tenure.task WHERE id = %s", (task_id,)
        )
        left = lease_end.fetchone()
        blocker.rollback()
        wait_for(lambda: worker.in_flight() == 0, what="the slot's release")
        stats = worker.stats
    assert left is not None and left[0].total_seconds() > 0, f"the group outlived the lease ({took:.2f} s)"
    # its outcome (a failure: it was killed) came after the safe window: discarded
    assert (stats.discarded, stats.completed, stats.failed) == (1, 0, 0)


def test_exec_handler_that_records_its_own_transition_counts_as_completed(
    handler: Path,
    app_conninfo: str,
    admin: psycopg.Connection[Any],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="tenure")
    calls = tmp_path / "calls"
    # answers at once: the shim's report of its outcome is refused (a lease of 30 s: no
    # extension comes first)
    quick = enqueue(admin, {"do": "self", "notes": str(calls)})
    counts = []
    with exec_worker(app_conninfo, handler, lease=30.0) as worker:
        wait_for(lambda: worker.stats.completed == 1 and worker.in_flight() == 0, what="completion")
        counts.append(worker.stats)
    # recorded, then still running past an extension (every second): that extension is
    # refused, and must not cost the command its life
    slow = enqueue(admin, {"do": "self", "after": 1.6, "notes": str(calls)})
    # recorded, then hanging: stopped a safe window (2 s) after the refused extension, still
    # counted as completed
    hung = enqueue(admin, {"do": "self", "after": 60, "notes": str(calls)})
    with exec_worker(app_conninfo, handler, lease=3.0) as worker:
        wait_for(lambda: worker.stats.completed == 2 and worker.in_flight() == 0, what="completion")
        counts.append(worker.stats)
    for task_id in (quick, slow, hung):
        assert row(admin, task_id).state == "self-done"
        effects = admin.execute("SELECT epoch FROM shim_effects WHERE task_id = %s", (task_id,)).fetchall()
        assert effects == [(row(admin, task_id).epoch,)], "the handler's write applied exactly once"
    assert [n["what"] for n in notes(calls) if n["what"] == "answered"] == ["answered", "answered"]
    for stats, finished in zip(counts, (1, 2), strict=True):
        assert (stats.completed, stats.already_recorded, stats.lost, stats.discarded, stats.failed) == (
            finished,
            finished,
            0,
            0,
            0,
        )
    messages = [r.message for r in caplog.records]
    assert any(f"stopped the processor of task {hung}" in m for m in messages), messages
    assert not any("lost the lease" in m for m in messages), messages
    assert any(
        f"task {quick} was finished in epoch" in m and "its outcome was refused" in m for m in messages
    )
    assert any(
        f"task {slow} was finished in epoch" in m and "an extension was refused" in m for m in messages
    )


def test_exec_worker_from_the_command_line(
    handler: Path, app_conninfo: str, admin: psycopg.Connection[Any], tmp_path: Path
) -> None:
    task_id = enqueue(admin, {"do": "complete"})
    tenure = [sys.executable, "-m", "tenure", "task", "worker", "--db", app_conninfo]
    shim = subprocess.Popen(
        [*tenure, "--kind", KIND, "--lease", "3", "--exec", "--", sys.executable, str(handler), "exec"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_for(lambda: row(admin, task_id).status == "done", what="completion")
    finally:
        shim.send_signal(signal.SIGTERM)
        output, _ = shim.communicate(timeout=30)
    assert shim.returncode == 0, output
    assert "each task runs" in output and "1 completed" in output, output

    def refused(*words: str) -> str:
        done = subprocess.run([*tenure, *words], capture_output=True, text=True, timeout=60)
        assert done.returncode == 2, done
        return done.stderr

    assert "--exec needs the kinds of task" in refused("--exec", "--", "true")
    assert "not allowed with argument" in refused("--module", "x", "--http", "http://127.0.0.1:1/")
    assert "--kill-grace must be above 0 and below a third of the lease (1 s)" in refused(
        "--kind", KIND, "--lease", "3", "--kill-grace", "2", "--exec", "--", "true"
    )
    assert "--kind is for --exec and --http" in refused("--kind", KIND, "--module", "os")


# -- --http ----------------------------------------------------------------------------------


def test_http_outcomes_and_failures(
    handler: Path, app_conninfo: str, admin: psycopg.Connection[Any], tmp_path: Path
) -> None:
    ids = {
        do: enqueue(admin, {"do": do}) for do in ("complete", "route", "release", "fail", "garbage", "status")
    }

    async def run() -> None:
        with http_handler(handler, tmp_path) as url:
            async with http_worker(app_conninfo, url) as worker:
                for do, task_id in ids.items():
                    await await_for(finished(admin, task_id), what=do)
                stats = worker.stats
        assert (stats.completed, stats.released, stats.failed, stats.routed, stats.lost) == (2, 1, 3, 1, 0)

    asyncio.run(run())
    done = row(admin, ids["complete"])
    assert (done.state, done.data["got"]["attempt"], done.data["got"]["epoch"]) == ("finished", 1, done.epoch)
    assert row(admin, ids["route"]).state == "routed"
    assert row(admin, ids["release"]).state == "later"
    assert row(admin, ids["fail"]).last_error == "the remote said no"
    assert (row(admin, ids["garbage"]).last_error or "").startswith("the answer of http://127.0.0.1:")
    assert (row(admin, ids["status"]).last_error or "").endswith(
        "/tasks answered 500 Internal Server Error: kaput"
    )


def test_http_answer_after_the_lease_was_lost_is_refused_and_logged(
    handler: Path,
    app_conninfo: str,
    admin: psycopg.Connection[Any],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="tenure")
    calls = tmp_path / "calls"
    # a lease of 9 s is extended every 3 s: the answer (after 1 s) comes before the shim
    # could learn of the ejection from an extension, and the database refuses it
    task_id = enqueue(admin, {"do": "hang", "seconds": 1.0, "notes": str(calls)})
    ejector = uuid.uuid4()

    async def run() -> None:
        with http_handler(handler, tmp_path) as url:
            async with http_worker(app_conninfo, url, lease=9.0) as worker:
                await await_for(lambda: notes(calls), what="the request")
                Driver(admin).task_eject(task_id, ejector, lease=60)
                await await_for(lambda: worker.in_flight() == 0, what="the answer")
                stats = worker.stats
        assert [n["what"] for n in notes(calls)] == ["start", "answered"]
        assert (stats.completed, stats.lost, stats.discarded, stats.already_recorded) == (0, 1, 1, 0)

    asyncio.run(run())
    after = row(admin, task_id)
    assert (after.owner, after.status, after.state) == (ejector, "pending", "new")  # never applied
    messages = [r.message for r in caplog.records]
    assert any(f"lost the lease of task {task_id}" in m for m in messages), messages
    assert any(
        f"discarded the result of task {task_id}" in m and "refused the outcome" in m for m in messages
    )


def test_http_request_is_cut_when_the_lease_is_lost(
    handler: Path, app_conninfo: str, admin: psycopg.Connection[Any], tmp_path: Path
) -> None:
    calls = tmp_path / "calls"
    task_id = enqueue(admin, {"do": "watch", "notes": str(calls)})

    async def run() -> None:
        with http_handler(handler, tmp_path) as url:
            async with http_worker(app_conninfo, url, lease=1.5) as worker:
                await await_for(lambda: notes(calls), what="the request")
                Driver(admin).task_eject(task_id, uuid.uuid4(), lease=60)
                # the extension every 0.5 s is refused: the processor is cancelled and the
                # request's connection closed, which the handler sees
                await await_for(lambda: worker.in_flight() == 0, timeout=10, what="the cut")
                await await_for(lambda: len(notes(calls)) == 2, timeout=10, what="the handler's notice")
                stats = worker.stats
        assert [n["what"] for n in notes(calls)] == ["start", "cut"]
        assert (stats.lost, stats.discarded, stats.completed) == (1, 1, 0)

    asyncio.run(run())


def test_http_handler_that_records_its_own_transition_counts_as_completed(
    handler: Path,
    app_conninfo: str,
    admin: psycopg.Connection[Any],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="tenure")
    calls = tmp_path / "calls"
    quick = enqueue(admin, {"do": "self", "notes": str(calls)})
    slow = enqueue(admin, {"do": "self", "after": 1.6, "notes": str(calls)})
    hung = enqueue(admin, {"do": "self", "after": 60, "notes": str(calls)})  # its request is cut

    async def run() -> None:
        with http_handler(handler, tmp_path) as url:
            async with http_worker(app_conninfo, url, lease=3.0) as worker:
                for task_id in (quick, slow, hung):
                    await await_for(is_done(admin, task_id), what="done")
                await await_for(lambda: worker.in_flight() == 0, what="all counted")
                stats = worker.stats
        assert (stats.completed, stats.already_recorded, stats.lost, stats.discarded) == (3, 3, 0, 0)

    asyncio.run(run())
    for task_id in (quick, slow, hung):
        effects = admin.execute("SELECT count(*) FROM shim_effects WHERE task_id = %s", (task_id,)).fetchone()
        assert effects == (1,)
    messages = [r.message for r in caplog.records]
    assert not any("lost the lease" in m for m in messages), messages
