"""The failover part of ``tenure demo``: the database itself fails over under running services.

A 3-node Patroni cluster (etcd v2, ``synchronous_mode_strict``, the harness of
``tenure.testing.patroni``) holds the database. The fleet of ``tenure.testing.failover``
runs as separate processes through a multi-host conninfo with
``target_session_attrs=read-write``: three electors that make fenced writes while they
believe they are primary, two task workers draining a stream of tasks, two
claimers sharing six keys and making fenced writes on the keys they hold, two
submission pools sending a stream of batches of four keys to a ledger table (each
batch applied under its key's claim), and three active/passive replicas of one
service writing through the replica lock while active, all as a role with
``synchronous_commit = off``. The database switches over, then its primary
node is SIGKILLed, then the next primary node is frozen (SIGSTOP) past Patroni's ttl and
thawed once another node took over. After each, the time until each area served again
once the database was writable is measured from the clients' logs. At the end the
clients' own logs of what they were told are checked against the final database and
the ledger, and a picture shows, on this machine's monotonic clock,
which node was the writable primary, which elector believed it was primary in
which term, and which replica was active in which epoch.
"""

from __future__ import annotations

import contextlib
import itertools
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import psycopg

from tenure.testing import plots, procs
from tenure.testing.child import ChildProcess
from tenure.testing.failover import (
    APP,
    AREAS,
    BATCH_KEYS,
    INTERVAL,
    KEYS,
    QUEUE,
    SETUP,
    TAKEOVER_BOUND,
    TIMEOUT,
    ClientLog,
    Timing,
    check,
    enqueue_batches,
    enqueue_stream,
    wait,
)
from tenure.testing.patroni import BINARIES, PatroniCluster

DB = "tenure_failover"
ELECTORS, WORKERS, CLAIMERS = ("e0", "e1", "e2"), ("w0", "w1"), ("c0", "c1")
QUEUES, REPLICAS = ("q0", "q1"), ("r0", "r1", "r2")
RUN = 4.0  # seconds of work before, between and after the failovers
FROZEN = 3.0  # seconds the frozen primary stays frozen after another took over

COLOURS = {
    "writable primary": "tab:green",
    "unavailable": "tab:red",
    "sync standby": "tab:blue",
    "replica": "lightsteelblue",
    "starting": "khaki",
    "down": "lightgrey",
    "frozen": "tab:purple",
    "believed primary": "tab:orange",
    "active replica": "tab:cyan",
}


@dataclass(frozen=True)
class Sample:
    """What the nodes were at one instant (monotonic): a state of COLOURS per node, and the
    timeline of the writable primary."""

    at: float
    states: dict[str, str]
    timeline: int | None


class NodeWatch:
    """Samples Patroni's view of the nodes, with a write probe of its leader, in a thread."""

    def __init__(self, cluster: PatroniCluster, every: float = 0.25) -> None:
        self.cluster = cluster
        self.every = every
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="node-watch", daemon=True)

    def start(self) -> NodeWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.samples.append(self.sample())

    def sample(self) -> Sample:
        at = time.monotonic()
        members = {member["name"]: member for member in self.cluster.members()}
        states, timeline = {}, None
        for name, node in self.cluster.nodes.items():
            member = members.get(name, {})
            role = member.get("role")
            if node.frozen:
                states[name] = "frozen"
            elif not node.running() or not member:
                states[name] = "down"
            elif role == "leader":
                writable = self.cluster.write_probe(name, timeout=1.0)
                states[name] = "writable primary" if writable else "unavailable"
                timeline = member.get("timeline") if writable else None
            elif member.get("state") != "running":
                states[name] = "starting"
            else:
                states[name] = "sync standby" if role == "sync_standby" else "replica"
        return Sample(at, states, timeline)

    def sampled_after(self, moment: float) -> bool:
        return bool(self.samples) and self.samples[-1].at > moment

    def outage(self, since: float, until: float) -> tuple[float, float] | None:
        """The first stretch that began between since and until in which no sample saw a
        writable primary: (its first sample, the next sample that saw one again)."""
        start = None
        for sample in list(self.samples):
            writable = "writable primary" in sample.states.values()
            if start is None and not writable and since <= sample.at <= until:
                start = sample.at
            elif start is not None and writable:
                return start, sample.at
        return None


