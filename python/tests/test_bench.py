"""``tenure bench`` runs every section end to end (at a tiny size: the figures are for
``make bench``, never asserted here), so the benchmark cannot rot between runs. The peers
section needs pgqueuer and procrastinate in .venv-peers (``make test`` installs them): without
them its test skips, or fails when CI is set."""

from __future__ import annotations

import ast
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

from tenure.bench import SECTIONS, common
from tenure.bench.batches import MIN_COUNTS, steady
from tenure.bench.common import Rate, Repeated, grown_size, interleaved, rate_line, ratio_spread, steady_tps
from tenure.bench.latency import targets
from tenure.bench.memory import rss_mib
from tenure.bench.peers import (
    PEER_SCHEMAS,
    PGQUEUER_BATCHES,
    Drained,
    Row,
    headline,
    per_job,
    rate_between,
)
from tenure.bench.soak import UTYPE, SoakLog, verify

SMALL = [
    "--seconds", "1", "--clients", "2", "--kills", "2",
    "--backlogs", "2000", "--task-workers", "1", "--task-seconds", "1",
    "--enqueue-batches", "10", "--wake-tasks", "3",
    "--claim-keys", "40", "--claim-instances", "2",
    "--queue-keys", "2", "--queue-batches", "16", "--queue-seconds", "0", "--queue-flood", "1000",
    "--replica-trials", "1",
    "--supervise-faults", "1",
]  # fmt: skip

# peers (with latency) and soak have their own tests below, heartbeat too (with --repeat 2), sync
# its own in test_patroni_harness.py (on that module's cluster); memory (about 25 s even at 20 tasks:
# three worker processes started and stopped) runs in make bench only, its reading checked below
EXCEPT_PEERS = ",".join(
    section
    for section in SECTIONS
    if section not in ("peers", "latency", "memory", "soak", "sync", "heartbeat")
)


