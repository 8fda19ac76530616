"""Stopping a primary that a real partition cut off from the database (issue 26).

An elector or a claimer runs in a process of its own, in a network namespace of its own, and
reaches the server through a veth pair to a second namespace (both ends inside
namespaces this test makes, so the machine's own network is untouched); on the server's
side a small forwarder, whose listening socket lives in that second namespace, passes
the bytes on to the test cluster. An nftables table in the client's namespace then
drops every packet, both ways: the client's kernel retransmits into a blackhole, as on a
real partition, which a proxy that merely stops forwarding does not show.

Measured from outside, on the monotonic clock every process shares: ``stop()`` after
SIGTERM must return within its grace (the safe window, T - I), and the loss callback
(``on_demoted``, ``on_lost``) must fire by the end of the safe window of the last successful
renewal, each plus a stated slack.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from proxy import PausingProxy
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from tenure import Driver

INTERVAL, TIMEOUT = 0.5, 2.0
GRACE = TIMEOUT - INTERVAL  # stop()'s default grace: the safe window T - I
# A task worker's stop: its shutdown grace, then at most the release bound, the safe window
# (2/3 of the lease, 3 s) capped at 2 s. With stop_app's "tasks" (a grace of 3 s) the task's
# safe window ends during the grace; with "release" (0.5 s) the task is released into the
# cut with more time left in its window than the release bound.
STOP_BOUND = {"tasks": 3.0 + 2.0, "release": 0.5 + 2.0}
# Scheduling on a loaded two-core machine (five helpers' tests at once) adds to every bound.
SLACK = 0.25
APP = Path(__file__).with_name("stop_app.py")
CLONE_NEWNET = 0x40000000

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not (shutil.which("ip") and shutil.which("nft")),
    reason="needs root, ip and nft (scripts/install-deps.sh installs nftables)",
)


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@contextlib.contextmanager
def namespaces(count: int) -> Iterator[tuple[str, list[tuple[str, str]]]]:
    """A server namespace and ``count`` client namespaces, each joined to it by a veth pair
    of its own; yields their names with the server's address as each client sees it. All
    are deleted afterwards (and with them their veths and nftables tables)."""
    tag = f"{os.getpid() % 100000}"
    server = f"tn-srv-{tag}"
    clients = [f"tn-cli-{tag}-{n}" for n in range(count)]
    subnet = f"10.254.{os.getpid() % 250}"
    try:
        ip("netns", "add", server)
        ip("-n", server, "link", "set", "lo", "up")
        for n, client in enumerate(clients):
            ip("netns", "add", client)
            ip("-n", server, "link", "add", f"vs{n}", "type", "veth", "peer", "name", "vc", "netns", client)
            for namespace, device, address in ((server, f"vs{n}", 4 * n + 1), (client, "vc", 4 * n + 2)):
                ip("-n", namespace, "addr", "add", f"{subnet}.{address}/30", "dev", device)
                ip("-n", namespace, "link", "set", device, "up")
            ip("-n", client, "link", "set", "lo", "up")
        yield server, [(client, f"{subnet}.{4 * n + 1}") for n, client in enumerate(clients)]
    finally:
        for namespace in [*clients, server]:
            subprocess.run(["ip", "netns", "del", namespace], check=False, capture_output=True)


def listener_in(namespace: str) -> socket.socket:
    """A listening TCP socket of ``namespace`` (made on a thread that joins it, so this
    process stays in its own): a socket keeps the namespace it was made in."""
    made: list[socket.socket | BaseException] = []

    def make() -> None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = os.open(f"/var/run/netns/{namespace}", os.O_RDONLY)
            try:
                if libc.setns(fd, CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), "setns")
            finally:
                os.close(fd)
            made.append(socket.create_server(("0.0.0.0", 0)))
        except BaseException as error:
            made.append(error)

    thread = threading.Thread(target=make)
    thread.start()
    thread.join()
    if isinstance(made[0], BaseException):
        raise made[0]
    return made[0]


@contextlib.contextmanager
def forwarder(namespace: str, upstream: tuple[str, int]) -> Iterator[int]:
    """Forward connections to the listening port yielded, in ``namespace``, to ``upstream``."""
    with PausingProxy(*upstream, listener=listener_in(namespace)) as proxy:
        yield proxy.port


def cut(namespace: str) -> None:
    """Drop every packet in and out of ``namespace``: a blackhole, no reset, no refusal."""
    rules = (
        "table inet tenure_cut {\n"
        " chain input { type filter hook input priority 0; policy drop; }\n"
        " chain output { type filter hook output priority 0; policy drop; }\n"
        "}\n"
    )
    subprocess.run(["ip", "netns", "exec", namespace, "nft", "-f", "-"], input=rules, text=True, check=True)


def events(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.endswith("}")]


def wait_for(log: Path, event: str, child: subprocess.Popen[str], timeout: float) -> dict[str, Any]:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        found = [e for e in events(log) if e["event"] == event]
        if found:
            return found[0]
        if child.poll() is not None:
            break
        time.sleep(0.05)
    stderr = child.stderr.read() if child.poll() is not None and child.stderr else ""
    raise AssertionError(f"no {event!r} within {timeout} s; the child logged {events(log)}, stderr: {stderr}")


# The async claimer and replica manager share the async elector's stop (AsyncCycleLoop), the
# sync maintainer the async one's shape.
CASES = [
    ("elector", "sync"),
    ("elector", "async"),
    ("claimer", "sync"),
    ("replica", "sync"),
    ("maintainer", "async"),
    ("tasks", "sync"),
    ("tasks", "async"),
    ("release", "sync"),
    ("release", "async"),
    ("queue", "sync"),
    ("queue", "async"),
]


def grace_of(kind: str) -> float:
    return STOP_BOUND.get(kind, GRACE)


@pytest.mark.timeout(120)
def test_stops_while_cut_off_keep_their_bounds(app_conninfo: str, admin: Any, tmp_path: Path) -> None:
    """Every case at once, each in its own client namespace: one database, a few seconds."""
    driver = Driver(admin)
    driver.claim_register("cut", ["a", "b"])
    for kind, flavour in CASES:
        if kind in STOP_BOUND:
            driver.task_enqueue(f"cut-{kind}-{flavour}")
        if kind == "queue":
            driver.claim_register(f"cut-queue-{flavour}", ["a", "b"])
    parts = conninfo_to_dict(app_conninfo)
    upstream = (str(parts["host"]), int(str(parts["port"])))
    children: dict[str, tuple[subprocess.Popen[str], Path, str]] = {}
    terminated: dict[str, float] = {}
    stopped: dict[str, dict[str, Any]] = {}
    with namespaces(len(CASES)) as (server, clients), forwarder(server, upstream) as port:
        try:
            for (kind, flavour), (client, address) in zip(CASES, clients, strict=True):
                log = tmp_path / f"{kind}-{flavour}.log"
                conninfo = make_conninfo(app_conninfo, host=address, port=port)
                name = "cut" if kind == "claimer" else f"cut-{kind}-{flavour}"
                argv = [sys.executable, str(APP), conninfo, name, str(log), kind, flavour]
                child = subprocess.Popen(
                    ["ip", "netns", "exec", client, *argv], stderr=subprocess.PIPE, text=True
                )
                children[f"{kind} {flavour}"] = (child, log, client)
            for child, log, _ in children.values():
                wait_for(log, "gained", child, 30)
            time.sleep(3 * INTERVAL)  # a few renewals through the veths
            for _, _, client in children.values():
                cut(client)
            # One renewal of each is sure to be in flight into the blackhole when SIGTERM comes.
            time.sleep(INTERVAL + 0.1)
            for case, (child, _, _) in children.items():
                terminated[case] = time.monotonic()
                child.send_signal(signal.SIGTERM)
            for case, (child, log, _) in children.items():
                stopped[case] = wait_for(log, "stopped", child, 30)
                child.wait(30)
        finally:
            for child, _, _ in children.values():
                if child.poll() is None:
                    child.kill()
                    child.wait()
    failures = []
    for (kind, _), (case, (_, log, _)) in zip(CASES, children.items(), strict=True):
        grace = grace_of(kind)
        seen = events(log)
        windows = [e["until"] for e in seen if e["event"] == "window"]
        lost = [e for e in seen if e["event"] == "lost"]
        if not lost:
            failures.append(f"{case}: the loss callback never fired: {seen}")
            continue
        stop_took = stopped[case]["at"] - terminated[case]
        late = lost[0]["at"] - windows[-1]
        print(
            f"{case}: stop() took {stop_took:.3f} s (bound {grace} s); the loss callback "
            f"{late:+.3f} s after the safe window ended ({lost[0]['what']})"
        )
        if stop_took > grace + SLACK:
            failures.append(
                f"{case}: stop() took {stop_took:.3f} s after SIGTERM while cut off, "
                f"over its bound {grace} s + {SLACK} s"
            )
        if late > SLACK:
            failures.append(
                f"{case}: the loss callback ({lost[0]['what']!r}) fired {late:.3f} s after the safe "
                f"window ended (slack {SLACK} s)"
            )
        if len(lost) > 1:
            failures.append(f"{case}: the loss callback more than once: {lost}")
    assert not failures, "\n".join(failures)
