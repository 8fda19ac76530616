"""Replicas as processes: the demo replica service, a client that writes through the
load balancer, and the checks of what the client was told against the database.

A demo replica (``python -m tenure.testing.replicas --db URL --name r1 --port 8081``)
runs a ReplicaManager and serves ``GET /health/active``, ``GET /health/live`` and
``POST /write``: while active, each write inserts a row into
``tenure_demo.replica_writes`` through the lock connection after ``replica_guard``,
with the replica's name, its epoch, the backend pid and the server's time. With
``--async`` the same service runs on asyncio: an AsyncReplicaManager and a small HTTP
server of asyncio streams on one event loop, no thread.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import class_row

from tenure.driver import Driver
from tenure.errors import NotPrimary
from tenure.http.replica import ReplicaServer, active_only
from tenure.runtime.replicas import AsyncReplicaManager, ReplicaManager
from tenure.runtime.shutdown import wait_for_shutdown
from tenure.testing.child import ChildProcess, emit
from tenure.testing.procs import free_port


def run_replica(
    conninfo: str, *, name: str, host: str, port: int, interval: float, idle_timeout: float, grace: float
) -> None:
    manager = ReplicaManager(
        conninfo,
        name=name,
        interval=interval,
        idle_timeout=idle_timeout,
        grace=grace,
        on_active=lambda epoch: emit("active", epoch=epoch),
        on_passive=lambda reason: emit("passive", reason=reason),
    )

    @active_only(manager)
    def write(request: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        request_id = str(request.get("request_id") or uuid.uuid4())
        with manager.write() as connection:
            row = connection.execute(WRITE, (request_id, manager.name)).fetchone()
        assert row is not None
        return 200, {"request_id": request_id, "replica": manager.name, "epoch": row[0], "pid": row[1]}

    with manager, ReplicaServer(manager, host=host, port=port, routes={("POST", "/write"): write}) as server:
        emit("started", replica=manager.name, url=server.url, pid=os.getpid())
        wait_for_shutdown()
    emit("stopped")


# The write of POST /write, made on the lock connection in a transaction that passed replica_guard.
WRITE = (
    "INSERT INTO tenure_demo.replica_writes (request_id, replica, epoch, pid) "
    "VALUES (%s, %s, tenure.replica_guard(), pg_backend_pid()) RETURNING epoch, pid, done_at"
)


async def run_async_replica(
    conninfo: str, *, name: str, host: str, port: int, interval: float, idle_timeout: float, grace: float
) -> None:
    """:func:`run_replica` on asyncio: the same routes and answers, from an AsyncReplicaManager."""
    manager = AsyncReplicaManager(
        conninfo,
        name=name,
        interval=interval,
        idle_timeout=idle_timeout,
        grace=grace,
        on_active=lambda epoch: emit("active", epoch=epoch),
        on_passive=lambda reason: emit("passive", reason=reason),
    )

    async def write(request: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        request_id = str(request.get("request_id") or uuid.uuid4())
        refusal = {"error": f"replica {manager.name} is passive", "role": "passive", "replica": manager.name}
        try:
            async with manager.write() as connection:
                row = await (await connection.execute(WRITE, (request_id, manager.name))).fetchone()
        except NotPrimary as refused:
            return 503, {**refusal, "error": refused.message}
        assert row is not None
        return 200, {"request_id": request_id, "replica": manager.name, "epoch": row[0], "pid": row[1]}

    async def answer(method: str, path: str, body: bytes) -> tuple[int, dict[str, Any]]:
        if (method, path) == ("GET", "/health/active"):
            status = manager.status()
            return (200 if status["role"] == "active" else 503), status
        if (method, path) == ("GET", "/health/live"):
            return 200, {"live": True, **manager.status()}
        if (method, path) == ("POST", "/write"):
            return await write(json.loads(body) if body else {})
        return 404, {"error": f"no route {method} {path}"}

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # One request per connection (Connection: close): enough for HAProxy and the Client.
        try:
            method, path, _ = (await reader.readline()).decode("latin-1").split(" ", 2)
            length = 0
            while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
                header, _, value = line.decode("latin-1").partition(":")
                if header.strip().lower() == "content-length":
                    length = int(value)
            try:
                status, reply = await answer(method, path.split("?", 1)[0], await reader.readexactly(length))
            except Exception as error:
                status, reply = 500, {"error": f"{error.__class__.__name__}: {error}"}
            data = json.dumps(reply).encode()
            writer.write(
                f"HTTP/1.1 {status} {http.client.responses.get(status, '')}\r\nContent-Type: application/json"
                f"\r\nContent-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode()
                + data
            )
            await writer.drain()
        except (ValueError, OSError, asyncio.IncompleteReadError):
            pass  # a malformed request or a client gone: nothing to answer
        finally:
            writer.close()

    stopping = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(signum, stopping.set)
    async with manager, await asyncio.start_server(serve, host, port) as server:
        emit("started", replica=manager.name, url=f"http://{host}:{port}", pid=os.getpid(), flavour="async")
        await stopping.wait()
        server.close()
    emit("stopped")


def replica_main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tenure.testing.replicas", description="one demo replica")
    parser.add_argument("--db", default=os.environ.get("TENURE_DB", ""), help="conninfo or URL")
    parser.add_argument("--name", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--interval", type=float, default=0.5)
    parser.add_argument("--idle-timeout", type=float, default=1.5)
    parser.add_argument("--grace", type=float, default=2.0)
    parser.add_argument("--async", dest="use_async", action="store_true", help="run on asyncio")
    args = parser.parse_args(argv)
    options: dict[str, Any] = dict(
        name=args.name,
        host=args.host,
        port=args.port,
        interval=args.interval,
        idle_timeout=args.idle_timeout,
        grace=args.grace,
    )
    if args.use_async:
        asyncio.run(run_async_replica(args.db, **options))
    else:
        run_replica(args.db, **options)


@dataclass(frozen=True)
class ReplicaSettings:
    interval: float = 0.5
    idle_timeout: float = 1.5
    grace: float = 2.0
    check_interval: float = 0.2  # HAProxy's health check interval

    @property
    def failover_bound(self) -> float:
        """Crash of the active replica to the first request it serves elsewhere, at worst:
        the reservation (grace + 2 intervals after the last ping), an acquisition
        interval, and a health check interval plus its timeout."""
        return self.grace + 3 * self.interval + 2 * self.check_interval


class ReplicaProcess(ChildProcess):
    """A demo replica (python -m tenure.testing.replicas) as a child process."""

    def __init__(
        self,
        conninfo: str,
        name: str,
        log_path: Path,
        *,
        settings: ReplicaSettings,
        port: int | None = None,
        flavour: str = "sync",
    ) -> None:
        self.name = name
        self.port = port or free_port()
        self.flavour = flavour
        super().__init__(
            [
                sys.executable,
                "-m",
                "tenure.testing.replicas",
                "--db",
                conninfo,
                "--name",
                name,
                "--port",
                str(self.port),
                "--interval",
                str(settings.interval),
                "--idle-timeout",
                str(settings.idle_timeout),
                "--grace",
                str(settings.grace),
                *(["--async"] if flavour == "async" else []),
            ],
            log_path,
        )
        # The replica's full name carries its pid: name:pid.
        self.replica = self.wait_for_output(r'"replica": "([^"]+)"').group(1)

    def health(self) -> int:
        """The status of its ``GET /health/active`` (0: no answer)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health/active", timeout=2) as response:
                return int(response.status)
        except urllib.error.HTTPError as error:
            return error.code
        except OSError:
            return 0


