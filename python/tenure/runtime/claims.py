"""The claimer: holds a fair share of a keyspace's keys, as in Grid's claim-and-expiry plan.

Every cycle, in one call (claim_cycle), it renews all its claims (the database says
which it still holds, and which it must give up above the fair share), then takes
free or expired keys up to the fair share (skipped when another instance is taking),
then tells the application what it gained and lost. A key whose claim was not renewed within the
safe window (expiry - cycle after the renewal was sent, monotonic clock) is lost
locally, whatever the database says later.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable

from tenure.connect import instance_name
from tenure.driver import OPS, Op
from tenure.errors import InvalidArgument, InvalidConfiguration
from tenure.metrics import Metrics
from tenure.runtime.loop import CycleLoop

log = logging.getLogger(__name__)

Keys = dict[str, int]  # key -> epoch


class Claimer(CycleLoop):
    """Runs the claim cycle for one keyspace in a background thread.

    ``on_gained(keys)`` and ``on_lost(keys)`` receive {key: epoch}; they run on the
    claim thread, or on the watchdog thread when the safe window passes. Leaving
    the context manager releases every claim and leaves the keyspace.
    """

    def __init__(
        self,
        conninfo: str,
        keyspace: str,
        *,
        cycle: float,
        expiry: float,
        name: str | None = None,
        on_gained: Callable[[Keys], None] | None = None,
        on_lost: Callable[[Keys], None] | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        if not cycle > 0:
            raise InvalidConfiguration(f"cycle must be positive, got {cycle!r} s")
        if not expiry > 2 * cycle:
            raise InvalidConfiguration(
                f"expiry must be longer than twice the cycle: expiry={expiry} s, cycle={cycle} s",
                hint="Choose expiry > 2 * cycle (3 * cycle is a good start): a claim must survive one failed "
                "renewal, and the claimer gives its keys up locally after expiry - cycle without one.",
            )
        if not keyspace or not keyspace.strip() or len(keyspace) > 200:
            raise InvalidArgument(
                f"keyspace must be a non-empty name of at most 200 characters: {keyspace!r}"
            )
        self.keyspace = keyspace
        self.cycle = cycle
        self.expiry = expiry
        self.instance_id = uuid.uuid4()
        self.name = instance_name(name)
        super().__init__(
            conninfo,
            period=cycle,
            safe_window=expiry - cycle,
            label=f"claimer {keyspace} {self.name}",
            metrics=metrics,
            runtime="claims",
            metric_name=keyspace,
        )
        self._on_gained = on_gained
        self._on_lost = on_lost
        self._held: Keys = {}
        self.busy_skips = 0

    # -- what the application asks ---------------------------------------------------

    def held(self) -> Keys:
        """The keys this instance holds with their epochs; empty once the safe window passed."""
        with self._state:
            return dict(self._held) if time.monotonic() < self._deadline else {}

    def epoch(self, key: str) -> int | None:
        return self.held().get(key)

    def wait_for(self, condition: Callable[[Keys], bool], timeout: float) -> bool:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if condition(self.held()):
                return True
            time.sleep(0.02)
        return condition(self.held())

    def stop(self, *, release: bool = True) -> None:  # type: ignore[override]
        """Stop the cycle; with ``release``, give every claim back and leave the keyspace."""
        super().stop(leave=release)

    # -- the cycle ----------------------------------------------------------------------

    def _cycle(self) -> Op[None]:
        sent = time.monotonic()
        grants = yield from OPS.claim_cycle(self.keyspace, self.instance_id, expiry=self.expiry)
        held = {g.key: g.epoch for g in grants if g.change in ("renewed", "taken") and g.key and g.epoch}
        deadline = sent + self.safe_window
        if time.monotonic() >= deadline:
            held = {}  # answered too late to act on
        if any(g.change == "busy" for g in grants):
            self.busy_skips += 1
        self._update(held, deadline, reason="not renewed")

    def _holding(self) -> bool:
        return bool(self._held)

    def _expire(self) -> None:
        with self._state:
            if time.monotonic() < self._deadline:
                return  # renewed meanwhile
            lost, self._held = self._held, {}
        log.info("%s: no renewal of %s within the safe window", self.name, self.keyspace)
        self._call(self._on_lost, lost)

    def _stopped(self) -> None:
        self._update({}, 0.0, reason="stopped")

    def _leave(self) -> Op[None]:
        yield from OPS.claim_release(self.keyspace, self.instance_id)

    def _update(self, held: Keys, deadline: float, *, reason: str) -> None:
        with self._state:
            before = self._held
            self._held, self._deadline = held, deadline
            self._state.notify_all()
        lost = {k: e for k, e in before.items() if held.get(k) != e}
        gained = {k: e for k, e in held.items() if before.get(k) != e}
        self.metrics.claims_held.labels(self.keyspace).set(len(held))
        self.metrics.claims_lost.labels(self.keyspace).inc(len(lost))
        self.metrics.claims_gained.labels(self.keyspace).inc(len(gained))
        if lost:
            log.info("%s: lost %d keys of %s (%s)", self.name, len(lost), self.keyspace, reason)
            self._call(self._on_lost, lost)
        if gained:
            self._call(self._on_gained, gained)

    def _call(self, callback: Callable[[Keys], None] | None, keys: Keys) -> None:
        if callback is None:
            return
        try:
            callback(keys)
        except Exception:
            log.exception("%s: claim callback %r failed", self.name, callback)
