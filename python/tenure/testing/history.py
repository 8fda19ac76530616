"""Who held what, read back from the database's own records, and checks on it.

The terms come from ``tenure.heartbeat_term`` (server clock); a term still running
ends, for these checks, when its entry would expire. Reading them needs a role that
may read tenure's tables (the owner or a superuser), as operators and tests have.

Times of two server generations (before and after a database failover) were read
from two clocks: they are compared only within one generation, and across
generations only the order of terms counts.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import psycopg
from psycopg.rows import class_row


@dataclass(frozen=True)
class Term:
    utype: str
    term: int
    instance_id: UUID
    started_at: datetime
    ended_at: datetime
    end_reason: str | None
    generation: int = 1


@dataclass(frozen=True)
class FencedWrite:
    """A write an application made under ``heartbeat_fence``, stamped by the server."""

    utype: str
    instance_id: UUID
    term: int
    done_at: datetime


def read_terms(connection: psycopg.Connection[Any], utype: str | None = None) -> list[Term]:
    with connection.cursor(row_factory=class_row(Term)) as cursor:
        cursor.execute(
            """
            SELECT t.utype, t.term, t.instance_id, t.started_at,
                   coalesce(t.ended_at, h.renewed_at + h.timeout) AS ended_at, t.end_reason, t.generation
              FROM tenure.heartbeat_term t
              JOIN tenure.heartbeat h USING (utype)
             WHERE %(utype)s::text IS NULL OR t.utype = %(utype)s
             ORDER BY t.utype, t.term
            """,
            {"utype": utype},
        )
        return cursor.fetchall()


def check_terms(terms: Iterable[Term]) -> list[str]:
    """Violations: two holders of one type at one instant (within a server generation),
    terms that do not grow, or a term of an earlier generation after a later one."""
    problems: list[str] = []
    by_type: dict[str, list[Term]] = {}
    for term in terms:
        by_type.setdefault(term.utype, []).append(term)
    for utype, held in by_type.items():
        held.sort(key=lambda t: (t.generation, t.started_at))
        for before, after in itertools.pairwise(held):
            if after.term <= before.term:
                problems.append(f"{utype}: term {after.term} started after term {before.term}")
            if after.generation != before.generation:
                continue  # two clocks: the order of generations is the order of time
            # An expired term holds through ended_at (last heartbeat + T, inclusive);
            # a resigned one ends at ended_at, which a successor may start at.
            overlap = after.started_at < before.ended_at or (
                after.started_at == before.ended_at and before.end_reason != "resigned"
            )
            if overlap:
                problems.append(
                    f"{utype}: term {after.term} ({after.instance_id}) started at {after.started_at}, "
                    f"before term {before.term} ({before.instance_id}) ended at {before.ended_at}"
                )
    return problems


def check_writes(terms: Sequence[Term], writes: Iterable[FencedWrite]) -> list[str]:
    """Violations: a fenced write outside its own term, or by someone else than the holder."""
    by_key = {(t.utype, t.term): t for t in terms}
    problems: list[str] = []
    for write in writes:
        term = by_key.get((write.utype, write.term))
        if term is None:
            problems.append(f"write by {write.instance_id} in unknown term {write.utype}/{write.term}")
        elif term.instance_id != write.instance_id:
            problems.append(
                f"write by {write.instance_id} in {write.utype} term {write.term} held by {term.instance_id}"
            )
        elif not term.started_at <= write.done_at <= term.ended_at:
            problems.append(
                f"write by {write.instance_id} at {write.done_at} outside its term {write.term} "
                f"[{term.started_at}, {term.ended_at}]"
            )
    return problems
