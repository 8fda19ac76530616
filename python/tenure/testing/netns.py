"""Real network partitions for tests: network namespaces joined by veth pairs, cut with nftables.

:func:`namespaces` makes a server namespace and one namespace per client, each joined to
the server's by a veth pair of its own; both ends are made inside the namespaces, so the
machine's own network is untouched, and everything is deleted on exit. A client process
runs in its namespace (``exec_in(namespace) + argv``) and reaches the server's through
its veth; a socket made by :func:`in_namespace` (a listener, a forwarder to the test
cluster) lives in the server's namespace. :func:`cut` puts an nftables table into one
client's namespace, which :func:`heal` removes:

- ``blackhole``: every packet dropped, both ways; the kernel retransmits into it;
- ``loss``: 30% of packets dropped at random, both ways;
- ``reset``: every TCP packet answered with a reset, both ways.

Needs root, ``ip`` and ``nft`` (scripts/install-deps.sh installs nftables).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

CLONE_NEWNET = 0x40000000
TABLE = "tenure_cut"
R = TypeVar("R")

# Each fault is the body of both chains of the table (input and output).
FAULTS = {
    "blackhole": "policy drop",
    "loss": "policy accept; numgen random mod 100 < 30 drop",
    "reset": "policy accept; meta l4proto tcp reject with tcp reset",
}


def available() -> bool:
    """Whether this process may make namespaces and cut them (root, ip, nft)."""
    return os.geteuid() == 0 and bool(shutil.which("ip") and shutil.which("nft"))


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@dataclass(frozen=True)
class Client:
    """A client namespace and the server's address as it sees it."""

    namespace: str
    server_address: str


@contextlib.contextmanager
def namespaces(count: int, *, tag: str = "") -> Iterator[tuple[str, list[Client]]]:
    """A server namespace and ``count`` client namespaces (at most 60), each joined to it by a
    veth pair of its own; yields the server's namespace and the clients. All are deleted
    afterwards, and with them their veths and nftables tables."""
    if not 0 < count <= 60:
        raise ValueError(f"namespaces: count must be 1..60, not {count}")
    tag = tag or f"{os.getpid() % 100000}"
    server = f"tn-srv-{tag}"
    names = [f"tn-cli-{tag}-{n}" for n in range(count)]
    subnet = f"10.254.{os.getpid() % 250}"
    try:
        _ip("netns", "add", server)
        _ip("-n", server, "link", "set", "lo", "up")
        for n, client in enumerate(names):
            _ip("netns", "add", client)
            _ip("-n", server, "link", "add", f"vs{n}", "type", "veth", "peer", "name", "vc", "netns", client)
            for namespace, device, address in ((server, f"vs{n}", 4 * n + 1), (client, "vc", 4 * n + 2)):
                _ip("-n", namespace, "addr", "add", f"{subnet}.{address}/30", "dev", device)
                _ip("-n", namespace, "link", "set", device, "up")
            _ip("-n", client, "link", "set", "lo", "up")
        yield server, [Client(client, f"{subnet}.{4 * n + 1}") for n, client in enumerate(names)]
    finally:
        for namespace in [*names, server]:
            subprocess.run(["ip", "netns", "del", namespace], check=False, capture_output=True)


def exec_in(namespace: str) -> list[str]:
    """The command prefix that runs a program in ``namespace``."""
    return ["ip", "netns", "exec", namespace]


def in_namespace(namespace: str, make: Callable[[], R]) -> R:
    """``make()`` run on a thread that joined ``namespace``, so this process stays in its own:
    a socket keeps the namespace it was made in."""
    made: list[R] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = os.open(f"/var/run/netns/{namespace}", os.O_RDONLY)
            try:
                if libc.setns(fd, CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), "setns")
            finally:
                os.close(fd)
            made.append(make())
        except BaseException as error:
            failed.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if failed:
        raise failed[0]
    return made[0]


def cut(namespace: str, fault: str = "blackhole") -> None:
    """Apply ``fault`` (a key of :data:`FAULTS`) to every packet in and out of ``namespace``."""
    if fault not in FAULTS:
        raise ValueError(f"cut: no fault {fault!r}; choose one of {', '.join(FAULTS)}")
    body = FAULTS[fault]
    rules = (
        f"table inet {TABLE} {{\n"
        f" chain input {{ type filter hook input priority 0; {body}; }}\n"
        f" chain output {{ type filter hook output priority 0; {body}; }}\n"
        "}\n"
    )
    subprocess.run([*exec_in(namespace), "nft", "-f", "-"], input=rules, text=True, check=True)


def heal(namespace: str) -> None:
    """Remove the fault :func:`cut` applied to ``namespace`` (none is fine)."""
    subprocess.run(
        [*exec_in(namespace), "nft", "delete", "table", "inet", TABLE], check=False, capture_output=True
    )


def describe(namespace: str) -> str:
    """The addresses, listening TCP sockets and nftables rules of ``namespace``, for a failure report."""
    shown = []
    for command in (["ip", "-brief", "addr"], ["ss", "-ltn"], ["nft", "list", "ruleset"]):
        done = subprocess.run([*exec_in(namespace), *command], capture_output=True, text=True, check=False)
        shown.append(f"$ {' '.join(command)}\n{done.stdout}{done.stderr}")
    return "\n".join(shown)
