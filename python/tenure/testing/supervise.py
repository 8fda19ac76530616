"""Supervised commands as real processes, for the fault tests, the demo and the bench of
``tenure elect --exec`` and ``tenure claim run --exec``.

- :class:`Shim`: one ``tenure elect --exec`` or ``tenure claim run --exec`` process, run
  under the harness's reaper (:mod:`tenure.testing.procs`) so that what it leaves behind
  when it is killed is reaped, never left a zombie of PID 1.
- The child every shim supervises is :mod:`tenure.testing.fenced_child`: it logs its start,
  every fenced write and its end on the monotonic clock, one file per process.
- :class:`DeathWatch`: a thread that notes when each child is first seen gone (dead or a
  zombie), polling /proc every few milliseconds: an upper bound of its death, whatever
  killed it.
- :class:`Fleet`: shims of one service type or keyspace, with the watch, the faults
  (SIGKILL and SIGSTOP of a shim, ``pg_terminate_backend`` of its connections, SIGKILL of
  its child) and the checks of the children's lives against each other and the database.

The checks read a child's life as the interval from its first log line (it does nothing
before it) to the moment the watch first saw it gone: a sound over-approximation, so
intervals that do not meet prove that no two children ran at the same instant.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Self
from uuid import UUID

import psycopg

from tenure.testing.child import ChildProcess
from tenure.testing.claims import check_claim_records
from tenure.testing.history import FencedWrite, check_writes, read_terms
from tenure.testing.procs import alive, reaper_command, sweep

CHILD = Path(__file__).with_name("fenced_child.py")
WATCH_EVERY = 0.003  # seconds between two looks of the death watch


# -- the children -------------------------------------------------------------------------


def _start_time(pid: int) -> int | None:
    """The kernel's start time of ``pid`` while it is alive and not a zombie, else None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return None if fields[0] in "ZX" else int(fields[19])


@dataclass
class ChildLife:
    """One supervised child, from its own log and from the death watch."""

    pid: int
    instance: UUID
    resource: str  # the service type, or the claim key
    grant: int  # the term, or the claim's epoch
    started: float  # its first log line (monotonic)
    events: list[dict[str, Any]]
    gone: float | None  # when the watch first saw it gone: at or after its death

    def _first(self, event: str) -> float | None:
        return next((e["mono"] for e in self.events if e["event"] == event), None)

    @property
    def sigterm(self) -> float | None:
        """When SIGTERM reached it (its own log)."""
        return self._first("sigterm")

    @property
    def exited(self) -> float | None:
        """Its last act when it left on SIGTERM; None when it was SIGKILLed."""
        return self._first("exit")

    @property
    def died(self) -> float | None:
        """Its death as precisely as known: the exit it logged, else when it was seen gone."""
        return self.exited if self.exited is not None else self.gone

    @property
    def until(self) -> float:
        """The end of its life for the overlap checks: when it was seen gone (infinity while
        it is not), never earlier than its death."""
        return self.gone if self.gone is not None else float("inf")

    @property
    def writes(self) -> list[dict[str, Any]]:
        return [e for e in self.events if e["event"] == "write"]

    @property
    def refused(self) -> list[dict[str, Any]]:
        return [e for e in self.events if e["event"] == "refused"]


def _read_events(path: Path) -> list[dict[str, Any]]:
    events = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(ValueError):  # a line being written
            events.append(json.loads(line))
    return events


class DeathWatch:
    """Watches every child that logs into ``log_dir`` and notes when it is first seen gone."""

    def __init__(self, log_dir: Path, *, every: float = WATCH_EVERY) -> None:
        self.log_dir = log_dir
        self.every = every
        self._known: dict[int, int] = {}  # pid -> its start time, while alive
        self._gone: dict[int, float] = {}  # pid -> first seen gone
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tenure-death-watch", daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._look()
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self._look()

    def _look(self) -> None:
        now = time.monotonic()
        for name in os.listdir(self.log_dir):
            pid = int(name.split(".")[0])
            if pid in self._known or pid in self._gone:
                continue
            first = _read_events(self.log_dir / name)[:1]
            if not first:
                continue  # the start line is being written
            with self._lock:
                self._known[pid] = first[0]["started"]
        for pid, started in list(self._known.items()):
            if _start_time(pid) != started:  # gone, a zombie, or its pid reused
                with self._lock:
                    del self._known[pid]
                    self._gone[pid] = now

    def lives(self) -> list[ChildLife]:
        """Every child so far, in the order they started."""
        found = []
        for path in self.log_dir.glob("*.jsonl"):
            events = _read_events(path)
            if not events:
                continue
            start = events[0]
            with self._lock:
                gone = self._gone.get(start["pid"])
            found.append(
                ChildLife(
                    pid=start["pid"],
                    instance=UUID(start["instance"]),
                    resource=start.get("utype") or start["key"],
                    grant=start.get("term") or start["epoch"],
                    started=start["mono"],
                    events=events,
                    gone=gone,
                )
            )
        return sorted(found, key=lambda life: life.started)

    def living(self) -> list[ChildLife]:
        return [life for life in self.lives() if life.gone is None]

    def wait_for(self, condition: Callable[[list[ChildLife]], Any], *, timeout: float, what: str) -> Any:
        """Look at the lives until ``condition`` returns something true, and return it."""
        end = time.monotonic() + timeout
        while True:
            found = condition(self.lives())
            if found:
                return found
            if time.monotonic() > end:
                raise TimeoutError(f"{what}: not within {timeout} s")
            time.sleep(0.01)


