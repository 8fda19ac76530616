"""``tenure bench``: figures as ratios to baselines measured in the same run.

1. Heartbeat throughput: pgbench clients each acting as an elector renewing its own
   service type with ``update_heartbeat``, against pgbench running a one-row UPDATE
   with the same number of clients on the same cluster.
2. Contended bids: every client bidding for one type (one renews, the rest are
   discarded), against the same baseline.
3. Takeover time: demo service processes, the primary SIGKILLed again and again; the
   time from the kill (server clock) to the start of the next term, against T + I.
4. Tasks completed per second with 1, 4, 8 workers on a backlog of 100,000 and of
   1,000,000 tasks: real ``tenure task worker`` processes running a no-op processor
   (:mod:`tenure.bench.app`), and the same SQL calls driven by pgbench, against pgbench
   running the bare SKIP LOCKED claim and complete on a plain table with the same backlog;
   then one worker process with no-op handlers in any language, a command per task
   (``--exec``) and a local HTTP handler (``--http``, :mod:`tenure.bench.shim_handler`),
   against the Python worker (``--module``) in the same run; and the task controls' cost:
   the kind limited by ``max_running`` (a limit that binds no slot, and one that binds), and
   the backlog spread over priorities 0 .. 9, against the kind without settings at priority 0.
5. Tasks enqueued per second, one per call and in batches, against a one-row INSERT.
6. Wake-up latency from enqueue to lease start with and without LISTEN/NOTIFY, against
   a bare NOTIFY reaching a listener (on) and against the poll interval (off); for scale,
   a bare queue's wake-up (INSERT + NOTIFY, a SKIP LOCKED claim on the notification).
7. Claims: instances holding their fair share of 10,000 (and 1,000) keys, each running
   claim_cycle (and, for reference, claim_renew + claim_take in two calls) as fast as it
   can (one pgbench client per instance), against
   pgbench running one UPDATE that extends the expiry of the same rows on a plain table.
8. The submission queue: batches per second end to end and fairness under a flood
   (:mod:`tenure.bench.batches`).
9. Replica failover: three demo replicas behind HAProxy with a client writing through it;
   the active replica SIGKILLed again and again; the time from the kill to the first
   successful request through the load balancer, against the acquisition interval plus
   the health-check interval, without a grace period and with one (whose reservation
   the failover must wait out).
10. Peers: tenure's task workers, pgqueuer (asyncpg and psycopg) and procrastinate each
   draining the same no-op jobs on the same cluster, against the bare SKIP LOCKED floor
   (:mod:`tenure.bench.peers`; the peers run from their own virtual environment).
   Then end-to-end latency: single jobs enqueued one per call at half of each system's own
   maximum with such enqueues, p50 and p99 from due to completion, tenure against pgqueuer
   (:mod:`tenure.bench.latency`, section ``latency``).
11. Memory: the resident size of one worker process idle and with 1,000 tasks in flight,
   tenure's TaskWorker and AsyncTaskWorker against pgqueuer (:mod:`tenure.bench.memory`).
12. The retention soak: electors, a task worker, claimers and a submission queue under steady
   churn with two maintainers pruning every history; rows and sizes per table at the warm-up,
   the middle and the end, and the growth from the middle to the end (:mod:`tenure.bench.soak`).
13. Supervised commands: ``tenure elect --exec`` shims whose child makes fenced writes; the
   primary's shim SIGKILLed, SIGSTOPped and cut off from the database (pg_terminate_backend),
   20 times each: the time from the fault and from the end of the grant's safe window to the
   child's death, and what is left before anyone else could be granted the type
   (:mod:`tenure.bench.supervise`).
14. A synchronous standby: tenure's task workers against pgqueuer-asyncpg's best batch sizes on
   a two-node Patroni cluster in synchronous mode at production durability, as ratios to
   pgqueuer's best there, with the jobs each writing commit carried (:mod:`tenure.bench.sync`).

Every throughput row is a steady rate, its start-up reported apart (pgbench: after its
first second; workers: after a second's warm-up; queue and peers: 10% to 90% done). With
``--repeat N`` the throughput rows of 1, 4, 5, 7, 8 and 10 and the wake-up latencies of 6
run N times in interleaved rounds (:func:`tenure.bench.common.interleaved`): each row shows
its median and the spread of its runs, ``MOVED`` past 15%.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import psycopg

from tenure.bench.batches import FLOOD_BATCHES, FLOOD_KEYS, queue_bench
from tenure.bench.claims import CLAIMS_PLAIN_DDL, claim_costs
from tenure.bench.common import SPREAD_LIMIT, durability
from tenure.bench.heartbeat import heartbeat_throughput, takeover
from tenure.bench.latency import FALLBACK_TENURE, latency_bench
from tenure.bench.latency import SYSTEMS as LATENCY_SYSTEMS
from tenure.bench.memory import memory
from tenure.bench.peers import PEER_SECONDS, PEER_SYSTEMS, TENURE_CONFIGS, default_peers_python, peers_bench
from tenure.bench.replicas import replica_failover
from tenure.bench.soak import soak
from tenure.bench.supervise import supervise
from tenure.bench.sync import SYNC_BATCHES, SYNC_TENURE, sync_bench
from tenure.bench.tasks import (
    JOBS_DDL,
    clean,
    control_costs,
    enqueue_rates,
    shim_throughput,
    task_throughput,
    wake_latency,
)

SECTIONS = (
    "heartbeat",
    "takeover",
    "tasks",
    "enqueue",
    "wake",
    "claims",
    "queue",
    "replicas",
    "supervise",
    "peers",
    "latency",
    "memory",
    "soak",
    "sync",
)


def run_bench(
    admin_conninfo: str,
    *,
    sections: list[str],
    seconds: float,
    clients: int,
    kills: int,
    backlogs: list[int],
    workers: list[int],
    task_concurrency: int,
    task_seconds: float,
    enqueue_batches: list[int],
    wake_tasks: int,
    claim_keys: list[int],
    claim_instances: int,
    queue_keys: list[int],
    queue_batches: int,
    replica_trials: int,
    queue_seconds: float = 5.0,
    queue_flood: int = FLOOD_BATCHES,
    peer_jobs: int = 20_000,
    peer_seconds: float = PEER_SECONDS,
    peer_tenure: list[tuple[int, int]] | None = None,
    peers_python: str = "",
    peer_systems: list[str] | None = None,
    latency_rate: float | None = None,
    latency_seconds: float = 10.0,
    latency_systems: list[str] | None = None,
    memory_tasks: int = 1000,
    memory_hold: float = 20.0,
    soak_seconds: float = 1800.0,
    soak_age: float | None = None,
    supervise_faults: int = 20,
    workdir: Path | None = None,
    repeat: int = 1,
    sync_jobs: int = 30_000,
    sync_tenure: list[tuple[int, int]] | None = None,
    sync_batches: list[int] | None = None,
) -> int:
    workdir = workdir or Path(tempfile.mkdtemp(prefix="tenure-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    with psycopg.connect(admin_conninfo, autocommit=True) as admin:
        admin.execute("CREATE SCHEMA IF NOT EXISTS tenure_bench")
        admin.execute("CREATE TABLE IF NOT EXISTS tenure_bench.row (id int PRIMARY KEY, v bigint NOT NULL)")
        admin.execute(
            "INSERT INTO tenure_bench.row SELECT g, 0 FROM generate_series(0, %s) g ON CONFLICT DO NOTHING",
            (clients,),
        )
        admin.execute(JOBS_DDL)
        admin.execute(CLAIMS_PLAIN_DDL)
        cluster = durability(admin)

    print(f"tenure bench ({', '.join(sections)}): {clients} clients, {seconds:.0f} s per throughput run")
    print(f"  cluster: {cluster}")
    if repeat > 1:
        print(
            f"  repeated rows: {repeat} interleaved rounds; each shows the median and the spread of its runs "
            f"((max - min) / median; MOVED past {SPREAD_LIMIT:.0%}); pgbench rows leave their first "
            "second out (reported apart as the start-up)"
        )
    if "heartbeat" in sections:
        heartbeat_throughput(admin_conninfo, clients=clients, seconds=seconds, workdir=workdir, repeat=repeat)
    if "takeover" in sections:
        takeover(admin_conninfo, kills=kills, workdir=workdir)

    with psycopg.connect(admin_conninfo, autocommit=True) as admin:
        if "tasks" in sections:
            for backlog in backlogs:
                task_throughput(
                    admin,
                    admin_conninfo,
                    backlog=backlog,
                    workers=workers,
                    concurrency=task_concurrency,
                    seconds=task_seconds,
                    workdir=workdir,
                    repeat=repeat,
                )
            control_costs(
                admin,
                admin_conninfo,
                backlog=min(backlogs),
                clients=max(workers),
                concurrency=task_concurrency,
                seconds=task_seconds,
                workdir=workdir,
                repeat=repeat,
            )
            shim_throughput(
                admin,
                admin_conninfo,
                backlog=max(backlogs),
                concurrency=task_concurrency,
                seconds=task_seconds,
                workdir=workdir,
                repeat=repeat,
            )
        if "enqueue" in sections:
            enqueue_rates(
                admin,
                admin_conninfo,
                clients=clients,
                seconds=task_seconds,
                batches=enqueue_batches,
                backlog=min(backlogs),
                workdir=workdir,
                repeat=repeat,
            )
        if "wake" in sections:
            wake_latency(admin, admin_conninfo, tasks=wake_tasks, workdir=workdir, repeat=repeat)
        clean(admin)
        if "claims" in sections:
            claim_costs(
                admin,
                admin_conninfo,
                keys=claim_keys,
                instances=claim_instances,
                seconds=seconds,
                workdir=workdir,
                repeat=repeat,
            )
        if "queue" in sections:
            queue_bench(
                admin,
                admin_conninfo,
                keys=queue_keys,
                batches=queue_batches,
                workdir=workdir,
                repeat=repeat,
                min_window=queue_seconds,
                flood=queue_flood,
            )
        peer_rows = []
        if "peers" in sections:
            peer_rows = peers_bench(
                admin,
                admin_conninfo,
                jobs=peer_jobs,
                python=peers_python or default_peers_python(),
                workdir=workdir,
                tenure_configs=TENURE_CONFIGS if peer_tenure is None else peer_tenure,
                repeat=repeat,
                systems=PEER_SYSTEMS if peer_systems is None else peer_systems,
                min_window=peer_seconds,
            )
        if "latency" in sections:
            latency_bench(
                admin,
                admin_conninfo,
                rows=peer_rows,
                rate=latency_rate,
                seconds=latency_seconds,
                python=peers_python or default_peers_python(),
                workdir=workdir,
                tenure=peer_tenure[0] if peer_tenure else FALLBACK_TENURE,
                systems=LATENCY_SYSTEMS if latency_systems is None else latency_systems,
                repeat=repeat,
            )
        if "memory" in sections:
            memory(
                admin,
                admin_conninfo,
                python=peers_python or default_peers_python(),
                workdir=workdir,
                tasks=memory_tasks,
                hold=memory_hold,
            )
    if "replicas" in sections:
        replica_failover(admin_conninfo, trials=replica_trials, workdir=workdir)
    if "supervise" in sections:
        supervise(admin_conninfo, faults=supervise_faults, workdir=workdir)
    if "sync" in sections:
        sync_bench(
            jobs=sync_jobs,
            python=peers_python or default_peers_python(),
            workdir=workdir,
            batches=SYNC_BATCHES if sync_batches is None else sync_batches,
            tenure_configs=SYNC_TENURE if sync_tenure is None else sync_tenure,
            repeat=repeat,
            min_window=peer_seconds,
        )
    if "soak" in sections:
        with psycopg.connect(admin_conninfo, autocommit=True) as admin:
            soak(admin, admin_conninfo, seconds=soak_seconds, age=soak_age, workdir=workdir)
    print(f"  logs: {workdir}")
    return 0


def _sections(text: str) -> list[str]:
    """A comma-separated list of bench sections."""
    chosen = [part.strip() for part in text.split(",") if part.strip()]
    unknown = sorted(set(chosen) - set(SECTIONS))
    if not chosen or unknown:
        raise argparse.ArgumentTypeError(f"choose from {','.join(SECTIONS)}; unknown: {','.join(unknown)}")
    return chosen


def _counts(text: str) -> list[int]:
    """A comma-separated list of positive integers, for the bench's sizes."""
    try:
        counts = [int(part) for part in text.split(",")]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers separated by commas, got {text!r}")
    return counts


