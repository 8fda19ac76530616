"""The claimer: holds a fair share of a keyspace's keys, as in Grid's claim-and-expiry plan.

Every cycle, in one call (claim_cycle), it renews all its claims (the database says
which it still holds, and which it must give up above the fair share), then takes
free or expired keys up to the fair share (skipped when another instance is taking),
then tells the application what it gained and lost. A key whose claim was not renewed within the
safe window (expiry - cycle after the renewal was sent, monotonic clock) is lost
locally, whatever the database says later.

:class:`ClaimLogic` holds every decision; :class:`Claimer` runs it on threads and
:class:`AsyncClaimer` on the application's event loop, where ``holding(key)`` runs a
block only while the key is held.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager

from tenure.connect import instance_name
from tenure.driver import OPS, Op
from tenure.errors import ClaimLost, InvalidArgument, InvalidConfiguration
from tenure.metrics import Metrics
from tenure.runtime.loop import AsyncCycleLoop, CycleLoop, LoopLogic, await_until, wait_until

log = logging.getLogger(__name__)

Keys = dict[str, int]  # key -> epoch
Condition = Callable[[Keys], bool]


class ClaimLogic(LoopLogic):
    """What a claimer decides, on threads (:class:`Claimer`) or on asyncio (:class:`AsyncClaimer`):
    the configuration, the cycle, the safe window, what was gained and lost, the callbacks."""

    def __init__(
        self,
        conninfo: str,
        keyspace: str,
        *,
        cycle: float,
        expiry: float,
        name: str | None = None,
        on_gained: Callable[[Keys], object] | None = None,
        on_lost: Callable[[Keys], object] | None = None,
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

    def held_until(self) -> tuple[Keys, float]:
        """``held()`` with the end of its safe window (monotonic)."""
        with self._state:
            deadline = self._deadline
            return (dict(self._held) if time.monotonic() < deadline else {}), deadline

    def epoch(self, key: str) -> int | None:
        """The epoch ``key`` is held in, or None when it is not held."""
        return self.held().get(key)

    def _until_unheld(self) -> float | None:
        """Seconds until ``held()`` empties at the end of the safe window, which no notice
        announces, so a wait ends there too (None: nothing held)."""
        with self._state:
            left = self._deadline - time.monotonic() if self._held else 0.0
        return max(left, 0.001) if left > 0 else None

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
            self._state.notify_all()
        self._tell_followers()
        log.info("%s: no renewal of %s within the safe window", self.name, self.keyspace)
        self.metrics.claims_held.labels(self.keyspace).set(0)
        self.metrics.claims_lost.labels(self.keyspace).inc(len(lost))
        self._call(self._on_lost, lost)

    def _stopped(self) -> None:
        self._update({}, 0.0, reason="stopped")

    def _leave(self) -> Op[None]:
        yield from OPS.claim_release(self.keyspace, self.instance_id)

    def _update(self, held: Keys, deadline: float, *, reason: str) -> None:
        with self._state:
            if self._closing:
                held, deadline = {}, 0.0  # stop() began: a late answer takes nothing up
            before = self._held
            self._held, self._deadline = held, deadline
            self._state.notify_all()
        self._tell_followers()
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


class Claimer(ClaimLogic, CycleLoop):
    """Runs the claim cycle for one keyspace in a background thread.

    ``on_gained(keys)`` and ``on_lost(keys)`` receive {key: epoch}; they run on the
    claim thread, or on the watchdog thread when the safe window passes. Leaving
    the context manager releases every claim and leaves the keyspace.
    """

    def wait_for(self, condition: Condition, timeout: float) -> bool:
        """Block until ``condition(held())`` is true (True) or ``timeout`` passes (False)."""
        with self._state:  # reentrant: a change between a look and the wait is not missed
            return wait_until(
                lambda: condition(self.held()), self._state.wait, timeout, look_every=self._until_unheld
            )

    def stop(self, *, release: bool = True, grace: float | None = None) -> None:  # type: ignore[override]
        """Stop the cycle; with ``release``, give every claim back and leave the keyspace
        (within ``grace`` seconds, default the safe window: see :meth:`CycleLoop.stop`)."""
        super().stop(leave=release, grace=grace)


class AsyncClaimer(ClaimLogic, AsyncCycleLoop):
    """:class:`Claimer` for asyncio: the same claim cycle on two tasks of the running event loop.

    ``on_gained`` and ``on_lost`` run on the event loop; a callback may be a coroutine
    function (it runs as a task of its own). Use as ``async with``: leaving the block, or
    the cancellation of the task in it, stops the cycle, releases every claim and leaves
    the keyspace. ``async with claimer.holding(key) as epoch:`` runs a body only while
    ``key`` is held.
    """

    async def wait_for(self, condition: Condition, timeout: float | None) -> bool:
        """Wait until ``condition(held())`` is true (True) or ``timeout`` seconds pass (False;
        None: no timeout)."""
        # No await between a look and the wait: no change is missed.
        return await await_until(
            lambda: condition(self.held()), self._state.wait, timeout, look_every=self._until_unheld
        )

    def holding(self, key: str, timeout: float | None = None) -> AbstractAsyncContextManager[int]:
        """``async with claimer.holding(key) as epoch:`` runs its body only while ``key`` is held
        in ``epoch``.

        Waits up to ``timeout`` seconds (None: for ever) for the key, else TimeoutError. When
        the key is lost (released above the fair share, taken over, retired, or not renewed
        within the safe window, expiry - cycle after the last renewal was sent), the body is
        cancelled at once and :class:`~tenure.errors.ClaimLost` raised from the block: code in
        it cannot run on past the safe window (it is stopped at its next await; a step the event
        loop had already made ready still runs once). The cancellation time moves with every
        renewal. Leaving the block keeps the key; fence the body's writes
        with ``claim_fence(keyspace, instance_id, key, epoch)`` in their transaction.
        """
        return self._holding_key(key, timeout)

    @contextlib.asynccontextmanager
    async def _holding_key(self, key: str, timeout: float | None) -> AsyncIterator[int]:
        if not await self.wait_for(lambda held: key in held, timeout):
            raise TimeoutError(f"{self.label}: {key!r} not held within {timeout} s")
        with self._state:
            epoch, deadline = self._held[key], self._deadline

        def still() -> float | str:
            current = self._held.get(key)
            if current == epoch:
                return self._deadline
            return "it was given up" if current is None else f"it is held in epoch {current} now"

        def lost(reason: str) -> ClaimLost:
            return ClaimLost(
                f"{self.name} no longer holds {key!r} of {self.keyspace} in epoch {epoch}: {reason}"
            )

        async with self._while_held(
            deadline, still, lost, expired="its safe window passed without a renewal"
        ):
            yield epoch

    async def stop(self, *, release: bool = True, grace: float | None = None) -> None:  # type: ignore[override]
        """Stop the cycle; with ``release``, give every claim back and leave the keyspace
        (within ``grace`` seconds, default the safe window: see :meth:`CycleLoop.stop`)."""
        await super().stop(leave=release, grace=grace)
