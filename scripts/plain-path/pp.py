"""Plain-path harness (issue 28, Speed), not part of make test: DB `base` (5ccd359) against DB `new` (this branch), same cluster,
paired interleaved rounds of
  cycle   : pgbench, 2 clients, task_cycle 10 per call (completes what the previous call leased)
  acquire : pgbench, 2 clients, task_acquire(1) + task_complete
  workers : 2 `tenure task worker` processes (--concurrency PP_CONCURRENCY, default 16; poll 0.05) of each tree's own python
on a fresh backlog of BACKLOG due tasks of kind `bench` each run.

Environment: PGHOST/PGPORT of the cluster holding both databases, PP_PGDATA its data directory
(server CPU from /proc, as root or its user), PP_BASE_PYTHON / PP_NEW_PYTHON the python/ trees
whose `tenure task worker` runs against each.
usage: python pp.py ROUNDS SECONDS [measures,comma,separated] [backlog]
"""

from __future__ import annotations

import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg

from ppcommon import conninfo, fill

from tenure.bench.common import ServerCpu

DBS = {"base": os.environ.get("PP_BASE_PYTHON", "/work/wt-plain28-base/python"),
       "new": os.environ.get("PP_NEW_PYTHON", "/work/wt-plain28/python")}
# The databases measured as base and new (PP_BASE_DB, PP_NEW_DB: to compare two other deployments).
DB_NAMES = {"base": os.environ.get("PP_BASE_DB", "base"), "new": os.environ.get("PP_NEW_DB", "new")}
PY = "/work/main/.venv/bin/python"
PGBENCH = "/usr/lib/postgresql/15/bin/pgbench"
OWNER = "md5(:client_id::text)::uuid"
CLAIM = f"""\
SELECT coalesce(max(id::text), '') AS id, coalesce(max(epoch), 0) AS epoch
  FROM tenure.task_acquire({OWNER}, '30 s', 1, ARRAY['bench']) \\gset
\\if :epoch
SELECT tenure.task_complete(':id', {OWNER}, :epoch);
\\endif
"""
CYCLE = f"""\
SELECT coalesce(jsonb_agg(jsonb_build_object('id', id, 'epoch', epoch, 'outcome', 'complete'))
                FILTER (WHERE outcome = 'lease'), '[]') AS held,
       count(*) FILTER (WHERE outcome = 'complete' AND refused IS NULL) AS completed
  FROM tenure.task_cycle({OWNER}, '30 s', 10, ARRAY['bench'], ':held') \\gset
"""
WORK = Path(tempfile.mkdtemp(prefix="speed28-pp-"))


POSTMASTER = int(Path(os.environ.get("PP_PGDATA", "/tmp/plain28pg/data"), "postmaster.pid").read_text().split()[0])
SERVER = ServerCpu(POSTMASTER)  # seconds of CPU the cluster used so far, as the bench reads it


def count_done(db: str, since: object = None, until: object = None) -> int:
    with psycopg.connect(conninfo(db), autocommit=True) as c:
        if since is None:
            return c.execute("SELECT count(*) FROM tenure.task WHERE status = 'done'").fetchone()[0]
        return c.execute(
            "SELECT count(*) FROM tenure.task WHERE finished_at >= %s AND finished_at < %s", (since, until)
        ).fetchone()[0]


def pgbench(db: str, script: str, seconds: int) -> float:
    path = WORK / f"s{abs(hash(script))}.sql"
    path.write_text(script)
    out = subprocess.run(
        [PGBENCH, "-n", "-c", "2", "-j", "2", "-T", str(seconds), "-f", str(path), "-D", "held=[]", conninfo(db)],
        capture_output=True, text=True, check=True,
    ).stdout
    return float(re.search(r"tps = ([0-9.]+) \(without", out).group(1))


