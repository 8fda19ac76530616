"""tenure on a real Patroni cluster that fails over under running services.

Three nodes (etcd v2, ``synchronous_mode`` and ``synchronous_mode_strict``), n2's
clock 2 s ahead and n3's 2 s behind (libfaketime), the application role with
``synchronous_commit = off``. A fleet of three electors (each doing fenced writes
while it believes it is primary), two task workers and two claimers (sharing six
keys, each doing fenced writes on the keys it holds) runs through a multi-host
conninfo with ``target_session_attrs=read-write`` while the database: switches
over, loses its primary to SIGKILL, has its primary frozen past Patroni's ttl, and
loses its primary while the synchronous standby's walreceiver is stalled (with
waits for it cancelled; the walreceiver then dies with what it had not read). After
each, the clients' own logs of what they were told are checked against the final
database: no term granted twice, no two instances believing they are primary at one
instant, no (task, epoch) leased twice, no key held by two claimers at one instant
(their safe windows included) nor granted twice in one epoch, no acknowledged fenced
write (by term or by claim) or task outcome lost (and outcomes were acknowledged),
every task done exactly once, and a primary again within a bound after the database
is writable. The fleet and the checks
are tenure.testing.failover's, which the failover part of ``tenure demo`` runs too.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest
from conftest import harness_logs

from tenure import Driver
from tenure.testing.failover import (
    APP,
    AREAS,
    KEYS,
    KIND,
    QUEUE,
    SETUP,
    TAKEOVER_BOUND,
    ClientLog,
    Fleet,
    Timing,
    check,
    enqueue_batches,
    wait,
)
from tenure.testing.patroni import PatroniCluster

pytestmark = pytest.mark.usefixtures("needs_patroni")

DB = "fo"


@pytest.fixture(scope="module")
def cluster(request: pytest.FixtureRequest) -> Iterator[PatroniCluster]:
    with (
        PatroniCluster(clock_offsets={"n2": "+2s", "n3": "-2s"}) as cluster,
        harness_logs(request, cluster.log_tails, "patroni logs"),
    ):
        cluster.deploy_tenure(DB)
        cluster.psql(None, SETUP, dbname=DB)
        yield cluster


def run_scenario(cluster: PatroniCluster, fault: Callable[[], float], *, tasks: int = 500) -> Timing:
    """Run the fleet through ``fault`` (which returns when the database was writable again,
    on the monotonic clock); check the invariants; return the timing."""
    cluster.wait_ready(120)
    log = ClientLog()
    with cluster.connect(None, DB) as admin:
        admin.execute("TRUNCATE fo_writes, fo_effects, fo_claim_writes, fo_replica_writes, fo_ledger")
        admin.execute("UPDATE fo_ledger_key SET applied = 0")
        admin.execute("DELETE FROM tenure.task")
        admin.execute("DELETE FROM tenure.batch WHERE keyspace = %s", (QUEUE,))
        enqueued = Driver(admin).task_enqueue_many([{"kind": KIND} for _ in range(tasks)])
        log.enqueued_tasks(row.id for row in enqueued)
    conninfo = cluster.conninfo(DB, user=APP)
    fleet = Fleet(conninfo, log).start()
    producing = threading.Event()
    producer = threading.Thread(
        target=enqueue_batches, args=(conninfo, log, producing), kwargs={"every": 0.1}
    )
    producer.start()
    try:
        assert wait(lambda: log.primary_at(0) is not None, 30), "a primary before the fault"
        time.sleep(1.0)
        fault_at = time.monotonic()
        writable_at = fault()
        assert wait(lambda: log.primary_at(fault_at) is not None, 60), "a primary after the fault"
        elected = log.primary_at(fault_at)
        assert elected is not None
        # An area that does not serve again is reported by report(), after the checks.
        wait(lambda: all(log.served_at(area, writable_at) is not None for area in AREAS), 60)
        with cluster.connect(None, DB) as admin:
            assert wait(
                lambda: (
                    admin.execute("SELECT count(*) FROM tenure.task WHERE status = 'done'").fetchone()
                    == (tasks,)
                ),
                90,
            ), "every task done after the failover"
            producing.set()  # batches flowed as long as tasks did
            producer.join()
            assert wait(
                lambda: (
                    admin.execute(
                        "SELECT count(*) FILTER (WHERE status <> 'committed') FROM tenure.batch "
                        "WHERE keyspace = %s",
                        (QUEUE,),
                    ).fetchone()
                    == (0,)
                ),
                60,
            ), "every batch committed after the failover"
    finally:
        producing.set()
        producer.join()
        fleet.stop()
    with cluster.connect(None, DB) as admin:
        problems = check(log, admin)
    assert not problems, (problems, sorted(log.replicas, key=lambda span: span[2]))
    # Every task was done by a worker of the fleet, so the workers were told of outcomes:
    # the check above compared them with the final tables.
    completed = sum(1 for *_, kind in log.outcomes if kind == "complete")
    assert completed > tasks // 2, f"only {completed} acknowledged completions of {tasks} tasks were checked"
    holders: dict[str, set[object]] = {}
    for instance, key, *_ in log.claims:
        holders.setdefault(key, set()).add(instance)
    handed = sum(1 for held_by in holders.values() if len(held_by) > 1)
    actives = sorted({epoch for _, epoch, *_ in log.replicas})
    print(
        f"\nchecked: {len(log.elected)} terms, {len(log.writes)} acknowledged fenced writes; "
        f"{completed} acknowledged completions of {tasks} tasks; "
        f"claims: {len(log.claims)} spans of {len(KEYS)} keys ({handed} held by both claimers in turn), "
        f"{len(log.claim_writes)} acknowledged claim-fenced writes; "
        f"batches: all {len(log.enqueued_batches)} acknowledged batches applied once and in order "
        f"({len(log.batches)} acknowledged applications); "
        f"replicas: {len(log.replicas)} active spans in epochs {actives}, never two at once, "
        f"{len(log.replica_writes)} acknowledged guarded writes"
    )
    return Timing.measure(log, fault=fault_at, writable=writable_at, primary=elected[0])


def test_switchover(cluster: PatroniCluster) -> None:
    def fault() -> float:
        # Under synchronous_mode_strict only the synchronous standby may take over.
        cluster.switchover(cluster.sync_standby())
        return time_writable(cluster)

    report("switchover", run_scenario(cluster, fault))


def test_sigkill_of_the_primary_node(cluster: PatroniCluster) -> None:
    def fault() -> float:
        old = cluster.leader()
        assert old is not None
        cluster.kill_node(old)
        writable = time_writable(cluster, exclude=(old,))
        cluster.start_node(old)
        return writable

    report("SIGKILL of the primary", run_scenario(cluster, fault))


def test_primary_frozen_past_the_ttl(cluster: PatroniCluster) -> None:
    def fault() -> float:
        old = cluster.leader()
        assert old is not None
        with cluster.frozen(old):
            writable = time_writable(cluster, exclude=(old,))
            time.sleep(5)  # the old primary stays frozen after the new one took over
        return writable

    report("SIGSTOP of the primary", run_scenario(cluster, fault))


def test_stalled_sync_standby_then_primary_killed(cluster: PatroniCluster) -> None:
    def fault() -> float:
        old, standby = cluster.leader(), cluster.sync_standby()
        assert old is not None and standby is not None
        cluster.stall_walreceiver(standby)
        try:
            time.sleep(2)
            # Cancel the commits waiting for the standby: the server says success with a
            # WARNING, which the clients must not take as an acknowledgement.
            cluster.psql(
                old, "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE wait_event = 'SyncRep'"
            )
            time.sleep(1)
            cluster.kill_node(old)
            # The standby keeps only what it had written: resumed, its walreceiver would
            # read the rest from its socket's buffer, and nothing could be lost.
            cluster.drop_walreceiver(standby)
        finally:
            cluster.resume_walreceiver(standby)
        writable = time_writable(cluster, exclude=(old,))
        cluster.start_node(old)
        return writable

    report("stalled standby, primary killed", run_scenario(cluster, fault))


def time_writable(cluster: PatroniCluster, exclude: tuple[str, ...] = ()) -> float:
    cluster.wait_writable(90, exclude=exclude)
    return time.monotonic()


def report(scenario: str, timing: Timing) -> None:
    print(
        f"\n{scenario}: writable again {timing.writable:.2f} s after the fault, a primary after "
        f"{timing.primary:.2f} s: {timing.takeover:.2f} s after writable (bound {TAKEOVER_BOUND} s); "
        f"time to serve again after writable: {timing.serving()}"
    )
    assert timing.takeover <= TAKEOVER_BOUND, f"{scenario}: {timing} exceeds {TAKEOVER_BOUND} s"
    assert not timing.late_areas(), f"{scenario}: late to serve again: {timing.serving()}"
