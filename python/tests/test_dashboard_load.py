"""tenure dashboard against a large fleet under many concurrent requests: every answer stays
bounded in size and time (a page of each list, excerpts of long texts), the pool's
exhaustion is answered 503 with Retry-After instead of 500 or a hang, and the dashboard
answers promptly once the storm is over.

The fleet is made in one INSERT ... SELECT generate_series as the schema owner, not by
enqueueing: the million tasks of issue 27 (20-50 s on two cores), fewer with
TENURE_DASHBOARD_FLEET=20000 while working on it. The bounds are generous on purpose:
they tell a bounded answer from an unbounded one (the million-task /tasks was 20.8 MB
and 5.8 s, the next request after a storm 85 s), not a fast machine from a slow one.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import psycopg
import pytest
from psycopg_pool import PoolTimeout
from test_dashboard import chromium

from tenure.dashboard import DashboardServer, Settings, data
from tenure.driver import Driver
from tenure.testing.procs import free_port

FLEET = int(os.environ.get("TENURE_DASHBOARD_FLEET", "1000000"))
REQUESTS = 200
BIG_TASK = uuid.UUID("00000000-0000-0000-0000-00000000b16d")
MAX_BYTES = 1_000_000  # every answer, page or JSON
MAX_SECONDS = 30.0  # every answer, 200 or 503, while 200 requests arrive at once
CALM_SECONDS = 10.0  # one request once the storm is over
PATHS = (
    "/",
    "/tasks",
    "/tasks?page=2",
    "/tasks?status=pending",
    "/tasks?status=dead&page=3",
    f"/tasks/{BIG_TASK}",
    "/claims",
    "/heartbeat",
    "/batches",
    "/schedules",
    "/replicas",
)


def _build_fleet(admin: psycopg.Connection[Any], tasks: int) -> None:
    """``tasks`` tasks of 2000 kinds: 70 % pending and due, 20 % done, 10 % dead with a 5000
    character error; one task whose data is 5 MB (written before data had a limit); 20,000
    claim keys."""
    admin.execute(
        """
        INSERT INTO tenure.task (kind, state, status, data, attempts, last_error, created_at, last_change,
                                 last_action, next_action, finished_at)
        SELECT 'kind-' || n %% 2000, 'new', s.status, jsonb_build_object('n', n),
               CASE s.status WHEN 'dead' THEN 5 ELSE 0 END,
               CASE s.status WHEN 'dead' THEN repeat('e', 5000) END,
               now() - interval '1 hour', now(), now(),
               CASE s.status WHEN 'pending' THEN now() - n * interval '1 ms' END,
               CASE s.status WHEN 'pending' THEN NULL ELSE now() - n * interval '1 ms' END
          FROM generate_series(1, %s) n,
               LATERAL (SELECT CASE WHEN n %% 10 < 7 THEN 'pending' WHEN n %% 10 < 9 THEN 'done'
                                    ELSE 'dead' END AS status) s
        """,
        (tasks,),
    )
    admin.execute(
        "INSERT INTO tenure.task (id, kind, state, data, created_at, last_change, last_action, next_action) "
        "VALUES (%s, 'big', 'new', jsonb_build_object('blob', repeat('x', 5000000)), now(), now(), now(), "
        "now() + interval '1 day')",
        (BIG_TASK,),
    )
    driver = Driver(admin)
    for start in (0, 10000):
        driver.claim_register("load", [f"key-{n}" for n in range(start, start + 10000)])
    admin.execute("ANALYZE tenure.task")
    admin.execute("ANALYZE tenure.claim_key")


@contextlib.contextmanager
def _dashboard(conninfo: str, log: Path) -> Iterator[str]:
    """``tenure dashboard`` in a process of its own, as it is deployed (the test's 200
    client threads would otherwise share its interpreter); its URL once it answers."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with log.open("w") as output:
        child = subprocess.Popen(
            [
                *(str(Path(sys.executable).parent / "tenure"), "dashboard"),
                *("--db", conninfo, "--http", f"127.0.0.1:{port}", "--refresh", "0"),
            ],
            stdout=output,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 60
            while True:
                assert child.poll() is None, f"tenure dashboard exited: {log.read_text()}"
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(url + "/schedules", timeout=5).status_code == 200:
                        break
                assert time.monotonic() < deadline, f"tenure dashboard did not answer: {log.read_text()}"
                time.sleep(0.2)
            yield url
        finally:
            child.terminate()
            try:
                child.wait(15)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()


def _get(url: str, path: str, as_json: bool) -> tuple[str, int, int, float, str | None]:
    """One client's request, on a connection of its own as from another browser (plain
    http.client: 200 httpx clients at once spend seconds making SSL contexts)."""
    started = time.monotonic()
    connection = http.client.HTTPConnection(urlsplit(url).netloc, timeout=120)
    try:
        connection.request("GET", path, headers={"Accept": "application/json"} if as_json else {})
        answer = connection.getresponse()
        body = answer.read()
    finally:
        connection.close()
    return path, answer.status, len(body), time.monotonic() - started, answer.getheader("Retry-After")


@pytest.mark.timeout(900)
def test_a_large_fleet_under_many_concurrent_requests_gets_bounded_answers(
    admin: psycopg.Connection[Any], app_conninfo: str, tmp_path: Path
) -> None:
    started = time.monotonic()
    _build_fleet(admin, FLEET)
    built = time.monotonic() - started
    with (
        _dashboard(app_conninfo, tmp_path / "dashboard.log") as url,
        httpx.Client(base_url=url, timeout=120) as client,
    ):
        # Alone, each page is bounded and shows what is cut.
        one = client.get(f"/tasks/{BIG_TASK}", params={"format": "json"})
        assert one.status_code == 200 and len(one.content) < 100_000, len(one.content)
        task = one.json()["task"]
        assert task["data_truncated"] and task["data_bytes"] > 5_000_000
        assert task["show_command"] == f"tenure task show {BIG_TASK}"
        page = client.get(f"/tasks/{BIG_TASK}").text
        assert "prints it whole" in page and f"tenure task show {BIG_TASK}" in page
        tasks = client.get("/tasks", params={"format": "json"}).json()
        assert len(tasks["status"]) == tasks["page"]["size"] and tasks["page"]["more"]
        assert len(tasks["dead"]) == tasks["page"]["size"]
        assert all(len(r["last_error"]) < 5000 and r["last_error_length"] == 5000 for r in tasks["dead"])
        assert 'id="next-page"' in client.get("/tasks").text
        second = client.get("/tasks", params={"page": "2", "format": "json"}).json()
        assert second["status"][0] != tasks["status"][0]
        assert 'id="prev-page"' in client.get("/tasks", params={"page": "2"}).text
        assert client.get("/tasks", params={"page": "0"}).status_code == 400

        storm_started = time.monotonic()
        with ThreadPoolExecutor(REQUESTS) as pool:
            answers = list(pool.map(lambda n: _get(url, PATHS[n % len(PATHS)], n % 2 == 0), range(REQUESTS)))
        storm = time.monotonic() - storm_started
        calm_started = time.monotonic()
        assert client.get("/tasks").status_code == 200
        calm = time.monotonic() - calm_started

    statuses = sorted({status for _, status, _, _, _ in answers})
    served = sum(status == 200 for _, status, _, _, _ in answers)
    slowest = max(seconds for _, _, _, seconds, _ in answers)
    largest = max(size for _, _, size, _, _ in answers)
    print(
        f"\n{FLEET} tasks built in {built:.1f} s; {REQUESTS} concurrent requests in {storm:.1f} s: "
        f"{served} answered 200, the others 503; slowest {slowest:.1f} s, largest {largest} bytes; "
        f"one request afterwards {calm:.2f} s"
    )
    assert set(statuses) <= {200, 503}, [a for a in answers if a[1] not in (200, 503)][:5]
    assert all(retry == "5" for _, status, _, _, retry in answers if status == 503)
    assert served > 0
    assert largest < MAX_BYTES, [a for a in answers if a[2] >= MAX_BYTES][:3]
    assert slowest < MAX_SECONDS, [a for a in answers if a[3] >= MAX_SECONDS][:3]
    assert calm < CALM_SECONDS


def test_a_full_pool_and_a_slow_page_are_answered_503_with_retry_after(
    admin_conninfo: str, app_conninfo: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The two ways a page is refused rather than left waiting, each forced: no connection
    within the pool's wait, and statements over the page's time (PAGE_SECONDS; the tasks
    table locked meanwhile, so a statement of the page waits past it however fast the
    machine: with the page's 1 ms alone, every statement of a small fleet's page could end
    in time)."""
    with (
        DashboardServer(app_conninfo, settings=Settings(refresh=5)) as server,
        httpx.Client(base_url=server.url, timeout=60) as client,
    ):
        dashboard = server.dashboard
        assert client.get("/claims").status_code == 200

        def no_connection(timeout: float | None = None) -> Any:
            raise PoolTimeout("couldn't get a connection after 5.00 sec")

        with monkeypatch.context() as patch:
            patch.setattr(dashboard.pool, "connection", no_connection)
            page = client.get("/claims")
            assert page.status_code == 503 and page.headers["retry-after"] == "5"
            assert "every database connection is in use" in page.text
            assert 'data-busy="1"' in page.text and 'data-refresh="5' in page.text  # the reload backs off
            answer = client.get("/claims", params={"format": "json"})
            assert answer.status_code == 503 and answer.headers["retry-after"] == "5"
            assert answer.json()["error"].startswith("busy: ")
        with (
            monkeypatch.context() as patch,
            psycopg.connect(admin_conninfo) as locker,
        ):
            patch.setattr(data, "PAGE_SECONDS", 0.0)
            locker.execute("LOCK TABLE tenure.task IN ACCESS EXCLUSIVE MODE")  # until the block ends
            slow = client.get("/tasks", params={"format": "json"})
            assert slow.status_code == 503 and slow.headers["retry-after"] == "5"
            assert "the page took longer than 0 s" in slow.json()["error"]
        assert client.get("/claims").status_code == 200, "the pool's connections are fine afterwards"


def test_the_reload_backs_off_while_the_dashboard_is_busy(app_conninfo: str) -> None:
    """In chromium: after each busy (503) page the next reload waits twice as long, up to
    16 times the interval; a quick page brings it back to the interval (refresh.js)."""
    with (
        DashboardServer(app_conninfo, settings=Settings(refresh=60)) as server,
        chromium() as chrome,
    ):

        def next_reload() -> str:
            chrome.get(server.url + "/claims")
            return str(chrome.execute_script("return document.body.dataset.nextReload"))

        assert next_reload() == "60"
        pool = server.dashboard.pool
        real = pool.connection

        def no_connection(timeout: float | None = None) -> Any:
            raise PoolTimeout("couldn't get a connection after 5.00 sec")

        pool.connection = no_connection  # type: ignore[method-assign]
        try:
            assert [next_reload() for _ in range(5)] == ["120", "240", "480", "960", "960"]
        finally:
            pool.connection = real  # type: ignore[method-assign]
        assert next_reload() == "60"
