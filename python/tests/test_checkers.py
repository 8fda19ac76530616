"""The process tests' checkers, fed doctored records: each violation they exist to catch
is reported. A checker that passes everything would make its fault test pass whatever
the code under it does; these run in milliseconds, without a database.

The heartbeat history's checkers (check_terms, check_writes) have theirs in
test_history.py, the replicas' record checker in test_replicas.py.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from uuid import UUID, uuid4

import pytest

from tenure.testing.claims import ClaimSpan, ClaimWork, check_claims
from tenure.testing.failover import AREAS, SERVE_BOUNDS, ClientLog, Timing, check_records
from tenure.testing.ledger import check_applied
from tenure.testing.replicas import Answer, ReplicaTerm, ReplicaWrite, check_replica_records
from tenure.testing.tasks import Effect, Lease, Step, check_effects, check_task_records

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def reported(problems: list[str], *fragments: str) -> bool:
    return any(all(fragment in problem for fragment in fragments) for problem in problems)


# -- the failover fleet's log against the final database -----------------------------------

E0, E1 = uuid4(), uuid4()
TASK_A, TASK_B = uuid4(), uuid4()
W0, W1 = uuid4(), uuid4()
CL0, CL1 = uuid4(), uuid4()
B1, B2, B3 = uuid4(), uuid4(), uuid4()


@dataclass
class Tables:
    """The final tables the failover checker reads: fo_writes, fo_effects, tenure.task,
    fo_claim_writes, the queue's tenure.batch, fo_ledger, fo_replica_writes."""

    writes: list[tuple[UUID, int, int]]
    effects: list[tuple[UUID, int]]
    tasks: list[tuple[UUID, str, int]]
    claim_writes: list[tuple[UUID, str, int, int]]
    batches: list[tuple[UUID, str, int, str]]
    ledger: list[tuple[UUID, str, int, int]]
    replica_writes: list[tuple[str, int, int]]


def fleet_log() -> tuple[ClientLog, Tables]:
    """A clean run: e0 primary in term 1, then e1 in term 2; two tasks completed; key k0
    held by claimer CL0 in epoch 1, then by CL1 in epoch 2 (after CL0's safe window), k1 by
    CL1 throughout, each with a fenced write; batches 1 and 2 of key b0 and 1 of b1 applied
    in order (the application of b0#2 acknowledged to nobody: its commit was not confirmed);
    replica r0 active in epoch 1, then r1 in epoch 2 after r0's safe window, each with a
    write; and the final tables that match it."""
    log = ClientLog()
    log.add("elected", "e0", 1, 10.0)
    log.add("demoted", "e0", 12.0)
    log.add("elected", "e1", 2, 13.0)
    log.add("writes", E0, 1, 0)
    log.add("writes", E1, 2, 1)
    log.add("leases", TASK_A, 1, W0)
    log.add("leases", TASK_B, 1, W0)
    log.add("leases", TASK_B, 2, W1)  # W0's lease ran out during the failover
    log.add("outcomes", TASK_A, 1, "complete")
    log.add("outcomes", TASK_B, 2, "complete")
    log.enqueued_tasks([TASK_A, TASK_B])
    log.add("claims", CL0, "k0", 1, 10.0, 12.5)  # its safe window ended at 12.5
    log.add("claims", CL1, "k0", 2, 14.0, 20.0)
    log.add("claims", CL1, "k1", 1, 10.0, 20.0)
    log.add("claim_writes", CL0, "k0", 1, 0)
    log.add("claim_writes", CL1, "k0", 2, 0)
    log.add("claim_writes", CL1, "k1", 1, 1)
    log.enqueued_batch_ids([B1, B2, B3])
    log.add("batches", B1, "b0", 1)
    log.add("batches", B3, "b1", 1)
    log.add("replicas", "r0", 1, 10.0, 11.5)  # its safe window ended at 11.5
    log.add("replicas", "r1", 2, 12.0, 20.0)
    log.add("replica_writes", "r0", 1, 0)
    log.add("replica_writes", "r1", 2, 3)
    tables = Tables(
        writes=[(E0, 1, 0), (E1, 2, 1)],
        effects=[(TASK_A, 1), (TASK_B, 2)],
        tasks=[(TASK_A, "done", 1), (TASK_B, "done", 2)],
        claim_writes=[(CL0, "k0", 1, 0), (CL1, "k0", 2, 0), (CL1, "k1", 1, 1)],
        batches=[(B1, "b0", 1, "committed"), (B2, "b0", 2, "committed"), (B3, "b1", 1, "committed")],
        ledger=[(B1, "b0", 1, 1), (B2, "b0", 2, 2), (B3, "b1", 1, 1)],
        replica_writes=[("r0", 1, 0), ("r1", 2, 3)],
    )
    return log, tables


