"""Supervised commands: a program in any language that runs only while a grant is held.

``tenure elect --exec``, ``tenure claim run --exec`` and ``tenure task worker --exec`` all
run their commands through :class:`Supervisor`:

- Each command starts in a process group of its own, with what it holds in its
  environment (``TENURE_INSTANCE_ID``, ``TENURE_TYPE``/``TENURE_TERM``,
  ``TENURE_KEYSPACE``/``TENURE_KEY``/``TENURE_EPOCH``, ...), so that it can fence its
  writes with the SQL function of its area.
- Each is tied to a grant by ``held()``: the end of the grant's safe window on the
  monotonic clock, or None once it ended. When the grant ends, or its safe window passes
  without a renewal, the group gets SIGTERM at once and SIGKILL ``kill_grace`` seconds
  later. The supervisor keeps its own timer at that deadline: it does not wait for the
  runtime's callbacks, which a stop while the database is away can delay.
- A *warden* (:mod:`tenure.runtime.warden`), a small process in a session of its own,
  holds the same deadlines: when the shim is frozen (SIGSTOP) it sends the same signals at
  the same times, and when the shim dies (SIGKILL) its pipe closes and it stops every
  group at once. Either enforcer alone keeps the bound.

The bound: a grant's safe window ends one interval (I, a claim's cycle, a third of a task
lease) before any other instance can be granted it, so with ``kill_grace`` below that
interval a command is dead before its successor can start, whichever of the shim, the
warden or the command itself fails.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol, Self
from uuid import UUID

from tenure.errors import InvalidConfiguration
from tenure.runtime.loop import Runtime
from tenure.runtime.shutdown import SIGNAL_CHECK, shutdown_signals

log = logging.getLogger(__name__)

WARDEN = Path(__file__).with_name("warden.py")
# How often the supervisor looks at its children without being woken: a safety net only,
# every change it must act on wakes it (or is a deadline it waits for).
RECHECK = 0.5

Held = Callable[[], float | None]  # the grant's deadline (monotonic), None once it ended


def exit_status(returncode: int) -> int:
    """A child's return code as a shell reports it: 128 + N for death by signal N."""
    return 128 - returncode if returncode < 0 else returncode


def check_kill_grace(kill_grace: float, margin: float, *, margin_name: str) -> None:
    """Refuse a kill grace that would let a command outlive its grant: the group must be dead
    ``kill_grace`` after the safe window ends, before another instance can be granted it
    ``margin`` seconds after that end."""
    if not 0 < kill_grace < margin:
        raise InvalidConfiguration(
            f"--kill-grace must be above 0 and below {margin_name} ({margin:g} s), got {kill_grace:g} s",
            hint=f"A command gets SIGTERM when its safe window ends and SIGKILL kill-grace later; another "
            f"instance can be granted the grant {margin_name} after the window ends, so a longer grace "
            f"could let two commands run at once. Lengthen {margin_name} to allow a longer grace.",
        )


