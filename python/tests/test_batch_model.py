"""The submission queue against a plain-Python model (hypothesis state machine).

Random enqueues with dependencies and state keys, selections in each mode and
depth, resolutions (committed, invalid, unknown), skips, retries and claim changes
from one holder to another. The model keeps every batch's status; after each step
the database must agree with it. Every selection is checked against the queue's
rules:

- only batches of keys the caller holds, only queued or unknown ones, never an
  invalid, skipped or committed batch again;
- per-key order: an earlier batch of the key is finished, or selected in the same
  call in an earlier round, or (unconstrained, or parallel with disjoint state keys)
  in flight under the current claim; an unknown batch and one in doubt (pending
  under a previous holder's epoch) hold back everything after them, and so does one
  waiting for an explicit dependency, in every mode;
- explicit dependencies are committed; with implicit dependencies an invalid batch
  halts its key; serial: at most one batch of a key in flight;
- progress: when a key's first open batch is eligible by these rules and the call
  asks for enough batches, it is selected.

``TENURE_MODEL_EXAMPLES`` sets the number of runs: 200 by default, in ``make test``; ``make fuzz``
runs 1,000.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass, field
from typing import Any

import psycopg
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

EXAMPLES = int(os.environ.get("TENURE_MODEL_EXAMPLES", "200"))
KEYS = ["k1", "k2"]
STATE_KEYS = ["a", "b"]
INSTANCES = [uuid.UUID(int=0xA), uuid.UUID(int=0xB)]
FINISHED = ("committed", "skipped")
STATUSES = ("queued", "pending", "committed", "invalid", "unknown", "skipped")


@dataclass
class Batch:
    id: uuid.UUID
    key: str
    seq: int
    deps: list[uuid.UUID]
    state_keys: list[str]
    n: int  # the order of creation, so that picks replay alike (ids are random)
    status: str = "queued"
    epoch: int | None = None  # the claim epoch it was last selected under


@dataclass
class Queue:
    """The model: what the rules say each batch's status is."""

    mode: str
    implicit: bool
    batches: dict[uuid.UUID, Batch] = field(default_factory=dict)

    def of_key(self, key: str) -> list[Batch]:
        return sorted((b for b in self.batches.values() if b.key == key), key=lambda b: b.seq)

    def waiting(self, batch: Batch) -> bool:
        return any(self.batches[d].status != "committed" for d in batch.deps)

    def halted(self, key: str) -> bool:
        return self.implicit and any(b.status == "invalid" for b in self.of_key(key))

    def doom(self, invalid: uuid.UUID) -> None:
        """Queued or unknown batches that depend on an invalid one (directly or not) turn invalid."""
        frontier = [invalid]
        while frontier:
            doomed = frontier.pop()
            for batch in self.batches.values():
                if batch.status in ("queued", "unknown") and doomed in batch.deps:
                    batch.status = "invalid"
                    frontier.append(batch.id)