def _systems(text: str) -> list[str]:
    """A comma-separated list of the peers section's systems beside tenure."""
    chosen = [part.strip() for part in text.split(",") if part.strip()]
    unknown = sorted(set(chosen) - set(PEER_SYSTEMS))
    if unknown:
        raise argparse.ArgumentTypeError(
            f"choose from {','.join(PEER_SYSTEMS)}; unknown: {','.join(unknown)}"
        )
    return chosen


def _latency_systems(text: str) -> list[str]:
    """A comma-separated list of the latency section's systems."""
    chosen = [part.strip() for part in text.split(",") if part.strip()]
    unknown = sorted(set(chosen) - set(LATENCY_SYSTEMS))
    if not chosen or unknown:
        raise argparse.ArgumentTypeError(
            f"choose from {','.join(LATENCY_SYSTEMS)}; unknown: {','.join(unknown)}"
        )
    return chosen


def _configs(text: str) -> list[tuple[int, int]]:
    """Comma-separated PROCESSESxCONCURRENCY pairs, for tenure's task workers beside the peers."""
    try:
        pairs = [tuple(int(n) for n in part.lower().split("x")) for part in text.split(",")]
    except ValueError:
        pairs = []
    if not pairs or any(len(pair) != 2 or min(pair) < 1 for pair in pairs):
        raise argparse.ArgumentTypeError(f"expected PROCESSESxCONCURRENCY pairs like 2x4,4x1, got {text!r}")
    return [(pair[0], pair[1]) for pair in pairs]