class Warden:
    """The shim's side of the warden process: started on first use, started again if it died
    or stopped reading. Its pipe is written without blocking, so a warden that is frozen
    itself can never hold up the shim's own enforcement: it is killed and replaced."""

    def __init__(self, kill_grace: float, *, label: str) -> None:
        self.kill_grace = kill_grace
        self.label = label
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._told: dict[int, str] = {}  # pgid -> the last line about it: what a new warden must hear

    def watch(self, pgid: int, deadline: float) -> None:
        self._tell(pgid, f"watch {pgid} {deadline!r}\n")

    def terminated(self, pgid: int, kill_at: float) -> None:
        """The shim sent the group SIGTERM: the warden sends none, only SIGKILL at ``kill_at``."""
        self._tell(pgid, f"term {pgid} {kill_at!r}\n")

    def forget(self, pgid: int) -> None:
        with self._lock:
            if self._told.pop(pgid, None) is not None:
                self._send(f"forget {pgid}\n")

    def _tell(self, pgid: int, line: str) -> None:
        with self._lock:
            self._told[pgid] = line
            self._send(line)

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def _send(self, line: str) -> None:
        """Write ``line``, whole, or replace the warden and tell the new one everything
        (called with _lock held)."""
        process = self._process
        if process is not None and process.poll() is None:
            assert process.stdin is not None
            data = line.encode()
            try:
                if os.write(process.stdin.fileno(), data) == len(data):
                    return
            except (BlockingIOError, BrokenPipeError):
                pass
            log.error("%s: the warden (pid %d) stopped reading; replacing it", self.label, process.pid)
            process.kill()
            process.wait()
        elif process is not None:
            log.error("%s: the warden exited (%s); starting another", self.label, process.returncode)
        process = self._process = subprocess.Popen(
            [sys.executable, "-I", "-S", str(WARDEN), repr(self.kill_grace)],
            stdin=subprocess.PIPE,
            start_new_session=True,  # out of reach of signals to the shim's process group
        )
        assert process.stdin is not None
        os.set_blocking(process.stdin.fileno(), False)
        everything = "".join(self._told.values())
        os.write(process.stdin.fileno(), everything.encode())  # a new pipe holds 64 KiB

    def close(self) -> None:
        """Close the pipe: the warden stops what it still watches (nothing, after a clean
        stop) and exits."""
        with self._lock:
            process, self._process = self._process, None
        if process is None:
            return
        assert process.stdin is not None
        with contextlib.suppress(BrokenPipeError):
            process.stdin.close()
        try:
            process.wait(timeout=self.kill_grace + 2.0)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@dataclass(eq=False)
class Child:
    """One supervised process: what it was started for, and how it ends."""

    key: str  # what it runs for: the service type, a claim key, a task id
    process: subprocess.Popen[bytes]
    held: Held
    deadline: float  # the end of the safe window the warden knows of
    started: float = field(default_factory=time.monotonic)
    terminated: float | None = None  # when SIGTERM was sent (monotonic)
    killed: bool = False
    reason: str | None = None  # why the supervisor stopped it; None: it exited by itself
    returncode: int | None = None
    done: threading.Event = field(default_factory=threading.Event)

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def stopped_by_us(self) -> bool:
        return self.reason is not None

    @property
    def status(self) -> int | None:
        """The exit status a shell would report (128 + N for signal N), once it ended."""
        return None if self.returncode is None else exit_status(self.returncode)