class FleetProcess(ChildProcess):
    """One elector, task worker, claimer, submission pool or replica of the fleet
    (``python -m tenure.testing.failover``)."""

    def __init__(self, conninfo: str, role: str, name: str, workdir: Path) -> None:
        super().__init__(
            [sys.executable, "-m", "tenure.testing.failover", "--db", conninfo, f"--{role}", name],
            workdir / f"failover-{name}.log",
        )
        self.name = name


@dataclass(frozen=True)
class Failover:
    label: str
    at: float  # monotonic
    timing: Timing


def run_failover_demo(*, workdir: Path, out: IO[str] | None = None) -> bool:
    """Run the part; True when every check passed (or when it is skipped: Patroni or etcd
    missing, and CI not set)."""
    out = out or sys.stdout
    print("\ntenure demo, the database fails over under the running services:", file=out)
    missing = procs.missing_programs(*BINARIES)
    if missing:
        verdict = "FAILED (CI is set, so a missing install is a failure)" if procs.under_ci() else "skipped"
        print(f"  {verdict}: {', '.join(missing)} not installed (make deps installs them)", file=out)
        return not procs.under_ci()
    workdir.chmod(0o755)  # the cluster's scratch directory goes in it, and runs as postgres
    with PatroniCluster(parent=workdir) as cluster:
        try:
            return _run(cluster, workdir, out)
        finally:
            for label, path in cluster.log_paths().items():
                with contextlib.suppress(OSError):
                    shutil.copy(path, workdir / f"failover-{label.replace(' ', '-')}.log")


