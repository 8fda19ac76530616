"""The submission queue's runtime: a queuer with the seed's ``next()``, a pool of
submitters calling the application's ``submit``, and a monitor calling its
``status`` for pending batches. An instance serves only the keys it holds claims on
(a :class:`~tenure.runtime.claims.Claimer` runs inside).

Per key, batches reach ``submit`` in sequence order even with many submitters: a
submitter holding a later batch of a key waits until the earlier ones selected
with it were submitted. Just before submitting, a submitter checks that the key's
claim is still held in the epoch the batch was selected under, locally and in the
database (submitters checking at the same time share one call); otherwise the
batch is left pending for the key's next holder, whose monitor will learn what
became of it.
"""

from __future__ import annotations

import bisect
import logging
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable
from types import TracebackType
from typing import Any
from uuid import UUID

import psycopg
from psycopg_pool import ConnectionPool

from tenure.connect import (
    check_start,
    connection_options,
    instance_name,
    listen,
    watch_commits,
)
from tenure.driver import BatchGrant, Driver, Resolution
from tenure.errors import ClaimLost, InvalidConfiguration, InvalidTransition
from tenure.metrics import Metrics
from tenure.runtime.claims import Claimer, Keys

log = logging.getLogger(__name__)

MONITOR_FIRST_RETRY = 0.005  # seconds: the first re-ask after a submission, doubling up to the poll interval

Submit = Callable[[BatchGrant], None]
Status = Callable[[BatchGrant], str | None]  # 'committed', 'invalid', 'unknown', or None: still pending


class Queuer:
    """The seed's queuer: ``next()`` returns one batch of a held key at a time, or None."""

    def __init__(
        self,
        pool: ConnectionPool[Any],
        claimer: Claimer,
        *,
        depth: int,
        limit: int,
        idle_interval: float,
        on_selected: Callable[[list[BatchGrant]], None] = lambda batches: None,
    ) -> None:
        self.pool = pool
        self.on_selected = on_selected
        self.claimer = claimer
        self.depth = depth
        self.limit = limit
        self.idle_interval = idle_interval
        self._buffer: deque[BatchGrant] = deque()
        self._lock = threading.Lock()
        self._idle_since: float | None = None  # when a selection last found nothing

    def poke(self) -> None:
        """Something may have become eligible (a batch resolved): select at the next call."""
        with self._lock:
            self._idle_since = None

    def settle(self) -> None:
        """Return once every selection that committed before this call was handed to
        ``on_selected`` (a selection holds the lock from its call until then)."""
        with self._lock:
            pass

    def next(self) -> BatchGrant | None:
        with self._lock:
            idle = self._idle_since is not None and time.monotonic() - self._idle_since < self.idle_interval
            if not self._buffer and not idle and self.claimer.held():
                with self.pool.connection() as connection:
                    selected = Driver(connection).batch_select(
                        self.claimer.keyspace, self.claimer.instance_id, limit=self.limit, depth=self.depth
                    )
                self.on_selected(selected)
                self._buffer.extend(selected)
                self._idle_since = None if self._buffer else time.monotonic()
            return self._buffer.popleft() if self._buffer else None


class HeldCheck:
    """The submitters' last check, in the database, that a key's claim is still held in
    the epoch a batch was selected under. Concurrent checks share one ``batch_check`` call,
    as a group commit does: a check asked while a call is in flight waits for the next
    call, so every batch is still checked by a call sent after its submitter asked, and is
    submitted only if that call said the claim was held."""

    def __init__(self, pool: ConnectionPool[Any], keyspace: str, instance_id: UUID) -> None:
        self.pool = pool
        self.keyspace = keyspace
        self.instance_id = instance_id
        self._changed = threading.Condition()
        self._asked: list[list[Any]] = []  # [key, epoch, answer or None]
        self._calling = False
        self.calls = 0

    def held(self, key: str, epoch: int) -> bool:
        ask: list[Any] = [key, epoch, None]
        with self._changed:
            self._asked.append(ask)
            while ask[2] is None and self._calling:
                self._changed.wait()
            if ask[2] is not None:
                return bool(ask[2])
            self._calling = True  # this thread asks for every check waiting now
            asked, self._asked = self._asked, []
            self.calls += 1
        answers: list[bool] = []
        try:
            with self.pool.connection() as connection:
                answers = Driver(connection).batch_check(
                    self.keyspace, self.instance_id, [(a[0], a[1]) for a in asked]
                )
        except psycopg.Error as error:
            log.warning("%s: checking claims before submitting failed: %s", self.keyspace, error)
        finally:
            with self._changed:
                for n, a in enumerate(asked):
                    a[2] = answers[n] if n < len(answers) else False
                self._calling = False
                self._changed.notify_all()
        return bool(ask[2])


