"""Heartbeat election: become primary, make a write fenced by the term, resign;
then the resigned term can no longer fence a write. The database comes from
PGHOST, PGPORT, PGDATABASE and PGUSER (a member of tenure_worker)."""

import sys

import tenure

conn = tenure.connect("", application_name="heartbeat example", deadline=5)  # every wait bounded
conn.execute("CREATE TABLE IF NOT EXISTS scheduler_runs (instance uuid, term bigint)")
driver = tenure.Driver(conn)


def run_jobs(elector: tenure.Elector, term: int) -> None:
    """The primary's work: it commits only while this instance is the primary in `term`."""
    with conn.transaction():
        driver.heartbeat_fence(elector.instance_id, "scheduler", term)  # else NotPrimary, rolled back
        conn.execute("INSERT INTO scheduler_runs VALUES (%s, %s)", (elector.instance_id, term))


with tenure.Elector("", "scheduler", interval=0.5, timeout=1.5) as elector:
    if not elector.wait_until_primary(timeout=10) or (term := elector.term) is None:
        sys.exit("not elected within 10 s")
    run_jobs(elector, term)
    print(f"primary in term {term}: fenced write committed")
# Leaving the block resigned: a follower takes over at its next poll, and the term is stale.
try:
    run_jobs(elector, term)
except tenure.NotPrimary as refused:
    print(f"after resigning: {refused.message}")
else:
    sys.exit(f"a write fenced by the resigned term {term} committed")
