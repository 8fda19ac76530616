"""Every runtime's Prometheus metrics, read over HTTP as a Prometheus server would."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable
from typing import Any

import psycopg
from prometheus_client.parser import text_string_to_metric_families

from tenure import Driver, Elector
from tenure.http.primary import PrimaryEndpoint
from tenure.http.replica import ReplicaServer
from tenure.metrics import Metrics, MetricsServer
from tenure.runtime.batches import SubmissionPool
from tenure.runtime.claims import Claimer
from tenure.runtime.replicas import ReplicaManager
from tenure.runtime.tasks import Complete, Task, TaskWorker
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