@dataclass(frozen=True)
class Answer:
    """One request of the client: when it was sent and answered (monotonic), and how."""

    sent: float
    done: float
    status: int  # 0: no HTTP answer
    request_id: str
    replica: str | None
    epoch: int | None


class Client:
    """Sends ``POST /write`` through the load balancer one after another until stopped."""

    def __init__(self, url: str, *, pause: float = 0.005, timeout: float = 5.0) -> None:
        self.url = url + "/write"
        self.pause = pause
        self.timeout = timeout
        self.answers: list[Answer] = []
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="replica-client", daemon=True)

    def _one(self) -> Answer:
        request_id = str(uuid.uuid4())
        data = json.dumps({"request_id": request_id}).encode()
        sent = time.monotonic()
        status, body = 0, {}
        try:
            request = urllib.request.Request(
                self.url, data=data, headers={"Content-Type": "application/json"}
            )
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                status, body = response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            status = error.code
        except (OSError, ValueError, http.client.HTTPException):
            # no answer, or one cut off by the kill (IncompleteRead): not acknowledged
            status, body = 0, {}
        return Answer(sent, time.monotonic(), status, request_id, body.get("replica"), body.get("epoch"))

    def _run(self) -> None:
        while not self._stopping.is_set():
            self.answers.append(self._one())
            self._stopping.wait(self.pause)

    def start(self) -> Client:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join()

    def first_success_after(self, moment: float, *, other_than: str | None = None) -> Answer | None:
        for answer in list(self.answers):
            if answer.sent >= moment and answer.status == 200 and answer.replica != other_than:
                return answer
        return None

    def wait_success_after(self, moment: float, *, other_than: str | None = None, wait: float = 30) -> Answer:
        end = time.monotonic() + wait
        while time.monotonic() < end:
            found = self.first_success_after(moment, other_than=other_than)
            if found is not None:
                return found
            time.sleep(0.01)
        raise TimeoutError(f"no successful request {wait} s after the fault")

    def failed_between(self, start: float, end: float) -> int:
        """Requests answered (or given up) from ``start`` to ``end`` that failed."""
        return sum(1 for a in list(self.answers) if start <= a.done < end and a.status != 200)


