"""Micro loops in one session each, CPU of that backend (from /proc) per call, base vs new,
interleaved. usage: python micro.py ROUNDS [cycle,acquire] [calls] [backlog]
  cycle  : CALLS task_cycle(10) calls, each completing what the previous leased, COMMIT each
  acquire: CALLS x (task_acquire(1) COMMIT; task_complete COMMIT)
Also reports the wall time per call.
"""

from __future__ import annotations

import statistics
import sys
import time

import psycopg

from ppcommon import conninfo, fill

from tenure.bench.common import cpu_seconds

CYCLE = """
DO $$
DECLARE held jsonb := '[]'; o uuid := gen_random_uuid();
BEGIN
  FOR i IN 1..%(calls)s LOOP
    SELECT coalesce(jsonb_agg(jsonb_build_object('id', id, 'epoch', epoch, 'outcome', 'complete'))
                    FILTER (WHERE outcome = 'lease'), '[]') INTO held
      FROM tenure.task_cycle(o, '30 s', 10, ARRAY['bench'], held);
    COMMIT;
  END LOOP;
END $$"""

ACQUIRE = """
DO $$
DECLARE o uuid := gen_random_uuid(); l record;
BEGIN
  FOR i IN 1..%(calls)s LOOP
    SELECT * INTO l FROM tenure.task_acquire(o, '30 s', 1, ARRAY['bench']);
    COMMIT;
    PERFORM tenure.task_complete(l.id, o, l.epoch);
    COMMIT;
  END LOOP;
END $$"""


def run(db: str, how: str, calls: int, backlog: int) -> tuple[float, float]:
    fill(db, backlog)
    with psycopg.connect(conninfo(db), autocommit=True) as c:
        pid = c.execute("SELECT pg_backend_pid()").fetchone()[0]
        # warm the caches (plans, catalog) with a few calls first
        c.execute((CYCLE if how == "cycle" else ACQUIRE) % {"calls": 20})
        c0, w0 = cpu_seconds(pid), time.monotonic()  # a backend's own user + system time
        c.execute((CYCLE if how == "cycle" else ACQUIRE) % {"calls": calls})
        c1, w1 = cpu_seconds(pid), time.monotonic()
    return 1000 * (c1 - c0) / calls, 1000 * (w1 - w0) / calls


def main() -> None:
    rounds = int(sys.argv[1])
    hows = sys.argv[2].split(",") if len(sys.argv) > 2 else ["cycle", "acquire"]
    calls = int(sys.argv[3]) if len(sys.argv) > 3 else 1500
    backlog = int(sys.argv[4]) if len(sys.argv) > 4 else 20_000
    dbs = sys.argv[5].split(",") if len(sys.argv) > 5 else ["base", "new"]
    res: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for r in range(rounds):
        order = dbs if r % 2 == 0 else dbs[::-1]
        for how in hows:
            line = []
            for db in order:
                got = run(db, how, calls, backlog)
                res.setdefault((db, how), []).append(got)
                line.append(f"{db} cpu {got[0]:.3f} wall {got[1]:.3f} ms/call")
            print(f"round {r + 1} {how}: " + "  ".join(line), flush=True)
    print("summary, median [min..max] ms per call (CPU of the backend / wall):")
    for how in hows:
        for db in dbs:
            c = [x[0] for x in res[(db, how)]]
            w = [x[1] for x in res[(db, how)]]
            print(f"  {how:8s} {db:6s} cpu {statistics.median(c):.3f} [{min(c):.3f}..{max(c):.3f}]  "
                  f"wall {statistics.median(w):.3f} [{min(w):.3f}..{max(w):.3f}]")
        if "base" in dbs:
            for db in dbs:
                if db == "base":
                    continue
                q = [n[0] / b[0] for n, b in zip(res[(db, how)], res[("base", how)])]
                print(f"  {how:8s} {db}/base cpu x{statistics.median(q):.3f} [{min(q):.3f}..{max(q):.3f}]")


if __name__ == "__main__":
    main()
