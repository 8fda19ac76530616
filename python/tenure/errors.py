"""tenure's exceptions, one per SQLSTATE of the class ``TN`` that its functions raise.

The table here is the single place where a SQLSTATE meets a Python class; the
driver turns every ``psycopg.Error`` whose SQLSTATE is tenure's into one of these.
"""

from __future__ import annotations

import psycopg


class TenureError(Exception):
    """Base of tenure's errors. Carries what PostgreSQL said: SQLSTATE, detail, hint."""

    sqlstate: str | None = None

    def __init__(self, message: str, *, detail: str | None = None, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail
        self.hint = hint

    def __str__(self) -> str:
        parts = [self.message]
        if self.detail:
            parts.append(f"DETAIL: {self.detail}")
        if self.hint:
            parts.append(f"HINT: {self.hint}")
        return "\n".join(parts)


class InvalidArgument(TenureError, ValueError):
    """TN001: an argument is missing or out of range; nothing was changed."""

    sqlstate = "TN001"


class InvalidConfiguration(InvalidArgument):
    """TN002: arguments are valid alone but not together (for example T <= 2I)."""

    sqlstate = "TN002"


class FencingError(TenureError):
    """A write was refused because the caller no longer holds what it claims to hold."""


class NotPrimary(FencingError):
    """TN101: the instance is not the live primary of the type in that term."""

    sqlstate = "TN101"


class LeaseLost(FencingError):
    """TN102: the caller no longer holds the task's lease (owner, epoch, or it ran out)."""

    sqlstate = "TN102"


class ClaimLost(FencingError):
    """TN103: the instance does not hold the key in that epoch (or the claim expired)."""

    sqlstate = "TN103"


class InvalidTransition(TenureError):
    """TN301: the change asked for does not apply to the current state (a batch already resolved)."""

    sqlstate = "TN301"


class NotFound(TenureError, LookupError):
    """TN201: no such task (never existed, or purged)."""

    sqlstate = "TN201"


class CommitNotConfirmed(TenureError, psycopg.OperationalError):
    """A commit the server could not confirm: its wait for a synchronous standby was cancelled.

    The transaction committed on the primary only, and a failover can lose it, so
    the call counts as failed (and as an ``OperationalError``: the connection is
    closed). Raised by the client, not by a tenure function.
    """


BY_SQLSTATE: dict[str, type[TenureError]] = {
    cls.sqlstate: cls
    for cls in (
        InvalidArgument,
        InvalidConfiguration,
        NotPrimary,
        LeaseLost,
        ClaimLost,
        NotFound,
        InvalidTransition,
    )
    if cls.sqlstate is not None
}


def from_psycopg(error: psycopg.Error) -> TenureError | None:
    """The tenure error for a psycopg error raised by a tenure function, or None."""
    cls = BY_SQLSTATE.get(error.sqlstate or "")
    if cls is None:
        return None
    diag = error.diag
    return cls(diag.message_primary or str(error), detail=diag.message_detail, hint=diag.message_hint)