@dataclass(frozen=True)
class ReplicaWrite:
    request_id: str
    replica: str
    epoch: int
    pid: int
    done_at: datetime


@dataclass(frozen=True)
class ReplicaTerm:
    epoch: int
    replica: str
    pid: int
    acquired_at: datetime


def read_replica_records(
    connection: psycopg.Connection[Any],
) -> tuple[list[ReplicaTerm], list[ReplicaWrite]]:
    lock_id = Driver(connection).replica_lock_id()
    with connection.cursor(row_factory=class_row(ReplicaTerm)) as cursor:
        cursor.execute(
            "SELECT epoch, replica, pid, acquired_at FROM tenure.replica_term WHERE lock_id = %s "
            "ORDER BY epoch",
            (lock_id,),
        )
        terms = cursor.fetchall()
    with connection.cursor(row_factory=class_row(ReplicaWrite)) as cursor:
        cursor.execute(
            "SELECT request_id, replica, epoch, pid, done_at FROM tenure_demo.replica_writes "
            "ORDER BY done_at, id"
        )
        writes = cursor.fetchall()
    return terms, writes


def check_replica_records(
    terms: list[ReplicaTerm], writes: list[ReplicaWrite], answers: list[Answer] | None = None
) -> list[str]:
    """No two replicas accepted writes at the same time, by the server's clock.

    Every write was made in the session that held the lock in its epoch (same replica,
    same backend pid), after that epoch's acquisition and before the next one; epochs
    only grow. Every request the client saw accepted is recorded, as that replica's.
    """
    problems: list[str] = []
    by_epoch = {t.epoch: t for t in terms}
    if [t.epoch for t in terms] != list(range(1, len(terms) + 1)):
        problems.append(f"epochs are not 1, 2, 3, ...: {[t.epoch for t in terms]}")
    for w in writes:
        term = by_epoch.get(w.epoch)
        following = by_epoch.get(w.epoch + 1)
        if term is None:
            problems.append(f"write {w.request_id} in epoch {w.epoch}, which was never acquired")
        elif (w.replica, w.pid) != (term.replica, term.pid):
            problems.append(
                f"write {w.request_id} by {w.replica} (pid {w.pid}) in epoch {w.epoch} of "
                f"{term.replica} (pid {term.pid})"
            )
        elif w.done_at < term.acquired_at or (following is not None and w.done_at >= following.acquired_at):
            problems.append(f"write {w.request_id} of epoch {w.epoch} at {w.done_at} falls outside its term")
    last = 0
    for w in writes:
        if w.epoch < last:
            problems.append(f"write {w.request_id} in epoch {w.epoch} after a write in epoch {last}")
        last = max(last, w.epoch)
    if answers is not None:
        recorded = {w.request_id: w for w in writes}
        for a in answers:
            if a.status != 200:
                continue
            found = recorded.get(a.request_id)
            if found is None:
                problems.append(f"request {a.request_id} was accepted by {a.replica} but is not recorded")
            elif (found.replica, found.epoch) != (a.replica, a.epoch):
                problems.append(
                    f"request {a.request_id} answered as {a.replica} but recorded as {found.replica}"
                )
    return problems


def active_replica(replicas: list[ReplicaProcess], admin: psycopg.Connection[Any]) -> ReplicaProcess | None:
    holder = Driver(admin).replica_holder()
    if holder is None or holder.replica is None:
        return None
    return next((r for r in replicas if r.replica == holder.replica), None)


def wait_for_active(
    replicas: list[ReplicaProcess], admin: psycopg.Connection[Any], *, other_than: str | None = None
) -> ReplicaProcess:
    end = time.monotonic() + 30
    while time.monotonic() < end:
        found = active_replica(replicas, admin)
        if found is not None and found.replica != other_than:
            return found
        time.sleep(0.02)
    raise TimeoutError("no active replica within 30 s")


if __name__ == "__main__":
    replica_main()
