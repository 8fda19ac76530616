"""Election with real processes, real SIGKILL, SIGSTOP and pg_terminate_backend, checked
from the database's records, for threaded services and for asyncio ones.

Three demo service instances stand for type A and two for type B. Each does fenced
"primary work" while it believes it is primary. The primary of A is killed; the
primary of B is frozen for longer than T, then resumed; the connections of A's new
primary are terminated by the server. Afterwards the history of
terms and of fenced writes, by the server's clock, must show: never two holders of
a type at one instant, terms that only grow, every write inside its writer's term.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg
import pytest

from tenure.driver import Driver
from tenure.errors import NotPrimary
from tenure.testing.database import server_now
from tenure.testing.heartbeat import WORK, ServiceProcess, read_writes, wait_for_primary
from tenure.testing.history import check_terms, check_writes, read_terms

I, T = 0.3, 1.0
# Scheduling on a loaded two-core machine adds to the protocol's bound: the
# follower's poll and the database round trip are not instantaneous.
SLACK = 0.25


@pytest.fixture(params=["sync", "async"])
def services(
    app_conninfo: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[dict[str, list[ServiceProcess]]]:
    """The services of both types, all threaded (Elector) or all asyncio (AsyncElector)."""
    spawned = {
        utype: [
            ServiceProcess.spawn(
                app_conninfo,
                utype,
                tmp_path / f"{utype}-{n}.log",
                interval=I,
                timeout=T,
                use_async=request.param == "async",
            )
            for n in range(count)
        ]
        for utype, count in (("A", 3), ("B", 2))
    }
    try:
        yield spawned
    finally:
        for group in spawned.values():
            for service in group:
                service.stop()


def began(event: dict[str, Any]) -> float:
    """When the event's write began (its transaction), else when it was reported."""
    return float(event.get("began", event["mono"]))


def believed_primary(service: ServiceProcess) -> bool:
    state = False
    for event in service.events():
        if event["event"] == "elected":
            state = True
        elif event["event"] in ("demoted", "resigned"):
            state = False
    return state


def test_kill_and_freeze_primaries(
    services: dict[str, list[ServiceProcess]], admin: Any, app_conninfo: str
) -> None:
    driver = Driver(admin)
    ids: dict[UUID, ServiceProcess] = {
        service.instance_id(): service for group in services.values() for service in group
    }
    primary_a, _ = wait_for_primary(driver, "A")
    primary_b, term_b = wait_for_primary(driver, "B")
    time.sleep(3 * I)

    # Exactly one primary per type, in the database and in the instances' own view.
    for utype, group in services.items():
        assert sum(believed_primary(s) for s in group) == 1, f"one instance of {utype} acts as primary"
    assert believed_primary(ids[primary_a]) and believed_primary(ids[primary_b])

    # SIGKILL the primary of A: a new one within T + I of the kill.
    killed_at = server_now(admin)
    ids[primary_a].signal(signal.SIGKILL)
    successor_a, term_a = wait_for_primary(driver, "A", other_than=primary_a)
    started = next(t.started_at for t in read_terms(admin, "A") if t.term == term_a)
    takeover = (started - killed_at).total_seconds()
    assert takeover <= T + I + SLACK, f"takeover of A took {takeover:.3f} s, bound T + I = {T + I} s"

    # SIGSTOP the primary of B for longer than T, then SIGCONT.
    frozen = ids[primary_b]
    frozen.signal(signal.SIGSTOP)
    stopped_at = time.monotonic()
    successor_b, new_term_b = wait_for_primary(driver, "B", other_than=primary_b)
    assert new_term_b == term_b + 1
    time.sleep(max(0.0, stopped_at + T + 0.5 - time.monotonic()))
    resumed_at = time.monotonic()
    frozen.signal(signal.SIGCONT)
    time.sleep(4 * I)

    # The frozen one noticed it is no longer primary before it began any primary work, or
    # even tried to (a write the fence refused). (A write that committed before the freeze
    # may be reported after the demotion: its event says when it began.)
    after = sorted(
        (
            e
            for e in frozen.events()
            if e["event"] in ("work", "refused", "demoted") and began(e) >= resumed_at
        ),
        key=began,
    )
    assert [e["event"] for e in after] == ["demoted"], f"events after SIGCONT: {after}"
    assert not believed_primary(frozen)
    assert driver.check_primary(successor_b, "B") and not driver.check_primary(primary_b, "B")
    # A write the frozen one may still have on its way in its old term (it read the term,
    # then froze): the fence refuses it, whatever the runtime believes. Were it let
    # through, check_writes below would also find it outside its term.
    with (
        psycopg.connect(app_conninfo, autocommit=True) as stale,
        pytest.raises(NotPrimary),
        stale.transaction(),
    ):
        Driver(stale).heartbeat_fence(primary_b, "B", term_b)
        stale.execute(WORK, ("B", primary_b, term_b))
    for utype, group in services.items():
        alive = [s for s in group if s.process.poll() is None]
        assert sum(believed_primary(s) for s in alive) == 1, f"still one primary of {utype}"

    # pg_terminate_backend of every connection of A's primary: it steps down at once (its
    # cycle fails) and A has one primary again, in a later term.
    name = next(e["name"] for e in ids[successor_a].events() if e["event"] == "started")
    admin.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE %s",
        (f"tenure % {name}",),
    )
    ids[successor_a].wait_for_output('"event": "demoted".*"reason": "heartbeat failed')
    end = time.monotonic() + 30
    while (entry := driver.get_primary("A")) is None or entry.term <= term_a:
        assert time.monotonic() < end, "A has a primary in a new term"
        time.sleep(0.05)
    time.sleep(3 * I)
    alive_a = [s for s in services["A"] if s.process.poll() is None]
    assert sum(believed_primary(s) for s in alive_a) == 1, "one primary of A after the termination"

    for group in services.values():
        for service in group:
            service.stop()

    terms = read_terms(admin)
    writes = read_writes(admin)
    assert check_terms(terms) == []
    assert check_writes(terms, writes) == []
    assert {w.utype for w in writes} == {"A", "B"}
    assert any(w.instance_id == successor_a for w in writes)
    by_type = {utype: [t.term for t in terms if t.utype == utype] for utype in ("A", "B")}
    assert by_type["A"] == sorted(by_type["A"]) and by_type["B"] == sorted(by_type["B"])
    # The frozen one wrote in its own term; check_writes showed none of it landed
    # after that term ended. (It may lead again once the others shut down.)
    assert any(w.instance_id == primary_b and w.term == term_b for w in writes)
