"""The examples shown in README.md and docs/examples.md are the files in examples/python, and the
docs' relative links lead somewhere.

An example block is marked ``<!-- example: examples/python/NAME.py -->`` just above
its fence and must equal that file without its opening docstring (the prose above
the block says what the docstring says). Every file of examples/python must appear
once in those two pages together (the README keeps a few, docs/examples.md the
rest). (``make test`` runs the files themselves.)

Every relative link in README.md, CHANGELOG.md and docs/*.md must lead to a file or
directory of the repository and, with ``#anchor``, to a heading of that page, by
GitHub's rule for heading anchors.

The FastAPI example also runs as two services behind a real HAProxy: the active one
is killed, the other takes over, and the records show one writer and one leader at a
time.

The Node.js and Java examples (examples/node, examples/java, compiled into
examples/java/build here) run under real shims: the elected job under three
``tenure elect --exec`` through a SIGKILL and a SIGSTOP, its rows checked against the
terms; the task handler first with this test in the shim's place (a replayed and a
too slow handover refused), then under ``tenure task worker --http`` and ``--exec``
through a SIGKILL and a SIGSTOP, every task booked exactly once by the lease that
finished it.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import pytest
from conftest import JDBC_JAR
from psycopg.conninfo import conninfo_to_dict

from tenure.driver import Driver
from tenure.testing.child import ChildProcess
from tenure.testing.database import APP_ROLE
from tenure.testing.haproxy import HAProxy
from tenure.testing.history import FencedWrite, check_terms, check_writes, read_terms
from tenure.testing.procs import free_port

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "python"
PAGES = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
EXAMPLE_PAGES = [ROOT / "README.md", ROOT / "docs" / "examples.md"]

MARKER = re.compile(r"^<!-- example: (\S+) -->\n```python\n(.*?)^```$", re.M | re.S)
DOCSTRING = re.compile(r'\A"""(.*?)"""\n+', re.S)
# [text](target): the target up to the closing parenthesis, without a title.
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def readme_blocks() -> list[tuple[str, str]]:
    """The example blocks of README.md and docs/examples.md, as (file, block)."""
    return [(path, body) for page in EXAMPLE_PAGES for path, body in MARKER.findall(page.read_text())]


def example_body(path: Path) -> str:
    """The example as the README shows it: without its opening docstring."""
    return DOCSTRING.sub("", path.read_text(), count=1)


def test_every_example_is_in_the_readme_once() -> None:
    shown = Counter(path for path, _ in readme_blocks())
    files = {str(path.relative_to(ROOT)) for path in EXAMPLES.glob("*.py")}
    assert files, "no examples found"
    assert set(shown) == files, f"example blocks {sorted(shown)} != files {sorted(files)}"
    assert all(count == 1 for count in shown.values()), shown


@pytest.mark.parametrize(("path", "body"), readme_blocks(), ids=[p for p, _ in readme_blocks()])
def test_readme_example_equals_its_file(path: str, body: str) -> None:
    expected = example_body(ROOT / path)
    assert body == expected, (
        f"the block for {path} (README.md or docs/examples.md) differs from the file (without its "
        "docstring): copy the file into the page, or change the file"
    )


def without_code(text: str) -> str:
    """The markdown outside fenced code blocks and inline code spans."""
    kept, fence = [], False
    for line in text.split("\n"):
        if line.startswith("```"):
            fence = not fence
            continue
        if not fence:
            kept.append(re.sub(r"`[^`]*`", "", line))
    return "\n".join(kept)


def anchors(page: Path) -> set[str]:
    """GitHub's heading anchors of a page: lowercased, punctuation dropped, spaces to
    hyphens, a repeated anchor numbered -1, -2, ..."""
    found: set[str] = set()
    seen: Counter[str] = Counter()
    fence = False
    for line in page.read_text().split("\n"):
        if line.startswith("```"):
            fence = not fence
        match = None if fence else re.match(r"^#{1,6} (.*?)\s*#*$", line)
        if match is None:
            continue
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", match.group(1))  # a link's text only
        slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
        found.add(slug if seen[slug] == 0 else f"{slug}-{seen[slug]}")
        seen[slug] += 1
    return found


def links(page: Path) -> list[str]:
    return [
        target
        for target in LINK.findall(without_code(page.read_text()))
        if not re.match(r"^[a-z][a-z0-9+.-]*:", target)  # http:, https:, mailto:
    ]


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_relative_links_lead_somewhere(page: Path) -> None:
    broken = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        destination = (page.parent / path).resolve() if path else page
        if not destination.exists():
            broken.append(f"{target}: no file {destination.relative_to(ROOT)}")
        elif anchor and destination.suffix == ".md" and anchor not in anchors(destination):
            broken.append(f"{target}: no heading #{anchor} in {destination.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_the_link_checker_sees_anchors_and_skips_code(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "# Page: `tenure.x` and [a link](other.md)\n\n## Why T \u2212 I\n\n## Why T \u2212 I\n\n"
        "```python\n# not a heading\n[not](a-link.md)\n```\n[one](#why-t--i-1) `[nor](this.md)`\n"
    )
    assert anchors(page) == {"page-tenurex-and-a-link", "why-t--i", "why-t--i-1"}
    assert links(page) == ["other.md", "#why-t--i-1"]


# -- the FastAPI example as two services behind HAProxy ---------------------------------------

FASTAPI_INTERVAL = 0.2


def post_order(url: str, order_id: int) -> tuple[int, dict[str, Any]]:
    """POST /orders through the load balancer: (status, body); 0 when nothing answered."""
    request = urllib.request.Request(
        url + "/orders", data=json.dumps({"id": order_id, "item": "pears"}).encode(), method="POST"
    )
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, {}
    except (OSError, ValueError):
        return 0, {}


def test_fastapi_service_fails_over_behind_haproxy(app_conninfo: str, admin: Any, tmp_path: Path) -> None:
    admin.execute(f"CREATE SCHEMA IF NOT EXISTS AUTHORIZATION {APP_ROLE}")  # its tables, as in make test
    params = conninfo_to_dict(app_conninfo)
    env = {
        **os.environ,
        "PGHOST": str(params["host"]),
        "PGPORT": str(params["port"]),
        "PGUSER": str(params["user"]),
        "PGDATABASE": str(params["dbname"]),
        "EXAMPLE_INTERVAL": str(FASTAPI_INTERVAL),
    }
    script = str(EXAMPLES / "fastapi_service.py")
    services = {}
    for name in ("a", "b"):
        port = free_port()
        services[name] = (
            port,
            ChildProcess([sys.executable, script, "--port", str(port)], tmp_path / f"{name}.log", env=env),
        )
    acked: list[tuple[int, str, int]] = []  # (order id, replica, epoch) of every 200

    def orders_until_accepted(url: str, start: int, *, other_than: str | None = None) -> int:
        """Sends orders until one is accepted by a replica other than ``other_than``: the next id."""
        end = time.monotonic() + 30
        order_id = start
        while time.monotonic() < end:
            status, body = post_order(url, order_id)
            order_id += 1
            if status == 200:
                acked.append((body["id"], body["replica"], body["epoch"]))
                if body["replica"] != other_than:
                    return order_id
            time.sleep(0.02)
        raise TimeoutError(
            f"no order accepted within 30 s; logs: {[p.output() for _, p in services.values()]}"
        )

    try:
        with HAProxy([(n, port) for n, (port, _) in services.items()], tmp_path, check_interval=0.1) as lb:
            next_id = orders_until_accepted(lb.url, 1)
            holder = Driver(admin).replica_holder()
            assert holder is not None and holder.replica is not None
            pid = int(holder.replica.rsplit(":", 1)[1])
            active = next(name for name, (_, p) in services.items() if p.process.pid == pid)
            survivor = next(name for name in services if name != active)
            next_id = orders_until_accepted(lb.url, next_id)  # still the active one
            services[active][1].signal(signal.SIGKILL)
            killed = time.monotonic()
            next_id = orders_until_accepted(lb.url, next_id, other_than=holder.replica)
            took = time.monotonic() - killed
            for _ in range(5):  # the new active one keeps accepting writes
                next_id = orders_until_accepted(lb.url, next_id)
            print(f"\nfastapi example: SIGKILL of the active service, {took:.3f} s until the other answered")
            time.sleep(6 * FASTAPI_INTERVAL)  # the survivor is the job's leader by now, whoever led before
            survivor_process = services[survivor][1]
            survivor_process.signal(signal.SIGTERM)  # the lifespan ends: resign, release
            # uvicorn shuts down gracefully, then raises the signal it caught again.
            assert survivor_process.process.wait(15) in (0, -signal.SIGTERM)
            assert "Traceback" not in survivor_process.output(), survivor_process.output()
    finally:
        for _, process in services.values():
            process.stop()

    # Every acknowledged order is recorded with the epoch it was answered with; epochs only grow.
    recorded = dict(admin.execute(f"SELECT id, epoch FROM {APP_ROLE}.orders").fetchall())
    assert {order_id: epoch for order_id, _, epoch in acked} == {i: recorded[i] for i, _, _ in acked}
    epochs = [epoch for _, _, epoch in acked]
    assert epochs == sorted(epochs) and len(set(epochs)) == 2, epochs
    assert len({replica for _, replica, _ in acked}) == 2
    left = Driver(admin).replica_holder()
    assert left is not None and (left.pid, left.reserved_until) == (None, None), (
        "released, reservation dropped"
    )
    # The leader job: one primary at a time, every run inside its own term; the survivor led last.
    terms = read_terms(admin, "fastapi-jobs")
    runs = [
        FencedWrite("fastapi-jobs", instance, term, done_at)
        for instance, term, done_at in admin.execute(
            f"SELECT instance, term, done_at FROM {APP_ROLE}.job_runs ORDER BY done_at"
        ).fetchall()
    ]
    assert runs and check_terms(terms) == [] and check_writes(terms, runs) == []
    assert terms[-1].end_reason == "resigned"
    assert terms[-1].term == runs[-1].term, "the survivor ran the job in the last term"


# -- the Node.js and Java examples: an elected job under the shim, a task handler ---------------

NODE_EXAMPLES = ROOT / "examples" / "node"
JAVA_EXAMPLES = ROOT / "examples" / "java"
TENURE = str(Path(sys.executable).with_name("tenure"))
JOB_INTERVAL = 0.3  # I and T of the elected job's shims: a takeover within about a second
JOB_TIMEOUT = 1.0


@dataclass(frozen=True)
class Language:
    name: str
    job: list[str]  # the elected job, the command after --exec
    handler: list[str]  # the task handler: one task on stdin, or with --listen HOST:PORT a server


@pytest.fixture(scope="session")
def java_classpath(needs_java: None) -> str:
    """examples/java compiled into examples/java/build (ignored by git), as docs/any-language.md says."""
    build = JAVA_EXAMPLES / "build"
    sources = sorted(str(path) for path in JAVA_EXAMPLES.glob("*.java"))
    subprocess.run(["javac", "-Xlint:all", "-Werror", "-d", str(build), *sources], check=True)
    return f"{build}:{JDBC_JAR}"


@pytest.fixture(params=["node", "java"])
def language(request: pytest.FixtureRequest) -> Language:
    if request.param == "node":
        request.getfixturevalue("needs_node")
        return Language(
            "node",
            ["node", str(NODE_EXAMPLES / "elected_job.js")],
            ["node", str(NODE_EXAMPLES / "task_handler.js")],
        )
    classpath = request.getfixturevalue("java_classpath")
    java = ["java", "-cp", classpath]
    return Language("java", [*java, "ElectedJob"], [*java, "TaskHandler"])


@pytest.fixture
def example_env(app_conninfo: str, admin: Any) -> dict[str, str]:
    """The libpq environment of the application role, which owns a schema for the examples' tables."""
    admin.execute(f"CREATE SCHEMA IF NOT EXISTS AUTHORIZATION {APP_ROLE}")
    params = conninfo_to_dict(app_conninfo)
    return {
        **os.environ,
        "PGHOST": str(params["host"]),
        "PGPORT": str(params["port"]),
        "PGUSER": str(params["user"]),
        "PGDATABASE": str(params["dbname"]),
    }


