"""The elector in-process: configuration, election, resignation, step-down, HTTP."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.error
import urllib.request
from typing import Any

import psycopg
import pytest

from tenure import (
    Driver,
    Elector,
    InvalidArgument,
    InvalidConfiguration,
    NotPrimary,
    PrimaryEndpoint,
    PrimaryWatch,
)
from tenure.aio import AsyncElector
from tenure.testing.aio import Flavour
from tenure.testing.history import read_terms

I, T = 0.2, 0.7


class Recorder:
    """Collects an elector's callbacks, in order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, object]] = []
        self.changed = threading.Condition()

    def elected(self, term: int) -> None:
        with self.changed:
            self.events.append(("elected", term))
            self.changed.notify_all()

    def demoted(self, reason: str) -> None:
        with self.changed:
            self.events.append(("demoted", reason))
            self.changed.notify_all()

    def wait_for(self, kind: str, count: int = 1, timeout: float = 10) -> list[object]:
        with self.changed:
            self.changed.wait_for(lambda: len(self.of(kind)) >= count, timeout)
            return self.of(kind)

    def of(self, kind: str) -> list[object]:
        return [value for event, value in self.events if event == kind]


def elector(
    flavour: Flavour, conninfo: str, recorder: Recorder, utype: str = "svc", timeout: float = T
) -> Elector:
    return flavour(
        Elector,
        conninfo,
        utype,
        interval=I,
        timeout=timeout,
        on_elected=recorder.elected,
        on_demoted=recorder.demoted,
    )


def test_bad_configuration_is_refused_before_connecting() -> None:
    with pytest.raises(InvalidConfiguration, match="longer than twice"):
        Elector("host=/nonexistent", "svc", interval=1, timeout=2)
    with pytest.raises(InvalidConfiguration):
        Elector("host=/nonexistent", "svc", interval=0, timeout=2)
    with pytest.raises(InvalidArgument, match="service type"):
        Elector("host=/nonexistent", " ", interval=1, timeout=3)


def test_one_primary_and_resignation_hands_over_before_expiry(
    app_conninfo: str, admin: Any, flavour: Flavour
) -> None:
    # T of 2 s (a safe window of 1.8 s): a stall of the shared machine longer than 0.5 s made
    # the first step down and come back in a new term (CI of d397c04), which is right but not
    # what this test is about; a handover by expiry still comes T - I after the last renewal.
    timeout = 2.0
    first_events, second_events = Recorder(), Recorder()
    first = elector(flavour, app_conninfo, first_events, timeout=timeout).start()
    assert first.wait_until_primary(10)
    second = elector(flavour, app_conninfo, second_events, timeout=timeout)
    with second:
        time.sleep(3 * I)
        assert first.is_primary() and not second.is_primary()
        assert first_events.of("elected") == [1] and second_events.events == []
        first.stop()
        assert first_events.of("demoted") == ["stopped"]
        assert second.wait_until_primary(10)
        assert second.term == 2
    terms = read_terms(admin, "svc")
    assert [t.end_reason for t in terms] == ["resigned", "resigned"]
    # The handover came from the resignation, not from expiry: the first renewed at
    # most I before it resigned, so a term that began less than T - I after the
    # resignation began before the first's entry could have expired.
    handover = (terms[1].started_at - terms[0].ended_at).total_seconds()
    assert 0 < handover < timeout - I


def test_a_failed_renewal_steps_down_at_once_and_it_comes_back(
    app_conninfo: str, admin: Any, flavour: Flavour
) -> None:
    events = Recorder()
    with elector(flavour, app_conninfo, events) as e:
        assert e.wait_until_primary(10)
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name LIKE 'tenure elector%%'"
        )
        demoted = events.wait_for("demoted")
        assert demoted and str(demoted[0]).startswith("heartbeat failed")
        assert e.wait_until_primary(10), "it reconnects and is elected again"
        # The database still named it in term 1, but it had stepped down from term 1:
        # it never takes a term up again (on_elected twice for one term), it resigns it
        # and is elected in a new one.
        assert events.of("elected") == [1, 2]


