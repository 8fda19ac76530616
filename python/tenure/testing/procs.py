"""Process bookkeeping for the harnesses (Patroni cluster, pgbouncer): read /proc,
signal whole process trees, and sweep away everything a scratch directory started.
It imports nothing but the standard library: the system python runs it as a script.

PostgreSQL backends call setsid(), and Patroni starts the postmaster through a helper
that exits, so neither process groups nor parent links from the harness reach every
process. What does reach them: the postmaster's command line names its data directory,
every other harness process names its scratch directory, and the rest descend from those.

``python procs.py --reap COMMAND...`` runs COMMAND as its child and, as a child subreaper,
adopts and reaps whatever COMMAND leaves orphaned (Patroni's postmaster and, after a
kill, its backends); it exits with COMMAND's status once it has no child left. Without
it the orphans go to PID 1, which on this machine never reaps them: killed ones stay
zombies. Sweeps leave these reapers alone: they end by themselves.

``python procs.py --watch DIR`` is the watchdog every harness starts: it waits until its
stdin closes (the harness is done, or its process died in any way, even by SIGKILL),
then sweeps DIR: SIGCONT and SIGKILL to every process of DIR, then removes DIR.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import pwd
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import Any, Self


class Harness:
    """A test harness as a context manager: started on entry, closed on exit whatever
    happens, and its logs written to stderr when starting or the ``with`` block failed."""

    def start(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def failure_logs(self) -> str:
        raise NotImplementedError

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            sys.stderr.write(self.failure_logs())
            self.close()
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is not None:
            sys.stderr.write(self.failure_logs())
        self.close()


class RunAs:
    """Popen arguments that run a child as the ``postgres`` user when we are root."""

    def __init__(self) -> None:
        self.root = os.geteuid() == 0
        entry = pwd.getpwnam("postgres") if self.root else pwd.getpwuid(os.geteuid())
        self.uid, self.gid = entry.pw_uid, entry.pw_gid

    def popen_args(self) -> dict[str, Any]:
        return {"user": self.uid, "group": self.gid, "extra_groups": []} if self.root else {}

    def own(self, path: Path) -> None:
        if self.root:
            os.chown(path, self.uid, self.gid)

    def can_enter(self, directory: Path) -> bool:
        """Whether the child's user may pass through directory and every one above it."""
        if not self.root:
            return True
        for path in [directory.resolve(), *directory.resolve().parents]:
            info = path.stat()
            bit = 0o100 if info.st_uid == self.uid else 0o010 if info.st_gid == self.gid else 0o001
            if not info.st_mode & bit:
                return False
        return True


def missing_programs(*names: str, path: str | None = None) -> list[str]:
    """The names that are not found on PATH (or on path)."""
    return [name for name in names if shutil.which(name, path=path) is None]


def under_ci() -> bool:
    """CI is set (as CI services set it): there a missing program fails a test instead of skipping it."""
    return os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


