"""The driver: one method per public SQL function of schema ``tenure``.

It holds no policy (no sleeps, no retries): rows become dataclasses and tenure's
SQLSTATEs become the exceptions of :mod:`tenure.errors`. Each method runs in the
connection's current transaction, or in a transaction of its own on an autocommit
connection, so an application can fence its own writes in the same transaction.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar
from uuid import UUID

import psycopg
from psycopg.rows import class_row

from tenure.errors import from_psycopg

T = TypeVar("T")


@dataclass(frozen=True)
class PrimaryEntry:
    """The primary of a service type and its term (fencing epoch)."""

    utype: str
    instance_id: UUID
    term: int
    renewed_at: datetime
    valid_until: datetime


@dataclass(frozen=True)
class HeartbeatStatus:
    """One row of the operator view ``tenure.heartbeat_status``."""

    utype: str
    instance_id: UUID | None
    term: int
    renewed_at: datetime
    heartbeat_age: timedelta
    timeout: timedelta
    heartbeat_interval: timedelta | None
    valid_until: datetime
    live: bool
    term_started_at: datetime | None


@contextmanager
def _translated() -> Iterator[None]:
    try:
        yield
    except psycopg.Error as error:
        tenure_error = from_psycopg(error)
        if tenure_error is None:
            raise
        raise tenure_error from error


def _seconds(value: timedelta | float | None) -> timedelta | None:
    if value is None or isinstance(value, timedelta):
        return value
    return timedelta(seconds=value)


class Driver:
    """Calls tenure's SQL functions on one psycopg connection."""

    def __init__(self, connection: psycopg.Connection[Any]) -> None:
        self.connection = connection

    def _rows(self, row_type: type[T], query: str, params: Sequence[object]) -> list[T]:
        with _translated(), self.connection.cursor(row_factory=class_row(row_type)) as cursor:
            cursor.execute(query, params)
            return cursor.fetchall()

    def _scalar(self, query: str, params: Sequence[object]) -> Any:
        with _translated(), self.connection.cursor() as cursor:
            cursor.execute(query, params)
            row = cursor.fetchone()
            assert row is not None
            return row[0]

    def update_heartbeat(
        self,
        instance_id: UUID,
        utype: str,
        *,
        timeout: timedelta | float,
        interval: timedelta | float | None = None,
    ) -> PrimaryEntry:
        """Heartbeat as a candidate for primary; returns who is primary now, with the term."""
        rows = self._rows(
            PrimaryEntry,
            "SELECT * FROM tenure.update_heartbeat(%s, %s, %s, %s)",
            (instance_id, utype, _seconds(timeout), _seconds(interval)),
        )
        return rows[0]

    def get_primary(self, utype: str) -> PrimaryEntry | None:
        """The live primary of ``utype``, or None when there is none."""
        rows = self._rows(PrimaryEntry, "SELECT * FROM tenure.get_primary(%s)", (utype,))
        return rows[0] if rows else None

    def check_primary(self, instance_id: UUID, utype: str) -> bool:
        """True only if ``instance_id`` is the live primary of ``utype``."""
        return bool(self._scalar("SELECT tenure.check_primary(%s, %s)", (instance_id, utype)))

    def heartbeat_resign(self, instance_id: UUID, utype: str) -> bool:
        """Give up primacy at once; True if the instance was the live primary."""
        return bool(self._scalar("SELECT tenure.heartbeat_resign(%s, %s)", (instance_id, utype)))

    def heartbeat_fence(self, instance_id: UUID, utype: str, term: int) -> None:
        """Raise NotPrimary unless the instance is the live primary in ``term``.

        Call it inside the transaction of the write it guards.
        """
        self._scalar("SELECT tenure.heartbeat_fence(%s, %s, %s)", (instance_id, utype, term))

    def heartbeat_status(self) -> list[HeartbeatStatus]:
        """Every service type: primary, term, last heartbeat and its age, liveness."""
        return self._rows(HeartbeatStatus, "SELECT * FROM tenure.heartbeat_status ORDER BY utype", ())
