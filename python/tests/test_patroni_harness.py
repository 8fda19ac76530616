"""Smoke tests of the Patroni harness (tenure.testing.patroni): one 3-node cluster for the
module, with n3's clock 2 s ahead; each fault once, with the seconds it took printed
(``pytest -s`` shows them)."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from conftest import harness_logs

from tenure.bench.sync import sync_bench
from tenure.driver import BatchGrant
from tenure.testing import procs
from tenure.testing.failover import ClientLog, FencedLedger
from tenure.testing.patroni import PatroniCluster
from tenure.testing.pgbouncer import PgBouncer

pytestmark = pytest.mark.usefixtures("needs_patroni")


@pytest.fixture(scope="module")
def cluster(request: pytest.FixtureRequest) -> Iterator[PatroniCluster]:
    with PatroniCluster(clock_offsets={"n3": "+2s"}) as cluster:
        print(f"\nstartup: {cluster.startup_seconds:.1f} s")
        with harness_logs(request, cluster.log_tails, "patroni logs"):
            yield cluster
    assert not cluster.directory.exists()
    assert not procs.processes_of(cluster.directory)


def poll(condition: object, timeout: float = 30.0) -> None:
    assert callable(condition)
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.1)


def test_starts_with_a_streaming_sync_standby(cluster: PatroniCluster) -> None:
    leader = cluster.leader()
    sync = cluster.sync_standby()
    assert leader is not None and sync is not None and sync != leader
    assert cluster.replication(leader)[sync] == ("streaming", "sync")
    assert {cluster.timeline(name) for name in cluster.nodes} == {1}


def test_a_row_written_on_the_leader_is_on_the_standbys(cluster: PatroniCluster) -> None:
    cluster.psql(None, "CREATE TABLE smoke (id int PRIMARY KEY, note text)")
    cluster.psql(None, "INSERT INTO smoke VALUES (1, 'written on the leader')")
    with psycopg.connect(cluster.conninfo()) as connection:
        assert connection.execute("SELECT note FROM smoke").fetchall() == [("written on the leader",)]
    for name in cluster.nodes:
        poll(lambda name=name: cluster.psql(name, "SELECT count(*) FROM smoke") == [(1,)], timeout=10)


def test_clock_offset_shifts_now_on_that_node_only(cluster: PatroniCluster) -> None:
    def skew(name: str) -> float:
        before = time.time()
        (server,) = cluster.psql(name, "SELECT extract(epoch FROM clock_timestamp())::float8")[0]
        return float(server) - (before + time.time()) / 2

    assert 1.0 < skew("n3") < 3.0
    assert abs(skew("n1")) < 1.0


def test_deploy_tenure_into_the_leader(cluster: PatroniCluster) -> None:
    conninfo = cluster.deploy_tenure("tenure_smoke")
    cluster.psql(None, "CREATE ROLE smoke_worker LOGIN IN ROLE tenure_worker", dbname="tenure_smoke")
    cluster.psql(None, "ALTER ROLE smoke_worker SET synchronous_commit = off", dbname="tenure_smoke")
    with psycopg.connect(conninfo) as connection:
        assert connection.execute(
            "SELECT count(*) FROM pg_namespace WHERE nspname = 'tenure'"
        ).fetchone() == (1,)
    with psycopg.connect(cluster.conninfo("tenure_smoke", user="smoke_worker")) as connection:
        assert connection.execute("SHOW synchronous_commit").fetchone() == ("off",)


@pytest.mark.timeout(120)
def test_bench_sync_section_prints_its_rows(
    cluster: PatroniCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str], peers_python: str
) -> None:
    """``tenure bench --sections sync`` at a tiny size, on this module's cluster (the section
    starts its own, durable, two-node one in make bench): pgqueuer and tenure drain on the
    primary, and the table shows each row's ratio to pgqueuer's best. About 16 s at a load
    of 6 on 2 cores (deploying tenure again would add 13)."""
    python = peers_python
    began = time.monotonic()
    rows = sync_bench(
        jobs=200, python=python, workdir=tmp_path, batches=[100], tenure_configs=[(1, 32)],
        min_window=0.3, cluster=cluster,
        dbname="tenure_smoke",  # deployed by the test above (or by the section)
    )  # fmt: skip
    print(f"sync section: {time.monotonic() - began:.1f} s")
    output = capsys.readouterr().out
    assert [(r.system, r.config) for r in rows] == [
        ("pgqueuer-asyncpg", "2 processes x batch 100"),
        ("tenure", "1 processes x concurrency 32"),
        ("tenure-async", "1 processes x concurrency 32"),
    ], output
    assert all(r.rate > 0 for r in rows), output
    # every commit of a no-op job carries at least that job; pgqueuer's batches carry more
    assert all(r.per_commit is not None and r.per_commit >= 1 for r in rows), output
    # Each run's steady window lasted min_window at least: 200 jobs drain in less, so a run
    # grew its backlog first and printed it (the window is 0.8 x jobs / rate).
    assert all(0.8 * r.runs[0].jobs / r.rate >= 0.3 for r in rows), output
    assert "jobs left a steady window of" in output and any(r.runs[0].jobs > 200 for r in rows), output
    assert "(streaming, sync)" in output, output
    _, _, table = output.partition("on the synchronous standby")
    ratios = re.findall(r"^ {4}(\S+) +\d+ processes x \S+ \d+ +\d+ +(\d+\.\d\d) ", table, re.MULTILINE)
    assert [system for system, _ in ratios] == ["pgqueuer-asyncpg", "tenure", "tenure-async"], output
    assert ratios[0][1] == "1.00", output
    assert "headline, synchronous standby" in output, output


@pytest.mark.usefixtures("needs_pgbouncer")
def test_pgbouncer_in_front_of_the_leader(cluster: PatroniCluster) -> None:
    leader = cluster.leader()
    assert leader is not None
    with (
        PgBouncer(upstream_port=cluster.port(leader)) as bouncer,
        psycopg.connect(bouncer.conninfo("postgres"), prepare_threshold=None, autocommit=True) as connection,
    ):
        assert connection.execute("SELECT pg_is_in_recovery()").fetchone() == (False,)


def test_stalled_walreceiver_holds_commits_on_the_leader(cluster: PatroniCluster) -> None:
    leader, sync = cluster.leader(), cluster.sync_standby()
    assert leader is not None and sync is not None
    cluster.stall_walreceiver(sync)
    try:
        assert not cluster.write_probe(leader, timeout=2.0)
    finally:
        cluster.resume_walreceiver(sync)
    assert cluster.write_probe(leader, timeout=10.0)


def test_switchover_moves_the_leader_and_the_timeline_grows(cluster: PatroniCluster) -> None:
    old = cluster.wait_ready()
    timeline = cluster.timeline(old)
    began = time.monotonic()
    new = cluster.switchover()
    print(f"\nswitchover {old} -> {new}: writable after {time.monotonic() - began:.1f} s")
    assert new != old
    assert cluster.timeline(new) > timeline
    cluster.wait_ready(90)


def test_sigkill_of_the_leader_gives_a_new_writable_leader(cluster: PatroniCluster) -> None:
    old = cluster.wait_ready()
    timeline = cluster.timeline(old)
    cluster.kill_node(old)
    began = time.monotonic()
    new = cluster.wait_writable(90, exclude=(old,))
    print(f"\nSIGKILL of {old}: {new} writable after {time.monotonic() - began:.1f} s")
    assert cluster.timeline(new) > timeline
    cluster.start_node(old)
    began = time.monotonic()
    cluster.wait_ready(120)
    print(f"{old} back and streaming after {time.monotonic() - began:.1f} s")


def test_a_replica_that_cannot_start_is_reinitialized(cluster: PatroniCluster) -> None:
    def member(name: str) -> dict[str, object]:
        return next((m for m in cluster.members() if m["name"] == name), {})

    leader = cluster.wait_ready()
    replica = next(name for name in cluster.nodes if name not in (leader, cluster.sync_standby()))
    cluster.kill_node(replica)
    (cluster.nodes[replica].data_dir / "postgresql.auto.conf").write_text("not a setting\n")
    cluster.start_node(replica)
    cluster.reinit_after = 3.0
    try:
        poll(lambda: member(replica).get("state") == "start failed")
        cluster.wait_ready(120)
    finally:
        cluster.reinit_after = 30.0
    assert cluster.reinitialized == [replica]
    assert cluster.psql(replica, "SELECT pg_is_in_recovery()") == [(True,)]


LEDGER = """
CREATE TABLE fo_ledger_key (key text PRIMARY KEY, applied int NOT NULL DEFAULT 0);
CREATE TABLE fo_ledger (batch_id uuid, key text, seq int, position int);
INSERT INTO fo_ledger_key VALUES ('k', 0);
-- as the failover fleet's role: commits not waiting for the synchronous standby
CREATE ROLE fo_probe LOGIN;
ALTER ROLE fo_probe SET synchronous_commit = off;
GRANT SELECT, UPDATE ON fo_ledger_key TO fo_probe;
GRANT SELECT ON fo_ledger TO fo_probe;
"""


def deposed_primary_gives_the_ledger_no_answer(cluster: PatroniCluster, old: str, new: str) -> None:
    """The failover ledger's status, asked of the old primary thawed before its Patroni
    demotes it, gives no answer; its data would say a batch applied on the new one never
    arrived (and the pool would send it again: the failover demo saw it applied twice)."""
    batch = BatchGrant(uuid.uuid4(), "k", 1, b"", [], 1, 1, 1)
    cluster.psql(new, "INSERT INTO fo_ledger VALUES (%s, 'k', 1, 1)", (batch.id,))
    cluster.thaw_postgres(old)
    stale = "SELECT pg_is_in_recovery(), count(*) FROM fo_ledger WHERE batch_id = %s"
    assert cluster.psql(old, stale, (batch.id,)) == [(False, 0)], "a writable primary that missed the batch"
    for name, answer in ((old, None), (new, "committed")):
        ledger = FencedLedger(cluster.node_conninfo(name, user="fo_probe"), ClientLog(), f"probe of {name}")
        try:
            if answer is None:
                with pytest.raises(ConnectionError, match="did not answer"):
                    ledger.status(batch)
            else:
                assert ledger.status(batch) == answer
        finally:
            ledger.close()


def test_frozen_leader_is_replaced_while_frozen(cluster: PatroniCluster) -> None:
    old = cluster.wait_ready()
    cluster.psql(None, LEDGER)
    cluster.freeze_node(old)
    try:
        began = time.monotonic()
        new = cluster.wait_writable(90, exclude=(old,))
        print(f"\nSIGSTOP of {old}: {new} writable after {time.monotonic() - began:.1f} s")
        assert cluster.nodes[old].frozen
        poll(lambda: cluster.leader() == new, timeout=30)
        deposed_primary_gives_the_ledger_no_answer(cluster, old, new)
    finally:
        cluster.thaw_node(old)
    began = time.monotonic()
    cluster.wait_ready(120)
    print(f"{old} thawed, demoted and streaming after {time.monotonic() - began:.1f} s")
    assert cluster.psql(old, "SELECT pg_is_in_recovery()") == [(True,)]
