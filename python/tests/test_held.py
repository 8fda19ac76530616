"""What this instance holds, for a program that runs its own loop: ``GET /held`` of
``tenure elect --http`` and ``tenure claim run --http``, with real processes against a
real PostgreSQL. A long-poll (``?wait=&version=``) returns at once on a change (a gain,
a loss through a killed connection, keys taken over by a new instance), holds for its
wait while nothing changes, never past the safe window of what it reported, and bad
parameters are refused with 400 and a message naming them."""

from __future__ import annotations

import json
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tenure import Driver
from tenure.http.held import HeldVersions
from tenure.testing.child import ChildProcess

TENURE = [sys.executable, "-m", "tenure"]
LONG = 60.0  # the longest wait a long-poll may ask for


class Shim(ChildProcess):
    """A ``tenure`` command with an endpoint on a free port; ``url`` is where it serves."""

    def __init__(self, args: list[str], log_path: Path) -> None:
        super().__init__([*TENURE, *args, "--http", "127.0.0.1:0"], log_path)
        self.url = self.wait_for_output(r"serving (http://127\.0\.0\.1:\d+)/").group(1)


class Answer:
    def __init__(self, status: int, body: dict[str, Any], elapsed: float) -> None:
        self.status, self.body, self.elapsed = status, body, elapsed

    @property
    def version(self) -> int:
        return int(self.body["version"])


def get(url: str) -> Answer:
    started = time.monotonic()
    try:
        with urllib.request.urlopen(url, timeout=LONG + 30) as response:
            return Answer(response.status, json.loads(response.read()), time.monotonic() - started)
    except urllib.error.HTTPError as error:
        return Answer(error.code, json.loads(error.read()), time.monotonic() - started)


def poll(url: str, version: int, wait: float = LONG) -> Answer:
    return get(f"{url}/held?wait={wait}&version={version}")


def until(url: str, condition: Any, *, within: float = 60.0) -> Answer:
    """Long-poll ``url`` until its answer satisfies ``condition``, as a program's loop would."""
    end = time.monotonic() + within
    answer = get(f"{url}/held")
    while not condition(answer.body):
        assert time.monotonic() < end, f"{url}/held never satisfied the condition: last {answer.body}"
        answer = poll(url, answer.version, wait=min(LONG, max(0.1, end - time.monotonic())))
    return answer


class Pending:
    """A long-poll on a thread of its own."""

    def __init__(self, url: str, version: int) -> None:
        self.answer: Answer | None = None
        self._thread = threading.Thread(target=self._run, args=(url, version), daemon=True)
        self._thread.start()

    def _run(self, url: str, version: int) -> None:
        self.answer = poll(url, version)

    def waiting(self) -> bool:
        return self._thread.is_alive()

    def result(self) -> Answer:
        self._thread.join(LONG + 60)
        assert self.answer is not None, "the long-poll got no answer"
        return self.answer


@pytest.fixture
def shims() -> Iterator[list[Shim]]:
    started: list[Shim] = []
    try:
        yield started
    finally:
        for shim in started:
            shim.stop()


def terminate(admin: psycopg.Connection[Any], application_name: str) -> int:
    row = admin.execute(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name LIKE %s",
        (application_name,),
    ).fetchone()
    return int(row[0]) if row else 0


def elect(app_conninfo: str, name: str, *, timeout: float) -> list[str]:
    return [
        "elect",
        *("--db", app_conninfo, "--type", "held", "--name", name),
        *("--interval", "0.5", "--timeout", str(timeout)),
    ]


