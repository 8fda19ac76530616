"""The warden: a small process beside a ``tenure`` shim that stops the shim's supervised
children when the shim itself cannot, because it is frozen (SIGSTOP, a stalled VM) or dead.

It runs as a script (``python -I -S warden.py KILL_GRACE``), with the standard library
only, in a session of its own so that a signal to the shim's process group does not reach
it. The shim writes lines to its stdin:

    watch PGID DEADLINE   the process group PGID may run until DEADLINE, a time on the
                          system-wide monotonic clock (CLOCK_MONOTONIC, time.monotonic()),
                          the end of the safe window of the grant it was started for
    term PGID KILL_AT     the shim sent the group SIGTERM itself; SIGKILL is due at KILL_AT
    forget PGID           the group ended (the shim reaped its leader)

A group whose deadline passes gets SIGKILL ``KILL_GRACE`` seconds after it, and SIGTERM a
moment (a quarter of the grace, at most 0.1 s) after it unless the shim said it sent one:
a shim that is alive stops its commands itself, at the deadline, and a command must not
hear SIGTERM twice (many programs take a second one as "force quit"). When its stdin
closes (the shim exited or was killed: nobody else holds the pipe), every group it
watches gets SIGTERM at once and SIGKILL after the grace, and the warden exits. The
shim enforces the same deadlines itself; the warden is the second enforcer that a
frozen shim cannot hold back.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time


def _signal(pgid: int, sig: int) -> bool:
    """Signal the group; False when it is gone."""
    try:
        os.killpg(pgid, sig)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return False


def main(argv: list[str]) -> int:
    grace = float(argv[1])
    lag = min(grace / 4, 0.1)  # the shim's own SIGTERM and its word of it come first
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C in a terminal is for the shim
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # stopping is what closing stdin is for
    deadlines: dict[int, float] = {}  # pgid -> when it gets SIGTERM
    kills: dict[int, float] = {}  # pgid -> when it gets SIGKILL (SIGTERM sent)
    fd = sys.stdin.fileno()
    pending = b""
    open_ = True
    while open_ or kills:
        now = time.monotonic()
        for pgid, at in list(deadlines.items()):
            if at + lag <= now:
                del deadlines[pgid]
                if _signal(pgid, signal.SIGTERM):
                    kills[pgid] = at + grace
        for pgid, at in list(kills.items()):
            if at <= now:
                del kills[pgid]
                _signal(pgid, signal.SIGKILL)
        if not open_:
            if kills:
                time.sleep(max(0.0, min(kills.values()) - time.monotonic()))
            continue
        upcoming = [*(at + lag for at in deadlines.values()), *kills.values()]
        timeout = max(0.0, min(upcoming) - time.monotonic()) if upcoming else None
        ready, _, _ = select.select([fd], [], [], timeout)
        if not ready:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:  # the shim is gone: nothing may outlive it
            open_ = False
            now = time.monotonic()
            for pgid in list(deadlines):
                del deadlines[pgid]
                if _signal(pgid, signal.SIGTERM):
                    kills[pgid] = now + grace
            continue
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            words = line.decode().split()
            if len(words) == 3 and words[0] == "watch":
                pgid, at = int(words[1]), float(words[2])
                if pgid not in kills:  # a group already being killed stays so
                    deadlines[pgid] = at
            elif len(words) == 3 and words[0] == "term":
                pgid = int(words[1])
                deadlines.pop(pgid, None)
                kills[pgid] = min(float(words[2]), kills.get(pgid, float("inf")))
            elif len(words) == 2 and words[0] == "forget":
                deadlines.pop(int(words[1]), None)
                kills.pop(int(words[1]), None)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
