"""Schedules from Python: ``tenure.cron_next`` against a reference implementation
(croniter, in tests only) over thousands of random expressions, and the driver's
schedule methods as a ``tenure_worker`` role calls them.

The comparison covers every field form (values, ranges, lists, steps, ``N/step``,
month and weekday names in any case, 7 for Sunday) and the day rule. Two known
differences are handled, not hidden:

- croniter counts a day-of-month or day-of-week field such as ``*/2`` as restricted
  (a day then matches either field); tenure follows Vixie cron, where a field that
  starts with ``*`` makes a day match both. croniter's ``day_or`` argument selects the
  rule, so the test passes Vixie's choice to it.
- ``7/N`` in the day-of-week field is Sunday alone for tenure (7 is Sunday; the days
  after it wrap to nothing), every day for croniter: the generator leaves it out, and
  the pgTAP file checks that ``1/3`` does not run on Sunday.
- Daylight saving time: tenure runs a local time in a spring-forward gap once at the
  jump and a repeated autumn time once at its first occurrence; croniter's behaviour
  around the changes is its own (for instance for ``*/15`` in a repeated hour). The
  comparison in DST zones therefore leaves out instants within 3 hours of a change,
  and the DST rules are tested by the pgTAP cases of db/tests/schedules.sql (Zurich and
  New York, spring and autumn). UTC and zones without DST are compared everywhere.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import psycopg
import pytest
from croniter import croniter

from tenure.driver import Driver
from tenure.errors import InvalidArgument, NotFound

SEED = 15
CASES = 4000
FIXED_ZONES = ["UTC", "Asia/Kolkata", "Asia/Tokyo", "America/Phoenix"]
DST_ZONES = ["Europe/Zurich", "America/New_York", "Australia/Sydney"]
MONTHS = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
DAYS = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"]
MONTH_DAYS = {2: 29, 4: 30, 6: 30, 9: 30, 11: 30}


def _value(rng: random.Random, low: int, high: int, names: list[str] | None) -> str:
    value = rng.randint(low, high)
    if names and rng.random() < 0.4 and value - low < len(names):
        name = names[value - low]
        return rng.choice([name, name.lower(), name.capitalize()])
    return str(value)


def _field(rng: random.Random, low: int, high: int, names: list[str] | None = None) -> str:
    form = rng.choice(["*", "value", "range", "list", "step", "range-step", "value-step", "*"])
    if form == "*":
        return "*"
    if form == "value":
        return _value(rng, low, high, names)
    if form == "step":
        return f"*/{rng.randint(1, max(1, (high - low + 1) // 2))}"
    if form == "list":
        return ",".join(str(v) for v in sorted(rng.sample(range(low, high + 1), rng.randint(2, 4))))
    if form == "value-step":
        # 7/N (Sunday, then every N days after it) is left out: croniter reads it as every day.
        return f"{rng.randint(low, 6 if names is DAYS else high)}/{rng.randint(1, high - low + 1)}"
    a, b = sorted(rng.sample(range(low, high + 1), 2))
    first, last = str(a), str(b)
    if names and rng.random() < 0.4 and b - low < len(names):
        first, last = names[a - low], names[b - low]
    text = f"{first}-{last}"
    return text if form == "range" else f"{text}/{rng.randint(1, b - a + 1)}"


def _values(field: str, low: int, high: int, names: list[str] | None) -> set[int]:
    """The values a field allows (to leave out expressions that can never match)."""

    def number(token: str) -> int:
        return int(token) if token.isdigit() else (names or []).index(token.upper()) + low

    allowed: set[int] = set()
    for item in field.split(","):
        base, _, step = item.partition("/")
        if base == "*":
            first, last = low, high
        elif "-" in base:
            first, last = (number(t) for t in base.split("-"))
        else:
            first = number(base)
            last = high if step else first
        allowed.update(range(first, last + 1, int(step or 1)))
    return allowed


def _expression(rng: random.Random) -> str:
    fields = [
        _field(rng, 0, 59),
        _field(rng, 0, 23),
        _field(rng, 1, 31) if rng.random() < 0.5 else _field(rng, 1, 28),
        _field(rng, 1, 12, MONTHS),
        _field(rng, 0, 7 if rng.random() < 0.2 else 6, DAYS),
    ]
    return " ".join(fields)


def _possible(expr: str) -> bool:
    _, _, dom, month, dow = expr.split()
    if not (dom.startswith("*") or dow.startswith("*")):
        return True  # either field: every month has every weekday
    days = _values(dom, 1, 31, None)
    return any(d <= MONTH_DAYS.get(m, 31) for m in _values(month, 1, 12, MONTHS) for d in days)


def _reference(expr: str, after: datetime, zone: str) -> datetime:
    """croniter's next time, with Vixie's day rule chosen explicitly."""
    _, _, dom, _, dow = expr.split()
    day_or = not (dom.startswith("*") or dow.startswith("*"))
    start = after.astimezone(ZoneInfo(zone))
    found = croniter(expr, start, day_or=day_or).get_next(datetime)
    assert isinstance(found, datetime)
    return found.astimezone(UTC)


def _near_change(instant: datetime, zone: str) -> bool:
    tz = ZoneInfo(zone)
    return (instant - timedelta(hours=3)).astimezone(tz).utcoffset() != (
        instant + timedelta(hours=3)
    ).astimezone(tz).utcoffset()


def _cases(rng: random.Random, count: int) -> list[tuple[str, datetime, str]]:
    cases: list[tuple[str, datetime, str]] = []
    zones = FIXED_ZONES + DST_ZONES
    while len(cases) < count:
        expr = _expression(rng)
        if not _possible(expr):
            continue
        seconds = rng.randint(0, 70 * 365 * 86400)  # 1990 .. 2060
        after = datetime(1990, 1, 1, tzinfo=UTC) + timedelta(seconds=seconds, microseconds=rng.choice([0, 1]))
        cases.append((expr, after, rng.choice(zones)))
    return cases


def _evaluate(conn: psycopg.Connection[Any], cases: list[tuple[str, datetime, str]]) -> list[datetime]:
    rows = conn.execute(
        """SELECT tenure.cron_next(c.expr, c.after, c.zone)
             FROM unnest(%s::text[], %s::timestamptz[], %s::text[]) WITH ORDINALITY AS c(expr, after, zone, n)
            ORDER BY c.n""",
        ([c[0] for c in cases], [c[1] for c in cases], [c[2] for c in cases]),
    ).fetchall()
    return [row[0] for row in rows]


def test_cron_next_agrees_with_croniter(admin: psycopg.Connection[Any]) -> None:
    rng = random.Random(SEED)
    cases = _cases(rng, CASES)
    ours = _evaluate(admin, cases)
    compared = 0
    mismatches = []
    for (expr, after, zone), got in zip(cases, ours, strict=True):
        expected = _reference(expr, after, zone)
        if zone in DST_ZONES and any(_near_change(t, zone) for t in (after, got, expected)):
            continue
        compared += 1
        if got != expected:
            mismatches.append(
                f"cron_next({expr!r}, {after.isoformat()}, {zone!r}) = {got}, croniter: {expected}"
            )
    assert not mismatches, f"{len(mismatches)} of {compared} differ, first: " + "\n".join(mismatches[:10])
    assert compared >= CASES * 0.95
    # The DST zones were compared too, away from their changes.
    assert sum(1 for c in cases if c[2] in DST_ZONES) > CASES // 4


def test_cron_next_chains_like_croniter(admin: psycopg.Connection[Any]) -> None:
    """Successive slots: each next time fed back as ``after`` follows croniter's iterator."""
    rng = random.Random(SEED + 1)
    for _ in range(40):
        expr = _expression(rng)
        if not _possible(expr):
            continue
        zone = rng.choice(FIXED_ZONES)
        after = datetime(2000, 1, 1, tzinfo=UTC) + timedelta(seconds=rng.randint(0, 40 * 365 * 86400))
        _, _, dom, _, dow = expr.split()
        day_or = not (dom.startswith("*") or dow.startswith("*"))
        reference = croniter(expr, after.astimezone(ZoneInfo(zone)), day_or=day_or)
        current = after
        for _ in range(25):
            row = admin.execute("SELECT tenure.cron_next(%s, %s, %s)", (expr, current, zone)).fetchone()
            assert row is not None
            expected = reference.get_next(datetime).astimezone(UTC)
            assert row[0] == expected, (expr, zone, current)
            current = row[0]


