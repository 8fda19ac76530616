"""Connections for tenure's runtime loops: autocommit, bounded in time on both ends."""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable
from typing import Any

import psycopg

log = logging.getLogger(__name__)


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


def listen(
    conninfo: str,
    channel: str,
    *,
    name: str,
    stopping: threading.Event,
    retry: float,
    on_notify: Callable[[str | None], None],
) -> None:
    """LISTEN on ``channel`` until ``stopping`` is set, calling ``on_notify`` with each payload.

    ``on_notify(None)`` follows every (re)connection: what was announced while no one
    listened is lost, so the caller should poll then. Notifications only wake early;
    polling remains the truth.
    """
    while not stopping.is_set():
        try:
            with connect(
                conninfo, application_name=f"tenure listen {name}", deadline=max(retry, 1.0)
            ) as connection:
                connection.execute(f"LISTEN {channel}")
                on_notify(None)
                while not stopping.is_set():
                    for notify in connection.notifies(timeout=0.5):
                        on_notify(notify.payload)
        except psycopg.Error as error:
            log.warning("%s: listen failed, polling only until it reconnects: %s", name, error)
            stopping.wait(retry)
