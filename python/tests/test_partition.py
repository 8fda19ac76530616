"""Every area under real network partitions: namespaces + nftables (issue 26).

Eleven clients, each a process in a network namespace of its own (tenure.testing.netns),
reach the test cluster through a veth pair and a forwarder in the server's namespace:
three electors doing fenced writes, two claimers doing claim-fenced writes on six keys,
two task workers (a producer enqueues tasks all along), two submission pools sending
batches of six keys to a simulated ledger (served from the server's namespace), two
replicas writing while active. Then, for each fault kind in turn (a blackhole, 30%
random loss, TCP resets), the primary elector, one claimer, one worker, one pool and
the active replica are cut for ``CUT`` seconds and healed; ``PARTITION_TRIALS`` rounds
(1 by default; 10 for the campaign in docs/operations.md).

Checked from the clients' own logs against the final database and ledger (the single
server's timestamps are comparable): no term or (key, epoch) or (task, epoch) granted
twice, no two instances believing they are primary or hold a key at one instant, every
acknowledged fenced write and outcome kept, late completions refused (each task's
effect applied exactly once), every batch applied once and in per-key order, never two
replicas active (by the server's clock and by their own), every acknowledged replica
write kept; each cut holder stepped down within its safe window of the cut (plus a
slack), and each cut client reached the database again after the heal. The figures
(time to step down after the cut, time to serve again after the heal) are printed, and
written as a Markdown table to ``PARTITION_TABLE`` when set.
"""

from __future__ import annotations

import itertools
import os
import signal
import statistics
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest
from proxy import forwarder
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from tenure import Driver
from tenure.testing import failover, netns
from tenure.testing.child import ChildProcess
from tenure.testing.ledger import LedgerServer, SimulatedLedger, check_applied
from tenure.testing.replicas import Answer, check_replica_records, read_replica_records

APP = Path(__file__).with_name("partition_app.py")
TRIALS = int(os.environ.get("PARTITION_TRIALS", "1"))
FAULTS = ("blackhole", "loss", "reset")
CUT, SETTLE = 4.0, 3.0  # a cut outlasts every safe window; after the heal, time to come back
CLIENTS = {
    "elector": ("e0", "e1", "e2"),
    "claimer": ("c0", "c1"),
    "worker": ("w0", "w1"),
    "pool": ("p0", "p1"),
    "replica": ("r0", "r1"),
}
# Each area's safe window: a holder cut off steps down within it of the cut.
SAFE_WINDOW = {
    "elector": failover.TIMEOUT - failover.INTERVAL,
    "claimer": failover.EXPIRY - failover.CYCLE,
    "worker": failover.LEASE * 2 / 3,
    "pool": 2.0 - 0.5,  # partition_app's pool: expiry 2 s, cycle 0.5 s
    "replica": 1.5,  # partition_app's replica: idle timeout 1.5 s
}
# Scheduling of eleven processes on a loaded two-core machine, and the watchdog's own tick.
SLACK = 0.5
BATCH_KEYS = tuple(f"q{n}" for n in range(6))

pytestmark = pytest.mark.skipif(not netns.available(), reason="needs root, ip and nft (install-deps.sh)")


@dataclass
class Fault:
    kind: str
    trial: int
    victims: dict[str, ChildProcess]  # area -> the client cut
    # per area, when the fault was in place (its nft command returned), and when it was gone
    cut_at: dict[str, float] = field(default_factory=dict)
    healed_at: dict[str, float] = field(default_factory=dict)


