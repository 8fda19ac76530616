"""tenure behind a real pgbouncer 1.18 in transaction mode.

Electors, task workers and claimers run through the pooler for 30 s
(``TENURE_POOLER_SECONDS``) with no step-down, no lost claim and no lost or
repeated task: the runtimes prepare no statement on the server (psycopg would after
five runs, and the pooler hands a prepared statement to another client's session).
What needs a session is refused with a clear error before anything is set on one:
LISTEN, replicas' advisory locks, and pgbouncer's default refusal of ``options``.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from conftest import PORT
from psycopg.conninfo import conninfo_to_dict

from tenure import Driver
from tenure.connect import connect
from tenure.errors import InvalidConfiguration
from tenure.runtime.claims import Claimer, Keys
from tenure.runtime.heartbeat import Elector
from tenure.runtime.replicas import ReplicaManager
from tenure.runtime.tasks import Complete, Task, TaskWorker
from tenure.testing.pgbouncer import PgBouncer

pytestmark = pytest.mark.usefixtures("needs_pgbouncer")

SECONDS = float(os.environ.get("TENURE_POOLER_SECONDS", "30"))


@pytest.fixture
def through(app_conninfo: str) -> Iterator[tuple[PgBouncer, str]]:
    """A transaction pooler in front of the test database, and the app's conninfo through it."""
    app = conninfo_to_dict(app_conninfo)
    with PgBouncer(upstream_port=PORT, users=[str(app["user"]), "postgres"], default_pool_size=10) as bouncer:
        yield bouncer, bouncer.conninfo(str(app["dbname"]), user=str(app["user"]))


def test_runtimes_run_through_a_transaction_pooler(
    through: tuple[PgBouncer, str], admin: psycopg.Connection[Any]
) -> None:
    _, conninfo = through
    driver = Driver(admin)
    lock = threading.Lock()
    elected: list[tuple[int, int]] = []
    demoted: list[tuple[int, str]] = []
    lost_keys: list[Keys] = []
    done: list[tuple[str, int]] = []

    def work(task: Task) -> Complete:
        with lock:
            done.append((str(task.id), task.epoch))
        return Complete()

    electors = [
        Elector(
            conninfo,
            "pooled",
            interval=0.3,
            # T - I = 1.7 s: a stall of a shared machine longer than the safe window is a
            # correct step-down, not this test's subject (the pooler's effect on every call)
            timeout=2.0,
            name=f"e{n}",
            on_elected=lambda term, n=n: elected.append((n, term)),  # type: ignore[misc]
            on_demoted=lambda reason, n=n: demoted.append((n, reason)),  # type: ignore[misc]
        )
        for n in range(3)
    ]
    driver.claim_register("pooled", [f"k{n}" for n in range(12)])
    claimers = [
        Claimer(conninfo, "pooled", cycle=0.5, expiry=2.0, name=f"c{n}", on_lost=lost_keys.append)
        for n in range(2)
    ]
    workers = [
        TaskWorker(conninfo, {"pooled": work}, concurrency=3, lease=3.0, poll_interval=0.05, listen=False)
        for _ in range(2)
    ]
    for elector in electors:
        elector.start()
    for claimer in claimers:
        claimer.start()
    for worker in workers:
        worker.start()
    try:
        end = time.monotonic() + SECONDS
        enqueued = 0
        while time.monotonic() < end:
            driver.task_enqueue_many([{"kind": "pooled"} for _ in range(20)])
            enqueued += 20
            time.sleep(0.25)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(done) < enqueued:
            time.sleep(0.1)
        lost_while_running = list(lost_keys)
        demoted_while_running = list(demoted)
    finally:
        for worker in workers:
            worker.stop()
        for claimer in claimers:
            claimer.stop()
        for elector in electors:
            elector.stop()

    assert len(elected) == 1 and elected[0][1] == 1, f"one primary, elected once: {elected}"
    assert demoted_while_running == [], f"no step-down: {demoted_while_running}"
    # Two claimers share 12 keys: the second one's arrival moves keys once, nothing else.
    assert len(lost_while_running) <= 1, f"claims lost while running: {lost_while_running}"
    assert all(worker.stats.lost == 0 and worker.stats.discarded == 0 for worker in workers)
    assert len(done) == enqueued, f"{enqueued - len(done)} tasks not done"
    assert len({task for task, _ in done}) == enqueued, "no task ran twice"
    assert all(epoch == 1 for _, epoch in done), "every task was done under its first lease"
    assert admin.execute(
        "SELECT count(*) FROM tenure.task WHERE kind = 'pooled' AND status <> 'done'"
    ).fetchone() == (0,)


def test_default_pgbouncer_refuses_options_with_a_clear_error(app_conninfo: str) -> None:
    app = conninfo_to_dict(app_conninfo)
    with PgBouncer(upstream_port=PORT, users=[str(app["user"])], ignore_startup_parameters=None) as bouncer:
        conninfo = bouncer.conninfo(str(app["dbname"]), user=str(app["user"]))
        with pytest.raises(InvalidConfiguration) as refused:
            connect(conninfo, application_name="t", deadline=2.0)
        assert "ignore_startup_parameters" in (refused.value.hint or "")
        with pytest.raises(InvalidConfiguration):
            TaskWorker(conninfo, {"x": lambda task: Complete()}, listen=False).start()


def test_session_features_are_refused_before_touching_a_session(app_conninfo: str) -> None:
    app = conninfo_to_dict(app_conninfo)
    # One server connection: every client shares the same server session.
    with PgBouncer(upstream_port=PORT, users=[str(app["user"])], default_pool_size=1) as bouncer:
        conninfo = bouncer.conninfo(str(app["dbname"]), user=str(app["user"]))
        with pytest.raises(InvalidConfiguration, match="LISTEN"):
            TaskWorker(conninfo, {"x": lambda task: Complete()}, listen=True).start()
        with pytest.raises(InvalidConfiguration, match="advisory lock"):
            ReplicaManager(conninfo, name="r").start()
        with psycopg.connect(conninfo, autocommit=True, prepare_threshold=None) as other:
            row = other.execute("SHOW idle_session_timeout").fetchone()
        assert row == ("0",), "the replica's refusal left the shared server session as it was"