def job_rows(admin: Any, utype: str) -> list[tuple[UUID, int, int, datetime]]:
    """The elected job's writes, (instance, term, n, at), in the order they were made."""
    if admin.execute("SELECT to_regclass(%s)", (f"{APP_ROLE}.job_runs",)).fetchone()[0] is None:
        return []
    rows: list[tuple[UUID, int, int, datetime]] = admin.execute(
        f"SELECT instance, term, n, at FROM {APP_ROLE}.job_runs WHERE utype = %s ORDER BY at, n", (utype,)
    ).fetchall()
    return rows


def wait_for_writes(admin: Any, utype: str, *, after_term: int, writes: int = 3) -> tuple[int, UUID]:
    """(term, instance) of the first term after ``after_term`` once its job made ``writes`` writes."""
    end = time.monotonic() + 30
    while time.monotonic() < end:
        rows = job_rows(admin, utype)
        counts = Counter((instance, term) for instance, term, _, _ in rows if term > after_term)
        ready = sorted((term, instance) for (instance, term), count in counts.items() if count >= writes)
        if ready:
            return ready[0]
        time.sleep(0.05)
    raise TimeoutError(f"no job wrote in a term after {after_term} within 30 s")


def test_elected_job_fences_its_writes_through_a_kill_and_a_freeze(
    language: Language, example_env: dict[str, str], admin: Any, tmp_path: Path
) -> None:
    """Three shims run the job under `tenure elect --exec`; the primary's shim is SIGKILLed, the next
    one's SIGSTOPped: each time the warden stops the job and a standby's job takes over. Every row was
    written by the live primary in its own term, the terms' writes never interleave, and each job that
    was stopped found every write it was told committed in place."""
    utype = f"example-job-{language.name}"
    env = {**example_env, "JOB_PERIOD": "0.05"}
    timings = ["--interval", str(JOB_INTERVAL), "--timeout", str(JOB_TIMEOUT)]
    shims: dict[UUID, ChildProcess] = {}
    started = [
        ChildProcess(
            [TENURE, "elect", "--type", utype, *timings, "--exec", "--", *language.job],
            tmp_path / f"{name}.log",
            env=env,
        )
        for name in "abc"
    ]
    try:
        for shim in started:
            announced = shim.wait_for_output(r"instance ([0-9a-f-]{36}) \(\S+\) standing for")
            shims[UUID(announced.group(1))] = shim
        first_term, first = wait_for_writes(admin, utype, after_term=0)
        shims[first].signal(signal.SIGKILL)
        second_term, second = wait_for_writes(admin, utype, after_term=first_term)
        shims[second].signal(signal.SIGSTOP)
        third_term, third = wait_for_writes(admin, utype, after_term=second_term)
        shims[second].signal(signal.SIGCONT)  # it finds its term gone and stands by
        wait_for_writes(admin, utype, after_term=second_term, writes=10)  # the third job goes on
        for shim in shims.values():
            shim.signal(signal.SIGTERM)
        statuses = {instance: shim.process.wait(15) for instance, shim in shims.items()}
    finally:
        for shim in started:
            shim.stop()
    logs = "\n".join(shim.output() for shim in started)
    assert len({first, second, third}) == 3, logs
    assert statuses[first] == -signal.SIGKILL
    assert statuses[third] == 0, f"the last primary's job must stop cleanly and pass its own check:\n{logs}"

    rows = job_rows(admin, utype)
    terms = read_terms(admin, utype)
    writes = [FencedWrite(utype, instance, term, at) for instance, term, _, at in rows]
    assert check_terms(terms) == [], logs
    assert check_writes(terms, writes) == [], logs
    written = [term for _, term, _, _ in rows]
    assert written == sorted(written), "the writes of two terms interleave"
    assert {first_term, second_term, third_term} <= set(written)
    for term in set(written):
        numbers = [n for _, t, n, _ in rows if t == term]
        assert numbers == list(range(1, len(numbers) + 1)), f"term {term}: writes {numbers}"
    # The last job's own check: its count of acknowledged writes is what the table holds.
    reported = re.findall(r"stopped after (\d+) fenced writes in term (\d+), all in place", logs)
    assert (str(written.count(third_term)), str(third_term)) in reported, logs
    assert "table has" not in logs, logs
    last_write = {term: at for _, term, _, at in rows}
    first_write = {term: at for _, term, _, at in reversed(rows)}
    terms_written = sorted(first_write)
    gaps = [(first_write[b] - last_write[a]).total_seconds() for a, b in itertools.pairwise(terms_written)]
    print(f"\n{language.name} elected job: no writes for {gaps} s at the kill and the freeze")