class SubmissionPool:
    """Submitters and a monitor for one queue (claims keyspace). Use as a context manager."""

    def __init__(
        self,
        conninfo: str,
        keyspace: str,
        *,
        submit: Submit,
        status: Status,
        submitters: int = 8,
        depth: int = 1,
        cycle: float = 1.0,
        expiry: float = 3.0,
        poll_interval: float = 0.2,
        listen: bool = True,
        name: str | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        if submitters < 1 or depth < 1:
            raise InvalidConfiguration(f"need at least one submitter and depth 1: {submitters}, {depth}")
        self.keyspace = keyspace
        self.submit = submit
        self.status = status
        self.submitters = submitters
        self.poll_interval = poll_interval
        self.listen = listen
        self.conninfo = conninfo
        self.metrics = metrics or Metrics()
        self.claimer = Claimer(
            conninfo,
            keyspace,
            cycle=cycle,
            expiry=expiry,
            name=name,
            on_lost=self._lost,
            metrics=self.metrics,
        )
        self.pool: ConnectionPool[Any] = ConnectionPool(
            conninfo,
            min_size=1,
            max_size=submitters + 2,
            kwargs=connection_options(
                application_name=f"tenure queue {instance_name(name)}", deadline=expiry
            ),
            configure=watch_commits,
            timeout=expiry,
            open=False,
        )
        # Idle submitters ask the database at most once per poll interval between them.
        self.queuer = Queuer(
            self.pool,
            self.claimer,
            depth=depth,
            limit=submitters,
            idle_interval=poll_interval,
            on_selected=self._selected,
        )
        self._order: dict[str, list[int]] = defaultdict(
            list
        )  # per key, sorted: selected seqs not yet submitted
        self._order_changed = threading.Condition()
        # Selected (so pending in the database) but not yet handed to submit(): the
        # monitor must not ask the external system about these.
        self._unsubmitted: set[UUID] = set()
        self._check = HeldCheck(self.pool, keyspace, self.claimer.instance_id)
        self._stopping = threading.Event()
        self._wake = threading.Event()  # submitters: something may have become eligible
        self._resolve_soon = threading.Event()  # monitor: something was submitted
        self._threads: list[threading.Thread] = []
        self.submitted = 0
        self.skipped = 0

    def start(self) -> SubmissionPool:
        check_start(
            self.conninfo,
            application_name="tenure queue probe",
            listener="a queue that listens for new batches" if self.listen else None,
        )
        self.pool.open(wait=True, timeout=30)
        self.claimer.start()
        targets = [self._submitter] * self.submitters + [self._monitor]
        if self.listen:
            targets.append(self._listen)
        for n, target in enumerate(targets):
            thread = threading.Thread(target=target, name=f"tenure-queue-{n}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        self._resolve_soon.set()
        with self._order_changed:
            self._order_changed.notify_all()
        for thread in self._threads:
            thread.join()
        self._threads.clear()
        self.claimer.stop()
        self.pool.close()

    def __enter__(self) -> SubmissionPool:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- submitters ------------------------------------------------------------------

    def _lost(self, keys: Keys) -> None:
        with self._order_changed:
            for key in keys:
                self._order.pop(key, None)
            self._order_changed.notify_all()

    def _submitter(self) -> None:
        while not self._stopping.is_set():
            try:
                batch = self.queuer.next()
            except psycopg.Error as error:
                log.warning("%s: selecting batches failed: %s", self.keyspace, error)
                batch = None
            if batch is None:
                self._wake.wait(self.poll_interval)
                self._wake.clear()
                continue
            try:
                self._submit_in_order(batch)
            finally:
                with self._order_changed:
                    queue = self._order.get(batch.key)
                    if queue is not None and batch.seq in queue:
                        queue.remove(batch.seq)
                    self._unsubmitted.discard(batch.id)
                    self._order_changed.notify_all()

    def _selected(self, batches: list[BatchGrant]) -> None:
        # Every batch of a selection is registered before any is handed out, so a later
        # batch of a key cannot overtake an earlier one.
        with self._order_changed:
            for batch in batches:
                # sorted: a batch the ledger lost comes back before later ones still waiting
                bisect.insort(self._order[batch.key], batch.seq)
                self._unsubmitted.add(batch.id)
            self.metrics.queue_unsubmitted.labels(self.keyspace).set(len(self._unsubmitted))
        self.metrics.batches_selected.labels(self.keyspace).inc(len(batches))

    def _submit_in_order(self, batch: BatchGrant) -> None:
        with self._order_changed:
            while not self._stopping.is_set():
                queue = self._order.get(batch.key)
                if queue is None or batch.seq not in queue:
                    return  # the key was lost meanwhile
                if queue[0] == batch.seq:
                    break
                self._order_changed.wait(0.5)
            else:
                return
        if self.claimer.epoch(batch.key) != batch.claim_epoch or not self._still_held(batch):
            with self._order_changed:
                self.skipped += 1
            self.metrics.batches_skipped.labels(self.keyspace).inc()
            return
        try:
            self.submit(batch)
        except Exception:
            log.exception(
                "%s: submitting batch %s of %s failed; the monitor will ask",
                self.keyspace,
                batch.seq,
                batch.key,
            )
        # Only now may the monitor ask about it: asked before it reached the external
        # system, it would read as lost (unknown) and go again.
        with self._order_changed:
            self._unsubmitted.discard(batch.id)
            self.submitted += 1
            self.metrics.queue_unsubmitted.labels(self.keyspace).set(len(self._unsubmitted))
        self.metrics.batches_submitted.labels(self.keyspace).inc()
        self._resolve_soon.set()

    def _still_held(self, batch: BatchGrant) -> bool:
        return self._check.held(batch.key, batch.claim_epoch)

    # -- monitor ------------------------------------------------------------------------

    def _monitor(self) -> None:
        """Asks the external system about pending batches right after submissions, again
        soon (backing off up to the poll interval) while some are still in flight, and
        every poll interval; resolves what it learned in one call."""
        delay = self.poll_interval
        while not self._stopping.is_set():
            if self._resolve_soon.wait(delay):
                delay = MONITOR_FIRST_RETRY
            self._resolve_soon.clear()
            if self._stopping.is_set():
                return
            try:
                resolved, in_flight = self._resolve_pending()
                if resolved:
                    self.queuer.poke()
                    self._wake.set()
            except psycopg.Error as error:
                log.warning("%s: monitoring failed: %s", self.keyspace, error)
                in_flight = False
            except Exception:
                log.exception("%s: the status function failed", self.keyspace)
                in_flight = False
            delay = min(delay * 2, self.poll_interval) if in_flight else self.poll_interval

    def _resolve_pending(self) -> tuple[int, bool]:
        """Resolves what the external system knows; returns how many, and whether any
        submitted batch is still in flight."""
        instance = self.claimer.instance_id
        with self.pool.connection() as connection:
            driver = Driver(connection)
            pending = driver.batch_pending(self.keyspace, instance)
            self.metrics.queue_pending.labels(self.keyspace).set(len(pending))
            # A batch selected just before batch_pending read may not be registered as
            # unsubmitted yet: asked about, it would read as lost (unknown) and go again.
            self.queuer.settle()
            with self._order_changed:
                submitted = [batch for batch in pending if batch.id not in self._unsubmitted]
            resolutions = []
            for batch in submitted:
                outcome = self.status(batch)
                if outcome is not None:
                    resolutions.append(Resolution(batch.id, batch.claim_epoch, outcome))
            in_flight = len(resolutions) < len(submitted)
            if not resolutions:
                return 0, in_flight
            try:
                driver.batch_resolve_many(self.keyspace, instance, resolutions)
                done = resolutions
            except (ClaimLost, InvalidTransition) as error:
                # A key changed hands meanwhile: resolve, one by one, what is still ours.
                log.info("%s: resolving one by one: %s", self.keyspace, error.message)
                done = []
                for r in resolutions:
                    try:
                        driver.batch_resolve(self.keyspace, instance, r.id, r.epoch, r.status, r.detail)
                        done.append(r)
                    except (ClaimLost, InvalidTransition) as error:
                        log.info("%s: could not resolve %s: %s", self.keyspace, r.id, error.message)
            for r in done:
                self.metrics.batches_resolved.labels(self.keyspace, r.status).inc()
            return len(done), in_flight

    # -- notifications ----------------------------------------------------------------

    def _listen(self) -> None:
        """Wake idle submitters when a batch of this queue is enqueued or resolved."""

        def on_notify(payload: str | None) -> None:
            if payload is None or payload == self.keyspace:
                self.queuer.poke()
                self._wake.set()

        listen(
            self.conninfo,
            "tenure_batch",
            name=f"{self.keyspace} {self.claimer.name}",
            stopping=self._stopping,
            retry=self.poll_interval,
            on_notify=on_notify,
        )
