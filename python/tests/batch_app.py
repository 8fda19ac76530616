"""A queue application for ``tenure batch run`` in the tests: SUBMIT appends the payload
to the file named by $BATCH_APP_LOG; STATUS says invalid for payloads starting with 'bad'.
With $BATCH_APP_ASYNC set, both are coroutine functions, which ``tenure batch run`` serves
with an AsyncSubmissionPool on asyncio."""

from __future__ import annotations

import asyncio
import os

from tenure.driver import BatchGrant


def _submit(batch: BatchGrant) -> None:
    with open(os.environ["BATCH_APP_LOG"], "a") as log:
        log.write(f"{batch.key} {batch.seq} {batch.payload.decode()}\n")


def _status(batch: BatchGrant) -> str:
    return "invalid" if batch.payload.startswith(b"bad") else "committed"


async def _submit_async(batch: BatchGrant) -> None:
    await asyncio.sleep(0)
    _submit(batch)


async def _status_async(batch: BatchGrant) -> str:
    await asyncio.sleep(0)
    return _status(batch)


if os.environ.get("BATCH_APP_ASYNC"):
    SUBMIT, STATUS = _submit_async, _status_async
else:
    SUBMIT, STATUS = _submit, _status  # type: ignore[assignment]
