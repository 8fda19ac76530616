"""Debian's HAProxy on loopback in front of replicas, with an HTTP health check."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import TracebackType

from tenure.testing.child import ChildProcess
from tenure.testing.procs import free_port


class HAProxy:
    """Debian's haproxy on loopback in front of the replicas, checking ``/health/active``."""

    def __init__(self, backends: list[tuple[str, int]], workdir: Path, *, check_interval: float) -> None:
        self.port = free_port()
        millis = max(10, int(check_interval * 1000))
        servers = "\n".join(
            f"    server {name} 127.0.0.1:{port} check inter {millis} fall 1 rise 1"
            for name, port in backends
        )
        # HAProxy waits min(timeout connect, 1 s) before retrying a refused connection (to
        # a replica just killed, not yet marked down): on loopback 100 ms is plenty.
        self.config = workdir / "haproxy.cfg"
        self.config.write_text(
            f"""global
    maxconn 512
defaults
    mode http
    timeout connect 100ms
    timeout client 10s
    timeout server 1s
    timeout check {millis}ms
    retries 1
    option redispatch
frontend replicas
    bind 127.0.0.1:{self.port}
    default_backend replicas
backend replicas
    option httpchk GET /health/active
    http-check expect status 200
{servers}
"""
        )
        binary = shutil.which("haproxy") or "/usr/sbin/haproxy"
        self.process = ChildProcess([binary, "-db", "-f", str(self.config)], workdir / "haproxy.log")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.process.stop()

    def __enter__(self) -> HAProxy:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
