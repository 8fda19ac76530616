"""The warden: a small process beside a ``tenure`` shim that stops the shim's supervised
children when the shim itself cannot, because it is frozen (SIGSTOP, a stalled VM) or dead.

It runs as a script (``python -I -S warden.py KILL_GRACE``), with the standard library
only, in a session of its own so that a signal to the shim's process group does not reach
it. The shim writes lines to its stdin:

    watch PGID DEADLINE   the process group PGID may run until DEADLINE, a time on the
                          system-wide monotonic clock (CLOCK_MONOTONIC, time.monotonic()),
                          the end of the safe window of the grant it was started for
    forget PGID           the group ended (the shim reaped its leader)

At a group's deadline the warden sends it SIGTERM, and SIGKILL ``KILL_GRACE`` seconds
later, unless a later deadline arrived first. When its stdin closes (the shim exited or
was killed: nobody else holds the pipe), every group it watches gets SIGTERM at once and
SIGKILL after the grace, and the warden exits. The shim enforces the same deadlines
itself; the warden is the second enforcer that a frozen shim cannot hold back.
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
            if at <= now:
                del deadlines[pgid]
                if _signal(pgid, signal.SIGTERM):
                    kills[pgid] = now + grace
        for pgid, at in list(kills.items()):
            if at <= now:
                del kills[pgid]
                _signal(pgid, signal.SIGKILL)
        if not open_:
            if kills:
                time.sleep(max(0.0, min(kills.values()) - time.monotonic()))
            continue
        upcoming = [*deadlines.values(), *kills.values()]
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
            elif len(words) == 2 and words[0] == "forget":
                deadlines.pop(int(words[1]), None)
                kills.pop(int(words[1]), None)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
