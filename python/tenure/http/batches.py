"""A submission queue served through a local HTTP handler, in any language: the
``submit`` and ``status`` of an :class:`~tenure.runtime.batches.AsyncSubmissionPool`
become JSON POSTs (``tenure batch run --http URL``).

``POST URL/submit`` and ``POST URL/status`` both carry one batch::

    {"keyspace": "orders", "instance_id": "6f1c...", "id": "0b6c...", "key": "po-17",
     "seq": 3, "payload": "<base64>", "state_keys": [], "attempts": 1, "epoch": 4, "round": 1}

``epoch`` is the claim's epoch the batch was selected under, so the handler can fence
its own writes with ``tenure.claim_fence(keyspace, instance_id, key, epoch)``. Any 2xx
answers a submit (its body is ignored); anything else, or no answer within the
timeout, is a failed submit: logged, and the batch stays pending for the monitor to
ask about. ``status`` is answered ``200 {"status": "committed" | "invalid" | "unknown" |
null}`` (null: still in flight); any other answer fails the monitor's round, which is
asked again at its next poll.
"""

from __future__ import annotations

import base64
from typing import Any
from uuid import UUID

import httpx

from tenure.driver import BatchGrant
from tenure.runtime.batches import AsyncSubmissionPool

STATUSES = ("committed", "invalid", "unknown")


class HandlerError(RuntimeError):
    """The handler answered something other than what the protocol allows."""


class BatchHandler:
    """``submit`` and ``status`` coroutines that POST each batch to a local handler over
    kept-alive connections of ``client``."""

    def __init__(self, url: str, *, client: httpx.AsyncClient, keyspace: str, instance_id: UUID) -> None:
        self.url = url.rstrip("/")
        self.client = client
        self.keyspace = keyspace
        self.instance_id = instance_id

    def body(self, batch: BatchGrant) -> dict[str, Any]:
        return {
            "keyspace": self.keyspace,
            "instance_id": str(self.instance_id),
            "id": str(batch.id),
            "key": batch.key,
            "seq": batch.seq,
            "payload": base64.b64encode(batch.payload).decode(),
            "state_keys": list(batch.state_keys),
            "attempts": batch.attempts,
            "epoch": batch.claim_epoch,
            "round": batch.round,
        }

    async def _post(self, path: str, batch: BatchGrant) -> httpx.Response:
        response = await self.client.post(self.url + path, json=self.body(batch))
        if not response.is_success:
            raise HandlerError(
                f"POST {self.url}{path} for batch {batch.id} ({batch.key} #{batch.seq}) answered "
                f"{response.status_code}: {response.text[:200]!r}"
            )
        return response

    async def submit(self, batch: BatchGrant) -> None:
        await self._post("/submit", batch)

    async def status(self, batch: BatchGrant) -> str | None:
        response = await self._post("/status", batch)
        try:
            answer = response.json()
            status = answer["status"]
        except (ValueError, TypeError, KeyError):
            raise HandlerError(
                f"POST {self.url}/status for batch {batch.id} answered {response.text[:200]!r}: expected "
                '{"status": "committed" | "invalid" | "unknown" | null}'
            ) from None
        if status is not None and status not in STATUSES:
            raise HandlerError(
                f"POST {self.url}/status for batch {batch.id} answered status {status!r}: expected "
                "committed, invalid, unknown or null (still in flight)"
            )
        return status  # type: ignore[no-any-return]


def handler_pool(
    conninfo: str,
    keyspace: str,
    *,
    url: str,
    client: httpx.AsyncClient,
    **options: Any,
) -> AsyncSubmissionPool:
    """An :class:`AsyncSubmissionPool` whose ``submit`` and ``status`` are POSTs to ``url``
    through ``client`` (see the module's docstring for the JSON)."""
    handler = BatchHandler(url, client=client, keyspace=keyspace, instance_id=UUID(int=0))
    pool = AsyncSubmissionPool(conninfo, keyspace, submit=handler.submit, status=handler.status, **options)
    handler.instance_id = pool.claimer.instance_id
    return pool