def failover_problems(log: ClientLog, tables: Tables) -> list[str]:
    return check_records(
        log,
        writes=tables.writes,
        effects=tables.effects,
        tasks=tables.tasks,
        claim_writes=tables.claim_writes,
        batches=tables.batches,
        ledger=tables.ledger,
        replica_writes=tables.replica_writes,
    )


def test_the_failover_checker_passes_a_clean_run() -> None:
    assert failover_problems(*fleet_log()) == []


def test_the_failover_checker_reports_a_term_granted_twice() -> None:
    log, tables = fleet_log()
    log.add("elected", "e2", 2, 20.0)
    assert reported(failover_problems(log, tables), "a term granted to two instances")


def test_the_failover_checker_reports_overlapping_primaries() -> None:
    log, tables = fleet_log()
    log.demoted[:] = [("e0", 13.5)]  # e0 stepped down only after e1 was elected
    assert reported(failover_problems(log, tables), "e0 and e1 both believed they were primary")


def test_the_failover_checker_reports_a_lost_acknowledged_write() -> None:
    log, tables = fleet_log()
    tables.writes.remove((E1, 2, 1))
    assert reported(failover_problems(log, tables), "1 acknowledged fenced writes lost")


@pytest.mark.parametrize(
    ("doctor", "why"),
    [
        (lambda t: t.effects.remove((TASK_B, 2)), "no effect of that epoch"),
        (lambda t: t.effects.__setitem__(1, (TASK_B, 3)), "no effect of that epoch"),
        (lambda t: t.tasks.__setitem__(1, (TASK_B, "pending", 3)), "the task is pending"),
    ],
    ids=["effect-gone", "effect-of-another-epoch", "task-not-done"],
)
def test_the_failover_checker_reports_a_lost_acknowledged_outcome(
    doctor: Callable[[Tables], None], why: str
) -> None:
    log, tables = fleet_log()
    doctor(tables)
    assert reported(failover_problems(log, tables), "1 acknowledged task outcomes lost", str(TASK_B), why)


def test_the_failover_checker_reports_a_run_without_any_acknowledged_outcome() -> None:
    log, tables = fleet_log()
    log.outcomes.clear()  # as when the harness's worker failed to log its outcomes
    assert reported(failover_problems(log, tables), "no acknowledged task outcome to check")


def test_the_failover_checker_reports_a_task_leased_twice_in_one_epoch_and_a_lost_task() -> None:
    log, tables = fleet_log()
    log.add("leases", TASK_A, 1, W1)
    log.enqueued_tasks([uuid4()])
    problems = failover_problems(log, tables)
    assert reported(problems, "1 (task, epoch) pairs leased to two workers")
    assert reported(problems, "1 acknowledged enqueued tasks lost")


def test_the_failover_checker_reports_a_key_held_by_two_claimers_at_once() -> None:
    log, tables = fleet_log()
    log.claims[0] = (CL0, "k0", 1, 10.0, 14.2)  # CL0 believed it held k0 past CL1's grant at 14.0
    assert reported(failover_problems(log, tables), "a key held by two instances at once, 1 times", "k0")


def test_the_failover_checker_reports_a_claim_epoch_granted_twice() -> None:
    log, tables = fleet_log()
    log.add("claims", CL0, "k1", 1, 21.0, 22.0)  # after CL1's span, but in CL1's epoch
    assert reported(failover_problems(log, tables), "1 (key, epoch) pairs granted to two instances", "k1")


def test_the_failover_checker_reports_a_lost_claim_fenced_write() -> None:
    log, tables = fleet_log()
    tables.claim_writes.remove((CL1, "k0", 2, 0))
    assert reported(failover_problems(log, tables), "1 acknowledged claim-fenced writes lost")


def test_the_failover_checker_reports_a_write_under_a_claim_never_granted() -> None:
    log, tables = fleet_log()
    tables.claim_writes.append((CL0, "k1", 1, 5))  # CL0 never held k1 (unacknowledged, so not logged)
    assert reported(failover_problems(log, tables), "1 claim-fenced writes in a (key, epoch) their writer")


