"""Connections for tenure's runtime loops: autocommit, bounded in time on both ends."""

from __future__ import annotations

import os
import socket
from typing import Any

import psycopg


def instance_name(name: str | None = None) -> str:
    """A readable name for this process incarnation: given name or host, and pid."""
    return f"{name or socket.gethostname()}:{os.getpid()}"


def connect(
    conninfo: str, *, application_name: str, deadline: float, idle_session_timeout: float | None = None
) -> psycopg.Connection[Any]:
    """An autocommit connection whose every wait ends within about ``deadline`` seconds.

    A statement, an idle transaction and unacknowledged TCP data are all cut off
    after ``deadline``, so a loop that must act within a safe window is never stuck
    in the network or behind a lock for longer than that window. With
    ``idle_session_timeout`` the server also ends the session after that many
    seconds without a statement (a replica's lock session, so that a frozen
    client's session and its advisory lock do not live forever).
    """
    millis = max(1, int(deadline * 1000))
    idle = (
        "" if idle_session_timeout is None else f" -c idle_session_timeout={int(idle_session_timeout * 1000)}"
    )
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
        options=f"-c statement_timeout={millis} "
        f"-c idle_in_transaction_session_timeout={max(millis, 1000)}{idle}",
    )
