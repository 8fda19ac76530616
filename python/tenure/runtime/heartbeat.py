"""The elector: heartbeat leader election for one service type, as in HPC Pack.

Every I it polls ``get_primary``; when the entry is empty or expired it bids with
``update_heartbeat`` and becomes primary only when the database says it won. As
primary it renews every I and steps down as soon as a renewal fails, names someone
else, or has not succeeded within T - I of when it was *sent* (monotonic clock),
whichever comes first, whatever the database says later. A term it stepped down
from is never taken up again: if the database still names it in that term, it
resigns and bids for a new one. After a database failover its first renewal on the
new server starts a new term (see docs/guide.md, "Database failover").
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass

from tenure.connect import instance_name
from tenure.driver import OPS, Op
from tenure.errors import InvalidArgument, InvalidConfiguration, NotPrimary
from tenure.metrics import Metrics
from tenure.runtime.loop import AsyncGrantLoop, GrantLogic, GrantLoop

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ElectionTiming:
    """Heartbeat interval I and timeout T, in seconds; T must exceed 2I."""

    interval: float
    timeout: float

    def __post_init__(self) -> None:
        if not self.interval > 0:
            raise InvalidConfiguration(f"heartbeat interval must be positive, got {self.interval!r} s")
        if not self.timeout > 2 * self.interval:
            raise InvalidConfiguration(
                f"timeout T must be longer than twice the interval I: "
                f"T={self.timeout} s, I={self.interval} s",
                hint="Choose T > 2I, for example T = 3I: a primary steps down after T - I without a "
                "successful renewal, which must leave room for more than one renewal.",
            )

    @property
    def safe_window(self) -> float:
        """How long after sending its last successful renewal a primary may act: T - I."""
        return self.timeout - self.interval


class Election(GrantLogic):
    """What an elector decides, on threads (:class:`Elector`) or on asyncio (:class:`AsyncElector`)."""

    grant_name = "term"

    def __init__(
        self,
        conninfo: str,
        utype: str,
        *,
        interval: float,
        timeout: float,
        name: str | None = None,
        on_elected: Callable[[int], object] | None = None,
        on_demoted: Callable[[str], object] | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.timing = ElectionTiming(interval=interval, timeout=timeout)
        if not utype or not utype.strip() or len(utype) > 200:
            raise InvalidArgument(
                f"service type must be a non-empty name of at most 200 characters: {utype!r}"
            )
        self.utype = utype
        self.instance_id = uuid.uuid4()
        self.name = instance_name(name)
        super().__init__(
            conninfo,
            period=interval,
            safe_window=self.timing.safe_window,
            label=f"elector {utype} {self.name}",
            metrics=metrics,
            runtime="heartbeat",
            metric_name=utype,
            on_gained=on_elected,
            on_lost=on_demoted,
        )

    # -- what the application asks -------------------------------------------------

    @property
    def term(self) -> int | None:
        """The term this instance is primary in, or None when it is not primary."""
        return self._current()

    def is_primary(self) -> bool:
        """True only while the last renewal, counted from when it was sent, is within T - I."""
        return self.term is not None

    # -- the cycle ------------------------------------------------------------------

    def _cycle(self) -> Op[None]:
        with self._state:
            primary = self._grant is not None
        if not primary:
            current = yield from OPS.get_primary(self.utype)
            if current is not None and current.instance_id != self.instance_id:
                return
        sent = time.monotonic()
        entry = yield from OPS.update_heartbeat(
            self.instance_id, self.utype, timeout=self.timing.timeout, interval=self.timing.interval
        )
        if entry.instance_id != self.instance_id:
            self._demote(f"overtaken by {entry.instance_id} in term {entry.term}")
            return
        if self._given_up(entry.term):
            # The database still names us in a term this instance already stepped down
            # from (a renewal came too late, or the connection failed while the server
            # kept the term). Never take a term up again: end it, and bid afresh.
            yield from OPS.heartbeat_resign(self.instance_id, self.utype)
            return
        self._confirm(entry.term, sent + self.timing.safe_window, too_late="renewal answered too late")

    def _cycle_failed(self, reason: str) -> None:
        self._demote(f"heartbeat failed: {reason}")

    def _expire(self) -> None:
        self._demote("no successful renewal within T - I", only_if_expired=True)

    def _stopped(self) -> None:
        self._demote("stopped")

    def _leave(self) -> Op[None]:
        # Even when not primary locally, the entry may still name us: vacate it.
        yield from OPS.heartbeat_resign(self.instance_id, self.utype)

    def _gained(self, term: int) -> None:
        self.metrics.primary.labels(self.utype).set(1)
        self.metrics.term.labels(self.utype).set(term)
        self.metrics.elections.labels(self.utype).inc()
        log.info("%s: primary of %s in term %d", self.name, self.utype, term)

    def _lost_grant(self, term: int, reason: str) -> None:
        self.metrics.primary.labels(self.utype).set(0)
        self.metrics.term.labels(self.utype).set(0)
        self.metrics.demotions.labels(self.utype).inc()
        log.info("%s: no longer primary of %s: %s", self.name, self.utype, reason)


class Elector(Election, GrantLoop):
    """Runs the election loop for one service type in a background thread.

    ``on_elected(term)`` runs on the election thread when the database confirms this
    instance as primary; ``on_demoted(reason)`` runs once per term when it stops
    being primary, on whichever thread noticed first. Use as a context manager:
    leaving it stops the loop and resigns, so another instance takes over at once.
    """

    def wait_until_primary(self, timeout: float | None = None) -> bool:
        """Block until this instance is primary (True) or ``timeout`` passes (False)."""
        return self._wait_for_grant(timeout)

    def stop(self, *, resign: bool = True, grace: float | None = None) -> None:  # type: ignore[override]
        """Stop the loop; with ``resign``, give primacy up in the database at once.

        Takes at most ``grace`` seconds (default T - I), even while the database is away.
        """
        super().stop(leave=resign, grace=grace)


class AsyncElector(Election, AsyncGrantLoop):
    """:class:`Elector` for asyncio: the same election on two tasks of the running event loop.

    ``on_elected`` and ``on_demoted`` run on the event loop; a callback may be a coroutine
    function (it runs as a task of its own). Use as ``async with``: leaving the block, or
    the cancellation of the task in it, stops the loop and resigns.
    """

    async def wait_until_primary(self, timeout: float | None = None) -> bool:
        """Wait until this instance is primary (True) or ``timeout`` passes (False)."""
        return await self._wait_for_grant(timeout)

    def leading(self, timeout: float | None = None) -> AbstractAsyncContextManager[int]:
        """``async with elector.leading() as term:`` runs its body only while primary in ``term``.

        Waits up to ``timeout`` seconds (None: for ever) to be primary, else TimeoutError.
        When the term ends, or its safe window T - I passes without a renewal, the body is
        cancelled at once and :class:`~tenure.errors.NotPrimary` raised from the block:
        code in it cannot run on past the safe window (it is stopped at its next await).
        """
        return self._holding_grant(timeout, self._term_lost)

    def _term_lost(self, term: int, reason: str) -> Exception:
        return NotPrimary(f"{self.name} is no longer primary of {self.utype} in term {term}: {reason}")

    async def stop(self, *, resign: bool = True, grace: float | None = None) -> None:  # type: ignore[override]
        """Stop the loop; with ``resign``, give primacy up in the database at once.

        Takes at most ``grace`` seconds (default T - I), even while the database is away.
        """
        await super().stop(leave=resign, grace=grace)