def test_the_failover_checker_reports_a_run_without_any_claim_fenced_write() -> None:
    log, tables = fleet_log()
    log.claim_writes.clear()
    assert reported(failover_problems(log, tables), "the claimers made no fenced write")


def test_the_failover_checker_reports_a_batch_applied_twice() -> None:
    log, tables = fleet_log()
    tables.ledger.append((B1, "b0", 1, 3))  # sent again after it was applied: a later position
    assert reported(failover_problems(log, tables), "batches: b0: applied more than once", "('b0', 1)")


def test_the_failover_checker_reports_batches_applied_out_of_order() -> None:
    log, tables = fleet_log()
    tables.ledger[:2] = [(B2, "b0", 2, 1), (B1, "b0", 1, 2)]
    assert reported(failover_problems(log, tables), "batches: b0: applied out of submission order")


def test_the_failover_checker_reports_a_batch_never_applied() -> None:
    log, tables = fleet_log()
    del tables.ledger[1]  # b0#2 resolved as committed, but not in the ledger
    assert reported(failover_problems(log, tables), "batches: b0: 1 batches never applied")


def test_the_failover_checker_reports_a_lost_acknowledged_application() -> None:
    log, tables = fleet_log()
    del tables.ledger[2]  # the acknowledged application of b1#1 is gone after the failover
    tables.batches[2] = (B3, "b1", 1, "pending")
    problems = failover_problems(log, tables)
    assert reported(problems, "1 acknowledged applications of batches lost")
    assert reported(problems, "1 of 3 batches not committed", "b1#1 pending")


def test_the_failover_checker_reports_a_lost_enqueued_batch() -> None:
    log, tables = fleet_log()
    log.enqueued_batch_ids([uuid4()])  # acknowledged to the producer, gone from tenure.batch
    assert reported(failover_problems(log, tables), "1 acknowledged enqueued batches lost")


def test_the_failover_checker_reports_a_run_without_any_applied_batch() -> None:
    log, tables = fleet_log()
    log.batches.clear()
    assert reported(failover_problems(log, tables), "the submission pools applied no batch")


def test_the_failover_checker_reports_two_active_replicas_at_once() -> None:
    log, tables = fleet_log()
    log.replicas[0] = ("r0", 1, 10.0, 12.3)  # r0 believed it was active past r1's start at 12.0
    assert reported(failover_problems(log, tables), "two replicas active at once, 1 times", "r1 active")


def test_the_failover_checker_reports_a_replica_epoch_granted_twice() -> None:
    log, tables = fleet_log()
    log.add("replicas", "r2", 2, 21.0, 22.0)  # after r1's span, but in r1's epoch
    assert reported(failover_problems(log, tables), "a replica epoch granted to two replicas", "r2")


def test_the_failover_checker_reports_a_lost_replica_write() -> None:
    log, tables = fleet_log()
    tables.replica_writes.remove(("r1", 2, 3))
    assert reported(failover_problems(log, tables), "1 acknowledged replica writes lost")


def test_the_failover_checker_reports_a_replica_write_in_an_epoch_never_granted() -> None:
    log, tables = fleet_log()
    tables.replica_writes.append(("r0", 2, 9))  # r0 was never active in epoch 2
    assert reported(failover_problems(log, tables), "1 replica writes in an epoch their writer was never")


def test_the_failover_checker_reports_a_run_without_any_replica_write() -> None:
    log, tables = fleet_log()
    log.replica_writes.clear()
    assert reported(failover_problems(log, tables), "the active replicas made no write")


def test_the_time_to_serve_again_is_measured_from_the_log_and_held_to_its_bound() -> None:
    log = ClientLog()
    for area in AREAS:
        log.add("served", area, 9.0)  # before the fault: not counted
        log.add("served", area, 21.0 + SERVE_BOUNDS[area] / 2)
    log.add("served", "claims", 19.5)  # during the outage, before writable: not counted
    log.add("served", "replicas", 21.0 + SERVE_BOUNDS["replicas"] / 2 + 5)
    timing = Timing.measure(log, fault=10.0, writable=20.0, primary=20.5)
    assert timing.takeover == 0.5
    assert timing.to_serve("elector") == SERVE_BOUNDS["elector"] / 2 + 1
    assert timing.late_areas() == []
    log.served[:] = [(area, at) for area, at in log.served if area != "batches"]
    late = Timing.measure(log, fault=10.0, writable=20.0, primary=20.5)
    assert late.late_areas() == ["batches"] and "batches never" in late.serving()
    log.add("served", "batches", 21.0 + SERVE_BOUNDS["batches"])
    assert Timing.measure(log, fault=10.0, writable=20.0, primary=20.5).late_areas() == ["batches"]