def build_parser() -> argparse.ArgumentParser:
    about = "measure heartbeat, task and claim throughput, takeover and wake-up times against baselines"
    parser = argparse.ArgumentParser(
        prog="tenure bench",
        description=about,
        epilog="example: tenure bench --db postgresql://postgres@127.0.0.1:5432/tenure_bench --kills 20",
    )
    parser.add_argument("--db", default=os.environ.get("TENURE_DB", ""), help="conninfo or URL")
    parser.add_argument(
        "--seconds", type=float, default=10.0, help="length of each heartbeat and claim run (10)"
    )
    parser.add_argument(
        "--clients", type=int, default=8, help="concurrent electors / pgbench clients, also for enqueue (8)"
    )
    parser.add_argument("--kills", type=int, default=20, help="primaries to kill for the takeover times (20)")
    parser.add_argument(
        "--backlogs",
        type=_counts,
        default=[300_000, 1_000_000],
        help="task backlogs to complete from (300000,1000000)",
    )
    parser.add_argument(
        "--task-workers",
        type=_counts,
        default=[1, 4, 8],
        help="task worker processes / pgbench clients completing tasks (1,4,8)",
    )
    parser.add_argument(
        "--task-concurrency",
        type=int,
        default=16,
        help="tasks each task worker process runs at once (--concurrency; 16)",
    )
    parser.add_argument(
        "--task-seconds", type=float, default=10.0, help="length of each task completion and enqueue run (10)"
    )
    parser.add_argument(
        "--enqueue-batches",
        type=_counts,
        default=[100, 1000],
        help="tasks per task_enqueue_many call (100,1000)",
    )
    parser.add_argument(
        "--wake-tasks", type=int, default=50, help="tasks enqueued one by one for the wake-up latency (50)"
    )
    parser.add_argument(
        "--claim-keys",
        type=_counts,
        default=[1_000, 10_000],
        help="keys registered for the claim renew + take cost, one run per count (1000,10000)",
    )
    parser.add_argument(
        "--claim-instances",
        type=int,
        default=8,
        help="instances sharing the keys, one pgbench client each (8)",
    )
    parser.add_argument(
        "--queue-keys", type=_counts, default=[4, 1000], help="keys of the submission-queue runs (4,1000)"
    )
    parser.add_argument(
        "--queue-batches",
        type=int,
        default=2000,
        help="batches per submission-queue run, at least 4 per key (2000)",
    )
    parser.add_argument(
        "--queue-seconds",
        type=float,
        default=5.0,
        help="the shortest steady window (10%% to 90%% committed) of a submission-queue run: a shorter one "
        "runs again with more batches per key (5; 0: never)",
    )
    parser.add_argument(
        "--queue-flood",
        type=int,
        default=FLOOD_BATCHES,
        help=f"the flood key's batches in the fairness run; each of the {FLOOD_KEYS - 1} others enqueues "
        f"a {FLOOD_KEYS}th of that ({FLOOD_BATCHES})",
    )
    parser.add_argument(
        "--sections",
        type=_sections,
        default=list(SECTIONS),
        help=f"comma-separated parts to run ({','.join(SECTIONS)})",
    )
    parser.add_argument(
        "--replica-trials",
        type=int,
        default=20,
        help="SIGKILLs of the active replica behind HAProxy, per setting, for the failover times (20)",
    )
    parser.add_argument(
        "--supervise-faults",
        type=int,
        default=20,
        help="faults of each kind (shim SIGKILL, shim SIGSTOP, connections killed) under --exec shims (20)",
    )
    parser.add_argument(
        "--peer-jobs",
        type=int,
        default=20_000,
        help="no-op jobs each system drains in the peers section (20000)",
    )
    parser.add_argument(
        "--peer-seconds",
        type=float,
        default=PEER_SECONDS,
        help="the shortest steady window (90%% to 10%% left) of a peers or sync run: in the first round a "
        "shorter one runs again with a larger backlog, kept in later rounds (%(default)g; 0: never)",
    )
    parser.add_argument(
        "--peer-tenure",
        type=_configs,
        default=None,
        help="tenure task worker configurations beside the peers, PROCESSESxCONCURRENCY "
        f"({','.join(f'{p}x{c}' for p, c in TENURE_CONFIGS)})",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="runs of each throughput row (heartbeat, tasks, enqueue, claims, queue, peers, sync) and of "
        "the wake-up and end-to-end latencies, in interleaved rounds; each row shows their median and "
        "spread, MOVED past "
        f"{SPREAD_LIMIT * 100:.0f}%% (1; make bench: 3)",
    )
    parser.add_argument(
        "--peer-systems",
        type=_systems,
        default=None,
        help=f"what drains beside tenure in the peers section ({','.join(PEER_SYSTEMS)}): on a slow "
        "disk, procrastinate's 20,000 jobs take minutes a round",
    )
    parser.add_argument(
        "--latency-rate",
        type=float,
        default=None,
        help="jobs/s offered to every system in the latency section (without it: half of each "
        "system's maximum with single enqueues, found by a probe run first)",
    )
    parser.add_argument(
        "--latency-seconds",
        type=float,
        default=10.0,
        help="the latency section's window: jobs due in it count, after a 1 s warm-up (10)",
    )
    parser.add_argument(
        "--latency-systems",
        type=_latency_systems,
        default=None,
        help=f"what the latency section runs ({','.join(LATENCY_SYSTEMS)})",
    )
    parser.add_argument(
        "--sync-jobs",
        type=int,
        default=30_000,
        help="no-op jobs each system drains on the synchronous standby's primary (sync section; 30000)",
    )
    parser.add_argument(
        "--sync-tenure",
        type=_configs,
        default=None,
        help="tenure task worker configurations of the sync section, PROCESSESxCONCURRENCY "
        f"({','.join(f'{p}x{c}' for p, c in SYNC_TENURE)})",
    )
    parser.add_argument(
        "--sync-batches",
        type=_counts,
        default=None,
        help=f"pgqueuer-asyncpg's batch sizes in the sync section ({','.join(map(str, SYNC_BATCHES))})",
    )
    parser.add_argument(
        "--memory-tasks", type=int, default=1000, help="tasks in flight in the memory section (1000)"
    )
    parser.add_argument(
        "--memory-hold",
        type=float,
        default=20.0,
        help="seconds each task of the memory section takes: longer than leasing them all (20)",
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="a directory for the logs and pictures, made if missing (a new tenure-bench-* in the "
        "temporary directory, kept)",
    )
    parser.add_argument(
        "--peers-python",
        default="",
        help="the interpreter of the peers' virtual environment ($TENURE_PEERS_PYTHON, else .venv-peers)",
    )
    parser.add_argument(
        "--soak-seconds", type=float, default=1800.0, help="length of the retention soak (1800)"
    )
    parser.add_argument(
        "--soak-age",
        type=float,
        default=None,
        help="retention age of every history during the soak, in seconds (a tenth of the soak, at least 5)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.soak_seconds < 10 or (
        args.soak_age is not None and not 1 <= args.soak_age <= args.soak_seconds / 2
    ):
        parser.error("--soak-seconds: at least 10; --soak-age: 1 s to half the soak, so the soak outlasts it")
    if args.queue_flood < FLOOD_KEYS * 10:
        parser.error(
            f"--queue-flood: at least {FLOOD_KEYS * 10} (10 batches for each other key); "
            f"got {args.queue_flood}"
        )
    if args.supervise_faults < 1:
        parser.error(f"--supervise-faults: at least 1; got {args.supervise_faults}")
    if args.memory_tasks < 1 or args.memory_hold < 2:
        parser.error("--memory-tasks: at least 1; --memory-hold: at least 2 s")
    if args.repeat < 1:
        parser.error(f"--repeat: at least 1; got {args.repeat}")
    if args.latency_seconds <= 0 or (args.latency_rate is not None and args.latency_rate <= 0):
        parser.error("--latency-seconds and --latency-rate: above 0")
    if args.sync_jobs < 10:
        parser.error(f"--sync-jobs: at least 10 jobs, for a 10%-90% window to measure; got {args.sync_jobs}")
    if args.peer_jobs < 10:
        parser.error(f"--peer-jobs: at least 10 jobs, for a 10%-90% window to measure; got {args.peer_jobs}")
    return run_bench(
        args.db,
        sections=args.sections,
        seconds=args.seconds,
        clients=args.clients,
        kills=args.kills,
        backlogs=args.backlogs,
        workers=args.task_workers,
        task_concurrency=args.task_concurrency,
        task_seconds=args.task_seconds,
        enqueue_batches=args.enqueue_batches,
        wake_tasks=args.wake_tasks,
        claim_keys=args.claim_keys,
        claim_instances=args.claim_instances,
        queue_keys=args.queue_keys,
        queue_batches=args.queue_batches,
        queue_seconds=args.queue_seconds,
        queue_flood=args.queue_flood,
        replica_trials=args.replica_trials,
        peer_jobs=args.peer_jobs,
        peer_seconds=args.peer_seconds,
        peer_tenure=args.peer_tenure,
        peers_python=args.peers_python,
        peer_systems=args.peer_systems,
        latency_rate=args.latency_rate,
        latency_seconds=args.latency_seconds,
        latency_systems=args.latency_systems,
        memory_tasks=args.memory_tasks,
        memory_hold=args.memory_hold,
        soak_seconds=args.soak_seconds,
        soak_age=args.soak_age,
        supervise_faults=args.supervise_faults,
        workdir=args.workdir,
        repeat=args.repeat,
        sync_jobs=args.sync_jobs,
        sync_tenure=args.sync_tenure,
        sync_batches=args.sync_batches,
    )