def test_impossible_expressions_are_refused(admin: psycopg.Connection[Any]) -> None:
    rng = random.Random(SEED + 2)
    refused = 0
    while refused < 30:
        expr = _expression(rng)
        if _possible(expr):
            continue
        with pytest.raises(psycopg.Error) as caught:
            admin.execute("SELECT tenure.cron_next(%s, now())", (expr,))
        assert caught.value.sqlstate == "TN001", expr
        refused += 1


def test_driver_schedules_as_a_worker(app_conninfo: str, connect: Any) -> None:
    """Every driver method of the area, as an application's tenure_worker role calls it."""
    driver = Driver(connect(app_conninfo))
    assert driver.cron_next("0 3 * * *", datetime(2026, 3, 28, 12, tzinfo=UTC), timezone="Europe/Zurich") == (
        datetime(2026, 3, 29, 1, tzinfo=UTC)
    )
    nightly = driver.schedule_set("nightly", "backup", cron="0 3 * * *", timezone="Europe/Zurich")
    assert nightly.cron == "0 3 * * *" and not nightly.paused and nightly.next_slot is not None
    assert nightly.next_slot > driver.server_time()
    ping = driver.schedule_set("ping", "ping", every=10, data={"to": "ops"}, catch_up="all")
    assert ping.every == timedelta(seconds=10) and ping.data == {"to": "ops"}
    assert ping.next_slot is not None and ping.next_slot.timestamp() % 10 == 0
    again = driver.schedule_set("ping", "ping", every=10, data={"to": "ops"}, catch_up="all")
    assert again.next_slot == ping.next_slot and again.updated_at == ping.updated_at
    with pytest.raises(InvalidArgument, match="p_cron and p_every are both given"):
        driver.schedule_set("x", "k", cron="* * * * *", every=5)
    with pytest.raises(InvalidArgument, match="minute field"):
        driver.schedule_set("x", "k", cron="99 * * * *")
    assert driver.schedule_tick() == []  # nothing due yet: the first slots are after now
    assert driver.schedule_pause("nightly").paused
    assert not driver.schedule_resume("nightly").paused
    task_id = driver.schedule_run_now("nightly")
    task = driver.task(task_id)
    assert task is not None and task.kind == "backup" and task.data == {"schedule": "nightly", "slot": None}
    rows = {row.name: row for row in driver.schedules()}
    assert set(rows) == {"nightly", "ping"}
    assert rows["nightly"].last_task_id == task_id and rows["nightly"].last_task_status == "pending"
    assert driver.schedule_drop("ping").name == "ping"
    with pytest.raises(NotFound):
        driver.schedule_drop("ping")


def test_tick_creates_each_slot_once(admin: psycopg.Connection[Any], connect: Any) -> None:
    """A due slot becomes one task whatever the number of ticks; the slot is in the data."""
    driver = Driver(admin)
    driver.schedule_set("yearly", "report", cron="0 0 1 1 *", catch_up="all", catch_up_limit=3)
    admin.execute("UPDATE tenure.schedule SET next_slot = '2020-01-01 00:00+00' WHERE name = 'yearly'")
    others = [Driver(connect()) for _ in range(3)]
    created = [slot for d in [driver, *others] for slot in d.schedule_tick()]
    year = driver.server_time().year
    assert sorted(s.slot.year for s in created) == [year - 2, year - 1, year]
    for slot in created:
        task = driver.task(slot.task_id)
        assert task is not None
        assert task.data == {"schedule": "yearly", "slot": slot.slot.strftime("%Y-%m-%dT%H:%M:%SZ")}
        assert task.max_attempts == 5
