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
def namespaces() -> Iterator[tuple[str, str, str]]:
    """A server namespace and a client namespace joined by a veth pair; yields their names
    and the server's address as the client sees it. Both are deleted afterwards."""
    tag = f"{os.getpid() % 100000}"
    server, client = f"tn-srv-{tag}", f"tn-cli-{tag}"
    subnet = f"10.254.{os.getpid() % 250}"
    try:
        ip("netns", "add", server)
        ip("netns", "add", client)
        ip("-n", server, "link", "add", "vs", "type", "veth", "peer", "name", "vc", "netns", client)
        for namespace, device, address in ((server, "vs", f"{subnet}.1"), (client, "vc", f"{subnet}.2")):
            ip("-n", namespace, "addr", "add", f"{address}/30", "dev", device)
            ip("-n", namespace, "link", "set", device, "up")
            ip("-n", namespace, "link", "set", "lo", "up")
        yield server, client, f"{subnet}.1"
    finally:
        for namespace in (client, server):
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
    with PausingProxy(*upstream) as proxy:
        proxy._listener.close()
        proxy._listener = listener_in(namespace)
        proxy.port = proxy._listener.getsockname()[1]
        threading.Thread(target=proxy._accept, daemon=True).start()
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


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("kind", "flavour"),
    [("elector", "sync"), ("elector", "async"), ("claimer", "sync"), ("maintainer", "async")],
)
def test_stop_while_cut_off_keeps_its_bounds(
    app_conninfo: str, admin: Any, tmp_path: Path, kind: str, flavour: str
) -> None:
    """The async claimer shares the async elector's stop (AsyncCycleLoop), the replica
    manager the elector's (GrantLoop), the sync maintainer the async one's shape: one case
    each would add seconds, not coverage."""
    Driver(admin).claim_register("cut", ["a", "b"])
    parts = conninfo_to_dict(app_conninfo)
    log = tmp_path / f"{kind}.log"
    upstream = (str(parts["host"]), int(str(parts["port"])))
    with namespaces() as (server, client, address), forwarder(server, upstream) as port:
        conninfo = make_conninfo(app_conninfo, host=address, port=port)
        child = subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                client,
                sys.executable,
                str(APP),
                conninfo,
                "cut",
                str(log),
                kind,
                flavour,
            ],
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            wait_for(log, "gained", child, 30)
            time.sleep(3 * INTERVAL)  # a few renewals through the veth
            cut(client)
            # One renewal is sure to be in flight into the blackhole when SIGTERM comes.
            time.sleep(INTERVAL + 0.1)
            terminated = time.monotonic()
            child.send_signal(signal.SIGTERM)
            stopped = wait_for(log, "stopped", child, 30)
            child.wait(30)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
    seen = events(log)
    windows = [e["until"] for e in seen if e["event"] == "window"]
    lost = [e for e in seen if e["event"] == "lost"]
    stop_took = stopped["at"] - terminated
    assert lost, f"the loss callback never fired: {seen}"
    late = lost[0]["at"] - windows[-1]
    print(
        f"{kind} {flavour}: stop() took {stop_took:.3f} s (grace {GRACE} s); the loss callback "
        f"{late:+.3f} s after the safe window ended ({lost[0]['what']})"
    )
    assert stop_took <= GRACE + SLACK, (
        f"stop() took {stop_took:.3f} s after SIGTERM while cut off, over its grace {GRACE} s + {SLACK} s"
    )
    assert late <= SLACK, (
        f"the loss callback ({lost[0]['what']!r}) fired {late:.3f} s after the safe window ended "
        f"(slack {SLACK} s)"
    )
    assert len(lost) == 1, f"the loss callback more than once: {lost}"
