"""Every runtime's Prometheus metrics, read over HTTP as a Prometheus server would, and the
task gauges of the database that only the elected maintainer exports."""

from __future__ import annotations

import dataclasses
import time
import urllib.request
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from prometheus_client.parser import text_string_to_metric_families

from tenure import Driver, Elector, Maintainer
from tenure.driver import TableVacuum, TaskKind, TaskStatus
from tenure.http.primary import PrimaryEndpoint
from tenure.http.replica import ReplicaServer
from tenure.metrics import Metrics, MetricsServer
from tenure.runtime.batches import SubmissionPool
from tenure.runtime.claims import Claimer
from tenure.runtime.maintain import MAINTAIN_TYPE as UTYPE
from tenure.runtime.replicas import ReplicaManager
from tenure.runtime.tasks import Complete, Task, TaskWorker
from tenure.testing.aio import Flavour
from tenure.testing.ledger import SimulatedLedger


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample at ``url``: (name, sorted labels) -> value."""
    with urllib.request.urlopen(url, timeout=5) as response:
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def wait_for(condition: Callable[[], bool], timeout: float = 20.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def test_elector_metrics_on_its_endpoint(app_conninfo: str) -> None:
    with Elector(app_conninfo, "metered", interval=0.1, timeout=0.5) as elector:
        assert elector.wait_until_primary(10)
        with PrimaryEndpoint(elector) as endpoint:
            samples = scrape(endpoint.url + "/metrics")
    labels = (("utype", "metered"),)
    assert samples[("tenure_primary", labels)] == 1
    assert samples[("tenure_term", labels)] >= 1
    assert samples[("tenure_elections_total", labels)] == 1
    cycles = (("name", "metered"), ("runtime", "heartbeat"))
    assert samples[("tenure_cycle_duration_seconds_count", cycles)] >= 1
    assert samples[("tenure_cycle_duration_seconds_bucket", (("le", "+Inf"), *cycles))] >= 1


def test_claims_tasks_and_queue_share_one_registry(app_conninfo: str, admin: psycopg.Connection[Any]) -> None:
    driver = Driver(admin)
    driver.claim_register("metered", ["a", "b", "c"])
    driver.task_enqueue_many([{"kind": "metered", "data": {"n": n}} for n in range(5)])
    driver.batch_configure("metered-queue", mode="serial")
    driver.batch_enqueue_many(
        "metered-queue", [{"key": "k", "payload": b"x"}, {"key": "k", "payload": b"bad"}]
    )
    ledger = SimulatedLedger(invalid=lambda payload: payload == b"bad")
    metrics = Metrics()

    def process(task: Task) -> Complete:
        return Complete()

    with (
        MetricsServer(metrics) as server,
        Claimer(app_conninfo, "metered", cycle=0.2, expiry=1.0, metrics=metrics) as claimer,
        TaskWorker(app_conninfo, {"metered": process}, poll_interval=0.1, metrics=metrics),
        SubmissionPool(
            app_conninfo,
            "metered-queue",
            submit=ledger.submit,
            status=ledger.status,
            submitters=2,
            cycle=0.2,
            expiry=1.0,
            poll_interval=0.05,
            metrics=metrics,
        ),
    ):
        assert claimer.wait_for(lambda held: len(held) == 3, 10)

        def done() -> bool:
            s = scrape(server.url)
            return (
                s.get(("tenure_tasks_completed_total", (("kind", "metered"),))) == 5
                and s.get(
                    ("tenure_batches_resolved_total", (("keyspace", "metered-queue"), ("status", "invalid")))
                )
                == 1
            )

        assert wait_for(done)
        samples = scrape(server.url)
    assert samples[("tenure_claims_held", (("keyspace", "metered"),))] == 3
    assert samples[("tenure_claims_gained_total", (("keyspace", "metered"),))] == 3
    assert samples[("tenure_tasks_acquired_total", (("kind", "metered"),))] == 5
    assert samples[("tenure_tasks_in_flight", ())] == 0
    queue = (("keyspace", "metered-queue"),)
    assert samples[("tenure_batches_submitted_total", queue)] == 2
    assert samples[("tenure_batches_resolved_total", (*queue, ("status", "committed")))] == 1
    assert samples[("tenure_claims_held", queue)] == 1, "the pool's claimer reports into the same registry"
    assert samples[("tenure_cycle_duration_seconds_count", (("name", "metered"), ("runtime", "claims")))] >= 1


def test_replica_metrics_on_its_endpoint(app_conninfo: str) -> None:
    with ReplicaManager(app_conninfo, name="metered", scope="metered", interval=0.2) as manager:
        assert manager.wait_until_active(10)
        with ReplicaServer(manager) as server:
            samples = scrape(server.url + "/metrics")
    lock = (("lock_id", str(manager.lock_id)),)
    assert samples[("tenure_replica_active", lock)] == 1
    assert samples[("tenure_replica_epoch", lock)] >= 1
    assert samples[("tenure_replica_activations_total", lock)] == 1


def task_gauges(metrics: Metrics, kind: str) -> dict[str, float]:
    """The task gauges of ``kind`` this registry exports now: metric name (status after a
    colon for tenure_tasks) -> value."""
    found = {}
    for family in metrics.registry.collect():
        for s in family.samples:
            if s.labels.get("kind") == kind and not s.name.endswith(("_total", "_created")):
                name = f"{s.name}:{s.labels['status']}" if "status" in s.labels else s.name
                found[name] = s.value
    return found


def test_task_gauges_keep_every_status_and_drop_what_has_gone() -> None:
    metrics = Metrics()
    now = datetime.now(UTC)
    statuses = [
        TaskStatus("mail", "new", "pending", 3, 1, 2, timedelta(seconds=4), 0),
        TaskStatus("mail", "sent", "pending", 1, 0, 1, timedelta(seconds=1), 1),
        TaskStatus("mail", "new", "waiting", 2, 0, 0, None, 0),
    ]
    limited = TaskKind("mail", True, 5, 1, 10, timedelta(minutes=1), 1, 3, 4, now)
    metrics.task_gauges(statuses, [limited])
    assert task_gauges(metrics, "mail") == {
        "tenure_tasks:pending": 4,
        "tenure_tasks:waiting": 2,
        "tenure_tasks:done": 0,
        "tenure_tasks:dead": 0,
        "tenure_tasks:cancelled": 0,
        "tenure_tasks_due": 3,
        "tenure_task_kind_paused": 1,
        "tenure_task_kind_running": 1,
        "tenure_task_kind_max_running": 5,
        "tenure_task_kind_max_running_per_key": 1,
        "tenure_task_kind_rate": 10,
        "tenure_task_kind_rate_period_seconds": 60,
        "tenure_task_kind_rate_used": 4,
    }
    unlimited = dataclasses.replace(limited, paused=False, max_running=None, rate=None, rate_period=None)
    metrics.task_gauges([dataclasses.replace(statuses[0], status="cancelled")], [unlimited])
    assert task_gauges(metrics, "mail") == {
        "tenure_tasks:pending": 0,
        "tenure_tasks:waiting": 0,
        "tenure_tasks:done": 0,
        "tenure_tasks:dead": 0,
        "tenure_tasks:cancelled": 3,
        "tenure_tasks_due": 2,
        "tenure_task_kind_paused": 0,
        "tenure_task_kind_running": 1,
        "tenure_task_kind_max_running_per_key": 1,
    }, "a limit removed loses its series, and a rate_used without a rate means nothing"
    metrics.task_gauges([], [])
    assert task_gauges(metrics, "mail") == {}, "a kind gone from the database is gone from the gauges"


def table_gauges(metrics: Metrics, table: str) -> dict[str, float]:
    """The table gauges of ``table`` this registry exports now: metric name -> value."""
    return {
        s.name: s.value
        for family in metrics.registry.collect()
        for s in family.samples
        if s.labels.get("table") == table
    }


def test_table_gauges_follow_the_view_and_drop_what_has_gone() -> None:
    metrics = Metrics()
    vacuumed = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    task = TableVacuum("task", 1000, 250, 60, vacuumed, 3, vacuumed, 81920)
    metrics.table_gauges([task, TableVacuum("task_lease_log", 10, 0, None, None, 0, None, 8192)])
    assert table_gauges(metrics, "task") == {
        "tenure_table_rows": 1000,
        "tenure_table_dead_rows": 250,
        "tenure_table_autovacuum_at_rows": 60,
        "tenure_table_last_vacuum_timestamp_seconds": vacuumed.timestamp(),
        "tenure_table_bytes": 81920,
    }
    assert table_gauges(metrics, "task_lease_log") == {
        "tenure_table_rows": 10,
        "tenure_table_dead_rows": 0,
        "tenure_table_bytes": 8192,
    }, "autovacuum off and never vacuumed: no series for either"
    metrics.table_gauges([dataclasses.replace(task, autovacuum_at=None)])
    assert "tenure_table_autovacuum_at_rows" not in table_gauges(metrics, "task")
    assert table_gauges(metrics, "task_lease_log") == {}, "a table gone from the view is gone from the gauges"
    metrics.clear_database_gauges()
    assert table_gauges(metrics, "task") == {}


def test_the_elected_maintainer_exports_the_task_gauges_and_a_standby_none(
    app_conninfo: str, admin: psycopg.Connection[Any], flavour: Flavour
) -> None:
    driver = Driver(admin)
    first = driver.task_enqueue("gauged", {"n": 1})
    driver.task_enqueue("gauged", {"n": 2}, priority=5)
    driver.task_enqueue("gauged", {"n": 3}, after=[first.id])
    cancelled = driver.task_enqueue("gauged", {"n": 4})
    assert driver.task_cancel(cancelled.id)
    driver.task_kind_set("gauged", max_running=2, rate=10, rate_period=60)
    (lease,) = driver.task_acquire(uuid.uuid4(), lease=60, kinds=["gauged"])
    assert lease.data == {"n": 2}, "the higher priority first"
    driver.task_kind_set("gauged", paused=True)
    expected = {
        "tenure_tasks:pending": 2,
        "tenure_tasks:waiting": 1,
        "tenure_tasks:done": 0,
        "tenure_tasks:dead": 0,
        "tenure_tasks:cancelled": 1,
        "tenure_tasks_due": 1,
        "tenure_task_kind_paused": 1,
        "tenure_task_kind_running": 1,
        "tenure_task_kind_max_running": 2,
        "tenure_task_kind_rate": 10,
        "tenure_task_kind_rate_period_seconds": 60,
        "tenure_task_kind_rate_used": 1,
    }
    options: dict[str, Any] = {
        "gauges_every": 0.1,
        "retention_every": 3600.0,
        "interval": 0.3,
        "timeout": 1.0,
    }
    first_maintainer = flavour(Maintainer, app_conninfo, name="g1", **options)
    second_maintainer = flavour(Maintainer, app_conninfo, name="g2", **options)
    with first_maintainer, second_maintainer, MetricsServer(first_maintainer.metrics) as first_server:
        assert wait_for(lambda: first_maintainer.is_primary() or second_maintainer.is_primary())
        active, standby = (
            (first_maintainer, second_maintainer)
            if first_maintainer.is_primary()
            else (second_maintainer, first_maintainer)
        )
        assert wait_for(lambda: task_gauges(active.metrics, "gauged") == expected), task_gauges(
            active.metrics, "gauged"
        )
        assert task_gauges(standby.metrics, "gauged") == {}, "one exporter per database"
        task_table = table_gauges(active.metrics, "task")
        assert task_table["tenure_table_bytes"] > 0 and task_table["tenure_table_autovacuum_at_rows"] >= 50, (
            task_table
        )
        assert table_gauges(standby.metrics, "task") == {}
        if active is first_maintainer:  # as Prometheus reads them
            samples = scrape(first_server.url)
            assert samples[("tenure_tasks", (("kind", "gauged"), ("status", "waiting")))] == 1

        driver.task_kind_set("gauged", paused=False, max_running=0)
        assert wait_for(lambda: task_gauges(active.metrics, "gauged").get("tenure_task_kind_paused") == 0)
        assert "tenure_task_kind_max_running" not in task_gauges(active.metrics, "gauged")

        # Someone else is elected: both are standbys, and neither exports the database's gauges.
        outsider = uuid.uuid4()
        with admin.transaction():
            driver.heartbeat_resign(active.instance_id, UTYPE)
            driver.update_heartbeat(outsider, UTYPE, timeout=1.0, interval=0.3)
        end = time.monotonic() + 20
        while task_gauges(active.metrics, "gauged") and time.monotonic() < end:
            driver.update_heartbeat(outsider, UTYPE, timeout=1.0, interval=0.3)
            time.sleep(0.2)
        assert task_gauges(active.metrics, "gauged") == {}, "a demoted maintainer keeps no stale gauges"
        assert table_gauges(active.metrics, "task") == {}
        assert not active.is_primary() and not standby.is_primary()
        assert task_gauges(standby.metrics, "gauged") == {}