def _run(cluster: PatroniCluster, workdir: Path, out: IO[str]) -> bool:
    print(
        f"  a 3-node Patroni cluster (synchronous_mode_strict, ttl {cluster.ttl} s) is up in "
        f"{cluster.startup_seconds:.1f} s: {cluster.leader()} leads, {cluster.sync_standby()} is its sync "
        "standby",
        file=out,
    )
    cluster.deploy_tenure(DB)
    cluster.psql(None, SETUP, dbname=DB)
    conninfo = cluster.conninfo(DB, user=APP)
    print(
        f"  processes: electors {', '.join(ELECTORS)} (I = {INTERVAL} s, T = {TIMEOUT} s) making "
        f"fenced writes while primary, task workers {', '.join(WORKERS)} draining a stream of tasks, "
        f"claimers {', '.join(CLAIMERS)} sharing {len(KEYS)} keys with fenced writes on those they hold, "
        f"submission pools {', '.join(QUEUES)} sending batches of {len(BATCH_KEYS)} keys to a ledger "
        f"table, replicas {', '.join(REPLICAS)} of one service writing while active; "
        f"as {APP}, whose synchronous_commit is off, through every node with target_session_attrs=read-write",
        file=out,
    )
    watch = NodeWatch(cluster).start()
    producer_log, stopping = ClientLog(), threading.Event()
    producers = [
        threading.Thread(
            target=enqueue_stream, args=(conninfo, producer_log, stopping), kwargs={"batch": 10, "every": 0.5}
        ),
        threading.Thread(
            target=enqueue_batches, args=(conninfo, producer_log, stopping), kwargs={"every": 0.2}
        ),
    ]
    fleet = [FleetProcess(conninfo, "elector", name, workdir) for name in ELECTORS]
    fleet += [FleetProcess(conninfo, "worker", name, workdir) for name in WORKERS]
    fleet += [FleetProcess(conninfo, "claimer", name, workdir) for name in CLAIMERS]
    fleet += [FleetProcess(conninfo, "queue", name, workdir) for name in QUEUES]
    fleet += [FleetProcess(conninfo, "replica", name, workdir) for name in REPLICAS]

    def client_log() -> ClientLog:
        log = ClientLog.read(line for process in fleet for line in process.lines())
        log.enqueued_tasks(producer_log.enqueued)
        log.enqueued_batch_ids(producer_log.enqueued_batches)
        return log

    failovers: list[Failover] = []

    def fail_over(fault: Callable[[str], tuple[str, float]]) -> None:
        """fault(the leader) returns a label and when the database was writable again."""
        at = time.monotonic()
        label, returned = fault(cluster.wait_ready(60))
        wait(lambda: watch.sampled_after(returned + watch.every), 5)  # it saw the new primary
        outage = watch.outage(at, returned)
        writable = min(returned, outage[1]) if outage else returned
        wait(lambda: client_log().primary_at(at) is not None, 30)
        elected = client_log().primary_at(at)
        if elected is None:
            print(f"  {label}: no primary within 30 s", file=out)
            return
        time.sleep(RUN)
        wait(lambda: all(client_log().served_at(area, writable) is not None for area in AREAS), 30)
        timing = Timing.measure(client_log(), fault=at, writable=writable, primary=elected[0])
        failovers.append(Failover(label, at, timing))
        print(
            f"  {label}: no writable primary for {outage[1] - outage[0] if outage else 0.0:.1f} s (sampled "
            f"every {watch.every} s), writable again {timing.writable:.1f} s after the fault; a primary "
            f"(term {elected[1]}) {timing.takeover:.2f} s after that (bound {TAKEOVER_BOUND:.0f} s)\n"
            f"    serving again after writable: {timing.serving()}",
            file=out,
        )

    def switchover(old: str) -> tuple[str, float]:
        new = cluster.switchover(cluster.sync_standby())
        return f"switchover {old} -> {new}", time.monotonic()

    def kill(old: str) -> tuple[str, float]:
        cluster.kill_node(old)  # Patroni, postgres and every backend at once
        new = cluster.wait_writable(90, exclude=(old,))
        writable = time.monotonic()
        cluster.start_node(old)  # it rejoins as a replica
        return f"SIGKILL {old} -> {new}", writable

    def freeze(old: str) -> tuple[str, float]:
        with cluster.frozen(old):  # SIGSTOP: its clients' connections stay open, blocked
            new = cluster.wait_writable(90, exclude=(old,))
            writable = time.monotonic()
            time.sleep(FROZEN)  # thawed, Patroni demotes it and it rejoins as a replica
        return f"SIGSTOP {old} -> {new}", writable

    try:
        started = time.monotonic()
        for process in fleet:
            process.wait_for_output("started", 30)
        for producer in producers:
            producer.start()
        wait(lambda: client_log().primary_at(started) is not None, 30)
        first = client_log().primary_at(started)
        print(f"  term {first[1] if first else '?'} granted; running for {RUN:.0f} s", file=out)
        time.sleep(RUN)
        for fault in (switchover, kill, freeze):
            fail_over(fault)
        stopping.set()
        for producer in producers:
            producer.join()
        with cluster.connect(None, DB) as admin:
            drained = wait(
                lambda: (
                    admin.execute("SELECT count(*) FROM tenure.task WHERE status <> 'done'").fetchone()
                    == (0,)
                ),
                60,
            )
            committed = wait(
                lambda: (
                    admin.execute(
                        "SELECT count(*) FROM tenure.batch WHERE keyspace = %s AND status <> 'committed'",
                        (QUEUE,),
                    ).fetchone()
                    == (0,)
                ),
                60,
            )
        print(
            f"  {len(producer_log.enqueued)} tasks enqueued, {'all' if drained else 'NOT all'} done; "
            f"{len(producer_log.enqueued_batches)} batches enqueued, {'all' if committed else 'NOT all'} "
            "committed",
            file=out,
        )
    finally:
        stopping.set()
        for producer in producers:
            if producer.is_alive():
                producer.join()
        for process in fleet:
            process.signal(signal.SIGTERM)  # all at once: each takes its grace
        for process in fleet:
            process.stop()
        watch.stop()
    ended = time.monotonic()
    log = client_log()
    with psycopg.connect(cluster.conninfo(DB), autocommit=True) as admin:
        problems = check(log, admin)
    problems += [
        f"{f.label}: a primary {f.timing.takeover:.2f} s after writable"
        for f in failovers
        if f.timing.takeover > TAKEOVER_BOUND
    ]
    problems += [
        f"{f.label}: late to serve again after writable: {f.timing.serving()}"
        for f in failovers
        if f.timing.late_areas()
    ]
    if len(failovers) < 3:
        problems.append("not every failover gave a new primary")
    for problem in problems:
        print(f"  VIOLATION: {problem}", file=out)
    if not problems:
        terms = ", ".join(str(term) for *_, term in log.primacy())
        print(
            f"checked from the clients' own logs against the final database: {len(log.elected)} grants "
            f"of primacy (terms {terms}), "
            f"none granted twice, never two believed primaries at once; {len(log.leases)} leases, no "
            f"(task, epoch) twice; all {len(log.writes)} acknowledged fenced writes and "
            f"all {len(log.outcomes)} acknowledged task outcomes are there; every task done exactly once; "
            f"{len(log.claims)} claims of keys, no key held by two claimers at once nor granted twice in "
            f"one epoch; all {len(log.claim_writes)} acknowledged claim-fenced writes are there; "
            f"all {len(log.enqueued_batches)} acknowledged batches applied once and in order "
            f"({len(log.batches)} acknowledged applications, all there); "
            f"{len(log.replicas)} active spans of replicas (epochs "
            f"{', '.join(str(epoch) for epoch in sorted({e for _, e, *_ in log.replicas}))}), never two "
            f"active at once; all {len(log.replica_writes)} acknowledged replica writes are there",
            file=out,
        )
    picture = _picture(workdir / "failover.png", watch, log, failovers, (started, ended), cluster.ttl, out)
    if picture is not None:
        print(f"picture: {picture}", file=out)
    print(f"client and cluster logs: {workdir}/failover-*.log", file=out)
    return not problems