@dataclass
class Figures:
    step_down: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    back: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    late: dict[tuple[str, str], list[float]] = field(default_factory=dict)

    def table(self) -> str:
        lines = [
            "| area | fault | cuts | stepped down | step down after the cut: median / max (safe window) "
            "| after the end of the safe window: max | serving again after the heal: median / max |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        for area, kind in itertools.product(CLIENTS, FAULTS):
            downs, backs = self.step_down.get((area, kind), []), self.back.get((area, kind), [])
            cuts = len(backs)
            down = (
                f"{statistics.median(downs):.2f} / {max(downs):.2f} s ({SAFE_WINDOW[area]:.1f} s)"
                if downs
                else "-"
            )
            up = f"{statistics.median(backs):.2f} / {max(backs):.2f} s" if backs else "-"
            lates = self.late.get((area, kind), [])
            late = f"{max(lates):+.3f} s" if lates else "-"
            lines.append(f"| {area} | {kind} | {cuts} | {len(downs)} | {down} | {late} | {up} |")
        return "\n".join(lines)


def setup_database(admin: psycopg.Connection[Any], role: str) -> None:
    keys = ", ".join(f"'{key}'" for key in failover.KEYS)
    admin.execute(
        f"""
        CREATE TABLE fo_writes (instance_id uuid, term bigint, seq int, PRIMARY KEY (instance_id, term, seq));
        CREATE TABLE fo_effects (task_id uuid, epoch bigint);
        CREATE TABLE fo_claim_writes (
            instance_id uuid, key text, epoch bigint, seq int, PRIMARY KEY (instance_id, seq)
        );
        GRANT INSERT, SELECT ON fo_writes, fo_effects, fo_claim_writes TO {role};
        SELECT tenure.claim_register('{failover.KEYSPACE}', ARRAY[{keys}]);
        """
    )
    Driver(admin).batch_configure("pt", mode="serial", implicit_deps=False)


@pytest.fixture
def children() -> Iterator[list[ChildProcess]]:
    started: list[ChildProcess] = []
    try:
        yield started
    finally:
        for child in started:
            child.signal(signal.SIGKILL)
            child.process.wait()


def events(child: ChildProcess, name: str) -> list[dict[str, Any]]:
    return [e for e in child.events() if e["event"] == name]


def wait(condition: Any, timeout: float, what: str) -> None:
    if not failover.wait(condition, timeout):
        raise AssertionError(f"{what} within {timeout} s")


@pytest.mark.timeout(180 + 60 * TRIALS)
def test_every_area_keeps_its_guarantees_under_partitions(
    app_conninfo: str, admin: psycopg.Connection[Any], tmp_path: Path, children: list[ChildProcess]
) -> None:
    driver = Driver(admin)
    setup_database(admin, str(conninfo_to_dict(app_conninfo)["user"]))
    parts = conninfo_to_dict(app_conninfo)
    upstream = (str(parts["host"]), int(str(parts["port"])))
    ledger = SimulatedLedger(keeps_order=False)  # order is the pool's to keep, not the ledger's
    roster = [(area, name) for area, names in CLIENTS.items() for name in names]
    log = failover.ClientLog()
    stopping = threading.Event()
    enqueued: dict[str, list[str]] = {}
    faults: list[Fault] = []

    def enqueue_batches() -> None:
        for n in itertools.count():
            if stopping.wait(0.1):
                return
            key = BATCH_KEYS[n % len(BATCH_KEYS)]
            payload = f"{key}:{n}"
            driver.batch_enqueue_many("pt", [{"key": key, "payload": payload.encode()}])
            enqueued.setdefault(key, []).append(payload)

    with netns.namespaces(len(roster)) as (server, clients), forwarder(server, upstream) as port:
        ledger_server = netns.in_namespace(server, lambda: LedgerServer(ledger, host="0.0.0.0"))
        # A client cut by resets leaves answers unsent (BrokenPipeError): nothing to print.
        ledger_server.http.handle_error = lambda request, client_address: None  # type: ignore[method-assign]
        threading.Thread(target=ledger_server.http.serve_forever, daemon=True).start()
        ledger_port = ledger_server.http.server_address[1]
        by_name: dict[str, tuple[str, ChildProcess, str]] = {}
        for (area, name), client in zip(roster, clients, strict=True):
            conninfo = make_conninfo(app_conninfo, host=client.server_address, port=port)
            ledger_url = f"http://{client.server_address}:{ledger_port}"
            argv = [sys.executable, str(APP), area, name, conninfo, ledger_url]
            child = ChildProcess([*netns.exec_in(client.namespace), *argv], tmp_path / f"{name}.log")
            children.append(child)
            by_name[name] = (area, child, client.namespace)
        producers = [
            threading.Thread(
                target=failover.enqueue_stream,
                args=(app_conninfo, log, stopping),
                kwargs={"batch": 1, "every": 0.7},
                daemon=True,
            ),
            threading.Thread(target=enqueue_batches, daemon=True),
        ]
        try:
            for child in children:
                try:
                    child.wait_for_output('"event": "started"', 30)
                except TimeoutError as error:
                    raise AssertionError(
                        f"{error}\nthe server's namespace:\n{netns.describe(server)}"
                    ) from None
            for thread in producers:
                thread.start()
            wait(lambda: driver.get_primary(failover.UTYPE) is not None, 20, "no primary elected")
            wait(lambda: driver.replica_holder() is not None, 20, "no active replica")
            time.sleep(2.0)
            for trial, kind in itertools.product(range(TRIALS), FAULTS):
                fault = Fault(kind, trial, victims=choose_victims(driver, by_name, trial))
                for area, child in fault.victims.items():
                    netns.cut(namespace_of(by_name, child), kind)
                    fault.cut_at[area] = time.monotonic()
                time.sleep(CUT)
                for area, child in fault.victims.items():
                    netns.heal(namespace_of(by_name, child))
                    fault.healed_at[area] = time.monotonic()
                faults.append(fault)
                time.sleep(SETTLE)
        finally:
            stopping.set()
            for thread in producers:
                if thread.is_alive():
                    thread.join()
        # Everything enqueued gets done by the clients, all connected again.
        wait(lambda: all_tasks_done(admin), 60, "tasks still not done")
        wait(lambda: all_batches_committed(admin), 60, "batches still not committed")
        for child in children:
            child.signal(signal.SIGTERM)
        for child in children:
            child.process.wait(30)
        ledger_server.http.shutdown()
        ledger_server.http.server_close()

    problems = check_everything(admin, log, by_name, ledger, enqueued)
    figures, late = measure(faults, by_name)
    print(f"\n{TRIALS} trial(s) of {', '.join(FAULTS)}, each cut {CUT} s:\n{figures.table()}")
    if os.environ.get("PARTITION_TABLE"):
        Path(os.environ["PARTITION_TABLE"]).write_text(figures.table() + "\n")
    assert not problems + late, "\n".join(problems + late)


def namespace_of(by_name: dict[str, tuple[str, ChildProcess, str]], child: ChildProcess) -> str:
    return next(namespace for _, c, namespace in by_name.values() if c is child)


def choose_victims(
    driver: Driver, by_name: dict[str, tuple[str, ChildProcess, str]], trial: int
) -> dict[str, ChildProcess]:
    """The primary elector and the active replica; a claimer, a worker and a pool in turn."""
    victims: dict[str, ChildProcess] = {}
    primary = driver.get_primary(failover.UTYPE)
    holder = driver.replica_holder()
    for area, child, _ in by_name.values():
        started = events(child, "started")[0]
        primary_id = str(primary.instance_id) if primary is not None else None
        if area == "elector" and started["instance_id"] == primary_id:
            victims[area] = child
        if area == "replica" and holder is not None and started["name"] == holder.replica:
            victims[area] = child
    for area in ("claimer", "worker", "pool"):
        victims[area] = by_name[CLIENTS[area][trial % len(CLIENTS[area])]][1]
    return victims


def all_tasks_done(admin: psycopg.Connection[Any]) -> bool:
    row = admin.execute("SELECT count(*) FILTER (WHERE status <> 'done') FROM tenure.task").fetchone()
    return row is not None and row[0] == 0


def all_batches_committed(admin: psycopg.Connection[Any]) -> bool:
    row = admin.execute("SELECT count(*) FILTER (WHERE status <> 'committed') FROM tenure.batch").fetchone()
    return row is not None and row[0] == 0


def spans(child: ChildProcess, *, end: float) -> list[tuple[float, float, str]]:
    """(from, until, grant) of each grant the child believed it held, from ``gained`` to
    ``lost``: each key of a pool (``what`` lists them), or the single grant of a replica."""
    found: list[tuple[float, float, str]] = []
    since: dict[str, float] = {}
    for event in child.events():
        if event["event"] not in ("gained", "lost"):
            continue
        grants = event["what"] if isinstance(event["what"], list) else ["the grant"]
        for grant in grants:
            if event["event"] == "gained":
                since.setdefault(grant, event["mono"])
            elif grant in since:
                found.append((since.pop(grant), event["mono"], grant))
    return found + [(start, end, grant) for grant, start in since.items()]


def check_everything(
    admin: psycopg.Connection[Any],
    log: failover.ClientLog,
    by_name: dict[str, tuple[str, ChildProcess, str]],
    ledger: SimulatedLedger,
    enqueued: dict[str, list[str]],
) -> list[str]:
    fleet = failover.ClientLog.read(
        line
        for area, child, _ in by_name.values()
        if area in ("elector", "claimer", "worker")
        for line in child.lines()
    )
    fleet.enqueued_tasks(log.enqueued)
    problems = failover.check_records(
        fleet,
        writes=admin.execute("SELECT instance_id, term, seq FROM fo_writes").fetchall(),
        effects=admin.execute("SELECT task_id, epoch FROM fo_effects").fetchall(),
        tasks=admin.execute("SELECT id, status, epoch FROM tenure.task").fetchall(),
        claim_writes=admin.execute("SELECT instance_id, key, epoch, seq FROM fo_claim_writes").fetchall(),
    )
    # the submission pools: every batch once, in per-key order; no key believed held by two pools
    applied = {key: [payload.decode() for payload in payloads] for key, payloads in ledger.history().items()}
    problems += [f"batches: {problem}" for problem in check_applied(enqueued, applied)]
    if not any(enqueued.values()):
        problems.append("batches: none enqueued")
    problems += believed_overlaps("pools", [child for area, child, _ in by_name.values() if area == "pool"])
    # the replicas: by the server's clock, and by their own beliefs; every acknowledged write kept
    replicas = [child for area, child, _ in by_name.values() if area == "replica"]
    answers = [
        Answer(e["mono"], e["mono"], 200, e["request_id"], e["replica"], e["epoch"])
        for child in replicas
        for e in events(child, "replica_write")
    ]
    terms, writes = read_replica_records(admin)
    problems += [f"replicas: {problem}" for problem in check_replica_records(terms, writes, answers)]
    if not answers:
        problems.append("replicas: no acknowledged write")
    problems += believed_overlaps("replicas", replicas)
    return problems


def believed_overlaps(what: str, children: list[ChildProcess]) -> list[str]:
    """Two children that believed at one instant (the monotonic clock they share) that they
    held the same grant."""
    end = time.monotonic()
    held = sorted(
        (start, until, grant, n)
        for n, child in enumerate(children)
        for start, until, grant in spans(child, end=end)
    )
    problems = []
    for (_, until, grant, n), (other_start, _, other_grant, other) in itertools.combinations(held, 2):
        if grant == other_grant and n != other and other_start < until:
            problems.append(
                f"{what}: {grant} believed held by two at once from {other_start:.3f} to {until:.3f}"
            )
    return problems


def measure(
    faults: list[Fault], by_name: dict[str, tuple[str, ChildProcess, str]]
) -> tuple[Figures, list[str]]:
    """The figures of each cut (the holder's step down after the cut and after the end of its
    safe window, the client's first database round trip after the heal); and the violations:
    a loss callback (or a worker's processor still holding its task) later than the end of
    the safe window of the last renewal plus SLACK, anywhere in the run; a holder cut off
    by a blackhole or resets that did not step down before the heal, or later than its
    safe window after the cut plus SLACK; a client that never reached the database again."""
    figures, problems = Figures(), []
    for area, child, _ in by_name.values():
        for event, late in lateness(child.events()):
            if late > SLACK:
                problems.append(
                    f"{area} {child.events()[0]['name']}: {event['event']} {event.get('what', '')} at "
                    f"{event['mono']:.3f}, {late:.3f} s after the end of its safe window (slack {SLACK} s)"
                )
    for fault in faults:
        for area, child in fault.victims.items():
            seen = child.events()
            cut_at, healed_at = fault.cut_at[area], fault.healed_at[area]
            during = [e for e in seen if cut_at <= e["mono"] < healed_at]
            lost = [e for e in during if e["event"] == "lost"]
            if lost:
                key = (area, fault.kind)
                took = lost[0]["mono"] - cut_at
                figures.step_down.setdefault(key, []).append(took)
                if fault.kind != "loss" and took > SAFE_WINDOW[area] + SLACK:
                    problems.append(
                        f"{area} cut by {fault.kind} (trial {fault.trial}) stepped down {took:.3f} s after "
                        f"the cut, over its safe window {SAFE_WINDOW[area]} s + {SLACK} s"
                    )
                figures.late.setdefault(key, []).extend(late for e, late in lateness(seen) if e in lost)
            held = holding(area, seen, cut_at)
            if fault.kind != "loss" and held - {str(e.get("task")) for e in during if e["event"] in ENDS}:
                problems.append(f"{area} cut by {fault.kind} (trial {fault.trial}) held on through the cut")
            back_event = "lease" if area == "worker" else "contact"
            back = [e["mono"] for e in seen if e["event"] == back_event and e["mono"] >= healed_at]
            if back:
                figures.back.setdefault((area, fault.kind), []).append(back[0] - healed_at)
            else:
                problems.append(
                    f"{area} cut by {fault.kind} (trial {fault.trial}) never reached the database again"
                )
    return figures, problems


ENDS = ("lost", "done")  # a worker's hold of a task ends with either


def lateness(seen: list[dict[str, Any]]) -> list[tuple[dict[str, Any], float]]:
    """Each loss callback (a worker's: each end of a hold) with how long after the end of the
    safe window of the last renewal before it (of that task, for a worker) it came."""
    found = []
    window: dict[str, float] = {}
    for e in seen:
        task = str(e.get("task"))
        if e["event"] == "window":
            window[task] = e["until"]
        elif e["event"] in ENDS and task in window:
            found.append((e, e["mono"] - window.pop(task)))
    return found


def holding(area: str, seen: list[dict[str, Any]], moment: float) -> set[str]:
    """What the client held at ``moment``: a worker its tasks in hand (by id), any other
    client ``{"None"}`` while it held its grant (gained, not lost since)."""
    held: set[str] = set()
    for e in seen:
        if e["mono"] > moment:
            break
        what = str(e.get("task"))
        if e["event"] in ("gained", "lease"):
            held.add(what)
        elif e["event"] in ENDS:
            held.discard(what)
    return held
