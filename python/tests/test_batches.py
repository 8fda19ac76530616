"""The submission queue through the driver: order, modes, resolution and fencing; the
pool's behaviour tests run against SubmissionPool and AsyncSubmissionPool (``flavour``)."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from proxy import PausingProxy
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from tenure import ClaimLost, Driver, InvalidConfiguration
from tenure.aio import AsyncSubmissionPool
from tenure.driver import BatchGrant, Resolution
from tenure.errors import InvalidTransition
from tenure.metrics import Metrics
from tenure.runtime.batches import AsyncHeldCheck, HeldCheck, SubmissionPool
from tenure.testing.aio import Flavour
from tenure.testing.ledger import SimulatedLedger


def test_serial_queue_through_the_driver(admin: psycopg.Connection[Any]) -> None:
    driver = Driver(admin)
    me, other = uuid.uuid4(), uuid.uuid4()
    driver.batch_configure("ledger", mode="serial")
    first = driver.batch_enqueue("ledger", "po-1", b"price 2.75")
    many = driver.batch_enqueue_many(
        "ledger", [{"key": "po-1", "payload": b"price 3.00"}, {"key": "po-1", "payload": b"price 3.25"}]
    )
    assert [first.seq, *(m.seq for m in many)] == [1, 2, 3]
    assert driver.claim_take("ledger", me, expiry=60)
    (grant,) = driver.batch_select("ledger", me, limit=8)
    assert (grant.key, grant.seq, grant.payload, grant.round) == ("po-1", 1, b"price 2.75", 1)
    assert driver.batch_select("ledger", me, limit=8) == [], "serial: the next waits for the commit"
    assert [p.id for p in driver.batch_pending("ledger", me)] == [grant.id]
    with pytest.raises(ClaimLost):
        driver.batch_resolve("ledger", other, grant.id, grant.claim_epoch, "committed")
    assert driver.batch_resolve("ledger", me, grant.id, grant.claim_epoch, "committed") == "committed"
    with pytest.raises(InvalidTransition):
        driver.batch_resolve("ledger", me, grant.id, grant.claim_epoch, "invalid")
    (second,) = driver.batch_select("ledger", me, limit=8)
    assert second.seq == 2
    driver.batch_resolve("ledger", me, second.id, second.claim_epoch, "unknown")
    (again,) = driver.batch_select("ledger", me, limit=8)
    assert (again.id, again.attempts) == (second.id, 2), "an unknown batch goes again before later ones"
    (row,) = driver.batch_keys("ledger")
    assert (row.key, row.mode, row.pending, row.queued, row.committed, row.halted) == (
        "po-1",
        "serial",
        1,
        1,
        1,
        False,
    )


def test_resolve_many_is_all_or_none(admin: psycopg.Connection[Any]) -> None:
    driver = Driver(admin)
    me = uuid.uuid4()
    driver.batch_configure("many", mode="unconstrained")
    driver.batch_enqueue_many("many", [{"key": k, "payload": b"x"} for k in ("a", "a", "b")])
    driver.claim_take("many", me, expiry=60)
    grants = driver.batch_select("many", me, limit=8, depth=2)
    assert sorted((g.key, g.seq) for g in grants) == [("a", 1), ("a", 2), ("b", 1)]
    stale = [Resolution(g.id, g.claim_epoch + (g.key == "b"), "committed") for g in grants]
    with pytest.raises(ClaimLost):
        driver.batch_resolve_many("many", me, stale)
    assert len(driver.batch_pending("many", me)) == 3, "nothing was resolved"
    outcomes = [Resolution(g.id, g.claim_epoch, "invalid" if g.key == "b" else "committed") for g in grants]
    assert driver.batch_resolve_many("many", me, outcomes) == 3
    assert {(r.key, r.committed, r.invalid) for r in driver.batch_keys("many")} == {("a", 2, 0), ("b", 0, 1)}


def wait_until(condition: Any, timeout: float = 30.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.05)
    return bool(condition())


def committed(driver: Driver, keyspace: str) -> int:
    return sum(row.committed for row in driver.batch_keys(keyspace))


def callbacks(flavour: Flavour, ledger: SimulatedLedger) -> dict[str, Callable[[BatchGrant], Any]]:
    """The ledger's submit and status for the pool of ``flavour``: coroutine functions for
    the async pool (each yields to the event loop first, so submitters interleave)."""
    if not flavour.is_async:
        return {"submit": ledger.submit, "status": ledger.status}

    async def submit(batch: BatchGrant) -> None:
        await asyncio.sleep(0)
        ledger.submit(batch)

    async def status(batch: BatchGrant) -> str | None:
        await asyncio.sleep(0)
        return ledger.status(batch)

    return {"submit": submit, "status": status}


def test_bad_pool_configuration_is_refused_before_connecting(flavour: Flavour) -> None:
    ledger = SimulatedLedger()
    for bad in (
        {"submitters": 0},
        {"depth": 0},
        {"prefetch": 0},
        {"submitters": 8, "prefetch": 1251},  # 10,008 batches a selection: batch_select takes 10,000
        {"poll_interval": 0},
        {"cycle": 1.0, "expiry": 1.5},
    ):
        with pytest.raises(InvalidConfiguration):
            flavour(SubmissionPool, "host=/nonexistent", "orders", **callbacks(flavour, ledger), **bad)


@pytest.mark.parametrize(
    ("mode", "keeps_order", "depth"),
    [("unconstrained", True, 3), ("serial", False, 1), ("serial", True, 2)],
)
def test_pool_delivers_every_key_in_order(
    app_conninfo: str,
    admin: psycopg.Connection[Any],
    flavour: Flavour,
    mode: str,
    keeps_order: bool,
    depth: int,
) -> None:
    driver = Driver(admin)
    driver.batch_configure("orders", mode=mode)
    keys, per_key = 5, 12
    driver.batch_enqueue_many(
        "orders",
        [{"key": f"po-{k}", "payload": f"{k}:{n}".encode()} for n in range(per_key) for k in range(keys)],
    )
    ledger = SimulatedLedger(keeps_order=keeps_order, max_delay=0.02)
    metrics = Metrics()
    with flavour(
        SubmissionPool,
        app_conninfo,
        "orders",
        **callbacks(flavour, ledger),
        submitters=4,
        depth=depth,
        cycle=0.2,
        expiry=0.7,
        poll_interval=0.05,
        metrics=metrics,
    ):
        assert wait_until(lambda: committed(driver, "orders") == keys * per_key)
    for k in range(keys):
        assert ledger.applied[f"po-{k}"] == [f"{k}:{n}".encode() for n in range(per_key)], (
            f"po-{k} out of order"
        )
    sample = metrics.registry.get_sample_value
    resolved = sample("tenure_batches_resolved_total", {"keyspace": "orders", "status": "committed"})
    assert resolved == keys * per_key, "each batch counted once as it was resolved"
    assert (sample("tenure_batches_submitted_total", {"keyspace": "orders"}) or 0) >= keys * per_key


def test_an_invalid_batch_halts_its_key_until_skipped(
    app_conninfo: str, admin: psycopg.Connection[Any], flavour: Flavour
) -> None:
    driver = Driver(admin)
    driver.batch_configure("halt", mode="serial")
    driver.batch_enqueue_many("halt", [{"key": "po", "payload": p} for p in (b"2.75", b"bad", b"3.25")])
    ledger = SimulatedLedger(invalid=lambda payload: payload == b"bad")
    with flavour(
        SubmissionPool,
        app_conninfo,
        "halt",
        **callbacks(flavour, ledger),
        submitters=2,
        cycle=0.2,
        expiry=0.7,
        poll_interval=0.05,
    ):
        assert wait_until(lambda: driver.batch_keys("halt")[0].halted)
        time.sleep(0.5)
        assert ledger.applied["po"] == [b"2.75"], "nothing after the invalid batch while the key is halted"
        (bad,) = [b for b in admin.execute("SELECT id FROM tenure.batch WHERE status = 'invalid'").fetchall()]
        assert driver.batch_skip("halt", bad[0])
        assert wait_until(lambda: ledger.state().get("po") == b"3.25")
    assert ledger.applied["po"] == [b"2.75", b"3.25"]


@pytest.mark.parametrize("prefetch", [1, 3])
def test_a_selection_takes_prefetch_batches_per_submitter(
    app_conninfo: str, admin: psycopg.Connection[Any], flavour: Flavour, prefetch: int
) -> None:
    """While both submitters are busy, the pool holds what its one selection took: 2 x
    prefetch batches pending, the rest still queued; then every batch goes."""
    driver = Driver(admin)
    keyspace = f"prefetch-{prefetch}"
    driver.batch_configure(keyspace, mode="unconstrained")
    driver.batch_enqueue_many(keyspace, [{"key": f"k{n:02}", "payload": b"x"} for n in range(20)])
    ledger = SimulatedLedger()
    gate = threading.Event()
    entered: list[int] = []
    submit = callbacks(flavour, ledger)["submit"]
    if flavour.is_async:

        async def gated(batch: BatchGrant) -> None:
            entered.append(batch.seq)
            while not gate.is_set():
                await asyncio.sleep(0.01)
            await submit(batch)

    else:

        def gated(batch: BatchGrant) -> None:  # type: ignore[misc]
            entered.append(batch.seq)
            assert gate.wait(30)
            submit(batch)

    def count(status: str) -> int:
        query = "SELECT count(*) FROM tenure.batch WHERE keyspace = %s AND status = %s"
        return int(admin.execute(query, (keyspace, status)).fetchone()[0])  # type: ignore[index]

    with flavour(
        SubmissionPool,
        app_conninfo,
        keyspace,
        submit=gated,
        status=callbacks(flavour, ledger)["status"],
        submitters=2,
        prefetch=prefetch,
        poll_interval=0.05,
    ):
        assert wait_until(lambda: len(entered) == 2)
        time.sleep(0.5)  # time for a selection that should not come
        assert (count("pending"), count("queued")) == (2 * prefetch, 20 - 2 * prefetch)
        gate.set()
        assert wait_until(lambda: count("committed") == 20)
    assert len(ledger.applied) == 20


def test_a_batch_goes_only_while_the_database_still_says_its_claim_is_held(
    app_conninfo: str, admin: psycopg.Connection[Any], flavour: Flavour
) -> None:
    """The last check before submitting asks the database: a key taken over there, before
    this instance's claimer has noticed, has its remaining batches left pending."""
    driver = Driver(admin)
    driver.batch_configure("fence", mode="unconstrained")
    driver.batch_enqueue_many("fence", [{"key": "po", "payload": p} for p in (b"1", b"2", b"3")])
    ledger = SimulatedLedger()
    entered, gate = threading.Event(), threading.Event()

    def hold(batch: BatchGrant) -> None:
        if batch.seq == 1:
            entered.set()
            assert gate.wait(30)

    submit = callbacks(flavour, ledger)["submit"]
    if flavour.is_async:

        async def gated(batch: BatchGrant) -> None:
            if batch.seq == 1:
                entered.set()
                while not gate.is_set():
                    await asyncio.sleep(0.01)
            await submit(batch)

    else:

        def gated(batch: BatchGrant) -> None:  # type: ignore[misc]
            hold(batch)
            submit(batch)

    with flavour(
        SubmissionPool,
        app_conninfo,
        "fence",
        submit=gated,
        status=callbacks(flavour, ledger)["status"],
        submitters=3,
        depth=3,
        cycle=5.0,
        expiry=30.0,
        poll_interval=0.05,
    ) as pool:
        assert entered.wait(30)
        admin.execute(
            "UPDATE tenure.claim_key SET claimant = gen_random_uuid(), epoch = epoch + 1 "
            "WHERE keyspace = 'fence' AND key = 'po'"
        )
        assert pool.claimer.epoch("po") is not None, "the claimer has not noticed yet"
        gate.set()
        assert wait_until(lambda: pool.skipped == 2)
        assert pool.submitted == 1
    assert ledger.applied["po"] == [b"1"], "only the batch checked before the takeover went"
    statuses = admin.execute("SELECT seq, status FROM tenure.batch WHERE keyspace = 'fence' ORDER BY seq")
    assert [tuple(row) for row in statuses.fetchall()] == [(1, "pending"), (2, "pending"), (3, "pending")], (
        "left for the key's next holder, whose monitor learns what became of them"
    )