# -- the shims ----------------------------------------------------------------------------


class Shim(ChildProcess):
    """One ``tenure elect --exec`` or ``tenure claim run --exec`` process under a reaper:
    ``process`` is the reaper, :attr:`pid` the shim itself (the target of the faults)."""

    def __init__(self, tenure_args: Sequence[str], child_args: Sequence[str], log_path: Path, *, name: str):
        self.name = name
        command = [
            *(sys.executable, "-m", "tenure", *tenure_args, "--name", name),
            *("--exec", "--", sys.executable, str(CHILD), *child_args),
        ]
        super().__init__(reaper_command(command), log_path)
        self._pid: int | None = None
        self._instance: UUID | None = None

    @property
    def pid(self) -> int:
        """The shim's pid (the reaper's first child)."""
        end = time.monotonic() + 20
        while self._pid is None:
            reaper = self.process.pid
            with contextlib.suppress(OSError, ValueError, IndexError):
                self._pid = int(Path(f"/proc/{reaper}/task/{reaper}/children").read_text().split()[0])
            if self._pid is None:
                if time.monotonic() > end or self.process.poll() is not None:
                    raise RuntimeError(f"shim {self.name} did not start:\n{self.output()}")
                time.sleep(0.01)
        return self._pid

    @property
    def instance_id(self) -> UUID:
        if self._instance is None:
            self._instance = UUID(
                self.wait_for_output(r"(?:instance|claimer) ([0-9a-f-]{36}) \(", 20).group(1)
            )
        return self._instance

    def signal(self, signum: int) -> None:
        """Send ``signum`` to the shim itself (not its reaper)."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signum)

    def exit_status(self, timeout: float) -> int:
        """The shim's exit status, once it and all it left behind are gone (the reaper's)."""
        return self.process.wait(timeout)

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError, RuntimeError):
            if alive(self.pid):
                os.kill(self.pid, signal.SIGCONT)
        super().stop()


# -- the faults ---------------------------------------------------------------------------

FAULTS = ("shim SIGKILL", "shim SIGSTOP", "connections killed", "child SIGKILL")


@dataclass
class Fault:
    kind: str
    at: float  # monotonic
    shim: Shim
    child: ChildLife  # the child that was running under the shim
    renewed_at: datetime | None = None  # the grant's last renewal when the fault struck (server clock)
    resumed: float | None = None  # when a frozen shim got SIGCONT
    notes: dict[str, Any] = field(default_factory=dict)


class ServerClock:
    """Server timestamps on the host's monotonic clock: the offset is measured around a
    ``clock_timestamp()`` query (its error is at most half the round trip, noted)."""

    def __init__(self, connection: psycopg.Connection[Any], *, samples: int = 5) -> None:
        best: tuple[float, float] | None = None
        for _ in range(samples):
            before = time.monotonic()
            row = connection.execute("SELECT clock_timestamp()").fetchone()
            after = time.monotonic()
            assert row is not None
            offset = row[0].timestamp() - (before + after) / 2
            if best is None or after - before < best[1]:
                best = (offset, after - before)
        assert best is not None
        self.offset, self.round_trip = best

    def mono(self, at: datetime) -> float:
        return at.timestamp() - self.offset


class Fleet:
    """Shims of one service type (``elect``) or keyspace (``claim``) whose children write
    as ``app_conninfo``; ``admin`` reads tenure's records and kills connections."""

    def __init__(
        self,
        admin: psycopg.Connection[Any],
        app_conninfo: str,
        workdir: Path,
        *,
        elect: str | None = None,
        claim: str | None = None,
        interval: float,
        timeout: float,
        kill_grace: float | None = None,
        every: float = 0.05,
    ) -> None:
        if (elect is None) == (claim is None):
            raise ValueError("a fleet elects for a type or claims in a keyspace")
        self.admin = admin
        self.app_conninfo = app_conninfo
        self.workdir = workdir
        self.log_dir = workdir / "children"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.resource = elect or claim or ""
        self.elect = elect is not None
        self.interval, self.timeout = interval, timeout
        self.kill_grace = kill_grace if kill_grace is not None else interval / 2
        self.every = every
        self.shims: list[Shim] = []
        self.faults: list[Fault] = []
        self.watch = DeathWatch(self.log_dir)
        self.clock = ServerClock(admin)

    def __enter__(self) -> Self:
        self.watch.__enter__()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if exc_type is not None:
                for shim in self.shims:
                    sys.stderr.write(f"--- shim {shim.name} ---\n{shim.output()}")
            self.stop()
        finally:
            self.watch.__exit__()

    def spawn(self, *, restart: bool = False, ignore_term: bool = False) -> Shim:
        name = f"shim{len(self.shims) + 1}"
        if self.elect:
            command = ["elect", "--type", self.resource, "--interval", str(self.interval)]
            command += ["--timeout", str(self.timeout)]
        else:
            command = ["claim", "run", "--keyspace", self.resource, "--cycle", str(self.interval)]
            command += ["--expiry", str(self.timeout)]
        command += ["--db", self.app_conninfo, "--kill-grace", str(self.kill_grace)]
        if restart:
            command.append("--restart")
        child = ["--db", self.app_conninfo, "--log-dir", str(self.log_dir), "--every", str(self.every)]
        if ignore_term:
            child.append("--ignore-term")
        shim = Shim(command, child, self.workdir / f"{name}.log", name=name)
        _ = shim.pid  # now, while the shim is its reaper's only child
        self.shims.append(shim)
        return shim

    def stop(self) -> None:
        """Stop every shim (SIGCONT, SIGTERM, SIGKILL after a while), then sweep away anything
        of this fleet still running."""
        for shim in self.shims:
            shim.stop()
        # Every process of the fleet names the children's log directory, WORKDIR/children,
        # on its command line; sweep looks for WORKDIR/ in them.
        sweep(self.workdir, remove=False)

    def shim_of(self, instance: UUID) -> Shim:
        return next(shim for shim in self.shims if shim.instance_id == instance)

    def living(self) -> list[ChildLife]:
        return self.watch.living()

    def wait_for_child(
        self, *, other_than: Iterable[UUID] = (), after: float = 0.0, timeout: float = 30.0
    ) -> ChildLife:
        """A living child of an instance not in ``other_than``, started after ``after``."""
        excluded = set(other_than)

        def found(lives: list[ChildLife]) -> ChildLife | None:
            return next(
                (
                    life
                    for life in lives
                    if life.gone is None
                    and life.instance not in excluded
                    and life.started > after
                    # its shim is one of ours and has written at least once: the child is at work
                    and life.writes
                ),
                None,
            )

        life: ChildLife = self.watch.wait_for(found, timeout=timeout, what="a new child at work")
        return life

    def wait_gone(self, child: ChildLife, timeout: float = 30.0) -> ChildLife:
        life: ChildLife = self.watch.wait_for(
            lambda lives: next((x for x in lives if x.pid == child.pid and x.gone is not None), None),
            timeout=timeout,
            what=f"child {child.pid} gone",
        )
        return life

    # -- faults ---------------------------------------------------------------------------

    def strike(self, kind: str, child: ChildLife) -> Fault:
        """The fault ``kind`` on the shim running ``child`` (or on the child itself)."""
        shim = self.shim_of(child.instance)
        if kind == "shim SIGKILL":
            at = time.monotonic()
            shim.signal(signal.SIGKILL)
            fault = Fault(kind, at, shim, child)
        elif kind == "shim SIGSTOP":
            at = time.monotonic()
            shim.signal(signal.SIGSTOP)
            fault = Fault(kind, at, shim, child)
        elif kind == "connections killed":
            # The last renewal read in the same statement that cuts the shim off: no later
            # renewal of this shim can be answered to it.
            row = self.admin.execute(
                "SELECT (SELECT renewed_at FROM tenure.heartbeat WHERE utype = %s), "
                "count(*) FILTER (WHERE pg_terminate_backend(pid)) "
                "FROM pg_stat_activity WHERE application_name LIKE %s",
                (self.resource, f"tenure % {shim.name}:%"),
            ).fetchone()
            at = time.monotonic()
            assert row is not None and row[1] >= 1, f"no connection of {shim.name} found"
            fault = Fault(kind, at, shim, child, renewed_at=row[0], notes={"terminated": row[1]})
        elif kind == "child SIGKILL":
            at = time.monotonic()
            with contextlib.suppress(ProcessLookupError):
                os.kill(child.pid, signal.SIGKILL)
            fault = Fault(kind, at, shim, child)
        else:
            raise ValueError(f"unknown fault {kind!r}; choose from {FAULTS}")
        self.faults.append(fault)
        return fault

    def resume(self, fault: Fault) -> None:
        fault.resumed = time.monotonic()
        fault.shim.signal(signal.SIGCONT)

    # -- checks ---------------------------------------------------------------------------

    def check_takeovers(self, *, bound: float) -> list[str]:
        """A child of another instance at work within ``bound`` seconds of each fault that
        ended a grant (a fault with restart expects one from the same instance)."""
        problems = []
        lives = self.watch.lives()
        for fault in self.faults:
            if fault.notes.get("restart"):
                after = [x for x in lives if x.started > fault.at and x.instance == fault.child.instance]
            else:
                after = [
                    x
                    for x in lives
                    if x.started > fault.at
                    and x.resource == fault.child.resource
                    and x.pid != fault.child.pid
                ]
            if not after:
                problems.append(f"{fault.kind} at {fault.at:.3f}: no child after it")
                continue
            took = after[0].started - fault.at
            if took > bound:
                problems.append(
                    f"{fault.kind}: the next child started {took:.3f} s later, bound {bound:.3f} s"
                )
        return problems


