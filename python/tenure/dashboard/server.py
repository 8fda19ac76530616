"""Serving the dashboard with uvicorn: :class:`DashboardServer` runs it on a background
thread (tests, embedding) and :func:`serve` in the foreground until a signal (the CLI)."""

from __future__ import annotations

import contextlib
import ipaddress
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Self

import uvicorn

from tenure.dashboard.app import Dashboard, Settings


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class DashboardServer:
    """The dashboard over ``conninfo`` at http://HOST:PORT/ on a background thread while
    the ``with`` block runs; port 0 takes a free port (see :attr:`url`)."""

    def __init__(
        self, conninfo: str, *, host: str = "127.0.0.1", port: int = 0, settings: Settings | None = None
    ) -> None:
        self.dashboard = Dashboard(conninfo, settings or Settings())
        config = uvicorn.Config(self.dashboard.app, host=host, port=port, log_level="warning", lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self._run, name="tenure dashboard", daemon=True)
        self.host = host
        self.port = port

    def _run(self) -> None:
        with contextlib.suppress(SystemExit):  # uvicorn exits when it cannot listen: __enter__ raises OSError
            self.server.run()

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def __enter__(self) -> Self:
        self.thread.start()
        while not self.server.started:
            if not self.thread.is_alive():
                self.dashboard.close()
                raise OSError(f"the dashboard could not listen on {self.host}:{self.port}")
            self.thread.join(0.02)
        self.port = self.server.servers[0].sockets[0].getsockname()[1]
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.dashboard.close()


def serve(
    conninfo: str, *, host: str, port: int, settings: Settings, announce: Callable[[], None] | None = None
) -> None:
    """Serve in the foreground until SIGINT or SIGTERM (uvicorn's own handlers). ``announce``
    runs once the dashboard has checked its role and connected, before it listens."""
    dashboard = Dashboard(conninfo, settings)
    try:
        if announce is not None:
            announce()
        config = uvicorn.Config(dashboard.app, host=host, port=port, log_level="warning", lifespan="off")
        uvicorn.Server(config).run()
    finally:
        dashboard.close()