def test_a_call_into_a_database_that_stops_answering_is_cut_at_its_bound(
    app_conninfo: str, admin: psycopg.Connection[Any], flavour: Flavour, caplog: pytest.LogCaptureFixture
) -> None:
    """Every call of the pool's own (a selection, the last check, the monitor's) runs under
    the deadline watchdog: a network pause that the kernel still acknowledges, which no
    connection option ends, costs a call its bound (``call_bound``, the claimer's safe
    window) and an error that says so; once the network heals, the pool serves again."""
    driver = Driver(admin)
    driver.batch_configure("pause", mode="serial")
    driver.batch_enqueue_many("pause", [{"key": "po", "payload": b"1"}])
    ledger = SimulatedLedger()
    caplog.set_level(logging.WARNING, logger="tenure")
    params = conninfo_to_dict(app_conninfo)

    def cut_calls() -> list[str]:
        return [r.getMessage() for r in caplog.records if "the call was cut" in r.getMessage()]

    with PausingProxy(str(params["host"]), int(str(params["port"]))) as proxy:
        via_proxy = make_conninfo(app_conninfo, host="127.0.0.1", port=proxy.port)
        with flavour(
            SubmissionPool,
            via_proxy,
            "pause",
            **callbacks(flavour, ledger),
            submitters=2,
            cycle=0.5,
            expiry=2.0,
            poll_interval=0.1,
        ) as pool:
            assert pool.call_bound == 1.5, "the claimer's safe window"
            assert wait_until(lambda: committed(driver, "pause") == 1)
            proxy.pause()
            assert wait_until(lambda: any("monitoring failed" in m for m in cut_calls()), 20), (
                "the monitor's call into the pause was cut while the pause lasted"
            )
            assert "the database did not answer within 1.5 s" in cut_calls()[0]
            proxy.resume()
            driver.batch_enqueue_many("pause", [{"key": "po", "payload": b"2"}])
            assert wait_until(lambda: committed(driver, "pause") == 2), "the pool serves again after it"
    assert ledger.applied["po"] == [b"1", b"2"]


