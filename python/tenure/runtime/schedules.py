"""Schedules declared in Python, next to the processors they feed.

``schedule(...)`` decorates a processor with the schedule that feeds it; a
``Schedules`` registry collects them, ``sync_schedules`` sets them in the database
(idempotent: ``schedule_set`` keeps each schedule's progress), and
``Schedules.processors()`` is the mapping a ``TaskWorker`` takes. The elected
:class:`~tenure.runtime.maintain.Maintainer` turns their due slots into tasks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from types import ModuleType
from typing import Any

from tenure.driver import Driver, ScheduleInfo
from tenure.errors import InvalidArgument


@dataclass(frozen=True)
class ScheduleSpec:
    """A schedule as ``schedule(...)`` declares it: the arguments of ``schedule_set``."""

    name: str
    kind: str
    cron: str | None = None
    every: timedelta | None = None
    timezone: str = "UTC"
    data: Any = None
    max_attempts: int = 5
    catch_up: str = "latest"
    catch_up_limit: int = 10

    def set(self, driver: Driver) -> ScheduleInfo:
        return driver.schedule_set(
            self.name,
            self.kind,
            cron=self.cron,
            every=self.every,
            timezone=self.timezone,
            data=self.data,
            max_attempts=self.max_attempts,
            catch_up=self.catch_up,
            catch_up_limit=self.catch_up_limit,
        )


SPEC_ATTRIBUTE = "tenure_schedule"
F = Callable[..., Any]


def schedule(
    cron: str | None = None,
    *,
    every: timedelta | float | None = None,
    tz: str = "UTC",
    name: str | None = None,
    kind: str | None = None,
    data: Any = None,
    max_attempts: int = 5,
    catch_up: str = "latest",
    catch_up_limit: int = 10,
) -> Callable[[F], F]:
    """Declare the schedule that feeds a processor: ``@schedule("0 3 * * *", tz="Europe/Zurich")``
    or ``@schedule(every=10)``. The name and the kind default to the function's name.

    It returns the function unchanged, with a :class:`ScheduleSpec` attached; a
    :class:`Schedules` registry collects them. The database checks the expression and
    the zone when the schedule is set (``sync_schedules``).
    """
    if (cron is None) == (every is None):
        raise InvalidArgument("a schedule takes exactly one of a cron expression and every=")
    interval = every if every is None or isinstance(every, timedelta) else timedelta(seconds=every)

    def decorate(function: F) -> F:
        function_name = getattr(function, "__name__", None)
        if not (name or kind) and not function_name:
            raise InvalidArgument(f"{function!r} has no __name__: give the schedule a name and a kind")
        spec = ScheduleSpec(
            name=name or str(function_name),
            kind=kind or str(function_name),
            cron=cron,
            every=interval,
            timezone=tz,
            data=data,
            max_attempts=max_attempts,
            catch_up=catch_up,
            catch_up_limit=catch_up_limit,
        )
        setattr(function, SPEC_ATTRIBUTE, spec)
        return function

    return decorate


class Schedules:
    """A registry of scheduled processors: ``Schedules(fn, ...)``, ``Schedules.of(module)``,
    or ``@registry.schedule(...)`` to declare and register in one step."""

    def __init__(self, *functions: F) -> None:
        self._entries: dict[str, tuple[ScheduleSpec, F]] = {}
        for function in functions:
            self.add(function)

    @classmethod
    def of(cls, *modules: ModuleType) -> Schedules:
        """Every function a ``@schedule`` decorated in the modules' namespaces."""
        found = [
            value
            for module in modules
            for value in vars(module).values()
            if callable(value) and isinstance(getattr(value, SPEC_ATTRIBUTE, None), ScheduleSpec)
        ]
        return cls(*found)

    def add(self, function: F) -> F:
        spec = getattr(function, SPEC_ATTRIBUTE, None)
        if not isinstance(spec, ScheduleSpec):
            raise InvalidArgument(f"{function!r} carries no @schedule")
        known = self._entries.get(spec.name)
        if known is not None and known[1] is not function:
            raise InvalidArgument(f"two functions declare the schedule {spec.name!r}")
        clash = [s.name for s, f in self._entries.values() if s.kind == spec.kind and f is not function]
        if clash:
            raise InvalidArgument(
                f"the kind {spec.kind!r} of schedule {spec.name!r} is already processed by "
                f"another function (schedule {clash[0]!r})"
            )
        self._entries[spec.name] = (spec, function)
        return function

    def schedule(self, cron: str | None = None, **options: Any) -> Callable[[F], F]:
        """``schedule(...)`` that also registers the function here."""

        def decorate(function: F) -> F:
            return self.add(schedule(cron, **options)(function))

        return decorate

    @property
    def specs(self) -> list[ScheduleSpec]:
        return [spec for spec, _ in sorted(self._entries.values(), key=lambda e: e[0].name)]

    def processors(self) -> dict[str | tuple[str, str], Callable[..., Any]]:
        """kind -> processor: the mapping ``TaskWorker(processors=...)`` takes (merge with others)."""
        return {spec.kind: function for spec, function in self._entries.values()}

    def sync(self, driver: Driver) -> list[ScheduleInfo]:
        return sync_schedules(driver, self)


def sync_schedules(
    driver: Driver, schedules: Schedules | Iterable[F] | Mapping[str, F]
) -> list[ScheduleInfo]:
    """Set every declared schedule in the database (``schedule_set``, one call each).

    Idempotent: an unchanged schedule keeps its next slot and its pause; a changed
    expression, interval or zone starts again at its first slot after now. Schedules
    that are in the database but not declared here are left alone.
    """
    if not isinstance(schedules, Schedules):
        values = schedules.values() if isinstance(schedules, Mapping) else schedules
        schedules = Schedules(*values)
    return [spec.set(driver) for spec in schedules.specs]