@pytest.mark.timeout(600)
def test_every_section_runs_and_reports(admin_conninfo: str, tmp_path: Path) -> None:
    result = subprocess.run(
        [
            *(sys.executable, "-m", "tenure", "bench", "--db", admin_conninfo, *SMALL),
            *("--sections", EXCEPT_PEERS, "--workdir", str(tmp_path / "not-yet")),
        ],
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    for shown in (
        "takeover after SIGKILL of the primary",
        "bare SKIP LOCKED",
        "binds no slot: only its bookkeeping",
        "priorities 0 .. 9 at random",
        "notifications on",
        "supervised command (tenure elect --exec)",
        "logs: ",
    ):
        assert shown in result.stdout, f"no {shown!r} in:\n{result.stdout}\n{result.stderr}"
    # The queue's fairness: under the flood, the naive FIFO served the flood key alone, tenure
    # every key alike (Jain's index 1).
    fairness = dict(
        re.findall(r"^ {4}(naive FIFO|tenure one-round) .* Jain mean ([\d.]+) ", result.stdout, re.M)
    )
    assert float(fairness["naive FIFO"]) < 0.1 and float(fairness["tenure one-round"]) > 0.9, result.stdout
    # The binding limit held: never more tasks leased at once than it allows.
    binding = re.search(r"max_running (\d+) \(binds:.* (\d+) / (\d+)$", result.stdout, re.MULTILINE)
    assert binding is not None, result.stdout
    limit, most_by_pgbench, most_by_workers = (int(n) for n in binding.groups())
    assert 0 < most_by_pgbench <= limit and 0 < most_by_workers <= limit, binding.group(0)


@pytest.mark.timeout(300)
def test_soak_prunes_finished_history_and_nothing_live(admin_conninfo: str, tmp_path: Path) -> None:
    """A 15 s soak with a 3 s age: the maintainer prunes finished tasks, and the database,
    checked against the clients' own log, lost nothing that was live or too young."""
    result = subprocess.run(
        [
            *(sys.executable, "-m", "tenure", "bench", "--db", admin_conninfo, "--sections", "soak"),
            *("--soak-seconds", "15", "--soak-age", "3", "--workdir", str(tmp_path)),
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    for shown in ("warm-up", "end/middle", "maintainers that acted", "nothing live was pruned"):
        assert shown in result.stdout, f"no {shown!r} in:\n{output}"
    found = re.search(r"soak log: (\S+\.json)", result.stdout)
    assert found is not None, output
    log = SoakLog.read(Path(found.group(1)))
    picture = re.search(r"picture: (\S+soak\.png)", result.stdout)
    assert picture is not None and Path(picture.group(1)).stat().st_size > 0, output
    assert log.tasks and log.batches and log.completed and log.submitted, output
    assert sum(m["pruned"].get("task", 0) for m in log.maintainers) > 0, output
    assert sum(m["retention_runs"] for m in log.maintainers) > 0, output
    with psycopg.connect(admin_conninfo) as check:
        assert verify(check, log) == [], output
        # The same, spelled out for the tasks: one that is gone was completed, and enqueued
        # (server clock) at least the age before the end; every younger one is still there.
        rows = check.execute(
            "SELECT id::text, status FROM tenure.task WHERE id = ANY(%s::uuid[])", (list(log.tasks),)
        )
        present: dict[str, str] = dict(rows.fetchall())
        gone = set(log.tasks) - set(present)
        assert gone, "the maintainer pruned none of the soak's tasks"
        assert gone <= set(log.completed), output
        assert all(log.tasks[task] <= log.end - log.age for task in gone), output
        assert all(present[task] == "pending" for task in set(log.tasks) - set(log.completed)), output
        # Every batch never submitted is still there, unsettled (queued, or selected when the pool stopped).
        rows = check.execute(
            "SELECT id::text, status FROM tenure.batch WHERE id = ANY(%s::uuid[])", (list(log.batches),)
        )
        batches: dict[str, str] = dict(rows.fetchall())
        unsent = set(log.batches) - set(log.submitted)
        assert all(batches.get(batch) in ("queued", "pending") for batch in unsent), output
        # The electors' service type keeps its current term.
        term = check.execute(
            "SELECT count(*) FROM tenure.heartbeat h JOIN tenure.heartbeat_term t USING (utype, term)"
            " WHERE h.utype = %s",
            (UTYPE,),
        ).fetchone()
        assert term == (1,), output


def test_rows_repeat_in_interleaved_rounds_and_a_row_that_moved_says_so(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The one mechanism every section repeats its rows with: each round measures every row
    once, in order, beside the machine's speed; a row shows its median and min-max spread,
    MOVED past 15%."""
    speeds = iter([20.0, 20.0, 30.0, 30.0, 20.0, 24.0])  # these runs are too short to sample during
    monkeypatch.setattr(common, "machine_speed", lambda: next(speeds))
    calls: list[tuple[str, int]] = []
    values = {"steady": iter([100.0, 110.0, 105.0]), "moving": iter([100.0, 130.0, 90.0])}

    def measure(row: str, round_: int) -> Rate:
        calls.append((row, round_))
        return Rate(next(values[row]), startup=0.1 * round_)

    runs = interleaved(["steady", "moving"], measure, repeat=3, show=lambda row, run: f"{row} {run.rate:.0f}")
    assert calls == [("steady", 1), ("moving", 1), ("steady", 2), ("moving", 2), ("steady", 3), ("moving", 3)]
    printed = capsys.readouterr().out.splitlines()
    assert printed == [
        "    round 1: steady 100   machine 1.00",
        "    round 1: moving 100   machine 1.00",
        "    round 2: steady 110   machine 1.50",
        "    round 2: moving 130   machine 1.50",
        "    round 3: steady 105   machine 1.00",
        "    round 3: moving 90   machine 1.20",
        "    the machine's mean speed during each run (a fixed loop of pure Python, loops/us): "
        "20.0-30.0, spread 45% MOVED; each row's runs at the median speed (rate x median / the run's speed):",
        # the median speed 22: steady 100 x 22 / 20, 110 x 22 / 30, 105 x 22 / 20
        "      steady: 81-116, spread 32% MOVED",
        "      moving: 82-110, spread 29% MOVED",  # 100 x 22 / 20, 130 x 22 / 30, 90 x 22 / 24
    ]
    steady = rate_line("steady", runs["steady"], runs["steady"], width=8)
    moving = rate_line("moving", runs["moving"], runs["steady"], width=8)
    assert steady == "steady          105 /s    1.00   start-up 0.20 s   runs 100-110, spread 10%"
    assert moving == (
        "moving          100 /s    0.95   start-up 0.20 s   runs 90-130, spread 40% MOVED"
        "; ratio per round 0.86-1.18, spread 32% MOVED"  # 100/100, 130/110, 90/105
    )
    # at the limit it holds still, just past it it moved; one run has no spread
    assert not Repeated((100.0, 115.0, 100.0)).moved
    assert Repeated((100.0, 115.1, 100.0)).describe().endswith("spread 15% MOVED")
    assert Repeated((100.0,)).describe() == "1 run" and not Repeated((100.0,)).moved
    assert Repeated((1.25, 2.5)).describe("{:.1f}", " ms") == "1.2-2.5 ms, spread 67% MOVED"
    assert "runs" not in rate_line("once", [Rate(50.0)], [Rate(100.0)], width=4)
    # a row that moves with its baseline (the machine slowed both) holds still as a ratio
    assert (
        ratio_spread([100.0, 150.0, 80.0], [200.0, 300.0, 160.0]) == "; ratio per round 0.50-0.50, spread 0%"
    )


def test_pgbench_rows_leave_their_first_second_out_as_the_start_up() -> None:
    progress = (
        "progress: 1.0 s, 600.0 tps, lat 3.3 ms stddev 1.0, 0 failed\n"
        "progress: 2.0 s, 1000.0 tps, lat 2.0 ms stddev 0.5, 0 failed\n"
        "progress: 3.0 s, 1200.0 tps, lat 1.7 ms stddev 0.5, 0 failed\n"
    )
    steady, startup = steady_tps(progress, 933.0)
    assert steady == pytest.approx(1100.0)
    assert startup == pytest.approx(1 - 600 / 1100)  # the first second did 600 of the steady 1,100
    assert steady_tps("progress: 1.0 s, 600.0 tps, lat 3.3 ms stddev 1.0, 0 failed\n", 640.0) == (640.0, None)


def test_a_run_too_short_to_measure_grows_to_the_window_asked_within_its_ceiling() -> None:
    """The queue's and the peers' runs grow by one rule: enough for the window asked at the
    rate seen, a quarter to spare, at least double, at most the ceiling, in whole steps."""
    assert grown_size(4_000, 1.3, 5.0, 100_000) == 19_231, (
        "4,000 batches lasting 1.3 s: 5 s needs about 15,400, + 25%"
    )
    assert grown_size(1_000, 4.9, 5.0, 1_000_000, step=1_000) == 2_000, "nearly long enough: still doubled"
    assert grown_size(20_000, 0.0, 5.0, 1_000_000, step=1_000) == 1_000_000, (
        "a run with no window at all: the ceiling"
    )
    assert grown_size(50_000, 2.0, 5.0, 100_000) == 100_000


def test_a_queue_run_is_measured_between_its_10_and_90_percent_and_knows_when_it_was_too_short() -> None:
    # started at 0, nothing done in the first second, then 20 a second: 10% at 1.5 s, 90% at 5.5 s
    run = steady([(0.0, 0), (1.0, 0), (2.0, 20), (3.0, 40), (4.0, 60), (5.0, 80), (6.0, 100)], 100)
    assert run.rate == pytest.approx(20.0)
    assert run.window == pytest.approx(4.0)
    assert run.startup == pytest.approx(1.5)  # 10% seen at 2 s, less the half second 10% takes
    assert run.counts == 4 >= MIN_COUNTS
    assert run.every == pytest.approx(1.0)
    # done before the first count: the rate is the whole run's, start-up in; no count inside
    short = steady([(10.0, 0), (10.5, 16)], 16)
    assert short.rate == pytest.approx(32.0)
    assert short.counts == 0 < MIN_COUNTS


@pytest.mark.timeout(120)
def test_repeated_rows_print_their_rounds_medians_and_spreads(admin_conninfo: str, tmp_path: Path) -> None:
    """A section end to end with --repeat 2 and 2 s pgbench runs: every round's run is
    printed, and every row its median, its start-up (the first second) and its spread."""
    result = subprocess.run(
        [
            *(sys.executable, "-m", "tenure", "bench", "--db", admin_conninfo, "--sections", "heartbeat"),
            *("--repeat", "2", "--seconds", "2", "--clients", "2", "--workdir", str(tmp_path)),
        ],
        capture_output=True,
        text=True,
        timeout=110,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    rounds = re.findall(
        r"^ {4}round (\d): (.*?) ([\d,]+) /s   machine \d+\.\d\d$", result.stdout, re.MULTILINE
    )
    assert re.search(
        r"^ {4}the machine's mean speed during each run .*: [\d.]+-[\d.]+, spread", result.stdout, re.M
    )
    steadied = re.findall(r"^ {6}(.*): [\d,]+-[\d,]+, spread \d+%", result.stdout, re.M)
    assert steadied == [label for n, label, _ in rounds if n == "1"], output
    assert [(n, label) for n, label, _ in rounds] == [
        (n, label)
        for n in ("1", "2")
        for label in (
            "baseline  pgbench one-row UPDATE",
            "heartbeat 2 electors, one type each",
            "heartbeat 2 electors bidding for one type",
        )
    ], output
    rows = re.findall(
        # start-up "-": pgbench's last progress report of a 2 s run sometimes does not come, and
        # with one report there is no steady second to set the first against
        r"^  (\S.*?\S) +([\d,]+) /s +\d+\.\d\d +start-up (?:-?\d+\.\d\d s|-)"
        r" +runs ([\d,]+)-([\d,]+), spread \d+%(?: MOVED)?"
        r"(?:; ratio per round \d+\.\d\d-\d+\.\d\d, spread \d+%(?: MOVED)?)?$",
        result.stdout,
        re.MULTILINE,
    )
    assert [label for label, *_ in rows] == [label for n, label, _ in rounds if n == "1"], output

    def number(text: str) -> int:
        return int(text.replace(",", ""))

    for label, median, low, high in rows:  # min-max are the rounds' runs, the median between them
        runs = sorted(number(rate) for _, row, rate in rounds if row == label)
        assert (number(low), number(high)) == (runs[0], runs[-1]), output
        assert runs[0] <= number(median) <= runs[-1], output


def test_rss_reads_the_resident_size_of_a_process() -> None:
    assert 1 < rss_mib(os.getpid()) < 4096


def test_the_machine_speed_is_sampled_while_a_run_lasts() -> None:
    with common.machine_speed_during(every=0.01) as speeds:
        time.sleep(0.3)
    count = len(speeds)
    assert count >= 5 and all(speed > 0 for speed in speeds)
    time.sleep(0.05)
    assert len(speeds) == count, "the sampler stops with the run"


def test_per_job_counts_what_grew_between_90_and_10_percent_left() -> None:
    """CPU and WAL per job: the growth of a counter from the last sample with 90% of the jobs
    left to the first with 10% left, over the jobs done between those two samples."""
    samples = [(0.0, 1000), (1.0, 950), (2.0, 850), (5.0, 150), (6.0, 50), (7.0, 0)]
    counter = [0.0, 10.0, 100.0, 800.0, 900.0, 905.0]
    assert per_job(samples, counter, 1000) == pytest.approx((900.0 - 10.0) / (950 - 50))


def test_rate_between_interpolates_the_90_and_10_percent_moments() -> None:
    # 1,000 jobs: 900 left at t = 1.5 (between 1.0 and 2.0), 100 left at t = 5.5.
    samples = [(0.0, 1000), (1.0, 950), (2.0, 850), (5.0, 150), (6.0, 50), (7.0, 0)]
    assert rate_between(samples, 1000) == pytest.approx(800 / (5.5 - 1.5))
    # A worker that took most of the backlog between two counts: both moments inside one step.
    assert rate_between([(0.0, 1000), (0.5, 1000), (1.5, 0)], 1000) == pytest.approx(800 / 0.8)
    with pytest.raises(ValueError, match="never reach"):
        rate_between([(0.0, 1000), (1.0, 500)], 1000)


def test_the_peers_headline_holds_tenure_best_by_either_worker_to_1_5x_and_the_threaded_to_1_0x() -> None:
    """Issue 29's goals over pgqueuer-asyncpg's best (by median): tenure's best row, threaded
    or async, at 1.5x; the threaded TaskWorker's best at 1.0x; and each also round by round
    over the best pgqueuer row of that round."""

    def row(system: str, config: str, *rates: float) -> Row:
        return Row(system, config, tuple(Drained(rate, 0.1, jobs=1000) for rate in rates))

    rows = [
        row("pgqueuer-asyncpg", "2 processes x batch 100", 100, 90, 80),
        row("pgqueuer-asyncpg", "2 processes x batch 500", 110, 80, 100),  # the best: median 100
        row("tenure", "2 processes x concurrency 1024", 120, 150, 160),
        row("tenure-async", "2 processes x concurrency 1024", 140, 100, 130),
    ]
    lines = headline(rows)
    assert "(2 processes x batch 500, 100 /s)" in lines[0], lines
    either, threaded, asynchronous = lines[1:]
    assert either.split()[:3] == ["tenure,", "either", "tenure"], lines
    assert "1.50x   (goal 1.5x: holds)   rounds: 1.09 / 1.67 / 1.60" in either, lines
    assert "1.50x   (goal 1.0x: holds)" in threaded, lines
    assert "1.30x   rounds: 1.27 / 1.11 / 1.30" in asynchronous and "goal" not in asynchronous, lines
    rows[2] = row("tenure", "2 processes x concurrency 1024", 90, 95, 99)
    either, threaded, _ = headline(rows)[1:]
    assert "tenure-async" in either and "1.30x   (goal 1.5x: NOT reached)" in either, either
    assert "0.95x   (goal 1.0x: NOT reached)" in threaded, threaded


PEER_SECONDS = "0.1"  # the fast rows grow once (each run of a peer starts processes: seconds)


@pytest.mark.timeout(600)
def test_peers_section_drains_with_every_system_then_latency(
    admin_conninfo: str, tmp_path: Path, peers_python: str
) -> None:
    """The peers drain; then the latency section runs the best of them with paced single
    enqueues, each first probed for its maximum, then offered half of it (a 1 s window here:
    the figures are make bench's, only their sense is checked)."""
    python = peers_python
    result = subprocess.run(
        [
            *(sys.executable, "-m", "tenure", "bench", "--db", admin_conninfo, "--sections", "peers,latency"),
            *(
                "--peer-jobs",
                "400",
                "--peer-seconds",
                PEER_SECONDS,
                "--peer-tenure",
                "1x2,2x1",
                "--peers-python",
                python,
            ),
            *("--latency-seconds", "1", "--latency-systems", "pgqueuer-asyncpg,tenure"),
            *("--workdir", str(tmp_path)),
        ],
        capture_output=True,
        text=True,
        timeout=540,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    side_by_side, _, latency = result.stdout.partition("end-to-end latency")
    _, _, side_by_side = side_by_side.partition("side by side")
    # system, configuration, jobs/s, five ratios, CPU per job of the server and of the
    # workers (microseconds, from /proc: the test's cluster runs on this host), WAL bytes per
    # job and jobs per commit (from the cluster's counters), the backlog drained, start-up,
    # then the runs' spread ("1 run" here)
    table = re.findall(
        r"^ {4}(\S+) +(\S.*?) {2,} *(\d+)(?: +\d+\.\d\d){5} +(\d+) +(\d+) +(\d+) +(\d+\.\d) +(\d+)"
        r" +-?\d+\.\d\d s +1 run$",
        side_by_side,
        re.MULTILINE,
    )
    rows = [(system, config, rate, server, workers) for system, config, rate, server, workers, *_ in table]
    # Every job writes WAL (its claim and its end) and commits at least once per batch.
    assert all(int(wal) > 0 and float(per_commit) > 0 for *_, wal, per_commit, _ in table), output
    # Every run's steady window (90% to 10% left) lasted --peer-seconds at least: the fast
    # ones drained a backlog grown from --peer-jobs (the rate is printed rounded: within 0.5).
    window = float(PEER_SECONDS)
    assert all(0.8 * int(jobs) / (int(rate) - 0.5) >= window for _, _, rate, *_, jobs in table), output
    assert any(int(jobs) > 400 for *_, jobs in table), output
    assert "jobs left a steady window of" in result.stdout, output
    systems = [system for system, *_ in rows]
    for system in ("floor", *PGQUEUER_BATCHES, "procrastinate", "tenure"):
        assert system in systems, f"no {system} row in the table:\n{output}"
    assert [config for system, config, *_ in rows if system == "tenure"] == [
        "1 processes x concurrency 2",
        "2 processes x concurrency 1",
    ], output
    assert all(int(rate) > 0 for _, _, rate, _, _ in rows), output
    # Every job costs the server and its workers some CPU: a meter that reads nothing shows 0.
    for system in ("floor", "tenure"):
        assert all(
            int(server) + int(workers) > 0 for name, _, _, server, workers in rows if name == system
        ), output
    plot = re.search(r"plot: (\S+\.png)", result.stdout)
    assert plot is not None and Path(plot.group(1)).stat().st_size > 0, output
    # Latency: each system's best configuration above with its drain rate from there; a probe
    # offered at least 5,000 /s found its maximum (what it completed, more than nothing); then
    # it was offered half of that and completed about as many a second, p50 <= p99 <= max;
    # tenure over pgqueuer.
    best = {
        system: max((row for row in rows if row[0] == system), key=lambda row: int(row[2]))
        for system in ("pgqueuer-asyncpg", "tenure")
    }
    probes = re.findall(
        r"^ {4}maximum: (\S+) .* offered +(\d+) /s, sent +(\d+), completed +(\d+)", latency, re.M
    )
    assert [system for system, *_ in probes] == ["pgqueuer-asyncpg", "tenure"], output
    assert all(int(offered) >= 5000 and int(completed) > 0 for _, offered, _, completed in probes), output
    figures = re.findall(
        r"^ {4}(\S+) +(\d+ processes x \S+ \d+) +(\d+) +(\d+) +(\d+) +(\d+)"
        r" +([\d.]+) +([\d.]+) +([\d.]+) +1 run",
        latency,
        re.MULTILINE,
    )
    assert [(system, config, drained) for system, config, drained, *_ in figures] == [
        best[system][:3] for system in ("pgqueuer-asyncpg", "tenure")
    ], output
    maximums = {system: int(completed) for system, _, _, completed in probes}
    for system, _, _, maximum, offered, completed, p50, p99, worst in figures:
        assert int(maximum) == maximums[system] and abs(int(offered) - int(maximum) / 2) <= 1, output
        assert 0.5 * int(offered) <= int(completed) <= 2 * int(offered), output
        assert 0 < float(p50) <= float(p99) <= float(worst), output
    assert re.search(r"^ {4}tenure +p50 +\d+\.\d\dx +p99 +\d+\.\d\dx$", latency, re.MULTILINE), output
    # Which configuration each system runs: its best row's, or without one the fallback.
    row = Row("tenure", "2 processes x concurrency 256", (Drained(1000.0, 0.1), Drained(3000.0, 0.1)))
    chosen = targets([row], rate=None)
    assert [(t.system, t.processes, t.size, t.rate, t.drained) for t in chosen] == [
        ("pgqueuer-asyncpg", 2, 500, None, None),
        ("tenure", 2, 256, None, 2000.0),
        ("tenure-async", 2, 256, None, None),
    ]
    assert [t.probe_rate for t in chosen] == [5000.0, 5000.0, 5000.0]
    assert targets([row], rate=100.0, systems=["tenure"])[0].rate == 100.0
    # The peers' schemas are gone with the section.
    with psycopg.connect(admin_conninfo) as check:
        schemas = check.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname = ANY(%s)", (list(PEER_SCHEMAS.values()),)
        )
        assert schemas.fetchall() == [], output


def test_only_the_peer_runner_imports_the_peers_and_it_imports_no_tenure() -> None:
    """The peers live in their own virtual environment: tenure's package must not need them,
    and the runner, run with the peers' interpreter, must not need tenure."""
    package = Path(__file__).resolve().parents[1] / "tenure"
    runner = package / "bench" / "peer_runner.py"
    peers = {"pgqueuer", "procrastinate", "asyncpg"}
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                roots = {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                roots = {node.module.split(".")[0]}
            else:
                continue
            if path == runner:
                assert "tenure" not in roots, f"{path}: {ast.unparse(node)}"
            else:
                assert not roots & peers, f"{path}: {ast.unparse(node)}"


def test_a_peer_worker_dies_with_the_bench_that_started_it(
    admin_conninfo: str, tmp_path: Path, peers_python: str
) -> None:
    """A bench killed mid-run left its pgqueuer workers running. Here a stand-in for the bench
    starts one, ready and waiting for its word on a pipe this test holds open (so no EOF ends
    it), and is SIGKILLed: the worker must be gone soon after."""
    python = peers_python
    runner = Path(__file__).resolve().parents[1] / "tenure" / "bench" / "peer_runner.py"
    word, hold = os.pipe()
    log = tmp_path / "worker.log"
    bench = (
        "import subprocess, sys, time\n"
        f"worker = subprocess.Popen([{python!r}, {str(runner)!r}, '--db', {admin_conninfo!r}, "
        f"'--schema', {PEER_SCHEMAS['pgqueuer']!r}, 'pgqueuer-asyncpg', 'work'], stdin={word}, "
        f"stdout=open({str(log)!r}, 'wb'), stderr=subprocess.STDOUT)\n"
        "print(worker.pid, flush=True)\n"
        "time.sleep(120)\n"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", bench], stdout=subprocess.PIPE, pass_fds=(word,), text=True
    )
    os.close(word)
    try:
        assert parent.stdout is not None
        worker = int(parent.stdout.readline())
        end = time.monotonic() + 30
        while "ready" not in log.read_text().split():
            assert time.monotonic() < end, log.read_text()
            time.sleep(0.05)
        assert_dies_with(parent, worker, log)
    finally:
        parent.kill()
        parent.wait()
        os.close(hold)


def test_a_process_the_bench_starts_dies_with_the_bench(tmp_path: Path) -> None:
    """The bench's own workers, producers and pgbench runs are started by start_process: a
    stand-in for the bench starts one and is SIGKILLed; the process must be gone soon after
    (a bench killed mid-run left its task workers taking the next run's tasks)."""
    log = tmp_path / "child.log"
    bench = (
        "import time\n"
        "from pathlib import Path\n"
        "from tenure.bench.common import start_process\n"
        f"child = start_process(['sleep', '120'], Path({str(log)!r}))\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(120)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", bench], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        assert alive(child)
        assert_dies_with(parent, child, log)
    finally:
        parent.kill()
        parent.wait()


def assert_dies_with(parent: subprocess.Popen[str], pid: int, log: Path) -> None:
    """SIGKILL ``parent``: process ``pid`` it started must be gone within 10 s."""
    parent.kill()
    parent.wait()
    end = time.monotonic() + 10
    while alive(pid):
        if time.monotonic() > end:
            os.kill(pid, signal.SIGKILL)
            pytest.fail(f"process {pid} outlived the bench that started it:\n{log.read_text()}")
        time.sleep(0.05)


def alive(pid: int) -> bool:
    """``pid`` runs (a zombie waiting for whoever adopted it counts as dead)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")
