"""A real Patroni cluster on loopback for failover tests and the demo: one etcd 3.4 and N Patroni 3.0.2
nodes running PostgreSQL 15, all as the ``postgres`` user when the tests run as root.

    with PatroniCluster(clock_offsets={"n3": "+2s"}) as cluster:
        cluster.deploy_tenure("app")
        conninfo = cluster.conninfo("app")          # every node, target_session_attrs=read-write
        old = cluster.leader()
        cluster.kill_node(old)
        new = cluster.wait_writable()

Setup: Patroni's ``etcd:`` (v2 API) backend, not ``etcd3:`` (3.0.2's etcd3 backend
overwrites the leader key after a freeze: split brain, patroni PR #2689); ttl 10,
loop_wait 2, retry_timeout 3, pg_rewind, replication slots, trust for 127.0.0.1,
``synchronous_mode`` and ``synchronous_mode_strict`` on unless the constructor says
otherwise (strict: with no sync standby the leader's commits wait). fsync is off (a
process kill never loses the page cache; only an OS crash would) unless ``durable=True``:
then every node runs at production durability (PostgreSQL's defaults for fsync,
synchronous_commit, full_page_writes and wal_sync_method), as the bench's ``sync``
section needs. Every port is chosen
free at run time; everything lives in one scratch directory h1-patroni-* in /tmp (or in
``parent``, which the ``postgres`` user must be able to enter), with a copy of
``procs.py`` for the reaper Patroni runs under (the ``postgres`` user need not be able to
read the checkout: a clone under /root works) and the
logs: ``etcd.log``, ``<node>/patroni.log`` (also PostgreSQL's early stderr) and
``<node>/pglog/postgresql.log``; :meth:`PatroniCluster.log_tails` returns their ends,
and leaving the ``with`` block by an exception prints them to stderr.

Faults, and what each one does:

- :meth:`kill_node`: SIGKILL to the node's Patroni, its postmaster and every backend at
  once (a machine that dies). Its leader key stays in etcd until the ttl runs out, then
  the sync standby is promoted. :meth:`start_node` starts its Patroni again, which
  rejoins the node as a replica (pg_rewind when needed).
- :meth:`freeze_node`: SIGSTOP to Patroni, the postmaster and all its children (a hung
  VM). Clients of the node stay connected and blocked; its TCP port still completes
  handshakes. Past the ttl another node takes over while it is frozen; after
  :meth:`thaw_node` (SIGCONT) its Patroni sees it lost the key and demotes it.
- :meth:`stall_walreceiver`: SIGSTOP to a standby's walreceiver only: the standby stops
  confirming WAL, so with synchronous commit the leader's commits wait (and with
  ``synchronous_commit`` at ``local``/``off`` they do not, and are lost on failover).
- :meth:`switchover`: a planned move of the leader through Patroni's REST API.
- ``clock_offsets={"n2": "+2s"}``: that node's ``bin_dir`` holds a ``postgres`` wrapper
  that preloads libfaketime, so ``now()`` on that node runs ahead (Patroni's own clock
  and CLOCK_MONOTONIC are not shifted).

Measured on the 2-core development machine (3 nodes, strict synchronous mode, the
smoke tests of test_patroni_harness.py, two runs):

- startup to a writable leader with a streaming sync standby: 7.8-9.0 s (initdb,
  two pg_basebackups, then Patroni assigns the sync standby one loop later);
- switchover (POST /switchover) to a writable new leader: 3.1-3.2 s;
- SIGKILL of the leader to a writable new leader: 11.9-12.0 s (the ttl of 10 s is most
  of it); the killed node, started again, streams again after 3.5 s;
- SIGSTOP of the leader to a writable new leader (in strict mode that also needs the
  remaining replica re-pointed and made sync): 13.7 s; after SIGCONT the old leader is
  demoted and streams again after 3.5 s;
- a stalled walreceiver on the sync standby holds the leader's commits (until resumed).

Cleanup is complete however the test ends: leaving the ``with`` block (or
:meth:`close`) thaws every frozen process and SIGKILLs every process of the scratch
directory, then removes it. If the test process itself dies (even by SIGKILL), a
watchdog process (``procs.py --watch``) notices its stdin close and does the same.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

from tenure.connect import abandon
from tenure.deploy import project_dir
from tenure.testing import procs

PG_BIN = Path("/usr/lib/postgresql/15/bin")
SUPERUSER = "postgres"
# what the cluster runs besides PostgreSQL (Debian's patroni and etcd-server)
BINARIES = ("patroni", "etcd")


def _faketime_library() -> str:
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))
    if not found:
        raise RuntimeError("libfaketime.so.1 not found: install the Debian package libfaketime")
    return found[0]


@dataclass
class Node:
    """One Patroni member and its PostgreSQL."""

    name: str
    directory: Path
    pg_port: int
    api_port: int
    clock_offset: str | None = None
    process: subprocess.Popen[bytes] | None = None
    frozen: set[int] = field(default_factory=set)
    stalled: set[int] = field(default_factory=set)

    @property
    def data_dir(self) -> Path:
        return self.directory / "data"

    @property
    def config_path(self) -> Path:
        return self.directory / "patroni.yml"

    @property
    def bin_dir(self) -> Path:
        return self.directory / "bin" if self.clock_offset else PG_BIN

    @property
    def patroni_log(self) -> Path:
        return self.directory / "patroni.log"

    @property
    def postgres_log(self) -> Path:
        return self.directory / "pglog" / "postgresql.log"

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def running(self) -> bool:
        """Its Patroni was started, was not killed, and is not frozen."""
        return self.process is not None and self.process.poll() is None and not self.frozen


def _stop_statement(connection: psycopg.Connection[Any]) -> None:
    """Cancel the statement running on connection; if the server does not take the cancel
    request within 1 s (a frozen server never does), shut the socket down. Never
    ``connection.cancel()``: it waits for the server without releasing the GIL, so a
    frozen server hangs the whole process."""
    try:
        connection.cancel_safe(timeout=1.0)
    except psycopg.Error:
        abandon(connection)


class PatroniCluster(procs.Harness):
    """etcd + ``nodes`` Patroni members named n1, n2, ...; a context manager."""

    def __init__(
        self,
        *,
        nodes: int = 3,
        scope: str = "tenure",
        synchronous_mode: bool = True,
        synchronous_mode_strict: bool = True,
        ttl: int = 10,
        loop_wait: int = 2,
        retry_timeout: int = 3,
        clock_offsets: dict[str, str] | None = None,
        parameters: dict[str, Any] | None = None,
        start_timeout: float = 120.0,
        keep_dir: bool = False,
        parent: Path | None = None,
        durable: bool = False,
    ) -> None:
        self.scope = scope
        self.durable = durable
        self.synchronous_mode = synchronous_mode
        self.synchronous_mode_strict = synchronous_mode_strict
        self.reinit_after = 30.0  # seconds a replica stays "start failed" before wait_ready reinits it
        self.reinitialized: list[str] = []  # the replicas it reinitialized, in order
        self.ttl, self.loop_wait, self.retry_timeout = ttl, loop_wait, retry_timeout
        self.parameters = dict(parameters or {})
        self.start_timeout = start_timeout
        self.keep_dir = keep_dir
        self.parent = parent or Path("/tmp")
        self.clock_offsets = dict(clock_offsets or {})
        names = [f"n{i}" for i in range(1, nodes + 1)]
        unknown = set(self.clock_offsets) - set(names)
        if unknown:
            raise ValueError(f"clock_offsets names unknown nodes {sorted(unknown)}; the nodes are {names}")
        self._names = names
        self._run_as = procs.RunAs()
        self.directory = Path()
        self.nodes: dict[str, Node] = {}
        self.etcd_port = 0
        self._etcd: subprocess.Popen[bytes] | None = None
        self._watchdog: subprocess.Popen[bytes] | None = None
        self._reaper = Path()
        self.startup_seconds = 0.0

    # -- life cycle ---------------------------------------------------------------------

    def failure_logs(self) -> str:
        return self.log_tails()

    def start(self) -> None:
        began = time.monotonic()
        if not self._run_as.can_enter(self.parent):
            raise RuntimeError(f"the postgres user cannot enter {self.parent} (or a directory above it)")
        self.directory = Path(tempfile.mkdtemp(prefix="h1-patroni-", dir=self.parent))
        self.directory.chmod(0o755)
        self._run_as.own(self.directory)
        self._watchdog = procs.start_watchdog(self.directory)
        # Patroni runs as postgres under this reaper: nothing it runs or reads is in the checkout
        self._reaper = procs.script_copy(self.directory)
        print(f"PatroniCluster in {self.directory}", file=sys.stderr)
        self._start_etcd()
        for name in self._names:
            node = Node(
                name,
                self.directory / name,
                procs.free_port(),
                procs.free_port(),
                clock_offset=self.clock_offsets.get(name),
            )
            node.directory.mkdir(mode=0o700)
            (node.directory / "pglog").mkdir(mode=0o700)
            self._run_as.own(node.directory)
            self._run_as.own(node.directory / "pglog")
            if node.clock_offset:
                self._write_clock_wrappers(node)
            self._write_config(node)
            self.nodes[name] = node
        for name in self._names:
            self.start_node(name)
        self.wait_ready(self.start_timeout)
        self.startup_seconds = time.monotonic() - began

    def close(self) -> None:
        """Thaw, kill and remove everything this cluster started; safe to call twice."""
        if not self.directory.parts:
            return
        for node in self.nodes.values():
            procs.signal_all(node.frozen | node.stalled, signal.SIGCONT)
            node.frozen.clear()
            node.stalled.clear()
        exclude = {self._watchdog.pid} if self._watchdog else set()
        procs.sweep(self.directory, exclude=exclude, remove=not self.keep_dir)
        for process in [self._etcd, *(node.process for node in self.nodes.values())]:
            if process is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(5)
        if self._watchdog is not None and not self.keep_dir:
            procs.stop_watchdog(self._watchdog)
        elif self._watchdog is not None:
            # keep the files: the watchdog must not remove them; its job is done
            self._watchdog.kill()
            self._watchdog.wait()
        self._watchdog = None
        self._etcd = None
        for node in self.nodes.values():
            node.process = None

    # -- components ---------------------------------------------------------------------

    def _popen(self, args: list[str], *, log: Path, cwd: Path, env: dict[str, str] | None = None) -> Any:
        base = {
            "PATH": "/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "HOME": str(cwd),
            "TZ": "UTC",
        }
        with open(log, "ab") as out:
            self._run_as.own(log)
            return subprocess.Popen(
                args,
                cwd=cwd,
                env={**base, **(env or {})},
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
                **self._run_as.popen_args(),
            )

    def _start_etcd(self) -> None:
        client, peer = procs.free_port(), procs.free_port()
        data = self.directory / "etcd"
        self.etcd_port = client
        self._etcd = self._popen(
            [
                "etcd",
                "--name=etcd1",
                f"--data-dir={data}",
                f"--listen-client-urls=http://127.0.0.1:{client}",
                f"--advertise-client-urls=http://127.0.0.1:{client}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=etcd1=http://127.0.0.1:{peer}",
                "--enable-v2=true",
            ],
            log=self.directory / "etcd.log",
            cwd=self.directory,
        )
        deadline = time.monotonic() + 30
        while True:
            with (
                contextlib.suppress(OSError, ValueError),
                urllib.request.urlopen(f"http://127.0.0.1:{client}/health", timeout=1) as answer,
            ):
                if json.load(answer).get("health") == "true":
                    return
            if self._etcd.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"etcd did not start; see {self.directory / 'etcd.log'}")
            time.sleep(0.1)

    def _write_clock_wrappers(self, node: Node) -> None:
        bin_dir = node.bin_dir
        bin_dir.mkdir()
        for real in PG_BIN.iterdir():
            if real.name != "postgres":
                (bin_dir / real.name).symlink_to(real)
        wrapper = bin_dir / "postgres"
        wrapper.write_text(
            "#!/bin/sh\n"
            f"# postgres with its wall clock shifted by {node.clock_offset} (libfaketime)\n"
            f"LD_PRELOAD={_faketime_library()} FAKETIME={node.clock_offset} FAKETIME_DONT_FAKE_MONOTONIC=1 "
            f'exec {PG_BIN / "postgres"} "$@"\n'
        )
        wrapper.chmod(0o755)

    def _write_config(self, node: Node) -> None:
        config = {
            "scope": self.scope,
            "namespace": "/h1/",
            "name": node.name,
            "log": {"level": "INFO"},
            "restapi": {
                "listen": f"127.0.0.1:{node.api_port}",
                "connect_address": f"127.0.0.1:{node.api_port}",
            },
            "etcd": {"host": f"127.0.0.1:{self.etcd_port}"},
            "bootstrap": {
                "dcs": {
                    "ttl": self.ttl,
                    "loop_wait": self.loop_wait,
                    "retry_timeout": self.retry_timeout,
                    "maximum_lag_on_failover": 1048576,
                    "synchronous_mode": self.synchronous_mode,
                    "synchronous_mode_strict": self.synchronous_mode_strict,
                    "postgresql": {
                        "use_pg_rewind": True,
                        "use_slots": True,
                        "parameters": {
                            "max_connections": 300,
                            "wal_log_hints": "on",
                            "wal_keep_size": "256MB",
                            # a standby retries streaming sooner (default 5 s: its first try
                            # fails when the leader has not made its replication slot yet)
                            "wal_retrieve_retry_interval": "500ms",
                            **({} if self.durable else {"fsync": "off"}),
                            "timezone": "UTC",
                            "log_timezone": "UTC",
                            **self.parameters,
                        },
                    },
                },
                "initdb": [{"encoding": "UTF8"}, {"locale": "C.UTF-8"}],
            },
            "postgresql": {
                "listen": f"127.0.0.1:{node.pg_port}",
                "connect_address": f"127.0.0.1:{node.pg_port}",
                "data_dir": str(node.data_dir),
                "bin_dir": str(node.bin_dir),
                "pgpass": str(node.directory / "pgpass"),
                "authentication": {
                    "superuser": {"username": SUPERUSER},
                    "replication": {"username": SUPERUSER},
                    "rewind": {"username": SUPERUSER},
                },
                "parameters": {
                    "unix_socket_directories": str(node.directory),
                    "logging_collector": "on",
                    "log_directory": str(node.directory / "pglog"),
                    "log_filename": "postgresql.log",
                    "log_line_prefix": "%m [%p] %q%u@%d ",
                },
                "pg_hba": [
                    "local all all trust",
                    "host all all 127.0.0.1/32 trust",
                    "host replication all 127.0.0.1/32 trust",
                ],
            },
        }
        # JSON is YAML
        node.config_path.write_text(json.dumps(config, indent=2))
        self._run_as.own(node.config_path)

    # -- node control ---------------------------------------------------------------------

    def _node(self, name: str) -> Node:
        try:
            return self.nodes[name]
        except KeyError:
            raise ValueError(f"no node {name!r}; the nodes are {sorted(self.nodes)}") from None

    def start_node(self, name: str) -> None:
        """Start the node's Patroni (which starts PostgreSQL); it must not be running."""
        node = self._node(name)
        if node.process is not None and node.process.poll() is None:
            raise RuntimeError(f"node {name} is already running")
        node.process = self._popen(
            procs.reaper_command(["patroni", str(node.config_path)], script=self._reaper),
            log=node.patroni_log,
            cwd=node.directory,
        )

    def kill_node(self, name: str) -> None:
        """SIGKILL the node's Patroni, postmaster and every child of them, all at once."""
        node = self._node(name)
        exclude = {self._watchdog.pid} if self._watchdog else set()
        procs.sweep(node.directory, exclude=exclude, remove=False)
        if node.process is not None:
            node.process.wait(10)
        node.frozen.clear()
        node.stalled.clear()

    def freeze_node(self, name: str) -> None:
        """SIGSTOP the node's Patroni, postmaster and all its children; thaw_node undoes it."""
        node = self._node(name)
        roots = [node.process.pid] if node.process else []
        postmaster = procs.postmaster_pid(node.data_dir)
        if postmaster is not None:
            roots.append(postmaster)
        node.frozen |= procs.freeze_tree(roots)

    def thaw_node(self, name: str) -> None:
        node = self._node(name)
        procs.signal_all(node.frozen, signal.SIGCONT)
        node.frozen.clear()

    def thaw_postgres(self, name: str) -> None:
        """SIGCONT a frozen node's PostgreSQL but not its Patroni: a primary deposed while
        frozen stays a writable primary (nobody demotes it) until thaw_node. That holds open
        the window between a real thaw and Patroni's next loop, in which clients reach it."""
        node = self._node(name)
        postmaster = procs.postmaster_pid(node.data_dir)
        if postmaster is None or postmaster not in node.frozen:
            raise RuntimeError(f"node {name}'s PostgreSQL is not frozen")
        procs.signal_all(procs.descendants([postmaster]) & node.frozen, signal.SIGCONT)

    def postmaster_pid(self, name: str) -> int | None:
        return procs.postmaster_pid(self._node(name).data_dir)

    def stall_walreceiver(self, name: str) -> int:
        """SIGSTOP the walreceiver of standby ``name``; returns its pid."""
        node = self._node(name)
        postmaster = procs.postmaster_pid(node.data_dir)
        table = procs.process_table()
        found = [
            pid
            for pid, (ppid, _, cmdline) in table.items()
            if ppid == postmaster and "walreceiver" in cmdline and procs.alive(pid, table)
        ]
        if not found:
            raise RuntimeError(f"node {name} has no walreceiver (is it a streaming standby?)")
        procs.signal_all(found, signal.SIGSTOP)
        node.stalled |= set(found)
        return found[0]

    def resume_walreceiver(self, name: str) -> None:
        node = self._node(name)
        procs.signal_all(node.stalled, signal.SIGCONT)
        node.stalled.clear()

    def drop_walreceiver(self, name: str) -> None:
        """SIGKILL the stalled walreceiver of standby ``name``: what the primary had sent it
        but it had not yet read dies with it (resumed, it would read that from its socket's
        buffer, even after the primary died). The standby's postmaster restarts it from its
        own WAL."""
        node = self._node(name)
        procs.signal_all(node.stalled, signal.SIGKILL)
        node.stalled.clear()

    # -- Patroni's view -------------------------------------------------------------------

    def api(self, name: str, path: str, body: dict[str, Any] | None = None, timeout: float = 3.0) -> Any:
        """GET (or POST body as JSON) Patroni's REST API of node ``name``; returns
        (status, decoded JSON or text)."""
        node = self._node(name)
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            node.api_url + path,
            data=data,
            method="POST" if body is not None else "GET",
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                status, raw = answer.status, answer.read()
        except urllib.error.HTTPError as error:
            status, raw = error.code, error.read()
        text = raw.decode(errors="replace")
        try:
            return status, json.loads(text)
        except ValueError:
            return status, text

    def members(self) -> list[dict[str, Any]]:
        """The members as Patroni's GET /cluster tells them (name, role, state, timeline, lag),
        asked from the first running node that answers; [] when none does."""
        for node in self.nodes.values():
            if not node.running():
                continue
            with contextlib.suppress(OSError):
                status, answer = self.api(node.name, "/cluster", timeout=2.0)
                if status == 200 and isinstance(answer, dict):
                    members: list[dict[str, Any]] = answer.get("members", [])
                    return members
        return []

    def leader(self) -> str | None:
        """The holder of the leader key in etcd (which a killed or frozen node keeps until the ttl)."""
        return next((m["name"] for m in self.members() if m.get("role") == "leader"), None)

    def sync_standby(self) -> str | None:
        return next((m["name"] for m in self.members() if m.get("role") == "sync_standby"), None)

    # -- SQL --------------------------------------------------------------------------------

    def node_conninfo(
        self, name: str, dbname: str = "postgres", *, user: str = SUPERUSER, **params: Any
    ) -> str:
        node = self._node(name)
        params.setdefault("connect_timeout", 3)
        return make_conninfo(host="127.0.0.1", port=node.pg_port, dbname=dbname, user=user, **params)

    def conninfo(
        self,
        dbname: str = "postgres",
        *,
        user: str = SUPERUSER,
        target_session_attrs: str = "read-write",
        **params: Any,
    ) -> str:
        """A libpq multi-host conninfo over every node."""
        ports = [str(node.pg_port) for node in self.nodes.values()]
        params.setdefault("connect_timeout", 3)
        return make_conninfo(
            host=",".join(["127.0.0.1"] * len(ports)),
            port=",".join(ports),
            dbname=dbname,
            user=user,
            target_session_attrs=target_session_attrs,
            **params,
        )

    def port(self, name: str) -> int:
        return self._node(name).pg_port

    def connect(
        self, name: str | None = None, dbname: str = "postgres", **params: Any
    ) -> psycopg.Connection[Any]:
        """An autocommit superuser connection to node ``name`` (the leader when None)."""
        name = name or self.leader()
        if name is None:
            raise RuntimeError("the cluster has no leader")
        return psycopg.connect(self.node_conninfo(name, dbname, **params), autocommit=True)

    def psql(self, name: str | None, sql: str, params: Any = None, *, dbname: str = "postgres") -> list[Any]:
        """Run one statement on node ``name`` (the leader when None); its rows, or []."""
        with self.connect(name, dbname) as connection:
            cursor = connection.execute(sql, params)
            return cursor.fetchall() if cursor.description else []

    def timeline(self, name: str) -> int:
        """The node's timeline: of its current WAL on a primary, of what it receives on a standby."""
        rows = self.psql(
            name,
            "SELECT CASE WHEN pg_is_in_recovery() THEN coalesce("
            " (SELECT received_tli FROM pg_stat_wal_receiver),"
            " (SELECT timeline_id FROM pg_control_checkpoint()))"
            " ELSE ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int END",
        )
        return int(rows[0][0])

    def write_probe(self, name: str, timeout: float = 3.0) -> bool:
        """True when a transaction commits on node ``name`` within timeout, including the wait
        for the sync standby (a cancelled sync-rep wait counts as no commit). Takes at most
        timeout + 1 s, even when the node is frozen meanwhile."""
        warnings: list[str] = []
        try:
            connection = psycopg.connect(
                self.node_conninfo(name, connect_timeout=max(2, int(timeout))), autocommit=True
            )
        except psycopg.Error:
            return False
        with connection:
            connection.add_notice_handler(lambda diag: warnings.append(diag.message_primary or ""))
            timer = threading.Timer(timeout, _stop_statement, [connection])
            timer.start()
            try:
                # WAL in a transaction with an xid: its commit waits for the sync standby
                # (txid_current() alone writes no WAL before the commit record, and such a
                # commit does not wait)
                connection.execute("SELECT pg_logical_emit_message(true, 'tenure-harness', 'write probe')")
            except psycopg.Error:
                return False
            finally:
                timer.cancel()
        return not any("synchronous replication" in warning for warning in warnings)

    def wait_writable(self, timeout: float = 60.0, *, exclude: tuple[str, ...] = ()) -> str:
        """Wait until a transaction commits on some running node; returns that node's name."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for node in self.nodes.values():
                if node.running() and node.name not in exclude and self.write_probe(node.name):
                    return node.name
            time.sleep(0.2)
        raise TimeoutError(f"no node accepted a write within {timeout} s\n{self.status()}")

    def replication(self, leader: str) -> dict[str, tuple[str, str]]:
        """application_name -> (state, sync_state) from pg_stat_replication on the leader."""
        rows = self.psql(leader, "SELECT application_name, state, sync_state FROM pg_stat_replication")
        return {name: (state, sync_state) for name, state, sync_state in rows}

    def wait_ready(self, timeout: float = 60.0, *, all_streaming: bool = True) -> str:
        """Wait for a leader that commits a write, a sync standby streaming with sync_state
        'sync' (in synchronous mode) and, with all_streaming, every other running node
        streaming from the leader; returns the leader's name.

        A replica Patroni keeps in state "start failed" for ``reinit_after`` seconds is
        reinitialized from the leader (POST /reinitialize, as ``patronictl reinit``), once,
        and said so on stderr: its own log (kept) says why it could not start."""
        deadline = time.monotonic() + timeout
        problem = "not checked yet"
        failed_since: dict[str, float | None] = {}
        while time.monotonic() < deadline:
            time.sleep(0.2)
            self._reinit_failed_replicas(failed_since)
            leader = self.leader()
            if leader is None or not self.nodes[leader].running():
                problem = f"no running leader (leader key: {leader})"
                continue
            if not self.write_probe(leader, timeout=min(3.0, max(0.5, deadline - time.monotonic()))):
                problem = f"leader {leader} did not commit a write"
                continue
            try:
                streams = self.replication(leader)
            except psycopg.Error as error:
                problem = f"pg_stat_replication on {leader}: {error}"
                continue
            if self.synchronous_mode:
                sync = self.sync_standby()
                if sync is None or streams.get(sync) != ("streaming", "sync"):
                    problem = f"sync standby {sync} not streaming in sync: {streams}"
                    continue
            if all_streaming:
                lagging = [
                    node.name
                    for node in self.nodes.values()
                    if node.running()
                    and node.name != leader
                    and streams.get(node.name, ("",))[0] != "streaming"
                ]
                if lagging:
                    problem = f"not streaming yet: {lagging}"
                    continue
            return leader
        raise TimeoutError(f"cluster not ready within {timeout} s: {problem}\n{self.status()}")

    def _reinit_failed_replicas(self, failed_since: dict[str, float | None]) -> None:
        now = time.monotonic()
        for member in self.members():
            name = member["name"]
            if member.get("state") != "start failed" or member.get("role") == "leader":
                failed_since.pop(name, None)
                continue
            since = failed_since.setdefault(name, now)
            if since is not None and now - since >= self.reinit_after and self.nodes[name].running():
                status, answer = self.api(name, "/reinitialize", {"force": True}, timeout=10.0)
                print(f"PatroniCluster: {name} could not start for {self.reinit_after:.0f} s (see its logs): "
                      f"reinitialized from the leader: {status} {answer}", file=sys.stderr)  # fmt: skip
                self.reinitialized.append(name)
                failed_since[name] = None  # once per wait

    def switchover(self, candidate: str | None = None, timeout: float = 60.0) -> str:
        """Move the leader through POST /switchover; returns the new leader once it is writable."""
        leader = self.leader()
        if leader is None:
            raise RuntimeError("switchover needs a leader")
        body = {"leader": leader} | ({"candidate": candidate} if candidate else {})
        status, answer = self.api(leader, "/switchover", body, timeout=timeout)
        if status != 200:
            raise RuntimeError(f"switchover refused ({status}): {answer}\n{self.status()}")
        return self.wait_writable(timeout, exclude=(leader,))

    # -- tenure -------------------------------------------------------------------------------

    def create_database(self, dbname: str) -> None:
        with self.connect() as connection:
            connection.execute(f'CREATE DATABASE "{dbname}"'.encode())

    def deploy_tenure(self, dbname: str) -> str:
        """createdb + sqitch deploy --verify on the leader (of the sqitch project that
        ``tenure deploy`` uses: the repository's, or the wheel's copy); returns the
        multi-host conninfo."""
        root = project_dir()
        self.create_database(dbname)
        leader = self.leader()
        assert leader is not None
        env = dict(os.environ, SQITCH_FULLNAME="tenure tests", SQITCH_EMAIL="tests@localhost")
        target = f"db:pg://{SUPERUSER}@127.0.0.1:{self.port(leader)}/{dbname}"
        subprocess.run(["sqitch", "--quiet", "deploy", "--verify", target], cwd=root, env=env, check=True)
        return self.conninfo(dbname)

    # -- diagnosis ----------------------------------------------------------------------------

    def log_paths(self) -> dict[str, Path]:
        """Every log, the nodes not running healthily first and etcd's last: a failure's
        report is read (and often cut) from the top."""
        states = {m["name"]: m.get("state") for m in self.members()}

        def healthy(node: Node) -> bool:
            return node.running() and states.get(node.name) in ("running", "streaming")

        paths = {}
        for node in sorted(self.nodes.values(), key=healthy):
            paths[f"{node.name} patroni"] = node.patroni_log
            paths[f"{node.name} postgres"] = node.postgres_log
        paths["etcd"] = self.directory / "etcd.log"
        return paths

    def log_tails(self, lines: int = 30) -> str:
        parts = []
        for label, path in self.log_paths().items():
            try:
                tail = path.read_text(errors="replace").splitlines()[-lines:]
            except OSError:
                continue
            parts.append(f"--- {label}: {path} (last {len(tail)} lines)\n" + "\n".join(tail) + "\n")
        return "".join(parts)

    def status(self) -> str:
        """One line per node: our view (running, frozen, killed) and Patroni's."""
        by_name = {m["name"]: m for m in self.members()}
        out = []
        for node in self.nodes.values():
            ours = "frozen" if node.frozen else "running" if node.running() else "stopped"
            member = by_name.get(node.name, {})
            out.append(
                f"{node.name} port={node.pg_port} api={node.api_port} {ours} "
                f"role={member.get('role')} state={member.get('state')} timeline={member.get('timeline')}"
            )
        return "\n".join(out)

    @contextlib.contextmanager
    def frozen(self, name: str) -> Iterator[None]:
        """freeze_node for the length of a with block."""
        self.freeze_node(name)
        try:
            yield
        finally:
            self.thaw_node(name)
