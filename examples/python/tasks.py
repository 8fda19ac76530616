"""Tasks: enqueue an order; a TaskWorker charges it, and the step's ledger row commits
in the same transaction as the task's completion, under the lease's epoch; then that
epoch fences nothing. The database comes from PGHOST, PGPORT, PGDATABASE and PGUSER."""

import sys
import time
from typing import Any

import psycopg

import tenure

conn = tenure.connect("", application_name="tasks example", deadline=5)  # every wait bounded
conn.execute("CREATE TABLE IF NOT EXISTS ledger (task uuid, entry text, epoch bigint)")
driver = tenure.Driver(conn)


def charge(task: tenure.Task) -> tenure.Complete:
    def writes(db: psycopg.Connection[Any]) -> None:  # in the transaction of task_complete
        entry = f"charged order {task.data['order']}"
        db.execute("INSERT INTO ledger VALUES (%s, %s, %s)", (task.id, entry, task.epoch))

    return tenure.Complete(state="charged", writes=writes)


order = driver.task_enqueue("order", {"order": 17})
with tenure.TaskWorker("", {"order": charge}, lease=5, poll_interval=0.2) as worker:
    for _ in range(100):  # up to 10 s
        if (row := driver.task(order.id)) is not None and row.status == "done":
            break
        time.sleep(0.1)
    else:
        sys.exit(f"task {order.id} not done within 10 s")
rows = conn.execute("SELECT entry, epoch FROM ledger WHERE task = %s", (order.id,)).fetchall()
if len(rows) != 1:
    sys.exit(f"expected one ledger row for task {order.id}, found {rows}")
entry, epoch = rows[0]
print(f"task {order.id} done: ledger row {entry!r} written in epoch {epoch}")
try:  # the lease ended with the task: a late write under its epoch is refused
    driver.task_fence(order.id, worker.instance_id, epoch)
except tenure.LeaseLost as refused:
    print(f"after completion: {refused.message}")
else:
    sys.exit(f"a write fenced by the finished lease (epoch {epoch}) was accepted")