def test_a_hung_renewal_steps_down_at_t_minus_i(
    app_conninfo: str, admin_conninfo: str, flavour: Flavour
) -> None:
    """A renewal stuck behind a lock: the watchdog demotes at T - I after the last renewal was sent."""
    events = Recorder()
    with elector(flavour, app_conninfo, events) as e, psycopg.connect(admin_conninfo) as blocker:
        assert e.wait_until_primary(10)
        blocker.execute("SELECT * FROM tenure.heartbeat WHERE utype = 'svc' FOR UPDATE")
        blocked_at = time.monotonic()
        demoted = events.wait_for("demoted")
        assert demoted[0] == "no successful renewal within T - I"
        assert not e.is_primary()
        # It cannot have lasted longer than T - I after the last renewal it sent, which
        # was at most one interval (plus scheduling) before the lock was taken.
        assert time.monotonic() - blocked_at < T + I
        blocker.rollback()
        assert e.wait_until_primary(10)


def test_http_endpoint_and_local_watch(app_conninfo: str, flavour: Flavour) -> None:
    events = Recorder()
    with elector(flavour, app_conninfo, events) as e, PrimaryEndpoint(e) as endpoint:
        with urllib.request.urlopen(endpoint.url + "/health/live", timeout=5) as live:
            assert live.status == 200
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(endpoint.url + "/nope", timeout=5)
        assert missing.value.code == 404
        assert e.wait_until_primary(10)
        with urllib.request.urlopen(endpoint.url + "/primary", timeout=5) as answer:
            body = json.loads(answer.read())
        assert answer.status == 200
        assert body["primary"] is True and body["term"] == 1 and body["instance_id"] == str(e.instance_id)
        assert 0 < body["valid_for_s"] <= T - I
        with PrimaryWatch(endpoint.url + "/primary", interval=I / 2, window=T - I) as watch:
            deadline = time.monotonic() + 5
            while not watch.is_primary() and time.monotonic() < deadline:
                time.sleep(0.02)
            assert watch.is_primary()
            e.stop()
            with pytest.raises(urllib.error.HTTPError) as not_primary:
                urllib.request.urlopen(endpoint.url + "/primary", timeout=5)
            assert not_primary.value.code == 503
            assert json.loads(not_primary.value.read())["primary"] is False
            time.sleep(T)
            assert not watch.is_primary(), "a no ends the watch's yes"


def test_watch_without_answers_says_no() -> None:
    watch = PrimaryWatch("http://127.0.0.1:9/primary", interval=0.1, window=0.5)
    assert watch.check() is False
    assert not watch.is_primary()
    with pytest.raises(ValueError):
        PrimaryWatch("http://127.0.0.1:9/primary", interval=1, window=0.5)


# -- asyncio only: acting only while primary ------------------------------------------


def async_elector(conninfo: str, recorder: Recorder | None = None, utype: str = "svc") -> AsyncElector:
    recorder = recorder or Recorder()
    return AsyncElector(
        conninfo, utype, interval=I, timeout=T, on_elected=recorder.elected, on_demoted=recorder.demoted
    )


def test_leading_runs_the_body_while_primary(app_conninfo: str) -> None:
    async def main() -> tuple[int, bool]:
        async with async_elector(app_conninfo) as e, e.leading(timeout=10) as term:
            await asyncio.sleep(3 * T)  # several renewals move the body's deadline along
            return term, e.is_primary()

    assert asyncio.run(main()) == (1, True)


def test_leading_cancels_the_body_when_the_term_is_lost(app_conninfo: str, admin: Any) -> None:
    reached: list[str] = []

    async def main() -> None:
        async with async_elector(app_conninfo) as e, e.leading(timeout=10) as term:
            assert term == 1
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name LIKE 'tenure elector%%'"
            )
            await asyncio.sleep(30)
            reached.append("after the sleep")

    started = time.monotonic()
    with pytest.raises(NotPrimary, match="in term 1: term 1 ended"):
        asyncio.run(main())
    assert reached == [] and time.monotonic() - started < 10


