"""Child processes for tests, demos and the bench: output to a log file, one JSON line per event."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any
from uuid import UUID

_emitting = threading.Lock()


def emit(event: str, **fields: object) -> None:
    """One event as one line of stdout. Threads of one process emit too (a runtime's callbacks
    and its main thread): ``print`` writes a line's text and its newline apart, so two events
    could share a line, of which a reader decodes only the first."""
    line = json.dumps({"event": event, "mono": round(time.monotonic(), 4), **fields}, default=str) + "\n"
    with _emitting:
        sys.stdout.write(line)
        sys.stdout.flush()


class ChildProcess:
    """A child process whose output goes to a log file; stopped with SIGTERM, then SIGKILL."""

    def __init__(self, command: list[str], log_path: Path, *, env: dict[str, str] | None = None) -> None:
        self.log_path = log_path
        with open(log_path, "wb") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)

    def output(self) -> str:
        return self.log_path.read_text()

    def lines(self) -> list[str]:
        """Its output's complete lines so far: a line the process is still writing (no newline
        yet) is left out, to be read whole next time."""
        complete, _, _ = self.output().rpartition("\n")
        return complete.splitlines()

    def wait_for_output(self, pattern: str, wait: float = 20.0) -> re.Match[str]:
        end = time.monotonic() + wait
        while time.monotonic() < end:
            found = re.search(pattern, self.output())
            if found:
                return found
            time.sleep(0.05)
        raise TimeoutError(f"process {self.process.pid} printed no {pattern!r}; output:\n{self.output()}")

    def events(self) -> list[dict[str, Any]]:
        """Its event lines (``emit``). Other output shares the log, and may follow an event on its line."""
        decoder = json.JSONDecoder()
        lines = self.lines()
        return [decoder.raw_decode(line[line.index('{"event"') :])[0] for line in lines if '{"event"' in line]

    def announced_instance_id(self, wait: float = 20.0) -> UUID:
        """The instance id its ``started`` event announces."""
        return UUID(self.wait_for_output(r'"instance_id": "([0-9a-f-]{36})"', wait).group(1))

    def stopped(self) -> bool:
        """Whether the process is stopped (by SIGSTOP, its own included), as Linux's /proc tells."""
        try:
            stat = Path(f"/proc/{self.process.pid}/stat").read_text()
        except FileNotFoundError:
            return False
        return stat[stat.rindex(")") + 2] in "Tt"

    def signal(self, signum: int) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signum)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