class BatchQueue(RuleBasedStateMachine):
    def __init__(self, db: psycopg.Connection[Any]) -> None:
        super().__init__()
        self.db = db
        self.keyspace = f"model-{uuid.uuid4()}"
        self.model = Queue("serial", True)
        self.holder = INSTANCES[0]
        self.epochs: dict[str, int] = {}

    # -- set-up and claims ------------------------------------------------------------

    @initialize(mode=st.sampled_from(["unconstrained", "serial", "parallel"]), implicit=st.booleans())
    def configure(self, mode: str, implicit: bool) -> None:
        self.model = Queue(mode, implicit)
        self.db.execute("SELECT tenure.batch_configure(%s, %s, %s)", (self.keyspace, mode, implicit))
        self.db.execute("SELECT tenure.claim_register(%s, %s)", (self.keyspace, KEYS))
        self.take()

    def take(self) -> None:
        rows = self.db.execute(
            "SELECT key, epoch FROM tenure.claim_take(%s, %s, '1 hour')", (self.keyspace, self.holder)
        ).fetchall()
        assert sorted(k for k, _ in rows) == KEYS, rows
        self.epochs = dict(rows)

    @rule()
    def claim_change(self) -> None:
        """The holder leaves (clean release) and the other instance takes every key in a new epoch."""
        self.db.execute("SELECT tenure.claim_release(%s, %s)", (self.keyspace, self.holder))
        self.holder = INSTANCES[1] if self.holder == INSTANCES[0] else INSTANCES[0]
        self.take()

    # -- producers and operators ---------------------------------------------------------

    @rule(
        key=st.sampled_from(KEYS),
        state_keys=st.lists(st.sampled_from(STATE_KEYS), unique=True, max_size=2),
        pick=st.lists(st.integers(0, 1000), max_size=2),
    )
    def enqueue(self, key: str, state_keys: list[str], pick: list[int]) -> None:
        existing = self._with_status(*STATUSES)
        deps = list(dict.fromkeys(existing[p % len(existing)].id for p in pick)) if existing else []
        row = self.db.execute(
            "SELECT id, seq FROM tenure.batch_enqueue(%s, %s, 'x', %s, %s::uuid[])",
            (self.keyspace, key, state_keys, deps),
        ).fetchone()
        assert row is not None
        batch = Batch(row[0], key, row[1], deps, state_keys, len(self.model.batches))
        if any(self.model.batches[d].status in ("invalid", "skipped") for d in deps):
            batch.status = "invalid"
        previous = self.model.of_key(key)
        assert batch.seq == (previous[-1].seq + 1 if previous else 1)
        self.model.batches[batch.id] = batch

    def _with_status(self, *statuses: str) -> list[Batch]:
        return sorted((b for b in self.model.batches.values() if b.status in statuses), key=lambda b: b.n)

    @precondition(lambda self: bool(self._with_status("invalid")))
    @rule(pick=st.integers(0, 1000), skip=st.booleans())
    def repair(self, pick: int, skip: bool) -> None:
        invalid = self._with_status("invalid")
        batch = invalid[pick % len(invalid)]
        function = "batch_skip" if skip else "batch_retry"
        row = self.db.execute(f"SELECT tenure.{function}(%s, %s)", (self.keyspace, batch.id)).fetchone()
        assert row == (True,)
        batch.status = "skipped" if skip else "queued"

    # -- the holder: select and resolve ----------------------------------------------------

    @rule(limit=st.sampled_from([1, 2, 10]), depth=st.sampled_from([1, 2, 4]))
    def select(self, limit: int, depth: int) -> None:
        model = self.model
        rows = self.db.execute(
            "SELECT id, key, seq, claim_epoch, round FROM tenure.batch_select(%s, %s, %s, %s)",
            (self.keyspace, self.holder, limit, depth),
        ).fetchall()
        assert len(rows) <= limit
        chosen = {row[0]: row[4] for row in rows}
        for batch_id, key, seq, epoch, round_ in rows:
            batch = model.batches[batch_id]
            where = f"batch {key}#{seq} ({model.mode}, implicit {model.implicit}), round {round_}"
            assert round_ <= depth
            assert epoch == self.epochs[key], (
                f"{where}: selected under epoch {epoch}, the claim is {self.epochs[key]}"
            )
            assert batch.status in ("queued", "unknown"), f"{where} was {batch.status}: selected again"
            assert not model.waiting(batch), f"{where}: a dependency is not committed"
            assert not model.halted(key), f"{where}: an invalid batch halts the key"
            for earlier in model.of_key(key):
                if earlier.seq >= seq:
                    break
                self._check_before(where, batch, earlier, chosen, round_)
        for batch_id in chosen:
            model.batches[batch_id].status = "pending"
            model.batches[batch_id].epoch = self.epochs[model.batches[batch_id].key]
        if model.mode == "serial":
            for key in KEYS:
                in_flight = [b for b in model.of_key(key) if b.status == "pending"]
                assert len(in_flight) <= 1, f"serial key {key}: {len(in_flight)} batches in flight"
        self._check_progress(rows, limit, chosen)

    def _check_before(
        self, where: str, batch: Batch, earlier: Batch, chosen: dict[uuid.UUID, int], round_: int
    ) -> None:
        model = self.model
        what = f"{where} went before #{earlier.seq} ({earlier.status})"
        if earlier.status in FINISHED or (earlier.status == "invalid" and not model.implicit):
            return
        if earlier.id in chosen:
            assert chosen[earlier.id] < round_, f"{what}, selected in round {chosen[earlier.id]}"
            assert model.mode != "serial", f"{what}: serial hands out one batch of a key at a time"
            return
        assert earlier.status != "unknown", f"{what}: an unknown batch goes again before any later one"
        assert not (earlier.status == "pending" and earlier.epoch != self.epochs[batch.key]), (
            f"{what}: it is in doubt, selected under a previous claim"
        )
        assert not (earlier.status == "queued" and model.waiting(earlier)), (
            f"{what}: it waits for a dependency, which holds back its key in every mode"
        )
        assert model.mode != "serial", f"{what}: serial waits for every earlier batch"
        if model.mode == "parallel":
            assert earlier.state_keys and batch.state_keys, (
                f"{what}: without state keys, parallel keeps order"
            )
            assert not set(earlier.state_keys) & set(batch.state_keys), f"{what}: their state keys overlap"

    def _check_progress(self, rows: list[Any], limit: int, chosen: dict[uuid.UUID, int]) -> None:
        """A key whose first open batch is plainly eligible gets it, when the call asks for enough."""
        model = self.model
        ready = []
        for key in KEYS:
            if model.halted(key):
                continue
            open_ = [
                b for b in model.of_key(key) if b.status in ("queued", "unknown", "pending") or b.id in chosen
            ]
            if not open_:
                continue
            first = open_[0]
            if model.mode == "serial" and any(b.status == "pending" and b.id not in chosen for b in open_):
                continue  # one in flight at a time (a retried batch waits for a later one in flight)
            if first.id in chosen or (first.status in ("queued", "unknown") and not model.waiting(first)):
                ready.append(first)
        if limit >= len(KEYS):
            missing = [f"{b.key}#{b.seq}" for b in ready if b.id not in chosen]
            assert not missing, f"eligible first batches not selected: {missing} ({model.mode})"
        else:
            assert len(rows) >= min(limit, len(ready)), f"{len(rows)} selected, {len(ready)} keys ready"

    @precondition(lambda self: bool(self._with_status("pending", "unknown")))
    @rule(
        pick=st.integers(0, 1000),
        status=st.sampled_from(["committed", "invalid", "unknown"]),
        many=st.booleans(),
    )
    def resolve(self, pick: int, status: str, many: bool) -> None:
        open_ = self._with_status("pending", "unknown")
        batch = open_[pick % len(open_)]
        epoch = self.epochs[batch.key]
        if many:
            items = [{"id": str(batch.id), "epoch": epoch, "status": status}]
            row = self.db.execute(
                "SELECT tenure.batch_resolve_many(%s, %s, %s)",
                (self.keyspace, self.holder, json.dumps(items)),
            ).fetchone()
            assert row == (1,)
        else:
            row = self.db.execute(
                "SELECT tenure.batch_resolve(%s, %s, %s, %s, %s)",
                (self.keyspace, self.holder, batch.id, epoch, status),
            ).fetchone()
            assert row == (status,)
        batch.status = status
        if status == "invalid":
            self.model.doom(batch.id)

    @precondition(lambda self: bool(self._with_status("pending")) and min(self.epochs.values()) > 1)
    @rule(pick=st.integers(0, 1000))
    def stale_resolve(self, pick: int) -> None:
        """A resolution under an epoch the holder no longer has is refused (TN103), and changes nothing."""
        pending = self._with_status("pending")
        batch = pending[pick % len(pending)]
        try:
            self.db.execute(
                "SELECT tenure.batch_resolve(%s, %s, %s, %s, 'committed')",
                (self.keyspace, self.holder, batch.id, self.epochs[batch.key] - 1),
            )
        except psycopg.Error as error:
            assert error.sqlstate == "TN103", error
        else:
            raise AssertionError("a resolution under a stale epoch was accepted")

    @invariant()
    def database_agrees(self) -> None:
        rows = self.db.execute(
            "SELECT id, status FROM tenure.batch WHERE keyspace = %s", (self.keyspace,)
        ).fetchall()
        found = dict(rows)
        expected = {b.id: b.status for b in self.model.batches.values()}
        assert found == expected, {
            f"{self.model.batches[i].key}#{self.model.batches[i].seq}": (expected[i], found.get(i))
            for i in expected
            if expected[i] != found.get(i)
        }


def test_batch_queue_matches_the_model(admin: psycopg.Connection[Any]) -> None:
    class OnThisDatabase(BatchQueue):
        def __init__(self) -> None:
            super().__init__(admin)

    run_state_machine_as_test(
        OnThisDatabase,
        settings=settings(
            max_examples=EXAMPLES,
            stateful_step_count=50,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        ),
    )