def test_elect_long_poll_answers_a_gain_and_a_loss_at_once(
    app_conninfo: str, admin: psycopg.Connection[Any], tmp_path: Path, shims: list[Shim]
) -> None:
    # T = 40 s: a safe window of 39.5 s, far longer than the loss takes to be seen, so
    # a prompt answer below comes from the change, not from the end of the window.
    primary = Shim(elect(app_conninfo, "shim-a", timeout=40), tmp_path / "a.log")
    shims.append(primary)
    held = until(primary.url, lambda body: body["term"] is not None)
    assert held.body["type"] == "held" and held.body["name"].startswith("shim-a") and held.body["term"] == 1
    assert 0 < held.body["valid_for_s"] <= 39.5
    standby = Shim(elect(app_conninfo, "shim-b", timeout=40), tmp_path / "b.log")
    shims.append(standby)
    idle = get(f"{standby.url}/held")
    assert idle.body["term"] is None and idle.body["valid_for_s"] == 0

    # Nothing changes on the standby: its long-poll holds for the whole wait.
    quiet = poll(standby.url, idle.version, wait=2)
    assert quiet.elapsed >= 1.9 and quiet.version == idle.version and quiet.body["term"] is None

    losing = Pending(primary.url, held.version)
    gaining = Pending(standby.url, idle.version)
    time.sleep(0.5)
    live = get(f"{primary.url}/health/live")
    assert live.status == 200 and losing.waiting(), "a long-poll does not hold up other requests"

    killed = time.monotonic()
    assert terminate(admin, "tenure elector held shim-a:%") == 1
    lost = losing.result()
    print(f"loss of term 1 answered {time.monotonic() - killed:.3f} s after its connection was terminated")
    assert lost.version > held.version and lost.body["term"] != 1, "the loss of term 1 was answered"
    assert lost.elapsed < 30, "answered when the loss happened, not at the end of the 39.5 s window"

    stopping = time.monotonic()
    primary.stop()  # resigns: the standby is elected at its next heartbeat
    gained = gaining.result()
    print(f"standby's gain answered {time.monotonic() - stopping:.3f} s after the primary was stopped")
    assert gained.version > idle.version and gained.body["term"] is not None and gained.body["term"] > 1
    assert gained.elapsed < LONG / 2, "the gain was answered when it happened"
    assert 0 < gained.body["valid_for_s"] <= 39.5


def test_elect_long_poll_never_outlasts_the_safe_window_and_refuses_bad_parameters(
    app_conninfo: str, tmp_path: Path, shims: list[Shim]
) -> None:
    # T - I = 1.5 s: a long-poll of 60 s on the primary comes back within the window it
    # reported, still primary, so a program asking again at once is never left without
    # a valid answer.
    primary = Shim(elect(app_conninfo, "shim-w", timeout=2), tmp_path / "w.log")
    shims.append(primary)
    held = until(primary.url, lambda body: body["term"] is not None)
    capped = poll(primary.url, held.version)
    assert capped.version == held.version and capped.body["term"] == held.body["term"]
    assert capped.elapsed < LONG / 4, "the wait is cut at the end of the reported safe window"
    assert 0 < capped.body["valid_for_s"] <= 1.5

    on_primary = get(f"{primary.url}/primary")
    assert on_primary.status == 200 and on_primary.body["version"] == held.version

    for query, message in [
        ("wait=abc&version=1", "wait must be a number of seconds, got 'abc'"),
        ("wait=-1&version=1", "wait must be from 0 to 60 seconds, got '-1'"),
        ("wait=61&version=1", "wait must be from 0 to 60 seconds, got '61'"),
        ("wait=nan&version=1", "wait must be from 0 to 60 seconds"),
        ("wait=5", "wait needs version"),
        ("wait=5&version=x", "version must be a non-negative integer from an earlier answer, got 'x'"),
        ("wait=5&version=-3", "version must be a non-negative integer"),
        ("wait=1&wait=2&version=1", "parameter 'wait' given 2 times"),
        ("timeout=5", "unknown parameter 'timeout'"),
        ("wait", "cannot read the query string"),
    ]:
        refused = get(f"{primary.url}/held?{query}")
        assert refused.status == 400, query
        assert message in refused.body["error"], (query, refused.body)
    assert get(f"{primary.url}/nowhere").status == 404