def test_a_failed_last_check_says_no_and_warns_unless_the_pool_is_stopping(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A ``batch_check`` call that fails answers no to the checks it carried; it is logged as
    a failure, unless the pool's stop cut it (the pool's ``failure_level`` says debug)."""

    class Unreachable:
        def run(self, op: Any) -> Any:
            raise psycopg.OperationalError("server closed the connection unexpectedly")

    class AsyncUnreachable:
        async def run(self, op: Any) -> Any:
            raise psycopg.OperationalError("server closed the connection unexpectedly")

    stopping = False

    def level() -> int:
        return logging.DEBUG if stopping else logging.WARNING

    held = HeldCheck(Unreachable(), "check", uuid.uuid4(), level)  # type: ignore[arg-type]
    async_held = AsyncHeldCheck(AsyncUnreachable(), "check", uuid.uuid4(), level)  # type: ignore[arg-type]
    caplog.set_level(logging.DEBUG, logger="tenure")

    def levels() -> list[int]:
        found = [
            r.levelno for r in caplog.records if "checking claims before submitting failed" in r.getMessage()
        ]
        caplog.clear()
        return found

    assert held.held("k", 1) is False and asyncio.run(async_held.held("k", 1)) is False
    assert levels() == [logging.WARNING, logging.WARNING]
    stopping = True
    assert held.held("k", 1) is False and asyncio.run(async_held.held("k", 1)) is False
    assert levels() == [logging.DEBUG, logging.DEBUG], "a call the stop cut is not a failure"


def test_a_late_resolution_of_an_earlier_attempt_does_not_send_a_batch_again(
    app_conninfo: str, admin: psycopg.Connection[Any]
) -> None:
    """The monitor asks about attempt 1 of a batch whose submission failed. Before its answer
    ('unknown', true of attempt 1) is recorded, an earlier resolution of the batch lands (as a
    resolve cut at its call bound does, later, on the server during a failover), and the batch
    is selected again and applied (attempt 2). The stale answer must not reach attempt 2 and
    send the batch a third time: it is applied once (the failover demo applied such batches
    twice)."""
    driver = Driver(admin)
    driver.batch_configure("late", mode="serial")
    driver.batch_enqueue("late", "po", b"1")
    applied: list[tuple[uuid.UUID, int]] = []
    stale_answer_given = threading.Event()
    pool: SubmissionPool

    def submit(batch: BatchGrant) -> None:
        if batch.attempts == 1:
            raise ConnectionError("attempt 1 lost on its way")
        applied.append((batch.id, batch.attempts))

    def status(batch: BatchGrant) -> str:
        done = batch.id in {id for id, _ in applied}
        if batch.attempts == 1 and not stale_answer_given.is_set():
            with psycopg.connect(app_conninfo, autocommit=True) as late:
                Driver(late).batch_resolve(
                    "late", pool.claimer.instance_id, batch.id, batch.claim_epoch, "unknown"
                )
            assert wait_until(lambda: len(applied) == 1), "attempt 2 went meanwhile"
            stale_answer_given.set()
        return "committed" if done else "unknown"

    with SubmissionPool(
        app_conninfo,
        "late",
        submit=submit,
        status=status,
        submitters=2,
        cycle=5.0,
        expiry=30.0,
        poll_interval=0.05,
    ) as pool:
        assert wait_until(lambda: committed(driver, "late") == 1)
        time.sleep(0.5)  # a batch sent again would be selected within a few polls
    assert stale_answer_given.is_set()
    assert [attempt for _, attempt in applied] == [2], "applied once, in its second attempt"
    row = admin.execute("SELECT status, attempts FROM tenure.batch WHERE keyspace = 'late'").fetchone()
    assert tuple(row or ()) == ("committed", 2)


# -- asyncio only ------------------------------------------------------------------------


def test_cancelling_the_task_of_an_async_pool_leaves_it_as_the_block_does(
    app_conninfo: str, admin: psycopg.Connection[Any]
) -> None:
    """The pool runs on the event loop alone; cancelling the task inside ``async with``
    lets the submission in progress finish, then releases the claims at once (a successor
    takes the key without waiting for the expiry) and leaves no task behind."""
    driver = Driver(admin)
    driver.batch_configure("cancel", mode="serial")
    driver.batch_enqueue_many("cancel", [{"key": "po", "payload": p} for p in (b"1", b"2")])
    ledger = SimulatedLedger()
    seen: dict[str, Any] = {}

    async def scenario() -> None:
        submitting, go_on = asyncio.Event(), asyncio.Event()

        async def submit(batch: BatchGrant) -> None:
            submitting.set()
            await go_on.wait()
            ledger.submit(batch)

        async def status(batch: BatchGrant) -> str | None:
            return ledger.status(batch)

        threads = set(threading.enumerate())
        pool = AsyncSubmissionPool(
            app_conninfo, "cancel", submit=submit, status=status, submitters=2, cycle=1.0, expiry=30.0
        )

        async def service() -> None:
            async with pool:
                await asyncio.sleep(3600)

        task = asyncio.create_task(service())
        await asyncio.wait_for(submitting.wait(), 30)
        seen["new threads"] = [t.name for t in set(threading.enumerate()) - threads]
        task.cancel()
        await asyncio.sleep(0.5)
        seen["done while submitting"] = task.done()
        go_on.set()
        try:
            await asyncio.wait_for(task, 30)
        except asyncio.CancelledError:
            seen["cancelled"] = True
        seen["submitted"] = pool.submitted
        seen["tasks left"] = [t.get_name() for t in asyncio.all_tasks() if t is not asyncio.current_task()]

    asyncio.run(scenario())
    assert seen["new threads"] == [], "the async pool runs without a thread"
    assert seen["cancelled"] and not seen["done while submitting"], "the submission in progress finishes"
    assert seen["submitted"] == 1 and ledger.applied["po"] == [b"1"]
    assert seen["tasks left"] == []
    successor = uuid.uuid4()
    taken = driver.claim_take("cancel", successor, expiry=60)
    assert [(g.key, g.change) for g in taken] == [("po", "taken")], "the claim was released"
    assert [b.seq for b in driver.batch_pending("cancel", successor)] == [1], (
        "the batch submitted during the stop is pending for the successor's monitor"
    )


def test_async_pool_takes_plain_callbacks_too(app_conninfo: str, admin: psycopg.Connection[Any]) -> None:
    """``submit``/``status`` may return a value instead of an awaitable (called on the loop)."""
    driver = Driver(admin)
    driver.batch_configure("plain", mode="serial")
    driver.batch_enqueue_many("plain", [{"key": "po", "payload": f"{n}".encode()} for n in range(5)])
    ledger = SimulatedLedger()

    async def scenario() -> None:
        async with AsyncSubmissionPool(
            app_conninfo,
            "plain",
            submit=ledger.submit,
            status=ledger.status,
            cycle=0.2,
            expiry=0.7,
            poll_interval=0.05,
        ):
            end = time.monotonic() + 30
            while committed(driver, "plain") < 5 and time.monotonic() < end:
                await asyncio.sleep(0.05)

    asyncio.run(scenario())
    assert ledger.applied["po"] == [f"{n}".encode() for n in range(5)]


def test_a_cancelled_submission_does_not_hold_up_the_stop_of_an_async_pool(
    app_conninfo: str, admin: psycopg.Connection[Any]
) -> None:
    """A submitter task cancelled in the middle of ``submit`` counts its submission out, so
    ``stop()``, which lets the submissions in progress return first, keeps its bound (the
    claimer's safe window, plus a generous slack for a loaded machine)."""
    driver = Driver(admin)
    driver.batch_configure("cancelled", mode="serial")
    driver.batch_enqueue_many("cancelled", [{"key": "po", "payload": b"1"}])
    seen: dict[str, Any] = {}

    async def scenario() -> None:
        submitting = asyncio.Event()
        submitters: list[asyncio.Task[Any]] = []

        async def submit(batch: BatchGrant) -> None:
            task = asyncio.current_task()
            assert task is not None
            submitters.append(task)
            submitting.set()
            await asyncio.sleep(3600)

        pool = AsyncSubmissionPool(
            app_conninfo,
            "cancelled",
            submit=submit,
            status=lambda _: None,
            submitters=2,
            cycle=0.5,
            expiry=2.0,
        )
        await pool.start()
        await asyncio.wait_for(submitting.wait(), 30)
        submitters[0].cancel()
        began = time.monotonic()
        try:
            await asyncio.wait_for(pool.stop(), 30)
            seen["stop took"] = time.monotonic() - began
        except TimeoutError:
            seen["stop took"] = None
        seen["grace"] = pool.claimer.safe_window

    asyncio.run(scenario())
    assert seen["stop took"] is not None, "stop() waited for the cancelled submission to return"
    assert seen["stop took"] <= seen["grace"] + 3.0, seen