def workers(db: str, seconds: int) -> float:
    env = dict(os.environ, PYTHONPATH=DBS[db])
    cmd = [PY, "-m", "tenure", "task", "worker", "--db", conninfo(DB_NAMES[db]), "--concurrency", os.environ.get("PP_CONCURRENCY", "16"), "--lease", "30",
           "--poll-interval", "0.05", "--module", "tenure.bench.app"]
    procs = []
    for n in range(2):
        log = open(WORK / f"w-{db}-{n}.log", "wb")
        procs.append((subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env), WORK / f"w-{db}-{n}.log"))
    try:
        for p, lp in procs:
            end = time.monotonic() + 30
            while " started: " not in lp.read_text():
                if p.poll() is not None or time.monotonic() > end:
                    raise RuntimeError(lp.read_text())
                time.sleep(0.05)
        time.sleep(1.0)
        with psycopg.connect(conninfo(DB_NAMES[db]), autocommit=True) as c:
            start = c.execute("SELECT now()").fetchone()[0]
        time.sleep(seconds)
    finally:
        for p, _ in procs:
            p.send_signal(signal.SIGTERM)
        for p, _ in procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    import datetime
    return count_done(DB_NAMES[db], start, start + datetime.timedelta(seconds=seconds)) / seconds


def measure(label: str, how: str, seconds: int, backlog: int) -> tuple[float, float]:
    db = DB_NAMES[label]
    fill(db, backlog)
    time.sleep(0.5)  # the fill's backend exits first
    cpu0 = SERVER.seconds()
    if how == "cycle":
        pgbench(db, CYCLE, seconds)
        rate = count_done(db) / seconds
    elif how == "acquire":
        rate = pgbench(db, CLAIM, seconds)
    else:
        rate = workers(label, seconds)
    time.sleep(0.3)  # the backends exit, their CPU time lands in the postmaster's
    cpu = SERVER.seconds() - cpu0
    with psycopg.connect(conninfo(db), autocommit=True) as c:
        left = c.execute("SELECT count(*) FROM tenure.task WHERE status = 'pending'").fetchone()[0]
        done = c.execute("SELECT count(*) FROM tenure.task WHERE status = 'done'").fetchone()[0]
    if left == 0:
        print(f"  !! {db} {how}: backlog ran out", flush=True)
    return rate, 1e6 * cpu / max(done, 1)


def main() -> None:
    rounds = int(sys.argv[1])
    seconds = int(sys.argv[2])
    hows = sys.argv[3].split(",") if len(sys.argv) > 3 else ["cycle", "acquire", "workers"]
    backlog = int(sys.argv[4]) if len(sys.argv) > 4 else 100_000
    results: dict[tuple[str, str], list[float]] = {}
    cpus: dict[tuple[str, str], list[float]] = {}
    ratios: dict[str, list[float]] = {h: [] for h in hows}
    cratios: dict[str, list[float]] = {h: [] for h in hows}
    for r in range(rounds):
        order = ["base", "new"] if r % 2 == 0 else ["new", "base"]
        for how in hows:
            got, cpu = {}, {}
            for db in order:
                got[db], cpu[db] = measure(db, how, seconds, backlog)
                results.setdefault((db, how), []).append(got[db])
                cpus.setdefault((db, how), []).append(cpu[db])
            ratios[how].append(got["new"] / got["base"])
            cratios[how].append(cpu["new"] / cpu["base"])
            print(f"round {r + 1} {how:8s} base {got['base']:8.0f}/s  new {got['new']:8.0f}/s  "
                  f"ratio {got['new'] / got['base']:.3f}   server CPU us/task base {cpu['base']:.0f} new {cpu['new']:.0f}"
                  f" x{cpu['new'] / cpu['base']:.3f}", flush=True)
    print("summary (median [min..max]):")
    for how in hows:
        b, n, q = results[("base", how)], results[("new", how)], ratios[how]
        print(f"  {how:8s} base {statistics.median(b):8.0f} [{min(b):.0f}..{max(b):.0f}]  "
              f"new {statistics.median(n):8.0f} [{min(n):.0f}..{max(n):.0f}]  "
              f"ratio {statistics.median(q):.3f} [{min(q):.3f}..{max(q):.3f}]", flush=True)
        b, n, q = cpus[("base", how)], cpus[("new", how)], cratios[how]
        print(f"  {'':8s} CPU us/task base {statistics.median(b):6.0f} [{min(b):.0f}..{max(b):.0f}]  "
              f"new {statistics.median(n):6.0f} [{min(n):.0f}..{max(n):.0f}]  "
              f"x{statistics.median(q):.3f} [{min(q):.3f}..{max(q):.3f}]", flush=True)


if __name__ == "__main__":
    main()