def test_a_client_logs_served_at_most_every_tenth_of_a_second_per_area() -> None:
    log = ClientLog()
    for _ in range(100):
        log.serve("tasks")
    log.serve("claims")
    assert [area for area, _ in log.served] == ["tasks", "claims"]


def test_a_client_log_reads_back_what_it_wrote() -> None:
    log, _ = fleet_log()
    log.add("served", "batches", 10.5)
    sink = io.StringIO()
    written = ClientLog(sink=sink)
    kinds = (
        "elected",
        "demoted",
        "writes",
        "leases",
        "outcomes",
        "claims",
        "claim_writes",
        "batches",
        "replicas",
        "replica_writes",
        "served",
    )
    for kind in kinds:
        for record in getattr(log, kind):
            written.add(kind, *record)
    read = ClientLog.read(["started", *sink.getvalue().splitlines(), "stopped"])
    assert [getattr(read, kind) for kind in kinds] == [getattr(log, kind) for kind in kinds]


# -- claims: the claim log against the fenced work -----------------------------------------

C1, C2 = uuid4(), uuid4()


def claim_records() -> tuple[list[ClaimSpan], list[ClaimWork]]:
    spans = [ClaimSpan("k", 1, C1, at(0), at(0), at(5)), ClaimSpan("k", 2, C2, at(5), at(4.5), None)]
    work = [ClaimWork("k", 1, C1, at(1)), ClaimWork("k", 2, C2, at(6))]
    return spans, work


def test_the_claim_checker_passes_clean_records() -> None:
    assert check_claims(*claim_records(), max_gap=1.0) == []


def test_the_claim_checker_reports_an_epoch_granted_twice() -> None:
    spans, work = claim_records()
    spans.append(ClaimSpan("k", 2, C1, at(7), at(7), None))
    assert reported(check_claims(spans, work, max_gap=1.0), "epoch 2 granted twice")


def test_the_claim_checker_reports_epochs_going_back() -> None:
    spans, _ = claim_records()
    spans[1] = ClaimSpan("k", 2, C2, at(-1), at(-1), None)
    assert reported(check_claims(spans, [], max_gap=1.0), "epochs do not grow")


def test_the_claim_checker_reports_work_of_two_claimants_at_once() -> None:
    spans, work = claim_records()
    work.append(ClaimWork("k", 1, C1, at(5.5)))  # C1 still working after C2's claim began
    work.append(ClaimWork("k", 2, C1, at(6)))  # C1 working in C2's epoch
    problems = check_claims(spans, work, max_gap=1.0)
    assert reported(problems, "in epoch 1", "outside the claim")
    assert reported(problems, f"by {C1} in epoch 2, which it did not hold")


def test_the_claim_checker_reports_a_key_left_without_a_claimant() -> None:
    spans, work = claim_records()
    assert reported(check_claims(spans, work, max_gap=0.2), "had no claimant for 0.500 s")


# -- tasks: the lease log against the steps written under each epoch -----------------------


def task_records() -> tuple[list[Lease], list[Step]]:
    leases = [Lease(TASK_A, 1, W0, at(0)), Lease(TASK_A, 2, W1, at(5))]
    steps = [Step(TASK_A, 1, W0, "first", at(1)), Step(TASK_A, 2, W1, "second", at(6))]
    return leases, steps


def test_the_task_checker_passes_clean_records() -> None:
    assert check_task_records(*task_records(), expected_steps=2) == []


def test_the_task_checker_reports_a_step_accepted_twice() -> None:
    leases, steps = task_records()
    steps.append(Step(TASK_A, 2, W1, "first", at(7)))
    assert reported(check_task_records(leases, steps, expected_steps=2), "1 steps accepted more than once")


def test_the_task_checker_reports_a_missing_step() -> None:
    leases, steps = task_records()
    assert reported(
        check_task_records(leases, steps[:1], expected_steps=2), "1 distinct steps accepted, not 2"
    )


def test_the_task_checker_reports_an_epoch_leased_twice() -> None:
    leases, steps = task_records()
    leases.append(Lease(TASK_A, 2, W0, at(5.5)))
    assert reported(check_task_records(leases, steps, expected_steps=2), "epoch 2 of", "leased twice")


