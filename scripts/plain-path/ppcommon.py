"""What pp.py and micro.py share (scripts/plain-path, issue 28): the connection string of a database on
the cluster in PGHOST/PGPORT, and a fresh backlog of due tasks of kind `bench`."""

from __future__ import annotations

import os

import psycopg


def conninfo(db: str) -> str:
    return f"host={os.environ['PGHOST']} port={os.environ['PGPORT']} user=postgres dbname={db}"


def fill(db: str, backlog: int) -> None:
    """Empty tenure.task and its lease log in DB, then BACKLOG due tasks of kind bench, oldest due
    first, vacuumed, analysed and checkpointed."""
    with psycopg.connect(conninfo(db), autocommit=True) as c:
        c.execute("TRUNCATE tenure.task, tenure.task_lease_log CASCADE")
        c.execute(
            "INSERT INTO tenure.task (kind, state, created_at, last_change, last_action, next_action) "
            "SELECT 'bench', 'new', now(), now(), now(), now() - g * interval '1 ms' "
            "FROM generate_series(%s, 1, -1) g",
            (backlog,),
        )
        c.execute("VACUUM ANALYZE tenure.task")
        c.execute("VACUUM ANALYZE tenure.task_lease_log")
        c.execute("CHECKPOINT")
