"""tenure on a real Patroni cluster that fails over under running services.

Three nodes (etcd v2, ``synchronous_mode`` and ``synchronous_mode_strict``), n2's
clock 2 s ahead and n3's 2 s behind (libfaketime), the application role with
``synchronous_commit = off``. A fleet of three electors (each doing fenced writes
while it believes it is primary) and two task workers runs through a multi-host
conninfo with ``target_session_attrs=read-write`` while the database: switches
over, loses its primary to SIGKILL, has its primary frozen past Patroni's ttl, and
loses its primary while the synchronous standby's walreceiver is stalled (with
waits for it cancelled). After each, the clients' own logs of what they were told
are checked against the final database: no term granted twice, no two instances
believing they are primary at one instant, no (task, epoch) leased twice, no
acknowledged fenced write or task outcome lost, every task done exactly once, and a
primary again within a bound after the database is writable.
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest
from conftest import harness_logs

from tenure import Driver
from tenure.connect import Deadlines, connect, durable_transaction
from tenure.elector import Elector
from tenure.errors import TenureError
from tenure.tasks import Complete, Outcome, Task, TaskWorker
from tenure.testing.patroni import PatroniCluster

pytestmark = pytest.mark.usefixtures("needs_patroni")

UTYPE, I, T = "fo", 0.5, 2.0
LEASE = 3.0
DB, APP = "fo", "fo_app"
# A new primary renews within I once it reaches the new server; reaching it may cost a
# connect timeout (2 s) per host that does not answer; the old primary's entry, if it
# died, is re-based at the first write and runs out T later.
TAKEOVER_BOUND = T + 2 * I + 2 * 2.0 + 1.0

SETUP = f"""
CREATE ROLE {APP} LOGIN IN ROLE tenure_worker;
ALTER ROLE {APP} SET synchronous_commit = off;
CREATE TABLE fo_writes (instance_id uuid, term bigint, seq int, PRIMARY KEY (instance_id, term, seq));
CREATE TABLE fo_effects (task_id uuid, epoch bigint);
GRANT INSERT, SELECT ON fo_writes, fo_effects TO {APP};
"""


@pytest.fixture(scope="module")
def cluster(request: pytest.FixtureRequest) -> Iterator[PatroniCluster]:
    with (
        PatroniCluster(clock_offsets={"n2": "+2s", "n3": "-2s"}) as cluster,
        harness_logs(request, cluster.log_tails, "patroni logs"),
    ):
        cluster.deploy_tenure(DB)
        cluster.psql(None, SETUP, dbname=DB)
        yield cluster


@dataclass
class Fleet:
    """The clients, and their own logs of what the database told them."""

    conninfo: str
    elected: list[tuple[str, int, float]] = field(default_factory=list)  # elector, term, when
    demoted: list[tuple[str, float]] = field(default_factory=list)
    acked_writes: list[tuple[uuid.UUID, int, int]] = field(default_factory=list)
    leases: list[tuple[uuid.UUID, int, uuid.UUID]] = field(default_factory=list)
    acked_outcomes: list[tuple[uuid.UUID, int]] = field(default_factory=list)
    stopping: threading.Event = field(default_factory=threading.Event)
    electors: list[Elector] = field(default_factory=list)
    workers: list[TaskWorker] = field(default_factory=list)
    threads: list[threading.Thread] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> None:
        for n in range(3):
            name = f"e{n}"
            elector = Elector(
                self.conninfo,
                UTYPE,
                interval=I,
                timeout=T,
                name=name,
                on_elected=self._on_elected(name),
                on_demoted=self._on_demoted(name),
            )
            self.electors.append(elector.start())
            thread = threading.Thread(target=self._write, args=(elector,), daemon=True)
            thread.start()
            self.threads.append(thread)
        for n in range(2):
            worker = AckingWorker(self, n)
            self.workers.append(worker.start())

    def _on_elected(self, name: str) -> Callable[[int], None]:
        def on_elected(term: int) -> None:
            with self.lock:
                self.elected.append((name, term, time.monotonic()))

        return on_elected

    def _on_demoted(self, name: str) -> Callable[[str], None]:
        def on_demoted(reason: str) -> None:
            with self.lock:
                self.demoted.append((name, time.monotonic()))

        return on_demoted

    def _write(self, elector: Elector) -> None:
        """Fenced writes while this instance believes it is primary; logged once confirmed."""
        deadlines = Deadlines(f"writer {elector.name}")
        connection: psycopg.Connection[Any] | None = None
        for seq in itertools.count():
            if self.stopping.wait(0.02):
                break
            term = elector.term
            if term is None:
                continue
            try:
                if connection is None or connection.closed or connection.broken:
                    connection = connect(self.conninfo, application_name="fo writer", deadline=1.5)
                with deadlines.bounded(connection, 2.0), durable_transaction(connection):
                    Driver(connection).heartbeat_fence(elector.instance_id, UTYPE, term)
                    connection.execute(
                        "INSERT INTO fo_writes VALUES (%s, %s, %s)", (elector.instance_id, term, seq)
                    )
                with self.lock:
                    self.acked_writes.append((elector.instance_id, term, seq))
            except (psycopg.Error, TenureError):
                if connection is not None:
                    connection.close()
                connection = None
        if connection is not None:
            connection.close()
        deadlines.close()

    def stop(self) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join()
        for worker in self.workers:
            worker.stop()
        for elector in self.electors:
            elector.stop()

    def primary_at(self, since: float) -> float | None:
        """When the first instance was elected after ``since`` (monotonic)."""
        with self.lock:
            times = [at for _, _, at in self.elected if at >= since]
        return min(times) if times else None


class AckingWorker(TaskWorker):
    """A task worker that logs each lease it is handed and each outcome the database confirmed."""

    def __init__(self, fleet: Fleet, n: int) -> None:
        super().__init__(
            fleet.conninfo,
            {"fo": self._work},
            concurrency=3,
            lease=LEASE,
            poll_interval=0.1,
            name=f"w{n}",
            shutdown_grace=1.0,
        )
        self.fleet = fleet

    def _work(self, task: Task) -> Outcome:
        with self.fleet.lock:
            self.fleet.leases.append((task.id, task.epoch, self.instance_id))
        time.sleep(0.15)
        return Complete(
            writes=lambda db: db.execute("INSERT INTO fo_effects VALUES (%s, %s)", (task.id, task.epoch))
        )

    def _apply(self, task: Task, outcome: Outcome, *, routed_away: bool = False) -> bool:
        recorded = super()._apply(task, outcome, routed_away=routed_away)
        if recorded and isinstance(outcome, Complete):
            with self.fleet.lock:
                self.fleet.acked_outcomes.append((task.id, task.epoch))
        return recorded


@dataclass(frozen=True)
class Timing:
    """Seconds after the fault: until the database was writable again, until a primary was elected."""

    writable: float
    primary: float

    @property
    def takeover(self) -> float:
        """From writable again to a primary (0 when the electors were faster than the probe)."""
        return max(0.0, self.primary - self.writable)


def run_scenario(cluster: PatroniCluster, fault: Callable[[Fleet], float], *, tasks: int = 500) -> Timing:
    """Run the fleet through ``fault`` (which returns when the database was writable again,
    on the monotonic clock); check the invariants; return the timing."""
    cluster.wait_ready(120)
    with cluster.connect(None, DB) as admin:
        admin.execute("TRUNCATE fo_writes, fo_effects")
        admin.execute("DELETE FROM tenure.task")
        Driver(admin).task_enqueue_many([{"kind": "fo"} for _ in range(tasks)])
    fleet = Fleet(cluster.conninfo(DB, user=APP))
    fleet.start()
    try:
        assert wait(lambda: fleet.primary_at(0) is not None, 30), "a primary before the fault"
        time.sleep(1.0)
        fault_at = time.monotonic()
        writable_at = fault(fleet)
        assert wait(lambda: fleet.primary_at(fault_at) is not None, 60), "a primary after the fault"
        elected_at = fleet.primary_at(fault_at)
        assert elected_at is not None
        with cluster.connect(None, DB) as admin:
            assert wait(
                lambda: (
                    admin.execute("SELECT count(*) FROM tenure.task WHERE status = 'done'").fetchone()
                    == (tasks,)
                ),
                90,
            ), "every task done after the failover"
    finally:
        fleet.stop()
    check(cluster, fleet, tasks)
    return Timing(writable=writable_at - fault_at, primary=elected_at - fault_at)


def check(cluster: PatroniCluster, fleet: Fleet, tasks: int) -> None:
    granted: dict[int, set[str]] = {}
    for instance, term, _ in fleet.elected:
        granted.setdefault(term, set()).add(instance)
    assert all(len(holders) == 1 for holders in granted.values()), f"a term granted twice: {granted}"
    assert len({(i, t) for i, t, _ in fleet.elected}) == len(fleet.elected), "on_elected twice for one term"
    # Believed primacy, by the clients' shared monotonic clock: never two at once.
    spans = []
    for instance, _, start in fleet.elected:
        ends = [at for who, at in fleet.demoted if who == instance and at >= start]
        spans.append((start, min(ends) if ends else float("inf"), instance))
    spans.sort()
    for (_, end, first), (start, _, second) in itertools.pairwise(spans):
        assert first == second or start >= end, f"two instances believed they were primary: {spans}"
    leased: dict[tuple[uuid.UUID, int], set[uuid.UUID]] = {}
    for task, epoch, owner in fleet.leases:
        leased.setdefault((task, epoch), set()).add(owner)
    assert all(len(owners) == 1 for owners in leased.values()), "a (task, epoch) leased twice"
    with cluster.connect(None, DB) as admin:
        writes = set(admin.execute("SELECT instance_id, term, seq FROM fo_writes").fetchall())
        effects = admin.execute("SELECT task_id, epoch FROM fo_effects").fetchall()
        done = admin.execute("SELECT count(*) FROM tenure.task WHERE status = 'done'").fetchone()
    lost_writes = set(fleet.acked_writes) - writes
    assert not lost_writes, f"{len(lost_writes)} acknowledged fenced writes lost"
    lost_outcomes = set(fleet.acked_outcomes) - set(effects)
    assert not lost_outcomes, f"{len(lost_outcomes)} acknowledged task outcomes lost"
    assert len(effects) == len({task for task, _ in effects}) == tasks, "every task's step applied once"
    assert done == (tasks,)
    assert fleet.acked_writes, "the primaries wrote"


def wait(condition: Callable[[], bool], timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if condition():
                return True
        except psycopg.Error:
            pass
        time.sleep(0.2)
    return False


def test_switchover(cluster: PatroniCluster) -> None:
    def fault(fleet: Fleet) -> float:
        # Under synchronous_mode_strict only the synchronous standby may take over.
        cluster.switchover(cluster.sync_standby())
        return time_writable(cluster)

    report("switchover", run_scenario(cluster, fault))


def test_sigkill_of_the_primary_node(cluster: PatroniCluster) -> None:
    def fault(fleet: Fleet) -> float:
        old = cluster.leader()
        assert old is not None
        cluster.kill_node(old)
        writable = time_writable(cluster, exclude=(old,))
        cluster.start_node(old)
        return writable

    report("SIGKILL of the primary", run_scenario(cluster, fault))


def test_primary_frozen_past_the_ttl(cluster: PatroniCluster) -> None:
    def fault(fleet: Fleet) -> float:
        old = cluster.leader()
        assert old is not None
        with cluster.frozen(old):
            writable = time_writable(cluster, exclude=(old,))
            time.sleep(5)  # the old primary stays frozen after the new one took over
        return writable

    report("SIGSTOP of the primary", run_scenario(cluster, fault))


def test_stalled_sync_standby_then_primary_killed(cluster: PatroniCluster) -> None:
    def fault(fleet: Fleet) -> float:
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
        f"{timing.primary:.2f} s: {timing.takeover:.2f} s after writable (bound {TAKEOVER_BOUND} s)"
    )
    assert timing.takeover <= TAKEOVER_BOUND, f"{scenario}: {timing} exceeds {TAKEOVER_BOUND} s"
