"""The election functions against a model, with hypothesis moving time through the
internal time-travel functions: every answer of the database must match what the
rules of the design say, including at the T boundary to the microsecond."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from tenure.errors import NotPrimary, from_psycopg
from tenure.testing.history import check_terms, read_terms

INSTANCES = [uuid.UUID(int=n) for n in (1, 2, 3)]
TIMEOUTS = [timedelta(seconds=s) for s in (1, 2, 3)]
MICRO = timedelta(microseconds=1)
T0 = datetime(2026, 1, 1, tzinfo=UTC)


class Election(RuleBasedStateMachine):
    def __init__(self, connection: psycopg.Connection[Any]) -> None:
        super().__init__()
        self.db = connection
        self.utype = f"model-{uuid.uuid4()}"
        self.now = T0
        self.holder: uuid.UUID | None = None
        self.term = 0
        self.renewed_at = T0
        self.timeout = timedelta(0)

    def live(self) -> bool:
        return self.holder is not None and self.now - self.renewed_at <= self.timeout

    def call(self, query: str, *args: object) -> Any:
        row = self.db.execute(query, (*args, self.now)).fetchone()
        return row

    @rule(
        step=st.sampled_from(["zero", "micro", "to_edge", "to_edge_plus", "random"]), seconds=st.floats(0, 4)
    )
    def advance(self, step: str, seconds: float) -> None:
        edge = self.renewed_at + self.timeout
        if step == "micro":
            self.now += MICRO
        elif step == "to_edge" and edge > self.now:
            self.now = edge
        elif step == "to_edge_plus" and edge >= self.now:
            self.now = edge + MICRO
        elif step == "random":
            self.now += timedelta(seconds=seconds)

    @rule(who=st.sampled_from(INSTANCES), timeout=st.sampled_from(TIMEOUTS))
    def heartbeat(self, who: uuid.UUID, timeout: timedelta) -> None:
        row = self.call(
            "SELECT instance_id, term, renewed_at FROM tenure._update_heartbeat(%s, %s, %s, NULL, %s)",
            who,
            self.utype,
            timeout,
        )
        if self.holder == who and self.live():
            self.renewed_at, self.timeout = self.now, timeout
        elif not self.live():
            self.holder, self.term, self.renewed_at, self.timeout = who, self.term + 1, self.now, timeout
        assert row == (self.holder, self.term, self.renewed_at)

    @rule(who=st.sampled_from(INSTANCES))
    def resign(self, who: uuid.UUID) -> None:
        (resigned,) = self.call("SELECT tenure._heartbeat_resign(%s, %s, %s)", who, self.utype)
        expected = self.holder == who and self.live()
        if self.holder == who:
            self.holder, self.renewed_at = None, self.now
        assert resigned == expected

    @rule(who=st.sampled_from(INSTANCES), stale=st.booleans())
    def fence(self, who: uuid.UUID, stale: bool) -> None:
        term = max(1, self.term - 1) if stale else max(1, self.term)
        allowed = self.live() and self.holder == who and term == self.term
        try:
            with self.db.transaction():
                self.call("SELECT tenure._heartbeat_fence(%s, %s, %s, %s)", who, self.utype, term)
            refused = False
        except psycopg.Error as error:
            assert isinstance(from_psycopg(error), NotPrimary), error
            refused = True
        assert refused == (not allowed)

    @invariant()
    def primary_matches(self) -> None:
        row = self.call("SELECT instance_id, term FROM tenure._get_primary(%s, %s)", self.utype)
        assert row == ((self.holder, self.term) if self.live() else None)
        for who in INSTANCES:
            (yes,) = self.call("SELECT tenure._check_primary(%s, %s, %s)", who, self.utype)
            assert yes == (self.live() and self.holder == who)

    def teardown(self) -> None:
        terms = read_terms(self.db, self.utype)
        assert [t.term for t in terms] == list(range(1, self.term + 1))
        assert check_terms(terms) == []


def test_election_matches_the_model(admin: psycopg.Connection[Any]) -> None:
    class OnThisDatabase(Election):
        def __init__(self) -> None:
            super().__init__(admin)

    run_state_machine_as_test(
        OnThisDatabase,
        settings=settings(
            max_examples=60,
            stateful_step_count=30,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