def test_leading_cancels_a_hung_body_at_the_end_of_the_safe_window(
    app_conninfo: str, admin_conninfo: str
) -> None:
    """The renewal hangs behind a row lock: the body is cancelled by the safe window's own
    timer, T - I after the last renewal was sent, not by a later look of the watchdog."""
    timings: dict[str, float] = {}

    async def main() -> None:
        async with async_elector(app_conninfo) as e, e.leading(timeout=10):
            blocker.execute("SELECT * FROM tenure.heartbeat WHERE utype = 'svc' FOR UPDATE")
            timings["blocked"] = time.monotonic()
            try:
                await asyncio.sleep(30)
            finally:
                timings["cancelled"] = time.monotonic()

    with (
        psycopg.connect(admin_conninfo) as blocker,
        pytest.raises(NotPrimary, match="window of term 1 passed"),
    ):
        asyncio.run(main())
    assert timings["cancelled"] - timings["blocked"] < T + I


def test_leading_waits_for_primacy_or_times_out(app_conninfo: str) -> None:
    async def main() -> None:
        async with (
            async_elector(app_conninfo) as first,
            first.leading(timeout=10),
            async_elector(app_conninfo) as second,
        ):
            with pytest.raises(TimeoutError):
                async with second.leading(timeout=3 * I):
                    raise AssertionError("the second is not primary")

    asyncio.run(main())


def test_cancelling_the_enclosing_task_resigns(app_conninfo: str, admin: Any) -> None:
    events = Recorder()

    async def serve(elected: asyncio.Event) -> None:
        async with async_elector(app_conninfo, events) as e:
            assert await e.wait_until_primary(10)
            elected.set()
            await asyncio.sleep(30)

    async def main() -> float:
        elected = asyncio.Event()
        service = asyncio.create_task(serve(elected))
        await elected.wait()
        service.cancel()
        with pytest.raises(asyncio.CancelledError):
            await service
        return time.monotonic()

    cancelled_at = asyncio.run(main())
    assert events.of("demoted") == ["stopped"]
    terms = read_terms(admin, "svc")
    assert [t.end_reason for t in terms] == ["resigned"]
    assert Driver(admin).get_primary("svc") is None, "resigned, not left to expire"
    assert time.monotonic() - cancelled_at < T


def test_async_callbacks_run_on_the_event_loop(app_conninfo: str) -> None:
    async def main() -> list[int]:
        seen: list[int] = []

        async def on_elected(term: int) -> None:
            await asyncio.sleep(0)
            seen.append(term)

        async with AsyncElector(app_conninfo, "svc", interval=I, timeout=T, on_elected=on_elected) as e:
            assert await e.wait_until_primary(10)
            await asyncio.sleep(I)
        return seen

    assert asyncio.run(main()) == [1]


def test_stop_keeps_its_grace_and_the_watchdog_while_the_loop_is_held_up(app_conninfo: str) -> None:
    """The loop thread held up where stop() cannot cut it short (an on_elected callback that
    blocks): stop() still returns within its grace, and the watchdog, which runs until stop()
    returns, steps down at the end of the safe window."""
    slack = 0.25  # scheduling on a loaded two-core machine
    grace = 1.0  # longer than the safe window T - I, so that the window ends during the stop
    release = threading.Event()
    demoted: list[tuple[float, str]] = []
    e = Elector(
        app_conninfo,
        "svc",
        interval=I,
        timeout=T,
        on_elected=lambda term: release.wait(10),
        on_demoted=lambda reason: demoted.append((time.monotonic(), reason)),
    )
    e.start()
    try:
        assert e.wait_until_primary(10)
        held = e.grant_until()
        assert held is not None
        began = time.monotonic()
        e.stop(grace=grace)
        took = time.monotonic() - began
    finally:
        release.set()
    assert took <= grace + slack, f"stop() took {took:.3f} s, over its grace {grace} s + {slack} s"
    assert demoted, "on_demoted never fired"
    at, reason = demoted[0]
    assert reason == "no successful renewal within T - I"
    assert at <= held[1] + slack, f"on_demoted came {at - held[1]:.3f} s after the safe window ended"
