"""The task driver and worker in-process, against a real database."""

from __future__ import annotations

import asyncio
import gc
import itertools
import json
import math
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from tenure import Driver, InvalidArgument, LeaseLost, NotFound
from tenure.aio import AsyncTaskWorker
from tenure.driver import Operations, TaskCycled
from tenure.errors import InvalidConfiguration
from tenure.runtime.tasks import (
    GC_YOUNG_PER_SLOT,
    Complete,
    Fail,
    Next,
    Processor,
    Release,
    Task,
    TaskWorker,
    tune_gc,
)
from tenure.testing.aio import Flavour


def wait_until(condition: Any, timeout: float = 20.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.02)
    return bool(condition())


def on(flavour: Flavour, processors: Mapping[Any, Callable[[Task], Any]]) -> dict[Any, Any]:
    """The tests' processors for ``flavour``: for the async worker, each as a coroutine function.
    Its body runs on a thread of the default executor, since the tests' processors block on
    events (the worker's event loop must go on meanwhile); outcomes and writes are the same
    (a ``lambda db: db.execute(...)`` returns an awaitable on an AsyncConnection)."""
    if not flavour.is_async:
        return dict(processors)

    def as_coroutine(function: Callable[[Task], Any]) -> Callable[[Task], Any]:
        async def processor(task: Task) -> Any:
            return await asyncio.to_thread(function, task)

        processor.__qualname__ = f"async {getattr(function, '__qualname__', function)}"
        return processor

    return {key: as_coroutine(function) for key, function in processors.items()}


