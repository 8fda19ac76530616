"""Serving the dashboard with uvicorn: :class:`DashboardServer` runs it on a background
thread (tests, embedding) and :func:`serve` in the foreground until a signal (the CLI)."""

from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Self

import uvicorn

from tenure.dashboard.app import Dashboard, Settings
from tenure.errors import InvalidConfiguration


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def exposed(host: str, settings: Settings, *, allow_remote: bool) -> Settings:
    """``settings`` for a dashboard listening on ``host``, which its ``Host`` header may name.
    Beyond loopback only when ``allow_remote`` says so, and then only with a token: the
    pages show every task's data and errors to whoever reaches them."""
    if not is_loopback(host):
        if not allow_remote:
            raise InvalidConfiguration(
                f"the dashboard listens on {host}, beyond this machine, only with --allow-remote "
                "(and a token; put it behind a TLS proxy: the token travels in clear over HTTP)"
            )
        if settings.token is None:
            raise InvalidConfiguration(
                f"the dashboard listens on {host}, beyond this machine, only with a token "
                "(--token or $TENURE_DASHBOARD_TOKEN)"
            )
    if host in ("0.0.0.0", "::"):  # every address: the names it is reached by come from --allow-host
        return settings
    return dataclasses.replace(settings, hosts=(*settings.hosts, host))


def _config(dashboard: Dashboard, host: str, port: int) -> uvicorn.Config:
    """uvicorn's settings: the forwarded headers are believed only from the trusted proxies
    (uvicorn's own default believes any process on 127.0.0.1)."""
    proxies = list(dashboard.settings.trusted_proxies)
    return uvicorn.Config(
        dashboard.app,
        host=host,
        port=port,
        log_level="warning",
        lifespan="off",
        proxy_headers=bool(proxies),
        forwarded_allow_ips=proxies or None,
    )


class DashboardServer:
    """The dashboard over ``conninfo`` at http://HOST:PORT/ on a background thread while
    the ``with`` block runs; port 0 takes a free port (see :attr:`url`). A host beyond
    loopback needs ``allow_remote`` and a token (see :func:`exposed`)."""

    def __init__(
        self,
        conninfo: str,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        settings: Settings | None = None,
        allow_remote: bool = False,
    ) -> None:
        self.dashboard = Dashboard(conninfo, exposed(host, settings or Settings(), allow_remote=allow_remote))
        self.server = uvicorn.Server(_config(self.dashboard, host, port))
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
    conninfo: str,
    *,
    host: str,
    port: int,
    settings: Settings,
    allow_remote: bool = False,
    announce: Callable[[], None] | None = None,
) -> None:
    """Serve in the foreground until SIGINT or SIGTERM (uvicorn's own handlers). ``announce``
    runs once the dashboard has checked its role and connected, before it listens. A host
    beyond loopback needs ``allow_remote`` and a token (see :func:`exposed`)."""
    dashboard = Dashboard(conninfo, exposed(host, settings, allow_remote=allow_remote))
    try:
        if announce is not None:
            announce()
        uvicorn.Server(_config(dashboard, host, port)).run()
    finally:
        dashboard.close()
