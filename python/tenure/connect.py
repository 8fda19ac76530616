"""Connections for tenure's runtime loops: autocommit, bounded in time on both ends."""

from __future__ import annotations

import os
import socket
from typing import Any

import psycopg


def instance_name(name: str | None = None) -> str:
    """A readable name for this process incarnation: given name or host, and pid."""
    return f"{name or socket.gethostname()}:{os.getpid()}"


def connect(conninfo: str, *, application_name: str, deadline: float) -> psycopg.Connection[Any]:
    """An autocommit connection whose every wait ends within about ``deadline`` seconds.

    A statement, an idle transaction and unacknowledged TCP data are all cut off
    after ``deadline``, so a loop that must act within a safe window is never stuck
    in the network or behind a lock for longer than that window.
    """
    millis = max(1, int(deadline * 1000))
    return psycopg.connect(
        conninfo,
        autocommit=True,
        application_name=application_name[:63],
        connect_timeout=max(2, int(deadline + 0.999)),
        keepalives=1,
        keepalives_idle=max(1, int(deadline)),
        keepalives_interval=1,
        keepalives_count=3,
        tcp_user_timeout=millis,
        options=f"-c statement_timeout={millis} -c idle_in_transaction_session_timeout={max(millis, 1000)}",
    )