def _picture(
    path: Path,
    watch: NodeWatch,
    log: ClientLog,
    failovers: list[Failover],
    window: tuple[float, float],
    ttl: int,
    out: IO[str],
) -> Path | None:
    """The picture: a band for the database, one per node, one per elector, one per replica."""
    started, ended = window
    spans = []
    samples = [s for s in watch.samples if started <= s.at <= ended]
    for sample, after in itertools.pairwise(samples):
        start, end = sample.at - started, after.at - started
        writable = [name for name, state in sample.states.items() if state == "writable primary"]
        database = "writable primary" if writable else "unavailable"
        spans.append(("database", start, end, f"timeline {sample.timeline}" if writable else "", database))
        for name, state in sample.states.items():
            spans.append((name, start, end, "", state))
    spans = _merged(spans)
    for begin, end, name, term in log.primacy(until=ended):
        spans.append((name, begin - started, min(end, ended) - started, f"term {term}", "believed primary"))
    for name, epoch, begin, end in log.replicas:
        replica = name.split(":")[0]  # the process's replica, whatever its pid
        spans.append(
            (replica, begin - started, min(end, ended) - started, f"epoch {epoch}", "active replica")
        )
    return plots.bands(
        path,
        title=f"the database fails over under the services (Patroni ttl {ttl} s; "
        f"electors I = {INTERVAL} s, T = {TIMEOUT} s)",
        rows=[
            "database",
            *sorted({row for row, *_ in spans} - {"database", *ELECTORS, *REPLICAS}),
            *ELECTORS,
            *REPLICAS,
        ],
        spans=spans,
        colours=COLOURS,
        events=[(f.label.split(" (")[0], f.at - started) for f in failovers],
        xlabel="seconds since the services started (this machine's monotonic clock)",
        out=out,
    )


def _merged(spans: list[tuple[str, float, float, str, str]]) -> list[tuple[str, float, float, str, str]]:
    """Consecutive spans of one row with the same label and state, as one."""
    merged: dict[str, list[tuple[str, float, float, str, str]]] = {}
    for row, start, end, label, state in spans:
        runs = merged.setdefault(row, [])
        if runs and runs[-1][3:] == (label, state) and abs(runs[-1][2] - start) < 1e-9:
            runs[-1] = (row, runs[-1][1], end, label, state)
        else:
            runs.append((row, start, end, label, state))
    return [span for runs in merged.values() for span in runs]