class Supervisor(Runtime):
    """Runs commands tied to grants, and stops each the moment its grant ends.

    ``spawn(key, held, env)`` starts ``argv`` for a grant; a thread of the supervisor
    watches every child: SIGTERM to its group when ``held()`` turns None or its deadline
    passes, SIGKILL ``kill_grace`` later. ``wake()`` makes it look at once (call it on
    every change of what is held: renewals move the warden's deadlines). ``on_exit(child)``
    runs on the supervisor's thread when a child ended, whoever ended it.
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        kill_grace: float,
        label: str,
        on_exit: Callable[[Child], None] | None = None,
    ) -> None:
        if not argv:
            raise InvalidConfiguration("--exec needs a command: tenure ... --exec -- CMD [ARGS...]")
        self.argv = list(argv)
        self.kill_grace = kill_grace
        self.label = label
        self._on_exit = on_exit
        self._state = threading.Condition()
        self._children: dict[int, Child] = {}  # pid -> child
        self._closing = False
        self._thread: threading.Thread | None = None
        self.warden = Warden(kill_grace, label=label)

    # -- life cycle ----------------------------------------------------------------------

    def start(self) -> Self:
        self._thread = threading.Thread(
            target=self._watch, name=f"tenure-supervisor-{self.label}", daemon=True
        )
        self._thread.start()
        return self

    def stop(self, reason: str = "the shim is stopping") -> None:
        """Stop every child (SIGTERM, SIGKILL after the grace) and wait for them, then the
        warden. Takes at most ``kill_grace`` plus a moment."""
        for child in self.children():
            self.terminate(child, reason)
        end = time.monotonic() + self.kill_grace + 1.0
        for child in self.children():
            child.done.wait(max(0.0, end - time.monotonic()))
        with self._state:
            self._closing = True
            self._state.notify_all()
        if self._thread is not None:
            self._thread.join()
        self.warden.close()

    # -- children ------------------------------------------------------------------------

    def children(self) -> list[Child]:
        with self._state:
            return list(self._children.values())

    def spawn(
        self,
        key: str,
        held: Held,
        env: Mapping[str, str],
        *,
        stdin: int | IO[Any] | None = None,
        stdout: int | IO[Any] | None = None,
        stderr: int | IO[Any] | None = None,
    ) -> Child | None:
        """Start the command for ``key`` with ``env`` added to this process's environment;
        None when the grant ended before it could start."""
        deadline = held()
        if deadline is None or deadline <= time.monotonic():
            return None
        process = subprocess.Popen(
            self.argv,
            env={**os.environ, **env},
            process_group=0,  # its own group: signals reach whatever it starts too
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
        )
        child = Child(key=key, process=process, held=held, deadline=deadline)
        self.warden.watch(process.pid, deadline)
        with self._state:
            self._children[process.pid] = child
            self._state.notify_all()
        threading.Thread(
            target=self._reap, args=(child,), name=f"tenure-child-{process.pid}", daemon=True
        ).start()
        log.info("%s: started %s for %s (pid %d)", self.label, self.argv[0], key, process.pid)
        return child

    def terminate(self, child: Child, reason: str) -> None:
        """SIGTERM to the child's group now (once), SIGKILL after the grace."""
        with self._state:
            if child.terminated is not None or child.done.is_set():
                return
            child.terminated = time.monotonic()
            child.reason = reason
            self._state.notify_all()
        log.info("%s: stopping pid %d (%s): %s", self.label, child.pid, child.key, reason)
        _signal(child.pid, signal.SIGTERM)
        self.warden.terminated(child.pid, child.terminated + self.kill_grace)

    def wake(self) -> None:
        """Look at every child's grant now."""
        with self._state:
            self._state.notify_all()

    def _reap(self, child: Child) -> None:
        returncode = child.process.wait()
        _signal(child.pid, signal.SIGKILL)  # whatever it left behind in its group
        self.warden.forget(child.pid)
        with self._state:
            if child.reason is None:
                # The warden stops a child at its deadline on its own, and after a freeze of
                # this process it does so before this watch can: a child that ended once its
                # grant was over was stopped for it, not a command that exited by itself
                # (which, without --restart, would make the shim give up and exit).
                deadline = child.held()
                if deadline is None or deadline <= time.monotonic():
                    child.reason = "its grant ended" if deadline is None else "its safe window passed"
            child.returncode = returncode
            self._children.pop(child.pid, None)
            self._state.notify_all()
        child.done.set()
        how = f"stopped ({child.reason})" if child.stopped_by_us else "exited by itself"
        log.info("%s: pid %d (%s) %s with status %d", self.label, child.pid, child.key, how, child.status)
        if self._on_exit is not None:
            try:
                self._on_exit(child)
            except Exception:
                log.exception("%s: on_exit failed", self.label)

    def _watch(self) -> None:
        with self._state:
            while not self._closing:
                now = time.monotonic()
                wake_at = now + RECHECK
                for child in list(self._children.values()):
                    if child.terminated is None:
                        deadline = child.held()
                        if deadline is None or deadline <= now:
                            why = "its grant ended" if deadline is None else "its safe window passed"
                            self._state.release()
                            try:
                                self.terminate(child, why)
                            finally:
                                self._state.acquire()
                            continue
                        if deadline != child.deadline:
                            child.deadline = deadline
                            self.warden.watch(child.pid, deadline)
                        wake_at = min(wake_at, deadline)
                    elif not child.killed:
                        kill_at = child.terminated + self.kill_grace
                        if now >= kill_at:
                            child.killed = True
                            _signal(child.pid, signal.SIGKILL)
                        else:
                            wake_at = min(wake_at, kill_at)
                self._state.wait(max(0.0, wake_at - time.monotonic()))


