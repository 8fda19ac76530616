"""A queue application for ``tenure batch run`` in the tests: SUBMIT appends the payload
to the file named by $BATCH_APP_LOG; STATUS says invalid for payloads starting with 'bad'."""

from __future__ import annotations

import os

from tenure.driver import BatchGrant


def SUBMIT(batch: BatchGrant) -> None:
    with open(os.environ["BATCH_APP_LOG"], "a") as log:
        log.write(f"{batch.key} {batch.seq} {batch.payload.decode()}\n")


def STATUS(batch: BatchGrant) -> str:
    return "invalid" if batch.payload.startswith(b"bad") else "committed"
