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

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from proxy import forwarder
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from tenure import Driver
from tenure.testing import netns

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

pytestmark = pytest.mark.skipif(
    not netns.available(),
    reason="needs root, ip and nft (scripts/install-deps.sh installs nftables)",
)


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
    with netns.namespaces(len(CASES)) as (server, clients), forwarder(server, upstream) as port:
        try:
            for (kind, flavour), client in zip(CASES, clients, strict=True):
                log = tmp_path / f"{kind}-{flavour}.log"
                conninfo = make_conninfo(app_conninfo, host=client.server_address, port=port)
                name = "cut" if kind == "claimer" else f"cut-{kind}-{flavour}"
                argv = [sys.executable, str(APP), conninfo, name, str(log), kind, flavour]
                child = subprocess.Popen(
                    [*netns.exec_in(client.namespace), *argv], stderr=subprocess.PIPE, text=True
                )
                children[f"{kind} {flavour}"] = (child, log, client.namespace)
            for child, log, _ in children.values():
                wait_for(log, "gained", child, 30)
            time.sleep(3 * INTERVAL)  # a few renewals through the veths
            for _, _, namespace in children.values():
                netns.cut(namespace, "blackhole")
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
