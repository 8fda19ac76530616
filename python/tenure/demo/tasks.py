"""The task part of ``tenure demo``: an order workflow with a long wait, a worker
killed in the middle of a step, and the recovery, read back from the database.

order/new       charge the customer (a ledger row), then wait for the warehouse:
                released, due again in a few seconds ("check again later")
order/shipping  the warehouse answered: record the shipment (a ledger row), complete

One order's charge step is slow the first time it runs; the demo kills the worker
in the middle of it. Its lease runs out, another worker takes the task, and the
ledger still holds exactly one charge per order: the charge is written in the same
transaction as the task's transition, so the killed attempt left nothing behind.
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path
from typing import IO, Any
from uuid import UUID

import psycopg

from tenure.driver import Driver
from tenure.runtime.tasks import Complete, Processor, Release, Task, Writes
from tenure.testing.database import server_now, setup
from tenure.testing.tasks import TaskWorkerProcess

LEASE, POLL, WAREHOUSE_WAIT, SLOW_STEP = 2.0, 0.2, 3.0, 30.0


def ledger(task: Task, entry: str) -> Writes:
    def write(db: psycopg.Connection[Any]) -> None:
        db.execute(
            "INSERT INTO tenure_demo.ledger (order_no, entry, task_id, epoch, owner) "
            "VALUES (%s, %s, %s, %s, %s)",
            (task.data["order"], entry, task.id, task.epoch, task.owner),
        )

    return write


def charge(task: Task) -> Release:
    if task.data.get("slow") and task.attempts == 0:
        time.sleep(SLOW_STEP)  # the payment provider hangs; the demo kills this worker meanwhile
    return Release(delay=WAREHOUSE_WAIT, state="shipping", writes=ledger(task, "charged"))


def ship(task: Task) -> Complete:
    return Complete(state="delivered", writes=ledger(task, "shipped"))


PROCESSORS: dict[str | tuple[str, str], Processor] = {("order", "new"): charge, ("order", "shipping"): ship}


def run_task_demo(admin_conninfo: str, *, orders: int = 5, workdir: Path, out: IO[str] | None = None) -> bool:
    """Run the order workflow with a crash mid-step; returns True when every check held."""
    out = out or sys.stdout
    app_conninfo = setup(admin_conninfo)
    admin = psycopg.connect(admin_conninfo, autocommit=True)
    driver = Driver(admin)
    print(
        f"\ntenure demo, tasks: {orders} orders, 2 workers, lease {LEASE} s, "
        f"warehouse answers after {WAREHOUSE_WAIT} s",
        file=out,
    )
    workers = [
        TaskWorkerProcess(
            app_conninfo,
            "tenure.demo.tasks",
            workdir / f"worker-{n}.log",
            lease=LEASE,
            poll_interval=POLL,
            concurrency=4,
        )
        for n in (1, 2)
    ]
    names = {w.instance_id: f"worker-{n}" for n, w in enumerate(workers, start=1)}
    slow_order = orders // 2 + 1
    try:
        enqueued = driver.task_enqueue_many(
            [{"kind": "order", "data": {"order": n, "slow": n == slow_order}} for n in range(1, orders + 1)]
        )
        order_of = {e.id: n for n, e in enumerate(enqueued, start=1)}
        slow_id = enqueued[slow_order - 1].id
        holder = _wait_for_owner(driver, slow_id)
        time.sleep(0.5)  # well inside the slow charge step
        killed_at = server_now(admin)
        victim = next(w for w in workers if w.instance_id == holder)
        victim.signal(signal.SIGKILL)
        victim.process.wait()
        print(
            f"  order {slow_order}: its charge step hangs; SIGKILL {names[holder]} in the middle of it "
            f"at {killed_at:%H:%M:%S.%f}",
            file=out,
        )
        end = time.monotonic() + 60
        while time.monotonic() < end and any(
            (row := driver.task(e.id)) is None or row.status != "done" for e in enqueued
        ):
            time.sleep(0.1)
    finally:
        for worker in workers:
            worker.stop()

    leases = admin.execute(
        "SELECT task_id, epoch, owner, leased_at FROM tenure.task_lease_log WHERE task_id = ANY(%s) "
        "ORDER BY task_id, epoch",
        ([e.id for e in enqueued],),
    ).fetchall()
    entries = admin.execute(
        "SELECT order_no, entry, epoch, done_at FROM tenure_demo.ledger ORDER BY done_at"
    ).fetchall()
    states = {e.id: (row.status, row.state) if (row := driver.task(e.id)) else None for e in enqueued}
    admin.close()

    print("\norders (server clock, UTC): each lease, and what it wrote to the ledger", file=out)
    for task_id, n in order_of.items():
        parts = []
        for lease_task, epoch, owner, leased_at in leases:
            if lease_task != task_id:
                continue
            wrote = [entry for order_no, entry, e, _ in entries if order_no == n and e == epoch]
            parts.append(
                f"epoch {epoch} {names.get(owner, str(owner)[:8])} {leased_at:%H:%M:%S.%f} "
                f"{'+'.join(wrote) or 'nothing (killed)'}"
            )
        status, state = states[task_id] or ("missing", "-")
        print(f"  order {n}: " + "; ".join(parts) + f"  => {status}, {state}", file=out)

    retaken = [leased_at for task_id, epoch, _, leased_at in leases if task_id == slow_id and epoch == 2]
    ok = True
    if retaken:
        took = (retaken[0] - killed_at).total_seconds()
        print(
            f"\nrecovery: order {slow_order} leased again {took:.3f} s after the kill; "
            f"bound lease + poll = {LEASE + POLL:.1f} s",
            file=out,
        )
    else:
        print(f"\nrecovery: order {slow_order} was never leased again", file=out)
        ok = False
    per_order = {
        (n, entry): sum(1 for o, en, _, _ in entries if (o, en) == (n, entry))
        for n in order_of.values()
        for entry in ("charged", "shipped")
    }
    wrong = {key: count for key, count in per_order.items() if count != 1}
    finished = all(state == ("done", "delivered") for state in states.values())
    if wrong or not finished:
        print(f"  VIOLATION: ledger entries not exactly once: {wrong}; final states: {states}", file=out)
        ok = False
    else:
        print(
            f"checked: all {orders} orders delivered; every order charged once and shipped once, "
            "the killed attempt left no ledger entry",
            file=out,
        )
    print(f"worker logs: {workdir}", file=out)
    return ok


def _wait_for_owner(driver: Driver, task_id: UUID, wait: float = 20.0) -> UUID:
    end = time.monotonic() + wait
    while time.monotonic() < end:
        row = driver.task(task_id)
        if row is not None and row.owner is not None:
            return row.owner
        time.sleep(0.02)
    raise TimeoutError(f"task {task_id} was not leased within {wait} s")
