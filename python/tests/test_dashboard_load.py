"""tenure dashboard against a large fleet under many concurrent requests: every answer stays
bounded in size and time (a page of each list, excerpts of long texts), the pool's
exhaustion is answered 503 with Retry-After instead of 500 or a hang, and the dashboard
answers promptly once the storm is over.

The fleet is made in one INSERT ... SELECT generate_series as the schema owner, not by
enqueueing: 100,000 tasks by default (a few seconds), TENURE_DASHBOARD_FLEET=1000000 for
the million of issue 27. The bounds are generous on purpose: they tell a bounded answer
from an unbounded one (the million-task /tasks was 20.8 MB and 5.8 s, the next request
after a storm 85 s), not a fast machine from a slow one.
"""

from __future__ import annotations

import os
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import psycopg
import pytest

from tenure.dashboard import DashboardServer, Settings
from tenure.driver import Driver

FLEET = int(os.environ.get("TENURE_DASHBOARD_FLEET", "100000"))
REQUESTS = 200
BIG_TASK = uuid.UUID("00000000-0000-0000-0000-00000000b16d")
MAX_BYTES = 1_000_000  # every answer, page or JSON
MAX_SECONDS = 30.0  # every answer, 200 or 503, while 200 requests arrive at once
CALM_SECONDS = 10.0  # one request once the storm is over
PATHS = (
    "/",
    "/tasks",
    "/tasks?page=2",
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


def _get(client: httpx.Client, path: str, as_json: bool) -> tuple[str, int, int, float, str | None]:
    started = time.monotonic()
    answer = client.get(path, headers={"Accept": "application/json"} if as_json else {})
    return path, answer.status_code, len(answer.content), time.monotonic() - started, answer.headers.get(
        "retry-after"
    )


@pytest.mark.timeout(900)
def test_a_large_fleet_under_many_concurrent_requests_gets_bounded_answers(
    admin: psycopg.Connection[Any], app_conninfo: str
) -> None:
    started = time.monotonic()
    _build_fleet(admin, FLEET)
    built = time.monotonic() - started
    with (
        DashboardServer(app_conninfo, settings=Settings(refresh=0)) as server,
        httpx.Client(base_url=server.url, timeout=120) as client,
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
        assert all(len(row["last_error"]) < 5000 and row["last_error_length"] == 5000 for row in tasks["dead"])
        assert 'id="next-page"' in client.get("/tasks").text
        second = client.get("/tasks", params={"page": "2", "format": "json"}).json()
        assert second["status"][0] != tasks["status"][0]
        assert 'id="prev-page"' in client.get("/tasks", params={"page": "2"}).text
        assert client.get("/tasks", params={"page": "0"}).status_code == 400

        storm_started = time.monotonic()
        with ThreadPoolExecutor(REQUESTS) as pool:
            answers = list(
                pool.map(lambda n: _get(client, PATHS[n % len(PATHS)], n % 2 == 0), range(REQUESTS))
            )
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
