"""The claimer's endpoint: ``ClaimsEndpoint`` serves ``GET /held``, the keys this
instance holds with their epochs, with a version and a long-poll (see
:mod:`tenure.http.held`), beside ``GET /health/live`` and ``GET /metrics``, for a
program on the same host that runs its own loop and must act on a key only while
``tenure claim run`` holds it.
"""

from __future__ import annotations

from tenure.http.held import HeldEndpoint
from tenure.runtime.claims import Claimer, Keys


class ClaimsEndpoint(HeldEndpoint):
    """Serves ``/held`` (with its long-poll), ``/health/live`` and ``/metrics`` for a
    claimer, on a background thread."""

    def __init__(self, claimer: Claimer, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.claimer = claimer

        def read() -> tuple[Keys, float | None]:
            keys, deadline = claimer.held_until()
            return keys, deadline if keys else None

        super().__init__(
            claimer,
            read,
            host=host,
            port=port,
            thread_name="tenure-claims-http",
            headroom=min(claimer.cycle / 2, claimer.safe_window / 4),
            metrics=claimer.metrics,
        )

    def _held_body(self, held: Keys) -> dict[str, object]:
        return {
            "keyspace": self.claimer.keyspace,
            "instance_id": str(self.claimer.instance_id),
            "name": self.claimer.name,
            "keys": dict(sorted(held.items())),
        }