def _signal(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


# -- what each command runs its children for ------------------------------------------------

RESTART_AFTER = 1.0  # seconds between a command's exit and its restart under --restart


class Followed(Protocol):
    """What :class:`GrantedCommands` follows: a runtime (or a test's stand-in) that calls back
    at every change of what it holds."""

    @property
    def instance_id(self) -> UUID: ...

    def follow(self, callback: Callable[[], None]) -> None: ...


class Elected(Followed, Protocol):
    """What :class:`ElectedCommand` reads of an elector."""

    @property
    def utype(self) -> str: ...

    def grant_until(self) -> tuple[int, float] | None: ...


class Claiming(Followed, Protocol):
    """What :class:`ClaimedCommands` reads of a claimer."""

    @property
    def keyspace(self) -> str: ...

    def held_until(self) -> tuple[dict[str, int], float]: ...


class GrantedCommands:
    """What ``elect --exec`` and ``claim run --exec`` share: a loop that starts the command
    for each grant held that has none running, on every change (a follower of the runtime,
    a child's exit), until asked to stop or, without ``restart``, until a command exits by
    itself. Subclasses say which grants there are (``_wanted``)."""

    def __init__(
        self,
        runtime: Followed,
        argv: Sequence[str],
        *,
        kill_grace: float,
        restart: bool,
        label: str,
        say: Callable[[str], None] = log.info,
    ) -> None:
        self.runtime = runtime
        self.restart = restart
        self.say = say
        self.supervisor = Supervisor(argv, kill_grace=kill_grace, label=label, on_exit=self._exit)
        self.exits: list[Child] = []  # every child that ended, in order
        self._changed = threading.Condition()
        self._exited: Child | None = None  # a child that exited by itself, without restart
        self._last_exit: dict[str, float] = {}  # key -> when its child last exited by itself
        runtime.follow(self.changed)

    def changed(self) -> None:
        """What is held changed: the supervisor looks at its deadlines, this loop at the grants."""
        self.supervisor.wake()
        with self._changed:
            self._changed.notify_all()

    def _exit(self, child: Child) -> None:
        self.exits.append(child)
        how = f"stopped: {child.reason}" if child.stopped_by_us else "exited by itself"
        self.say(f"command for {child.key} (pid {child.pid}) {how}, status {child.status}")
        if not child.stopped_by_us:
            self._last_exit[child.key] = time.monotonic()
            if not self.restart and self._exited is None:
                self._exited = child
        self.changed()

    def _wanted(self) -> dict[str, tuple[Held, dict[str, str]]]:
        """The children there should be now: key -> (held, environment)."""
        raise NotImplementedError

    def _slot(self, key: str) -> str:
        """What at most one child may run for at a time: a grant's successor (the next term,
        the key in a new epoch) waits until the child of the grant before it is gone."""
        return key

    def run(self, stop: threading.Event | None = None) -> int:
        """Until ``stop`` is set (default: until SIGTERM or SIGINT) or, without ``restart``, a
        command exits by itself; then every command still running is stopped. Returns the
        exit status of the command that exited by itself, else of the last one stopped (0
        when none ran): what the shim exits with."""
        with contextlib.ExitStack() as stack:
            if stop is None:
                stop = stack.enter_context(shutdown_signals())
            stack.enter_context(self.supervisor)  # leaving it stops every child
            threading.Thread(target=self._wake_on, args=(stop,), daemon=True).start()
            self._loop(stop)
            running = self.supervisor.children()
            if running and self._exited is None:
                self.say(f"stopping {len(running)} command(s)")
        if self._exited is not None:
            return self._exited.status or 0
        return self.exits[-1].status or 0 if self.exits else 0

    def _wake_on(self, stop: threading.Event) -> None:
        stop.wait()  # set by a signal handler, which cannot take locks itself
        self.changed()

    def _loop(self, stop: threading.Event) -> None:
        while not stop.is_set() and self._exited is None:
            # A child being stopped counts until it is reaped: it may live on for the grace,
            # and its successor would run beside it, this very instance holding both grants
            # (a term lost on a failed renewal and the next won at once). Its exit wakes us.
            busy = {self._slot(child.key) for child in self.supervisor.children()}
            wait = RECHECK
            for key, (held, env) in self._wanted().items():
                if self._slot(key) in busy:
                    continue
                since_exit = time.monotonic() - self._last_exit.get(key, -RESTART_AFTER)
                if since_exit < RESTART_AFTER:
                    wait = min(wait, RESTART_AFTER - since_exit)
                    continue
                try:
                    self.supervisor.spawn(key, held, env)
                except OSError as error:
                    command = self.supervisor.argv[0]
                    raise InvalidConfiguration(f"--exec: cannot start {command!r}: {error}") from error
            with self._changed:
                if not stop.is_set():
                    # Bounded by SIGNAL_CHECK: a signal the kernel handed to another thread
                    # runs its handler (which sets stop) only when this main thread wakes.
                    self._changed.wait(min(wait, SIGNAL_CHECK))


class ElectedCommand(GrantedCommands):
    """``tenure elect --exec``: runs the command while ``elector`` is primary, one child per
    term, with ``TENURE_INSTANCE_ID``, ``TENURE_TYPE`` and ``TENURE_TERM``."""

    runtime: Elected

    def _wanted(self) -> dict[str, tuple[Held, dict[str, str]]]:
        elector = self.runtime
        grant = elector.grant_until()
        if grant is None:
            return {}
        term = grant[0]

        def held() -> float | None:
            now = elector.grant_until()
            return now[1] if now is not None and now[0] == term else None

        env = {
            "TENURE_INSTANCE_ID": str(elector.instance_id),
            "TENURE_TYPE": elector.utype,
            "TENURE_TERM": str(term),
        }
        return {f"term {term}": (held, env)}

    def _slot(self, key: str) -> str:
        return "primary"  # one command at a time, whatever the term


class ClaimedCommands(GrantedCommands):
    """``tenure claim run --exec``: one child per key ``claimer`` holds, with
    ``TENURE_INSTANCE_ID``, ``TENURE_KEYSPACE``, ``TENURE_KEY`` and ``TENURE_EPOCH``."""

    runtime: Claiming

    def _wanted(self) -> dict[str, tuple[Held, dict[str, str]]]:
        claimer = self.runtime
        keys, _ = claimer.held_until()
        wanted: dict[str, tuple[Held, dict[str, str]]] = {}
        for key, epoch in keys.items():

            def held(key: str = key, epoch: int = epoch) -> float | None:
                now, deadline = claimer.held_until()
                return deadline if now.get(key) == epoch else None

            env = {
                "TENURE_INSTANCE_ID": str(claimer.instance_id),
                "TENURE_KEYSPACE": claimer.keyspace,
                "TENURE_KEY": key,
                "TENURE_EPOCH": str(epoch),
            }
            wanted[f"{key} epoch {epoch}"] = (held, env)
        return wanted

    def _slot(self, key: str) -> str:
        return key.rsplit(" epoch ", 1)[0]  # one command per claim key, whatever the epoch


def command_line(words: Sequence[str] | None) -> list[str] | None:
    """The command of ``--exec -- CMD [ARGS...]`` (argparse keeps the ``--``); None without --exec.
    A command that cannot be found is refused here, before anything is held."""
    if words is None:
        return None
    argv = list(words[1:] if words and words[0] == "--" else words)
    if not argv:
        raise InvalidConfiguration("--exec needs a command: --exec -- CMD [ARGS...]")
    if shutil.which(argv[0]) is None:
        raise InvalidConfiguration(
            f"--exec: {argv[0]!r} is not an executable file, nor a program on PATH",
            hint="Give a path to an executable (chmod +x) or the name of a program on PATH.",
        )
    return argv