def test_claims_long_poll_answers_keys_taken_over(
    app_conninfo: str, admin: psycopg.Connection[Any], tmp_path: Path, shims: list[Shim]
) -> None:
    keys = [f"k{n}" for n in range(4)]
    Driver(admin).claim_register("held", keys)

    def claim(name: str) -> list[str]:
        return [
            *("claim", "run", "--db", app_conninfo, "--keyspace", "held", "--name", name),
            *("--cycle", "0.5", "--expiry", "40"),
        ]

    first = Shim(claim("claims-a"), tmp_path / "a.log")
    shims.append(first)
    everything = until(first.url, lambda body: len(body["keys"]) == 4)
    assert everything.body["keyspace"] == "held" and sorted(everything.body["keys"]) == keys
    assert 0 < everything.body["valid_for_s"] <= 39.5

    losing = Pending(first.url, everything.version)
    second = Shim(claim("claims-b"), tmp_path / "b.log")
    shims.append(second)
    lost = losing.result()
    print(f"keys given up answered {lost.elapsed:.3f} s into the long-poll (with the second one's start)")
    assert lost.version > everything.version and len(lost.body["keys"]) < 4
    assert lost.elapsed < 30, "the keys given up were answered at once, not at the end of the window"
    for key, epoch in lost.body["keys"].items():
        assert everything.body["keys"][key] == epoch, "a key kept keeps its epoch"

    kept = until(first.url, lambda body: len(body["keys"]) == 2)
    taken = until(second.url, lambda body: len(body["keys"]) == 2)
    assert sorted([*kept.body["keys"], *taken.body["keys"]]) == keys, "every key held by one instance"
    for key, epoch in taken.body["keys"].items():
        assert epoch > everything.body["keys"][key], "a key taken over has a new epoch"
    rows = {c.key: c for c in Driver(admin).claims("held")}
    for answer in (kept, taken):
        for key, epoch in answer.body["keys"].items():
            assert str(rows[key].claimant) == answer.body["instance_id"] and rows[key].epoch == epoch

    # A shim that stops releases its keys before its endpoint closes: a program waiting
    # on it hears that it holds nothing, not a dropped connection.
    releasing = Pending(second.url, taken.version)
    time.sleep(0.5)
    second.stop()
    released = releasing.result()
    assert released.status == 200 and released.body["keys"] == {} and released.version > taken.version


def test_an_answer_never_names_a_grant_past_its_safe_window() -> None:
    # The runtime's watchdog normally tells the endpoint; without it (a stuck thread), the
    # long-poll still ends at the deadline, and what it reads then is nothing held.
    deadline = time.monotonic() + 0.5
    versions = HeldVersions(
        lambda: (7, deadline) if time.monotonic() < deadline else (None, None), headroom=0.1
    )
    version, held, until_ = versions.refresh()
    assert held == 7 and until_ == deadline
    capped = versions.wait(version, 30)
    assert capped[0] == version and capped[1] == 7, "answered before the end, within the headroom"
    assert deadline - time.monotonic() > 0
    after = versions.wait(version, 30)
    assert time.monotonic() >= deadline
    assert after[0] > version and after[1] is None and after[2] is None


def test_a_read_that_started_before_a_change_never_overwrites_it() -> None:
    # An answer read just before a demotion lands after the follower recorded the loss:
    # it must not bring the term back.
    deadline = time.monotonic() + 60
    state: dict[str, int | None] = {"term": 7}
    entered, release = threading.Event(), threading.Event()

    def read() -> tuple[int | None, float | None]:
        term = state["term"]
        if threading.current_thread().name == "slow-answer":
            entered.set()
            release.wait(30)
        return (term, deadline) if term is not None else (None, None)

    versions = HeldVersions(read, headroom=0.1)
    before, _, _ = versions.refresh()
    results: list[tuple[int, Any, float | None]] = []
    slow = threading.Thread(target=lambda: results.append(versions.refresh()), name="slow-answer")
    slow.start()
    assert entered.wait(30)
    state["term"] = None  # demoted; the runtime tells its followers
    demoted = versions.refresh()
    assert demoted[0] == before + 1 and demoted[1] is None
    release.set()
    slow.join(30)
    assert results == [demoted], "the stale read answered what was recorded after it"
    assert versions.refresh() == demoted