# Below Linux's ephemeral range (32768-60999), so that no outgoing connection takes a port
# between the moment it is chosen and the moment its server binds it (a Patroni REST API
# once failed with "Address already in use" that way).
_PORTS = range(10000, 32768)
_handed_out: set[int] = set()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago, not handed out before by this process."""
    while True:
        port = random.choice(_PORTS)
        if port in _handed_out:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port


def process_table() -> dict[int, tuple[int, str, str]]:
    """pid -> (ppid, state letter, command line) of every process alive now."""
    table: dict[int, tuple[int, str, str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        # the command name in parentheses may hold spaces and parentheses itself
        fields = stat[stat.rindex(")") + 2 :].split()
        table[int(entry)] = (int(fields[1]), fields[0], cmdline.replace(b"\0", b" ").decode(errors="replace"))
    return table


def alive(pid: int, table: dict[int, tuple[int, str, str]] | None = None) -> bool:
    """True while pid exists and is not a zombie."""
    if table is not None:
        return pid in table and table[pid][1] not in "ZX"
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] not in "ZX"


def descendants(roots: Iterable[int], table: dict[int, tuple[int, str, str]] | None = None) -> set[int]:
    """The roots that are alive and every process below them."""
    table = process_table() if table is None else table
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found: set[int] = set()
    todo = [pid for pid in roots if alive(pid, table)]
    while todo:
        pid = todo.pop()
        if pid in found:
            continue
        found.add(pid)
        todo.extend(children.get(pid, []))
    return found


def postmaster_pid(data_dir: Path) -> int | None:
    """The pid in data_dir/postmaster.pid if that process is alive and serves data_dir."""
    try:
        pid = int((data_dir / "postmaster.pid").read_text().split("\n", 1)[0])
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except (OSError, ValueError):
        return None
    return pid if str(data_dir) in cmdline and alive(pid) else None


def signal_all(pids: Iterable[int], signum: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)


def freeze_tree(roots: Iterable[int]) -> set[int]:
    """SIGSTOP the roots and all below them, again until no new process shows up."""
    roots = list(roots)
    stopped: set[int] = set()
    for _ in range(20):
        found = descendants(roots) - stopped
        if not found:
            break
        signal_all(found, signal.SIGSTOP)
        stopped |= found
    return stopped


def processes_of(directory: Path, *, exclude: Iterable[int] = ()) -> set[int]:
    """Every live process whose command line names directory, postmasters with a data
    directory below it, and everything below those."""
    table = process_table()
    skip = {os.getpid(), *exclude}
    needle = f"{directory}/"
    skip |= {pid for pid, (_, _, cmdline) in table.items() if REAPER_MARK in cmdline}
    roots = {pid for pid, (_, _, cmdline) in table.items() if needle in cmdline and pid not in skip}
    if directory.is_dir():
        for pidfile in directory.glob("**/postmaster.pid"):
            pid = postmaster_pid(pidfile.parent)
            if pid is not None:
                roots.add(pid)
    return descendants(roots, table) - skip


def reapers_of(directory: Path) -> set[int]:
    """The live reapers (``--reap``) whose command names directory."""
    needle = f"{directory}/"
    return {
        pid
        for pid, (_, state, cmdline) in process_table().items()
        if REAPER_MARK in cmdline and needle in cmdline and state not in "ZX"
    }


def sweep(
    directory: Path, *, exclude: Iterable[int] = (), remove: bool = True, timeout: float = 15.0
) -> None:
    """SIGCONT + SIGKILL every process of directory until none is left, then remove it.
    Its reapers get SIGCONT only (a frozen one would never reap), and end by themselves."""
    exclude = set(exclude)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = processes_of(directory, exclude=exclude)
        reapers = reapers_of(directory)
        signal_all(reapers, signal.SIGCONT)
        if not pids and not reapers:
            break
        signal_all(pids, signal.SIGCONT)
        signal_all(pids, signal.SIGKILL)
        time.sleep(0.05)
    else:
        # a reaper that did not end: its orphans go to PID 1 (maybe as zombies), but go
        signal_all(reapers_of(directory), signal.SIGKILL)
    if remove:
        shutil.rmtree(directory, ignore_errors=True)


REAPER_MARK = "procs.py --reap "
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


def die_with_parent(signum: int = signal.SIGTERM) -> None:
    """Have the kernel send signum to this process when its parent dies, however it dies."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")


def reaper_command(command: list[str], *, script: Path | None = None) -> list[str]:
    """command, run under a subreaper (see the module docstring); the reaper runs this file, or
    ``script``, a copy of it that :func:`script_copy` made."""
    # the system python: the reaper may run as a user that cannot read the test's venv
    return ["/usr/bin/python3", str(script or Path(__file__).resolve()), "--reap", *command]


def script_copy(directory: Path) -> Path:
    """A copy of this file in directory, readable by everyone, for a reaper that runs as another
    user: that user may not be able to read the checkout (a clone under /root or in a
    ``mktemp -d`` directory, mode 0700), so a harness never points it there."""
    copy = directory / Path(__file__).name
    shutil.copyfile(Path(__file__).resolve(), copy)
    copy.chmod(0o644)
    return copy


def _reap(command: list[str]) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")
    child = subprocess.Popen(command)
    # pass on what a harness may send to stop the command gracefully
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, lambda signum, _frame: os.kill(child.pid, signum))
    status = 0
    while True:
        try:
            pid, wait_status = os.wait()
        except ChildProcessError:
            return status
        except InterruptedError:
            continue
        if pid == child.pid:
            status = os.waitstatus_to_exitcode(wait_status)
            child.returncode = status


def start_watchdog(directory: Path) -> subprocess.Popen[bytes]:
    """Sweeps directory when its stdin closes: when the caller closes it, or dies."""
    return subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "--watch", str(directory)],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
    )


def stop_watchdog(watchdog: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    if watchdog.stdin is not None:
        with contextlib.suppress(OSError):
            watchdog.stdin.close()
    try:
        watchdog.wait(timeout)
    except subprocess.TimeoutExpired:
        watchdog.kill()
        watchdog.wait()


def _watch(directory: Path) -> None:
    # ignore the signals a terminal or a test runner sends to its whole group
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)
    while sys.stdin.buffer.read(4096):
        pass
    sweep(directory)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--watch":
        _watch(Path(sys.argv[2]))
    elif len(sys.argv) > 2 and sys.argv[1] == "--reap":
        sys.exit(_reap(sys.argv[2:]))
    else:
        sys.exit("usage: procs.py --watch DIR | --reap COMMAND...")
