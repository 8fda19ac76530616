"""A real pgbouncer (Debian's 1.18) on a free loopback port, for tests; a context manager.

    with PgBouncer(upstream_port=PORT, users=["postgres", "app"]) as bouncer:
        psycopg.connect(bouncer.conninfo("tenure_test", user="app"), prepare_threshold=None)

Defaults are what tenure's docs recommend for a transaction pooler: ``pool_mode =
transaction`` and ``ignore_startup_parameters = extra_float_digits,options``. Pass
``ignore_startup_parameters=None`` for pgbouncer's own default (none), under which a
client that sends ``options`` is refused with "unsupported startup parameter: options".
Clients are trusted (``auth_type = trust``; each user still has to be listed in the
auth_file, so name them in ``users``); pgbouncer logs into the upstream as that user
without a password, so the upstream must trust 127.0.0.1 too. Every database name is
passed through to the upstream (``* = host=... port=...``); :meth:`PgBouncer.retarget`
points it at another server (a new Patroni leader) with a reload.

It runs as the ``postgres`` user (pgbouncer refuses root) in /tmp/h1-pgbouncer-*, with
its log in ``pgbouncer.log`` there (:meth:`PgBouncer.log_tail`); leaving the ``with``
block stops it and removes the directory, and a watchdog does the same if the test
process dies.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

from tenure.testing import procs

DEFAULT_IGNORE = "extra_float_digits,options"


class PgBouncer(procs.Harness):
    def __init__(
        self,
        *,
        upstream_port: int,
        upstream_host: str = "127.0.0.1",
        users: Sequence[str] = ("postgres",),
        pool_mode: str = "transaction",
        ignore_startup_parameters: str | None = DEFAULT_IGNORE,
        max_client_conn: int = 200,
        default_pool_size: int = 20,
        settings: dict[str, str | int] | None = None,
        start_timeout: float = 30.0,
    ) -> None:
        self.upstream_host, self.upstream_port = upstream_host, upstream_port
        self.users = list(users)
        self.pool_mode = pool_mode
        self.ignore_startup_parameters = ignore_startup_parameters
        self.max_client_conn = max_client_conn
        self.default_pool_size = default_pool_size
        self.settings = dict(settings or {})
        self.start_timeout = start_timeout
        self.port = 0
        self.directory = Path()
        self._run_as = procs.RunAs()
        self._process: subprocess.Popen[bytes] | None = None
        self._watchdog: subprocess.Popen[bytes] | None = None

    @property
    def config_path(self) -> Path:
        return self.directory / "pgbouncer.ini"

    @property
    def log_path(self) -> Path:
        return self.directory / "pgbouncer.log"

    def failure_logs(self) -> str:
        return self.log_tail()

    def _config(self) -> str:
        settings: dict[str, str | int] = {
            "listen_addr": "127.0.0.1",
            "listen_port": self.port,
            "unix_socket_dir": "",
            "auth_type": "trust",
            "auth_file": str(self.directory / "userlist.txt"),
            "admin_users": "postgres",
            "pool_mode": self.pool_mode,
            "max_client_conn": self.max_client_conn,
            "default_pool_size": self.default_pool_size,
            "logfile": str(self.log_path),
            "pidfile": str(self.directory / "pgbouncer.pid"),
        }
        if self.ignore_startup_parameters is not None:
            settings["ignore_startup_parameters"] = self.ignore_startup_parameters
        settings.update(self.settings)
        lines = [
            "[databases]",
            f"* = host={self.upstream_host} port={self.upstream_port}",
            "[pgbouncer]",
            *(f"{key} = {value}" for key, value in settings.items()),
        ]
        return "\n".join(lines) + "\n"

    def _write(self, path: Path, text: str) -> None:
        path.write_text(text)
        self._run_as.own(path)

    def start(self) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="h1-pgbouncer-", dir="/tmp"))
        self.directory.chmod(0o755)
        self._run_as.own(self.directory)
        self._watchdog = procs.start_watchdog(self.directory)
        self.port = procs.free_port()
        self._write(self.directory / "userlist.txt", "".join(f'"{user}" ""\n' for user in self.users))
        self._write(self.config_path, self._config())
        with open(self.directory / "stderr.log", "ab") as out:
            self._process = subprocess.Popen(
                ["/usr/sbin/pgbouncer", str(self.config_path)],
                cwd=self.directory,
                env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
                **self._run_as.popen_args(),
            )
        deadline = time.monotonic() + self.start_timeout
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return
            if self._process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"pgbouncer did not start; see {self.log_path}")
            time.sleep(0.05)

    def close(self) -> None:
        if not self.directory.parts:
            return
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(5)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        exclude = {self._watchdog.pid} if self._watchdog else set()
        procs.sweep(self.directory, exclude=exclude)
        if self._watchdog is not None:
            procs.stop_watchdog(self._watchdog)
        self._watchdog = None
        self._process = None

    def conninfo(self, dbname: str, user: str = "postgres", **params: Any) -> str:
        """Conninfo through pgbouncer. Pooled sessions are shared: psycopg clients should
        pass prepare_threshold=None (no server-side prepared statements)."""
        params.setdefault("connect_timeout", 3)
        return make_conninfo(host="127.0.0.1", port=self.port, dbname=dbname, user=user, **params)

    def admin(self, command: str) -> list[tuple[Any, ...]]:
        """Run a command on pgbouncer's admin console (SHOW POOLS, RECONNECT, PAUSE, ...)."""
        with psycopg.connect(
            self.conninfo("pgbouncer"), autocommit=True, cursor_factory=psycopg.ClientCursor
        ) as connection:
            cursor = connection.execute(command.encode())
            return cursor.fetchall() if cursor.description else []

    def retarget(self, port: int, host: str = "127.0.0.1") -> None:
        """Point every database at another upstream (a config rewrite and a reload: new
        server connections go there; existing ones are closed once released)."""
        self.upstream_host, self.upstream_port = host, port
        self._write(self.config_path, self._config())
        if self._process is not None:
            self._process.send_signal(signal.SIGHUP)

    def log_tail(self, lines: int = 40) -> str:
        try:
            tail = self.log_path.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            return ""
        return f"--- pgbouncer: {self.log_path}\n" + "\n".join(tail) + "\n"