def test_the_task_checker_reports_two_owners_at_once() -> None:
    leases, steps = task_records()
    steps[0] = Step(TASK_A, 1, W0, "first", at(5.5))  # W0 wrote after W1's lease began
    assert reported(check_task_records(leases, steps, expected_steps=2), "two owners at once")
    steps[0] = Step(TASK_A, 1, W1, "first", at(1))  # written by someone else than the holder
    assert reported(check_task_records(leases, steps, expected_steps=2), "not the holder of that epoch")


# -- tasks: the processors' effects outside the database ----------------------------------


def effect_records() -> tuple[list[Lease], list[Effect]]:
    """W0 held TASK_A in epoch 1 (its safe window ending at 10.7), froze, and found it lost
    after; W1 took it over in epoch 2. Times are monotonic seconds."""
    leases = [Lease(TASK_A, 1, W0, at(0)), Lease(TASK_A, 2, W1, at(2))]
    effects = [
        Effect(TASK_A, 1, W0, "submit", 10.1, 10.7),
        Effect(TASK_A, 2, W1, "submit", 12.1, 12.7),
        Effect(TASK_A, 2, W1, "confirm", 12.5, 12.7),
        Effect(TASK_A, 1, W0, "confirm", 12.6, 10.7, held_back=True),
    ]
    return leases, effects


def test_the_effect_checker_passes_clean_records() -> None:
    assert check_effects(*effect_records()) == []


def test_the_effect_checker_reports_a_stale_holder_acting_after_its_successor_began() -> None:
    leases, effects = effect_records()
    # as when W0's worker ignored its safe window: the frozen step acted once thawed
    effects[3] = Effect(TASK_A, 1, W0, "confirm", 12.6, 10.7)
    problems = check_effects(leases, effects)
    assert reported(
        problems, f"confirm effect of {TASK_A} in epoch 1 made 1.900 s after its safe window ended"
    )
    assert reported(problems, "made 0.500 s after epoch 2's first effect (submit)", "stale holder")


def test_the_effect_checker_reports_an_effect_after_the_safe_window_alone() -> None:
    leases, effects = effect_records()
    effects[0] = Effect(TASK_A, 1, W0, "submit", 10.8, 10.7)  # before epoch 2, past its window
    problems = check_effects(leases, effects)
    assert reported(problems, "submit effect", "0.100 s after its safe window ended")
    assert not reported(problems, "stale holder")


def test_the_effect_checker_reports_an_effect_by_someone_else_than_the_holder() -> None:
    leases, effects = effect_records()
    effects[1] = Effect(TASK_A, 2, W0, "submit", 12.1, 12.7)
    assert reported(check_effects(leases, effects), f"made by {W0}, not the holder of that epoch")


# -- batches: what the ledger applied against submission order ------------------------------


def test_the_batch_checker_passes_per_key_submission_order() -> None:
    assert check_applied({"k": ["a", "b"], "j": ["c"]}, {"j": ["c"], "k": ["a", "b"]}) == []


@pytest.mark.parametrize(
    ("applied", "why"),
    [
        (["a", "b", "b"], "applied more than once: 'b'"),
        (["b", "a"], "applied out of submission order"),
        (["a"], "1 batches never applied"),
        (["a", "b", "x"], "1 batches applied that should not be"),
    ],
    ids=["twice", "out-of-order", "missing", "unexpected"],
)
def test_the_batch_checker_reports(applied: list[str], why: str) -> None:
    assert reported(check_applied({"k": ["a", "b"]}, {"k": applied}), "k: ", why)


# -- replicas: two replicas active at once ----------------------------------------------------


def test_the_replica_checker_reports_two_active_replicas() -> None:
    terms = [ReplicaTerm(1, "a", 10, at(0)), ReplicaTerm(2, "b", 20, at(5))]
    # a still accepted writes after b became active, and wrote them in b's epoch
    writes = [
        ReplicaWrite("w1", "a", 1, 10, at(1)),
        ReplicaWrite("w2", "b", 2, 20, at(6)),
        ReplicaWrite("w3", "a", 2, 10, at(6.5)),
    ]
    assert reported(check_replica_records(terms, writes), "w3 by a (pid 10) in epoch 2 of b")
    answers = [Answer(0, 0, 200, "w2", "a", 2)]  # the client was told a accepted w2
    assert reported(check_replica_records(terms, writes[:2], answers), "answered as a but recorded as b")
