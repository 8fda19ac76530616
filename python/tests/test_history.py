"""The history checkers find what they exist to find."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from uuid import uuid4

from tenure.testing.history import FencedWrite, Term, check_terms, check_writes

T0 = datetime(2026, 1, 1, tzinfo=UTC)
A, B = uuid4(), uuid4()


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def term(number: int, who: object, start: float, end: float) -> Term:
    return Term("svc", number, who, at(start), at(end), "expired")  # type: ignore[arg-type]


def test_disjoint_growing_terms_pass() -> None:
    other_type = Term("other", 1, A, at(0), at(99), None)
    assert check_terms([term(1, A, 0, 5), term(2, B, 5.001, 9), other_type]) == []


def test_overlap_and_shrinking_terms_are_found() -> None:
    problems = check_terms([term(1, A, 0, 5), term(2, B, 4, 9)])
    assert len(problems) == 1 and "before term 1" in problems[0]
    assert any("started after" in p for p in check_terms([term(2, A, 0, 5), term(1, B, 6, 9)]))


def test_a_resigned_term_ends_where_its_successor_may_start() -> None:
    resigned = Term("svc", 1, A, at(0), at(5), "resigned")
    expired = Term("svc", 1, A, at(0), at(5), "expired")
    assert check_terms([resigned, term(2, B, 5, 9)]) == []
    assert len(check_terms([expired, term(2, B, 5, 9)])) == 1


def test_writes_outside_their_term_are_found() -> None:
    terms = [term(1, A, 0, 5), term(2, B, 5.5, 9)]
    good = FencedWrite("svc", A, 1, at(4.9))
    late = FencedWrite("svc", A, 1, at(5.2))
    stolen = FencedWrite("svc", A, 2, at(6))
    unknown = FencedWrite("svc", A, 7, at(6))
    problems = check_writes(terms, [good, late, stolen, unknown])
    assert len(problems) == 3
    assert "outside its term" in problems[0]
    assert "held by" in problems[1]
    assert "unknown term" in problems[2]