def post_task(url: str, task: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(url, data=json.dumps(task).encode(), method="POST")
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=30) as response:
        answer: dict[str, Any] = json.loads(response.read())
        return answer


def run_task(command: list[str], task: dict[str, Any], env: dict[str, str]) -> dict[str, Any]:
    done = subprocess.run(
        command, input=json.dumps(task), capture_output=True, text=True, env=env, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


def lease(admin: Any, kind: str, owner: UUID, seconds: float) -> dict[str, Any]:
    """One task leased as the shim leases it, as the JSON the shim hands over."""
    row = admin.execute(
        "SELECT id, kind, state, data, attempts, epoch FROM tenure.task_acquire(%s, %s, 1, %s)",
        (owner, timedelta(seconds=seconds), [kind]),
    ).fetchone()
    assert row is not None, f"no task of kind {kind} due"
    task_id, kind, state, data, attempts, epoch = row
    return {"id": str(task_id), "kind": kind, "state": state, "data": data, "attempt": attempts + 1,
            "owner": str(owner), "epoch": epoch}  # fmt: skip


def check_booked_once(admin: Any, kind: str, count: int) -> list[tuple[UUID, int]]:
    """Every task of ``kind`` is done and booked exactly once, by the lease that finished it:
    (task, epoch) of each."""
    tasks = admin.execute(
        "SELECT id, status, state, epoch FROM tenure.tasks WHERE kind = %s ORDER BY id", (kind,)
    ).fetchall()
    assert len(tasks) == count
    assert [(status, state) for _, status, state, _ in tasks] == [("done", "booked")] * count, tasks
    entries = admin.execute(
        f"SELECT e.task_id, e.epoch, e.owner = l.owner FROM {APP_ROLE}.ledger_entries e"
        " JOIN tenure.task_leases l ON l.task_id = e.task_id AND l.epoch = e.epoch WHERE l.kind = %s",
        (kind,),
    ).fetchall()
    booked = Counter(task_id for task_id, _, _ in entries)
    assert {task_id for task_id, _, _, _ in tasks} == set(booked), "a task without its entry"
    assert set(booked.values()) == {1}, f"entries per task: {booked}"
    assert all(by_holder for _, _, by_holder in entries), "an entry by another owner than the epoch's"
    finished = {task_id: epoch for task_id, _, _, epoch in tasks}
    assert all(finished[task_id] == epoch for task_id, epoch, _ in entries), "an entry of an earlier epoch"
    return [(task_id, epoch) for task_id, epoch, _ in entries]


def test_task_handler_books_once_and_refuses_a_lost_lease(
    language: Language, example_env: dict[str, str], admin: Any, tmp_path: Path
) -> None:
    """The handler as the shim sees it, this test in the shim's place: a task handed over (POST,
    then stdin) is booked and finished in the handler's own transaction; the same task handed over
    again is refused by the fence and books nothing; a handler slower than its lease is refused, and
    the task's next holder books it."""
    kind = f"example-payment-{language.name}"
    driver = Driver(admin)
    for n in range(3):
        driver.task_enqueue(kind, {"account": f"acct-{n}", "amount": 10 + n})
    port = free_port()
    server = ChildProcess([*language.handler, "--listen", f"127.0.0.1:{port}"], tmp_path / "handler.log",
                          env=example_env)  # fmt: skip
    url = f"http://127.0.0.1:{port}/"
    try:
        server.wait_for_output("listening on")
        shim, slow, successor = uuid4(), uuid4(), uuid4()
        over_http = lease(admin, kind, shim, 30)
        assert post_task(url, over_http) == {"outcome": "complete"}
        on_stdin = lease(admin, kind, shim, 30)
        assert run_task(language.handler, on_stdin, example_env) == {"outcome": "complete"}
        for replayed in (post_task(url, over_http), run_task(language.handler, on_stdin, example_env)):
            assert replayed["outcome"] == "fail" and "lease lost" in replayed["error"], replayed
        # A lease of 1 s, a handler that works 1.5 s first: its fence finds the lease run out.
        too_slow = lease(admin, kind, slow, 1)
        too_slow["data"]["work_seconds"] = 1.5
        refused = post_task(url, too_slow)
        assert refused["outcome"] == "fail" and "lease lost" in refused["error"], refused
        again = lease(admin, kind, successor, 30)
        assert (again["id"], again["epoch"]) == (too_slow["id"], 2)
        assert post_task(url, again) == {"outcome": "complete"}
    finally:
        server.stop()
    booked = check_booked_once(admin, kind, 3)
    assert (UUID(too_slow["id"]), 2) in booked


TASK_LEASE = 1.5  # the task workers' lease: a dead or frozen worker's tasks are due again within it
SLOW = 3.0  # seconds a slow payment works before its transaction: longer than a lease that is not extended


def test_task_handler_under_the_shim_books_every_task_once_through_a_kill_and_a_freeze(
    language: Language, example_env: dict[str, str], admin: Any, tmp_path: Path
) -> None:
    """`tenure task worker`s hand the payments to the handler: POSTed to its server (--http) or
    one handler process per task (--exec). An HTTP worker is SIGKILLed while its handler works on a
    slow payment, whose fence then finds the lease gone; later the exec worker is SIGSTOPped while its
    handler works on another, which the warden stops. Another worker books each of the two in a later
    lease; every task ends booked with exactly one ledger entry, written by the lease that finished it."""
    kind = f"example-payment-{language.name}"
    driver = Driver(admin)
    worker = [TENURE, "task", "worker", "--kind", kind, "--lease", str(TASK_LEASE), "--concurrency", "2",
              "--poll-interval", "0.2"]  # fmt: skip
    port = free_port()
    over_http = [*worker, "--http", f"http://127.0.0.1:{port}/"]
    server = ChildProcess([*language.handler, "--listen", f"127.0.0.1:{port}"], tmp_path / "handler.log",
                          env=example_env)  # fmt: skip
    workers: list[ChildProcess] = []

    def start(command: list[str], name: str) -> ChildProcess:
        process = ChildProcess(command, tmp_path / f"{name}.log", env=example_env)
        workers.append(process)
        return process

    def instance(process: ChildProcess) -> UUID:
        return UUID(process.wait_for_output(r"task worker ([0-9a-f-]{36}) ").group(1))

    def payments(first: int) -> UUID:
        """A slow payment (due first), then three quick ones: the slow one's id."""
        slow = driver.task_enqueue(kind, {"account": "slow", "amount": first, "work_seconds": SLOW}).id
        for n in range(first + 1, first + 4):
            driver.task_enqueue(kind, {"account": f"acct-{n % 3}", "amount": n, "work_seconds": 0.05})
        return slow

    def wait_for(what: str, condition: Callable[[], bool]) -> None:
        end = time.monotonic() + 60
        while not condition():
            assert time.monotonic() < end, f"not within 60 s: {what}"
            time.sleep(0.02)

    def holder(task_id: UUID) -> UUID | None:
        row = admin.execute("SELECT owner FROM tenure.tasks WHERE id = %s", (task_id,)).fetchone()
        return None if row is None else UUID(str(row[0])) if row[0] is not None else None

    def all_done() -> bool:
        row = admin.execute("SELECT bool_and(status = 'done') FROM tenure.tasks WHERE kind = %s", (kind,))
        return bool(row.fetchone()[0])

    try:
        server.wait_for_output("listening on")
        first_http = start(over_http, "http-1")
        first_http_id = instance(first_http)
        slow_one = payments(0)
        wait_for("the HTTP worker leases the slow payment", lambda: holder(slow_one) == first_http_id)
        by_exec = start([*worker, "--exec", "--", *language.handler], "exec")  # starting meanwhile
        server.wait_for_output(rf"booking task {slow_one} \(epoch 1")  # works until after the lease ran out
        first_http.signal(signal.SIGKILL)  # its handler works on; its lease is no longer extended
        by_exec_id = instance(by_exec)
        wait_for("the first payments booked", all_done)
        slow_two = payments(10)
        wait_for("the exec worker leases the second slow one", lambda: holder(slow_two) == by_exec_id)
        second_http = start(over_http, "http-2")
        time.sleep(0.5)  # the exec worker's handler process runs by now
        by_exec.signal(signal.SIGSTOP)  # the warden stops its handlers at the end of their safe windows
        wait_for("every payment booked", all_done)
        by_exec.signal(signal.SIGCONT)
        for process in (second_http, by_exec):
            process.signal(signal.SIGTERM)
        for process in (second_http, by_exec):
            process.process.wait(20)
    finally:
        for process in (*workers, server):
            process.stop()
    booked = dict(check_booked_once(admin, kind, 8))
    assert booked[slow_one] > 1 and booked[slow_two] > 1, f"booked in epochs {booked}"
    refused = re.findall(rf"task {slow_one} epoch 1 refused", server.output())
    assert refused, f"the handler of the killed worker did not try its late write:\n{server.output()}"
