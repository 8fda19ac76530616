"""A task worker (``tenure task worker``, or with ``asynchronous`` ``tenure task worker --async``)
as a child process."""

from __future__ import annotations

import sys
from pathlib import Path
from uuid import UUID

from tenure.testing.child import ChildProcess


class TaskWorkerProcess(ChildProcess):
    """``tenure task worker`` as a child process."""

    def __init__(
        self,
        conninfo: str,
        module: str,
        log_path: Path,
        *,
        lease: float,
        poll_interval: float,
        concurrency: int = 4,
        env: dict[str, str] | None = None,
        asynchronous: bool = False,
    ) -> None:
        super().__init__(
            [
                sys.executable,
                "-m",
                "tenure",
                "task",
                "worker",
                "--db",
                conninfo,
                "--module",
                module,
                "--concurrency",
                str(concurrency),
                "--lease",
                str(lease),
                "--poll-interval",
                str(poll_interval),
                "--grace",
                "1",
                *(["--async"] if asynchronous else []),
            ],
            log_path,
            env=env,
        )
        self.instance_id = UUID(self.wait_for_output(r"task worker ([0-9a-f-]{36})").group(1))