def check_no_overlap(lives: Sequence[ChildLife]) -> list[str]:
    """Two children of one resource (a service type, a claim key) alive at one instant."""
    problems = []
    by_resource: dict[str, list[ChildLife]] = {}
    for life in lives:
        by_resource.setdefault(life.resource, []).append(life)
    for resource, group in by_resource.items():
        group.sort(key=lambda x: x.started)
        for n, earlier in enumerate(group):
            for later in group[n + 1 :]:
                if later.started < earlier.until:
                    problems.append(
                        f"{resource}: child {later.pid} ({later.instance}, {later.grant}) started at "
                        f"{later.started:.3f} while child {earlier.pid} ({earlier.instance}, "
                        f"{earlier.grant}) was alive (seen gone at {earlier.until:.3f})"
                    )
    return problems


def most_alive(lives: Sequence[ChildLife]) -> tuple[int, float]:
    """The largest number of children alive at one instant, and the first instant of it."""
    changes = sorted(
        [(x.started, 1) for x in lives] + [(x.until, -1) for x in lives], key=lambda c: (c[0], c[1])
    )
    count, most, when = 0, 0, 0.0
    for at, change in changes:
        count += change
        if count > most:
            most, when = count, at
    return most, when


def check_heartbeat_writes(
    admin: psycopg.Connection[Any], utype: str, lives: Sequence[ChildLife]
) -> list[str]:
    """Every row the children wrote lies in its writer's term by the server's history, and
    the rows of each grant are the writes its children saw acknowledged (plus at most one
    per child: a commit whose answer it did not live to log)."""
    terms = read_terms(admin, utype)
    rows = admin.execute(
        "SELECT utype, instance_id, term, done_at FROM tenure_demo.work WHERE utype = %s", (utype,)
    ).fetchall()
    writes = [FencedWrite(*row) for row in rows]
    stored = Counter((w.instance_id, w.term) for w in writes)
    return check_writes(terms, writes) + _count_writes(stored, lives, lambda x: (x.instance, x.grant))


def check_claim_writes(
    admin: psycopg.Connection[Any], keyspace: str, lives: Sequence[ChildLife]
) -> list[str]:
    """The same for claims, by the claim log."""
    problems = check_claim_records(admin, keyspace, max_gap=float("inf"))
    rows = admin.execute(
        "SELECT instance_id, key, epoch FROM tenure_demo.claim_work WHERE keyspace = %s", (keyspace,)
    ).fetchall()
    stored = Counter((instance, key, epoch) for instance, key, epoch in rows)
    return problems + _count_writes(stored, lives, lambda x: (x.instance, x.resource, x.grant))


def _count_writes(
    stored: Counter[Any], lives: Sequence[ChildLife], grant: Callable[[ChildLife], Any]
) -> list[str]:
    logged: Counter[Any] = Counter()
    children: Counter[Any] = Counter()
    for life in lives:
        logged[grant(life)] += len(life.writes)
        children[grant(life)] += 1
    return [
        f"{key}: its children logged {logged[key]} acknowledged writes, the table has {stored[key]}"
        for key in set(logged) | set(stored)
        if not logged[key] <= stored[key] <= logged[key] + children[key]
    ]