def statuses(driver: Driver, kind: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for row in driver.task_status():
        if row.kind == kind:
            counts[row.status] = counts.get(row.status, 0) + row.tasks
    return counts


def test_driver_round_trip_and_errors(admin: psycopg.Connection[Any]) -> None:
    driver = Driver(admin)
    me, other = uuid.uuid4(), uuid.uuid4()
    first = driver.task_enqueue("mail", {"to": "a@example.org"}, idempotency_key="order-1")
    again = driver.task_enqueue("mail", {"to": "a@example.org"}, idempotency_key="order-1")
    assert first.created and not again.created and again.id == first.id
    many = driver.task_enqueue_many([{"kind": "mail", "data": {"n": n}, "delay": 60} for n in range(3)])
    assert [m.created for m in many] == [True] * 3
    (lease,) = driver.task_acquire(me, lease=30, limit=10, kinds=["mail"])
    assert (lease.id, lease.epoch, lease.data) == (first.id, 1, {"to": "a@example.org"})
    driver.task_update(lease.id, me, lease.epoch, state="sending", data={"to": "a@example.org", "try": 1})
    with pytest.raises(LeaseLost) as lost:
        driver.task_extend(lease.id, other, lease.epoch, lease=30)
    assert lost.value.sqlstate == "TN102"
    with pytest.raises(NotFound):
        driver.task_extend(uuid.uuid4(), me, 1, lease=30)
    with pytest.raises(InvalidArgument):
        driver.task_enqueue("", {})
    driver.task_complete(lease.id, me, lease.epoch, state="sent")
    row = driver.task(lease.id)
    assert row is not None and (row.status, row.state, row.owner) == ("done", "sent", None)
    assert [r.id for r in driver.tasks(kind="mail", status="pending")] == [m.id for m in many]
    assert statuses(driver, "mail") == {"done": 1, "pending": 3}


def due_lookup_pages(admin: psycopg.Connection[Any], kind: str) -> int:
    """Index and table pages the first step of an acquisition of ``kind`` reads: its probe of
    the due index for the first task not leased."""
    row = admin.execute(
        "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT priority, next_action FROM tenure.task "
        "WHERE status = 'pending' AND leased_at IS NULL AND kind = %s "
        "ORDER BY priority DESC, next_action LIMIT 1",
        (kind,),
    ).fetchone()
    assert row is not None
    root = row[0][0]["Plan"]
    return int(root["Shared Hit Blocks"]) + int(root["Shared Read Blocks"])


def test_a_vacuum_takes_the_dead_entries_of_leased_tasks_out_of_the_due_index(
    admin: psycopg.Connection[Any],
) -> None:
    """A lease leaves a dead entry at the front of the due index, read by every later lookup
    until a VACUUM removes it. Where the tasks leased since are few next to those retained
    (their rows on fewer than 2% of the table's pages), PostgreSQL's VACUUM leaves the
    indexes alone, unless the table says otherwise (the change task_vacuum)."""
    admin.execute("ALTER TABLE tenure.task SET (autovacuum_enabled = off)")  # this test's VACUUMs only
    admin.execute(
        "INSERT INTO tenure.task "
        "(kind, state, status, created_at, last_change, last_action, finished_at, attempts) "
        "SELECT 'retained', 'done', 'done', now(), now(), now(), now(), 1 FROM generate_series(1, 400000)"
    )
    admin.execute(
        "INSERT INTO tenure.task (kind, state, created_at, last_change, last_action, next_action) "
        "SELECT 'mail', 'new', now(), now(), now(), now() - g * interval '1 ms' "
        "FROM generate_series(2010, 1, -1) g"
    )
    admin.execute("VACUUM (FREEZE, ANALYZE) tenure.task")
    assert due_lookup_pages(admin, "mail") <= 3
    leased = Driver(admin).task_acquire(uuid.uuid4(), lease=300, limit=2000, kinds=["mail"])
    assert len(leased) == 2000
    dead_front = due_lookup_pages(admin, "mail")
    assert dead_front > 10, "the entries of the 2,000 leased tasks are read until a VACUUM"
    admin.execute("VACUUM tenure.task")
    assert due_lookup_pages(admin, "mail") <= 3, f"after VACUUM, as before it ({dead_front} pages)"


def test_eject_refuses_the_previous_owner(admin: psycopg.Connection[Any]) -> None:
    driver = Driver(admin)
    owner, callback = uuid.uuid4(), uuid.uuid4()
    driver.task_enqueue("payment")
    (lease,) = driver.task_acquire(owner, lease=60)
    taken = driver.task_eject(lease.id, callback, lease=60)
    assert taken is not None and taken.epoch == lease.epoch + 1
    stale_writes: list[Callable[[], object]] = [
        lambda: driver.task_extend(lease.id, owner, lease.epoch, lease=60),
        lambda: driver.task_update(lease.id, owner, lease.epoch, state="x"),
        lambda: driver.task_complete(lease.id, owner, lease.epoch),
    ]
    for write in stale_writes:
        with pytest.raises(LeaseLost):
            write()
    driver.task_complete(lease.id, callback, taken.epoch, state="settled")
    assert driver.task_eject(lease.id, owner, lease=60) is None, "a finished task cannot be taken"


def complete(task: Task) -> Complete:
    return Complete()


def test_worker_completes_routes_and_releases(
    app_conninfo: str, admin: psycopg.Connection[Any], flavour: Flavour
) -> None:
    driver = Driver(admin)
    seen: list[tuple[str, int]] = []

    def first(task: Task) -> Next:
        seen.append((task.state, task.epoch))
        return Next("second", data={"step": 1})

    def second(task: Task) -> Release | Complete:
        seen.append((task.state, task.epoch))
        if task.data.get("waited"):
            return Complete(state="finished")
        return Release(delay=0.2, state="second", data={"waited": True})

    driver.task_enqueue("flow")
    driver.task_enqueue_many([{"kind": "plain"} for _ in range(20)])
    processors: dict[str | tuple[str, str], Processor] = {
        ("flow", "new"): first,
        ("flow", "second"): second,
        "plain": complete,
    }
    with flavour(
        TaskWorker, app_conninfo, on(flavour, processors), concurrency=3, lease=5, poll_interval=0.1
    ) as worker:
        assert wait_until(
            lambda: statuses(driver, "plain") == {"done": 20} and statuses(driver, "flow") == {"done": 1}
        )
    assert worker.stats.completed == 21 and worker.stats.routed == 1 and worker.stats.released == 1
    assert seen[0] == ("new", 1) and seen[1] == ("second", 1), "the routed step ran under the same lease"
    assert seen[2] == ("second", 2), "after the release the task was leased again"
    flow = driver.tasks(kind="flow")[0]
    assert (flow.state, flow.data) == ("finished", {"waited": True})


def test_processors_get_each_tasks_data_as_json_reads_it(
    app_conninfo: str, admin: psycopg.Connection[Any], flavour: Flavour
) -> None:
    """The worker's connections read ``{}`` without a parser (tenure.connect._json_loads):
    every other value as json.loads reads it (big integers exact), each task its own dict."""
    driver = Driver(admin)
    given = [{}, {}, {"n": 12345678901234567890123, "x": 0.1, "s": "{}", "l": [{}]}, {"": {}}]
    seen: list[Any] = []

    def record(task: Task) -> Complete:
        seen.append(dict(task.data))
        task.data["touched"] = True  # the processor's own dict: no other task's {} changes
        return Complete()

    driver.task_enqueue_many([{"kind": "data", "data": data} for data in given])
    with flavour(TaskWorker, app_conninfo, on(flavour, {"data": record}), concurrency=1, poll_interval=0.1):
        assert wait_until(lambda: statuses(driver, "data") == {"done": len(given)})

    def canonical(values: list[Any]) -> list[str]:
        return sorted(json.dumps(value, sort_keys=True) for value in values)  # jsonb orders keys its own way

    assert canonical(seen) == canonical(given)


def test_failures_back_off_then_die_and_can_be_requeued(
    app_conninfo: str, admin: psycopg.Connection[Any], flavour: Flavour
) -> None:
    driver = Driver(admin)
    (task,) = driver.task_enqueue_many([{"kind": "flaky", "max_attempts": 2}])
    calls: list[int] = []

    def flaky(t: Task) -> Complete:
        calls.append(t.attempts)
        raise RuntimeError("remote said no")

    with flavour(
        TaskWorker, app_conninfo, on(flavour, {"flaky": flaky}), concurrency=1, lease=5, poll_interval=0.1
    ) as worker:
        assert wait_until(lambda: statuses(driver, "flaky") == {"dead": 1})
    assert calls == [0, 1] and worker.stats.failed == 2
    row = driver.task(task.id)
    assert row is not None and row.last_error == "RuntimeError: remote said no"
    assert driver.task_requeue(task.id) is True
    assert statuses(driver, "flaky") == {"pending": 1}


def test_a_lost_lease_discards_the_result(
    app_conninfo: str, admin: psycopg.Connection[Any], flavour: Flavour
) -> None:
    driver = Driver(admin)
    admin.execute("CREATE TABLE effects (task uuid)")
    admin.execute("GRANT INSERT ON effects TO tenure_demo_app")
    started, lost_seen = threading.Event(), threading.Event()

    def slow(task: Task) -> Complete:
        started.set()
        if task.lost.wait(20):
            lost_seen.set()
        return Complete(writes=lambda db: db.execute("INSERT INTO effects VALUES (%s)", (task.id,)))

    (enqueued,) = driver.task_enqueue_many([{"kind": "slow"}])
    with flavour(
        TaskWorker, app_conninfo, on(flavour, {"slow": slow}), concurrency=1, lease=0.9, poll_interval=0.1
    ) as worker:
        assert started.wait(10)
        taken = driver.task_eject(enqueued.id, uuid.uuid4(), lease=60)
        assert taken is not None
        assert lost_seen.wait(10), "the extender learned the lease was lost"
        assert wait_until(lambda: worker.stats.discarded == 1)
    assert admin.execute("SELECT count(*) FROM effects").fetchone() == (0,), "its writes never landed"
    row = driver.task(enqueued.id)
    assert row is not None and row.status == "pending" and row.epoch == taken.epoch


def test_notifications_wake_an_idle_worker(
    app_conninfo: str, admin: psycopg.Connection[Any], flavour: Flavour
) -> None:
    driver = Driver(admin)
    with flavour(
        TaskWorker, app_conninfo, on(flavour, {"ping": complete}), lease=5, poll_interval=60
    ) as worker:
        time.sleep(0.5)  # the first poll found nothing; the next is a minute away
        driver.task_enqueue("ping")
        assert wait_until(lambda: worker.stats.completed == 1, timeout=30)


def test_tasks_are_announced_only_while_a_worker_waits(
    app_conninfo: str, admin: psycopg.Connection[Any], admin_conninfo: str, flavour: Flavour
) -> None:
    driver = Driver(admin)
    with psycopg.connect(admin_conninfo, autocommit=True) as listener:
        listener.execute("LISTEN tenure_task")
        driver.task_enqueue("ping")
        driver.task_enqueue("pong")
        assert list(listener.notifies(timeout=0.5)) == [], "no worker waits: nothing is announced"
        with flavour(
            TaskWorker, app_conninfo, on(flavour, {"ping": complete}), lease=5, poll_interval=60
        ) as worker:
            assert wait_until(lambda: worker.stats.completed == 1, timeout=30), "found by its first poll"
            waiting = "SELECT kinds FROM tenure.task_waiter WHERE owner = %s AND until > now()"
            assert admin.execute(waiting, (worker.instance_id,)).fetchall() == [(["ping"],)]
            driver.task_enqueue("pong")
            driver.task_enqueue("ping")
            payloads = [n.payload for n in listener.notifies(timeout=10, stop_after=1)]
            assert payloads == ["ping"], "announced: the kind the idle worker waits for, not the other"
            assert wait_until(lambda: worker.stats.completed == 2, timeout=30)


def test_shutdown_releases_tasks_in_flight(
    app_conninfo: str, admin: psycopg.Connection[Any], flavour: Flavour
) -> None:
    driver = Driver(admin)
    started, finish = threading.Event(), threading.Event()

    def stuck(task: Task) -> Complete:
        started.set()
        finish.wait(20)
        return Complete()

    (enqueued,) = driver.task_enqueue_many([{"kind": "stuck"}])
    worker = flavour(
        TaskWorker,
        app_conninfo,
        on(flavour, {"stuck": stuck}),
        lease=30,
        poll_interval=0.1,
        shutdown_grace=0.2,
    )
    with worker:
        assert started.wait(10)
    finish.set()
    row = driver.task(enqueued.id)
    assert row is not None and row.owner is None and row.due, "released: due at once for another instance"
    assert row.attempts == 0, "a release on shutdown is not a failed attempt"


def test_processor_registry_and_validation(app_conninfo: str, flavour: Flavour) -> None:
    with pytest.raises(InvalidArgument):
        flavour(TaskWorker, app_conninfo, {}, lease=5)
    processors = on(flavour, {"a": complete, ("a", "x"): complete, ("b", "y"): complete})
    worker = flavour(TaskWorker, app_conninfo, processors, lease=5)
    assert worker.kinds == ["a", "b"]
    assert worker.processor_for("b", "z") is None and worker.processor_for("a", "z") is processors["a"]


def test_fail_outcome_with_retry_delay(
    app_conninfo: str, admin: psycopg.Connection[Any], flavour: Flavour
) -> None:
    driver = Driver(admin)
    driver.task_enqueue("later")
    with flavour(
        TaskWorker,
        app_conninfo,
        on(flavour, {"later": lambda t: Fail("busy", retry_delay=300)}),
        lease=5,
        poll_interval=0.1,
    ) as w:
        assert wait_until(lambda: w.stats.failed == 1)
    (row,) = driver.tasks(kind="later")
    assert row.status == "pending" and not row.due and row.attempts == 1 and row.last_error == "busy"


@pytest.mark.parametrize("by", ["key", "id"])
def test_an_idempotent_enqueue_racing_another_returns_the_winner(connect: Any, by: str) -> None:
    first, second = connect(), connect()
    task_id = uuid.uuid4()
    options: dict[str, Any] = {"idempotency_key": "race-1"} if by == "key" else {"id": task_id}
    answers: list[Any] = []
    with first.transaction():
        won = Driver(first).task_enqueue("race", **options)
        racer = threading.Thread(
            target=lambda: answers.append(Driver(second).task_enqueue("race", **options))
        )
        racer.start()
        time.sleep(0.3)  # the racer now waits on our uncommitted row
    racer.join(10)
    assert won.created and len(answers) == 1
    assert answers[0].id == won.id and not answers[0].created


def test_the_worker_batches_outcomes_and_leases_into_round_trips(
    app_conninfo: str, admin: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch, flavour: Flavour
) -> None:
    """Outcomes that finished meanwhile ride in one task_cycle call with the next leases; every
    task is done exactly once, in one epoch, and each call's outcomes are applied or refused."""
    driver = Driver(admin)
    driver.task_enqueue_many([{"kind": "bulk", "data": {"n": n}} for n in range(200)])
    calls: list[tuple[int, int]] = []  # (outcomes reported, leases asked for) per call
    real_cycle = Operations.task_cycle.body

    def counting_cycle(self: Operations, owner: uuid.UUID, **kwargs: Any) -> Any:
        calls.append((len(kwargs.get("outcomes", ())), kwargs["limit"]))
        return real_cycle(self, owner, **kwargs)

    # Both workers compose the operation (OPS.task_cycle) into their round trips.
    monkeypatch.setattr(Operations, "task_cycle", counting_cycle)
    with flavour(
        TaskWorker, app_conninfo, on(flavour, {"bulk": complete}), concurrency=8, lease=5, poll_interval=0.1
    ) as worker:
        assert wait_until(lambda: statuses(driver, "bulk") == {"done": 200})
    assert worker.stats.completed == 200 and worker.stats.discarded == 0
    reported = [outcomes for outcomes, limit in calls if outcomes]
    # at least once each: a round trip cut or rolled back under load reports its outcomes again
    assert sum(reported) >= 200
    assert len(reported) < 200 and max(reported) > 1, f"outcomes were not batched: {reported}"
    assert all(limit <= 8 for _, limit in calls), "never more leases than free slots"
    epochs = admin.execute(
        "SELECT count(*), max(l.epoch) FROM tenure.task_lease_log l JOIN tenure.task t ON t.id = l.task_id "
        "WHERE t.kind = 'bulk'"
    ).fetchone()
    assert epochs == (200, 1), "one lease per task"


def test_a_refused_outcome_is_discarded_and_the_rest_of_its_round_trip_applies(
    app_conninfo: str, admin: psycopg.Connection[Any], flavour: Flavour
) -> None:
    driver = Driver(admin)
    (taken,) = driver.task_enqueue_many([{"kind": "contested"}])
    driver.task_enqueue_many([{"kind": "contested"} for _ in range(5)])
    other = uuid.uuid4()
    release = threading.Event()

    def work(task: Task) -> Complete:
        if task.id == taken.id:
            driver_b = Driver(admin)
            driver_b.task_eject(task.id, other, lease=60)  # another instance takes it over
            release.set()
        else:
            release.wait(10)
        return Complete()

    with flavour(
        TaskWorker, app_conninfo, on(flavour, {"contested": work}), concurrency=6, lease=5, poll_interval=0.1
    ) as worker:
        assert wait_until(lambda: worker.stats.completed == 5 and worker.stats.discarded == 1)
    assert worker.stats.lost == 1
    row = driver.task(taken.id)
    assert row is not None and (row.status, row.owner, row.epoch) == ("pending", other, 2)
    assert statuses(driver, "contested") == {"done": 5, "pending": 1}


def test_a_bad_outcome_fails_its_own_task_only(
    app_conninfo: str, admin: psycopg.Connection[Any], flavour: Flavour
) -> None:
    """An outcome the round trip could not carry (a blank state, data that is not JSON) fails
    in the processor that made it; the outcomes of the other tasks still apply."""
    driver = Driver(admin)
    tasks = driver.task_enqueue_many([{"kind": "odd", "data": {"n": n}} for n in range(6)])

    def work(task: Task) -> Any:
        if task.data["n"] == 0:
            return Complete(state=" ")
        if task.data["n"] == 1:
            return Complete(data={"not json": {1, 2}})
        return Complete()

    with flavour(
        TaskWorker, app_conninfo, on(flavour, {"odd": work}), concurrency=6, lease=5, poll_interval=0.1
    ) as worker:
        assert wait_until(lambda: worker.stats.completed == 4 and worker.stats.failed >= 2)
    errors = [driver.task(tasks[n].id).last_error or "" for n in (0, 1)]  # type: ignore[union-attr]
    assert errors[0].startswith("InvalidArgument: Complete: the state must be"), errors
    assert errors[1].startswith("TypeError: Object of type set"), errors


# -- the async worker alone: what only asyncio has ------------------------------------------


def test_the_async_worker_refuses_a_plain_function(app_conninfo: str) -> None:
    def blocking(task: Task) -> Complete:
        return Complete()

    async def fine(task: Task) -> Complete:
        return Complete()

    with pytest.raises(InvalidConfiguration, match=r"blocking for 'b'.*not a coroutine function"):
        AsyncTaskWorker(app_conninfo, {"a": fine, "b": blocking}, lease=5)  # type: ignore[dict-item]


def test_async_writes_commit_with_their_step_and_a_lost_lease_cancels_the_processor(
    app_conninfo: str, admin: psycopg.Connection[Any]
) -> None:
    """Async writes land in the transition's transaction (once); a failing write fails its step
    with nothing written; a processor whose lease is lost is cancelled and its outcome dropped."""
    driver = Driver(admin)
    admin.execute("CREATE TABLE effects (task uuid, step text)")
    admin.execute("GRANT INSERT ON effects TO tenure_demo_app")
    (good,) = driver.task_enqueue_many([{"kind": "write"}])
    (bad,) = driver.task_enqueue_many([{"kind": "write", "data": {"bad": True}}])
    (slow,) = driver.task_enqueue_many([{"kind": "slow"}])
    cancelled = asyncio.Event()

    def effect(task: Task, step: str) -> Callable[[psycopg.AsyncConnection[Any]], Any]:
        async def write(db: psycopg.AsyncConnection[Any]) -> None:
            await db.execute("INSERT INTO effects VALUES (%s, %s)", (task.id, step))
            if task.data and task.data.get("bad"):
                raise ValueError("the application's write failed")

        return write

    async def write(task: Task) -> Complete:
        return Complete(writes=effect(task, "write"))

    async def sleepy(task: Task) -> Complete:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return Complete(writes=effect(task, "slow"))

    async def scenario() -> tuple[AsyncTaskWorker, Any]:
        async with AsyncTaskWorker(
            app_conninfo, {"write": write, "slow": sleepy}, concurrency=3, lease=0.9, poll_interval=0.1
        ) as worker:
            while worker.stats.completed < 1 or worker.stats.failed < 1 or worker.in_flight() < 1:
                await asyncio.sleep(0.02)
            taken = driver.task_eject(slow.id, uuid.uuid4(), lease=60)
            await asyncio.wait_for(cancelled.wait(), 10)
            while worker.stats.discarded < 1:
                await asyncio.sleep(0.02)
        return worker, taken

    worker, taken = asyncio.run(scenario())
    assert worker.stats.lost == 1 and worker.stats.completed == 1
    assert admin.execute("SELECT task, step FROM effects").fetchall() == [(good.id, "write")]
    failed = driver.task(bad.id)
    assert failed is not None and failed.last_error == "ValueError: the application's write failed"
    row = driver.task(slow.id)
    assert row is not None and row.status == "pending" and row.epoch == taken.epoch


def test_cancelling_the_enclosing_task_releases_like_leaving_the_block(
    app_conninfo: str, admin: psycopg.Connection[Any]
) -> None:
    driver = Driver(admin)
    (enqueued,) = driver.task_enqueue_many([{"kind": "stuck"}])
    started = asyncio.Event()

    async def stuck(task: Task) -> Complete:
        started.set()
        await asyncio.sleep(60)
        return Complete()

    async def service() -> None:
        async with AsyncTaskWorker(
            app_conninfo, {"stuck": stuck}, lease=30, poll_interval=0.1, shutdown_grace=0.2
        ):
            await asyncio.sleep(3600)

    async def scenario() -> None:
        running = asyncio.create_task(service())
        await asyncio.wait_for(started.wait(), 10)
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running

    asyncio.run(scenario())
    row = driver.task(enqueued.id)
    assert row is not None and row.owner is None and row.due, "released: due at once for another instance"
    assert row.attempts == 0, "a release on shutdown is not a failed attempt"


def test_the_async_worker_cancels_a_processor_at_the_end_of_its_safe_window(
    app_conninfo: str, admin: psycopg.Connection[Any]
) -> None:
    """No extension within the safe window (here: the extender never runs): the lease watchdog
    loses the task and cancels its processor then; the task comes back after its lease."""
    driver = Driver(admin)
    (enqueued,) = driver.task_enqueue_many([{"kind": "long"}])
    cancelled = asyncio.Event()

    async def long(task: Task) -> Complete:
        if task.epoch == 1:
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                cancelled.set()
                raise
        return Complete(state="second time")

    async def scenario() -> AsyncTaskWorker:
        worker = AsyncTaskWorker(app_conninfo, {"long": long}, concurrency=1, lease=0.9, poll_interval=0.1)
        worker.extend_every = 3600.0  # no extension: the safe window runs out
        async with worker:
            await asyncio.wait_for(cancelled.wait(), 10)
            while worker.stats.completed < 1:
                await asyncio.sleep(0.02)
        return worker

    worker = asyncio.run(scenario())
    assert worker.stats.lost == 1 and worker.stats.discarded == 1 and worker.stats.completed == 1
    row = driver.task(enqueued.id)
    assert row is not None and (row.status, row.state, row.epoch) == ("done", "second time", 2)


# -- task controls: cancel, and a rate-limited kind's wait -------------------------------------


def test_a_cancelled_task_is_abandoned_and_its_outcome_never_reported(
    app_conninfo: str, admin: psycopg.Connection[Any], flavour: Flavour, caplog: pytest.LogCaptureFixture
) -> None:
    """task_cancel ends the holder's epoch: the worker learns at its next extension, lets the
    task go (the threaded one abandons its processor, the async one cancels it), discards what
    it returns, and says so; the task stays cancelled and its writes never land."""
    driver = Driver(admin)
    admin.execute("CREATE TABLE effects (task uuid)")
    admin.execute("GRANT INSERT ON effects TO tenure_demo_app")
    began: list[uuid.UUID] = []
    lost_seen = threading.Event()

    def hold(task: Task) -> Complete:
        began.append(task.id)
        if task.lost.wait(20):
            lost_seen.set()
        return Complete(writes=lambda db: db.execute("INSERT INTO effects VALUES (%s)", (task.id,)))

    (enqueued,) = driver.task_enqueue_many([{"kind": "held"}])
    (other,) = driver.task_enqueue_many([{"kind": "held", "delay": 0.5}])
    caplog.set_level("WARNING", logger="tenure.runtime.tasks")
    with flavour(
        TaskWorker, app_conninfo, on(flavour, {"held": hold}), concurrency=1, lease=0.9, poll_interval=0.1
    ) as worker:
        assert wait_until(lambda: began == [enqueued.id])
        assert driver.task_cancel(enqueued.id) is True
        assert lost_seen.wait(10), "the worker learned of the cancel at its next extension"
        assert wait_until(lambda: worker.stats.discarded == 1)
        assert wait_until(lambda: began == [enqueued.id, other.id]), "its slot went to the next task"
        assert driver.task_cancel(other.id) is True
        assert wait_until(lambda: worker.stats.discarded == 2)
    assert (worker.stats.cancelled, worker.stats.lost, worker.stats.completed) == (2, 0, 0)
    assert admin.execute("SELECT count(*) FROM effects").fetchone() == (0,), "its writes never landed"
    for task_id in (enqueued.id, other.id):
        row = driver.task(task_id)
        assert row is not None and (row.status, row.owner) == ("cancelled", None)
        said = [r.getMessage() for r in caplog.records if str(task_id) in r.getMessage()]
        assert any("was cancelled while this worker held it" in message for message in said), said
        assert any("the task was cancelled before the outcome was recorded" in message for message in said), (
            said
        )


def test_the_async_worker_cancels_the_processor_of_a_cancelled_task(
    app_conninfo: str, admin: psycopg.Connection[Any]
) -> None:
    driver = Driver(admin)
    (enqueued,) = driver.task_enqueue_many([{"kind": "long"}])
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def long(task: Task) -> Complete:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return Complete()

    async def scenario() -> AsyncTaskWorker:
        async with AsyncTaskWorker(
            app_conninfo, {"long": long}, concurrency=1, lease=0.9, poll_interval=0.1
        ) as worker:
            await asyncio.wait_for(started.wait(), 10)
            assert await asyncio.to_thread(driver.task_cancel, enqueued.id) is True
            await asyncio.wait_for(cancelled.wait(), 10)
            while worker.in_flight():
                await asyncio.sleep(0.02)
        return worker

    worker = asyncio.run(scenario())
    assert (worker.stats.cancelled, worker.stats.lost, worker.stats.discarded) == (1, 0, 1)
    row = driver.task(enqueued.id)
    assert row is not None and row.status == "cancelled"


def test_a_rate_limited_worker_sleeps_until_capacity_returns(
    app_conninfo: str, admin: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch, flavour: Flavour
) -> None:
    """One lease per 0.4 s: a worker with free slots is told (a 'throttled' row) when the next
    lease may go through, sleeps until then and takes the next task. Its poll interval is a
    minute, so without that wake-up the tasks would wait for it; and it does not poll in between:
    a handful of round trips per task, not a busy loop."""
    driver = Driver(admin)
    driver.task_kind_set("paced", rate=1, rate_period=0.4)
    tasks = 4
    driver.task_enqueue_many([{"kind": "paced", "data": {"n": n}} for n in range(tasks)])
    asked: list[int] = []  # the leases asked for, per round trip that asked for any
    real_cycle = Operations.task_cycle.body

    def counting_cycle(self: Operations, owner: uuid.UUID, **kwargs: Any) -> Any:
        if kwargs["limit"]:
            asked.append(kwargs["limit"])
        return real_cycle(self, owner, **kwargs)

    monkeypatch.setattr(Operations, "task_cycle", counting_cycle)
    with flavour(
        TaskWorker, app_conninfo, on(flavour, {"paced": complete}), concurrency=4, lease=5, poll_interval=60
    ) as worker:
        assert wait_until(lambda: statuses(driver, "paced") == {"done": tasks}, timeout=30)
    assert worker.stats.completed == tasks
    leased_at = [
        row[0]
        for row in admin.execute(
            "SELECT l.leased_at FROM tenure.task_lease_log l JOIN tenure.task t ON t.id = l.task_id "
            "WHERE t.kind = 'paced' ORDER BY l.leased_at"
        )
    ]
    gaps = [(later - earlier).total_seconds() for earlier, later in itertools.pairwise(leased_at)]
    assert len(leased_at) == tasks and min(gaps) >= 0.4, f"the rate limit held: {gaps}"
    assert len(asked) <= 3 * tasks + 2, f"{len(asked)} round trips asked for leases: it polled meanwhile"


def throttled_row(until: datetime) -> TaskCycled:
    return TaskCycled(
        id=None,  # a throttled row names a kind, not a task
        epoch=None,
        outcome="throttled",
        refused=None,
        kind="paced",
        state=None,
        data=None,
        attempts=None,
        next_action=until,
    )


def test_a_throttled_worker_waits_by_the_servers_clock_and_never_in_a_busy_loop() -> None:
    """The moment a 'throttled' row names is the server's: it is mapped through the last lease
    (which ends a lease after the server's now), not the worker's wall clock; without one, a
    moment that seems past is waited for at least 10 ms, doubling with each such answer."""
    worker = TaskWorker("dbname=unused", {"paced": complete}, lease=5, poll_interval=1.0)
    server_now = datetime.now(UTC) - timedelta(seconds=30)  # the server's clock is 30 s behind
    for answers in range(1, 9):
        before = time.monotonic()
        worker._leased([throttled_row(server_now + timedelta(seconds=0.3))], 2, before)
        wait = worker._throttled_until - before
        floor = min(1.0, 0.01 * 2**answers)
        assert floor <= wait <= floor + (time.monotonic() - before), (answers, wait)
        assert worker._idle_wait(2, before, before + 60) == pytest.approx(wait)
    lease = TaskCycled(
        id=uuid.uuid4(),
        epoch=1,
        outcome="lease",
        refused=None,
        kind="paced",
        state="new",
        data={},
        attempts=0,
        next_action=server_now + timedelta(seconds=5),  # the lease ends 5 s after the server's now
    )
    before = time.monotonic()
    worker._leased([lease, throttled_row(server_now + timedelta(seconds=0.3))], 2, before)
    after = time.monotonic()
    assert before + 0.3 <= worker._throttled_until <= after + 0.3, "0.3 s after the server's now"
    assert worker._lease_limit(1, before, before + 60) == 0, "nothing asked for until then"
    assert worker._lease_limit(1, after + 0.3, before + 60) == 1, "asked for once the rate lets it through"
    worker._leased([], 1, after)  # an answer without a throttled row: no more waiting for it
    assert worker._throttled_until == math.inf


def test_a_round_trip_rolled_back_by_a_deadlock_is_tried_again_at_once(
    app_conninfo: str, admin: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch, flavour: Flavour
) -> None:
    """The server broke a deadlock by rolling back a round trip that carried outcomes: nothing
    of it took effect, so it is sent again at once, not left to the tasks' leases (which would
    run the tasks again, as failed attempts)."""
    driver = Driver(admin)
    driver.task_enqueue_many([{"kind": "locked", "data": {"n": n}} for n in range(5)])
    real_cycle = Operations.task_cycle.body
    refused: list[int] = []

    def deadlocking_cycle(self: Operations, owner: uuid.UUID, **kwargs: Any) -> Any:
        if kwargs.get("outcomes") and not refused:
            refused.append(len(kwargs["outcomes"]))
            raise psycopg.errors.DeadlockDetected("deadlock detected")
        return real_cycle(self, owner, **kwargs)

    monkeypatch.setattr(Operations, "task_cycle", deadlocking_cycle)
    with flavour(
        TaskWorker,
        app_conninfo,
        on(flavour, {"locked": complete}),
        concurrency=5,
        lease=30,
        poll_interval=0.1,
    ) as worker:
        assert wait_until(lambda: statuses(driver, "locked") == {"done": 5}, timeout=20)
    assert refused and worker.stats.completed == 5 and worker.stats.discarded == 0
    epochs = admin.execute(
        "SELECT max(t.epoch), max(t.attempts) FROM tenure.task t WHERE t.kind = 'locked'"
    ).fetchone()
    assert epochs == (1, 0), "each task done in its first lease, no attempt failed"


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def test_tune_gc_freezes_what_exists_and_widens_the_young_generation_yet_cycles_are_still_collected() -> None:
    before = gc.get_threshold()
    try:
        tune_gc(1024)
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold() == (GC_YOUNG_PER_SLOT * 1024, before[1], before[2])
        gc.set_threshold(*before)
        tune_gc(1)  # never below Python's own threshold
        assert gc.get_threshold() == before
        cycle = _Cycle()
        gone = threading.Event()
        weakref.finalize(cycle, gone.set)
        del cycle
        gc.collect()
        assert gone.is_set()
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
