"""A simulated external system (the seed's ledger) for tests, the demo and the bench.

Switches: ``keeps_order`` (False: batches are applied after a random delay, so two
batches of a key submitted in order can be applied out of order, as with gossip),
``persists`` (False: a restart forgets batches received but not yet applied, whose
status then reads 'unknown'), and ``invalid`` (a predicate on the payload: such
batches are rejected, status 'invalid'). The state of a key is the payload of the
last batch applied to it, as a purchase order's price is its last change.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from uuid import UUID

from tenure.driver import BatchGrant


@dataclass
class SimulatedLedger:
    keeps_order: bool = True
    persists: bool = True
    invalid: Callable[[bytes], bool] = lambda payload: False
    max_delay: float = 0.05
    seed: int = 0
    applied: dict[str, list[bytes]] = field(default_factory=dict)
    _status: dict[UUID, str] = field(default_factory=dict)
    _waiting: dict[UUID, tuple[float, BatchGrant]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._random = random.Random(self.seed)

    def submit(self, batch: BatchGrant) -> None:
        with self._lock:
            if self._status.get(batch.id) in ("committed", "invalid"):
                return  # already kept: a resubmission changes nothing
            delay = 0.0 if self.keeps_order else self._random.uniform(0, self.max_delay)
            self._waiting[batch.id] = (time.monotonic() + delay, batch)
            self._status[batch.id] = "received"
            if self.keeps_order:
                self._apply_due()

    def status(self, batch: BatchGrant) -> str | None:
        """'committed', 'invalid', 'unknown' (lost in a restart), or None while in flight."""
        with self._lock:
            self._apply_due()
            state = self._status.get(batch.id)
            if state is None:
                return "unknown"
            return None if state == "received" else state

    def restart(self) -> None:
        """A restart: without ``persists``, batches not applied yet are forgotten."""
        with self._lock:
            self._apply_due()
            if not self.persists:
                for batch_id in self._waiting:
                    self._status.pop(batch_id, None)
                self._waiting.clear()

    def state(self) -> dict[str, bytes]:
        with self._lock:
            self._apply_due()
            return {key: payloads[-1] for key, payloads in self.applied.items() if payloads}

    def _apply_due(self) -> None:
        now = time.monotonic()
        for batch_id, (due, batch) in sorted(self._waiting.items(), key=lambda item: item[1][0]):
            if due > now:
                continue
            del self._waiting[batch_id]
            if self.invalid(batch.payload):
                self._status[batch_id] = "invalid"
            else:
                self.applied.setdefault(batch.key, []).append(batch.payload)
                self._status[batch_id] = "committed"
