"""Prometheus metrics of tenure's runtimes (prometheus_client), in a registry of their own.

Every runtime (Elector, Claimer, TaskWorker, SubmissionPool, ReplicaManager, Maintainer) takes a
``metrics=`` argument; pass one :class:`Metrics` to all the runtimes of a process to
serve them together, or let each make its own. :class:`MetricsServer` serves a
registry at ``/metrics``; ``tenure elect --http`` and ``tenure replica run --http``
serve it beside their health endpoints.

The database gauges (tasks per kind and status, each kind's settings against its use;
each table's rows and dead rows against autovacuum's count) are facts of the whole
database, not of one instance: the elected maintainer sets them
(``Maintainer(gauges_every=...)``), so they come from one place; a standby has none.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler
from types import TracebackType
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from tenure.driver import TableVacuum, TaskKind, TaskStatus

# Every status a task can have: each is exported for every kind, 0 included, so that a
# status that empties reads 0 rather than vanishing.
TASK_STATUSES = ("pending", "waiting", "done", "dead", "cancelled")

# Renewals are round trips of a few milliseconds, and slow ones matter up to the safe window.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class Metrics:
    """The metric families; label values name the service type, keyspace, kind or lock."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        # every renewal loop: heartbeat, claims, replica lock
        self.cycle_seconds = Histogram(
            "tenure_cycle_duration_seconds",
            "Time of one renewal cycle (heartbeat, claim renew + take, replica ping), sent to answered",
            ["runtime", "name"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.cycle_failures = Counter(
            "tenure_cycle_failures", "Renewal cycles that raised", ["runtime", "name"], registry=r
        )
        # heartbeat election
        self.primary = Gauge(
            "tenure_primary", "1 while this instance is primary of the type", ["utype"], registry=r
        )
        self.term = Gauge(
            "tenure_term", "The term this instance is primary in, 0 when it is not", ["utype"], registry=r
        )
        self.elections = Counter(
            "tenure_elections", "Terms this instance was elected in", ["utype"], registry=r
        )
        self.demotions = Counter(
            "tenure_demotions", "Terms this instance stopped being primary in", ["utype"], registry=r
        )
        # claims
        self.claims_held = Gauge("tenure_claims_held", "Keys this instance holds", ["keyspace"], registry=r)
        self.claims_gained = Counter("tenure_claims_gained", "Keys gained", ["keyspace"], registry=r)
        self.claims_lost = Counter("tenure_claims_lost", "Keys lost or given up", ["keyspace"], registry=r)
        # tasks
        self.tasks_in_flight = Gauge("tenure_tasks_in_flight", "Tasks leased and being processed", registry=r)
        self.tasks_acquired = Counter("tenure_tasks_acquired", "Task leases acquired", ["kind"], registry=r)
        self.tasks_completed = Counter("tenure_tasks_completed", "Tasks completed", ["kind"], registry=r)
        self.tasks_failed = Counter("tenure_tasks_failed", "Task steps that failed", ["kind"], registry=r)
        self.tasks_cancelled = Counter(
            "tenure_tasks_cancelled", "Tasks cancelled while the worker held them", ["kind"], registry=r
        )
        self.task_leases_lost = Counter(
            "tenure_task_leases_lost", "Task leases lost before the step ended", ["kind"], registry=r
        )
        # tasks in the database, set by the elected maintainer (see task_gauges)
        self.tasks_by_status = Gauge(
            "tenure_tasks", "Tasks in the database by kind and status", ["kind", "status"], registry=r
        )
        self.tasks_due = Gauge("tenure_tasks_due", "Tasks due now, by kind", ["kind"], registry=r)
        self.task_kind_paused = Gauge(
            "tenure_task_kind_paused", "1 while the kind is paused, else 0", ["kind"], registry=r
        )
        self.task_kind_running = Gauge(
            "tenure_task_kind_running", "Leases of the kind that have not run out", ["kind"], registry=r
        )
        self.task_kind_max_running = Gauge(
            "tenure_task_kind_max_running",
            "The kind's limit of tasks leased at once (absent without one)",
            ["kind"],
            registry=r,
        )
        self.task_kind_max_running_per_key = Gauge(
            "tenure_task_kind_max_running_per_key",
            "The kind's limit of tasks leased at once per limit key (absent without one)",
            ["kind"],
            registry=r,
        )
        self.task_kind_rate = Gauge(
            "tenure_task_kind_rate",
            "The kind's rate limit: leases per rate period (absent without one)",
            ["kind"],
            registry=r,
        )
        self.task_kind_rate_period = Gauge(
            "tenure_task_kind_rate_period_seconds",
            "The window of the kind's rate limit (absent without one)",
            ["kind"],
            registry=r,
        )
        self.task_kind_rate_used = Gauge(
            "tenure_task_kind_rate_used",
            "Leases of the kind granted within the last rate period (absent without a rate limit)",
            ["kind"],
            registry=r,
        )
        # tenure's tables, set by the elected maintainer (see table_gauges)
        self.table_rows = Gauge(
            "tenure_table_rows", "Live rows of one of tenure's tables, as last counted", ["table"], registry=r
        )
        self.table_dead_rows = Gauge(
            "tenure_table_dead_rows",
            "Dead row versions of the table not yet vacuumed away",
            ["table"],
            registry=r,
        )
        self.table_autovacuum_at = Gauge(
            "tenure_table_autovacuum_at_rows",
            "Dead rows past which autovacuum visits the table (absent where autovacuum is off)",
            ["table"],
            registry=r,
        )
        self.table_last_vacuum = Gauge(
            "tenure_table_last_vacuum_timestamp_seconds",
            "When the table's last VACUUM ended (absent: none since the statistics were reset)",
            ["table"],
            registry=r,
        )
        self.table_bytes = Gauge(
            "tenure_table_bytes", "The table's size on disk with its indexes", ["table"], registry=r
        )
        self._database_gauge_labels: dict[Gauge, set[tuple[str, ...]]] = {}
        self._database_gauge_lock = threading.Lock()
        # submission queue
        self.batches_selected = Counter(
            "tenure_batches_selected", "Batches selected", ["keyspace"], registry=r
        )
        self.batches_submitted = Counter(
            "tenure_batches_submitted", "Batches handed to submit()", ["keyspace"], registry=r
        )
        self.batches_skipped = Counter(
            "tenure_batches_skipped",
            "Batches not submitted: their key changed hands",
            ["keyspace"],
            registry=r,
        )
        self.batches_resolved = Counter(
            "tenure_batches_resolved", "Batches resolved, by outcome", ["keyspace", "status"], registry=r
        )
        self.queue_pending = Gauge(
            "tenure_queue_pending_batches",
            "Pending batches of the keys this instance holds",
            ["keyspace"],
            registry=r,
        )
        self.queue_unsubmitted = Gauge(
            "tenure_queue_unsubmitted_batches",
            "Batches selected and not yet submitted",
            ["keyspace"],
            registry=r,
        )
        # replicas
        self.replica_active = Gauge(
            "tenure_replica_active",
            "1 while this replica is active (holds the lock)",
            ["lock_id"],
            registry=r,
        )
        self.replica_epoch = Gauge(
            "tenure_replica_epoch",
            "The lock epoch this replica is active in, 0 when passive",
            ["lock_id"],
            registry=r,
        )
        self.replica_activations = Counter(
            "tenure_replica_activations", "Times this replica became active", ["lock_id"], registry=r
        )

        # maintenance (tenure maintain)
        self.schedule_ticks = Counter(
            "tenure_schedule_ticks", "schedule_tick calls made while the elected maintainer", registry=r
        )
        self.schedule_tasks = Counter(
            "tenure_schedule_tasks_created",
            "Tasks schedule_tick created, by schedule",
            ["schedule"],
            registry=r,
        )
        self.rows_pruned = Counter(
            "tenure_rows_pruned", "History rows removed by retention, by history", ["history"], registry=r
        )
        self.maintain_failures = Counter(
            "tenure_maintain_failures", "Maintenance calls that failed, by job", ["job"], registry=r
        )

    def task_gauges(self, statuses: Iterable[TaskStatus], kinds: Iterable[TaskKind]) -> None:
        """Set the task gauges from rows of the views ``tenure.task_status`` and
        ``tenure.task_kinds``; a kind or limit that has gone since the last call loses its series."""
        values: dict[Gauge, dict[tuple[str, ...], float]] = {}
        for row in statuses:
            for status in TASK_STATUSES:
                _put(
                    values, self.tasks_by_status, (row.kind, status), row.tasks if row.status == status else 0
                )
            _put(values, self.tasks_due, (row.kind,), row.due)
        for kind in kinds:
            labels: tuple[str, ...] = (kind.kind,)
            _put(values, self.task_kind_paused, labels, 1 if kind.paused else 0)
            _put(values, self.task_kind_running, labels, kind.running)
            _put(values, self.task_kind_max_running, labels, kind.max_running)
            _put(values, self.task_kind_max_running_per_key, labels, kind.max_running_per_key)
            _put(values, self.task_kind_rate, labels, kind.rate)
            _put(values, self.task_kind_rate_period, labels, _rate_period_seconds(kind))
            _put(values, self.task_kind_rate_used, labels, kind.rate_used if kind.rate is not None else None)
        self._replace_series(self._task_gauges(), values)

    def table_gauges(self, tables: Iterable[TableVacuum]) -> None:
        """Set the table gauges from rows of the view ``tenure.table_vacuum``."""
        values: dict[Gauge, dict[tuple[str, ...], float]] = {}
        for table in tables:
            labels = (table.table_name,)
            _put(values, self.table_rows, labels, table.live_rows)
            _put(values, self.table_dead_rows, labels, table.dead_rows)
            _put(values, self.table_autovacuum_at, labels, table.autovacuum_at)
            _put(
                values,
                self.table_last_vacuum,
                labels,
                None if table.last_vacuum is None else table.last_vacuum.timestamp(),
            )
            _put(values, self.table_bytes, labels, table.total_bytes)
        self._replace_series(self._table_gauges(), values)

    def clear_database_gauges(self) -> None:
        """Remove every series of the task and table gauges (an instance that is no longer the
        maintainer)."""
        with self._database_gauge_lock:
            for gauge in self._task_gauges() + self._table_gauges():
                gauge.clear()
            self._database_gauge_labels.clear()

    def _replace_series(
        self, gauges: tuple[Gauge, ...], values: dict[Gauge, dict[tuple[str, ...], float]]
    ) -> None:
        """Set each of ``gauges`` to its series in ``values``; a series set before and absent now goes."""
        with self._database_gauge_lock:
            for gauge in gauges:
                now = values.get(gauge, {})
                for series, value in now.items():
                    gauge.labels(*series).set(value)
                for gone in self._database_gauge_labels.get(gauge, set()) - now.keys():
                    gauge.remove(*gone)
                self._database_gauge_labels[gauge] = set(now)

    def _task_gauges(self) -> tuple[Gauge, ...]:
        return (
            self.tasks_by_status,
            self.tasks_due,
            self.task_kind_paused,
            self.task_kind_running,
            self.task_kind_max_running,
            self.task_kind_max_running_per_key,
            self.task_kind_rate,
            self.task_kind_rate_period,
            self.task_kind_rate_used,
        )

    def _table_gauges(self) -> tuple[Gauge, ...]:
        return (
            self.table_rows,
            self.table_dead_rows,
            self.table_autovacuum_at,
            self.table_last_vacuum,
            self.table_bytes,
        )

    def exposition(self) -> tuple[bytes, str]:
        """The text format and its content type, for an HTTP handler of one's own."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


def _put(
    values: dict[Gauge, dict[tuple[str, ...], float]],
    gauge: Gauge,
    labels: tuple[str, ...],
    value: float | None,
) -> None:
    """Add ``value`` to the series ``labels`` of ``gauge`` (None: no series)."""
    if value is not None:
        series = values.setdefault(gauge, {})
        series[labels] = series.get(labels, 0.0) + value


def _rate_period_seconds(kind: TaskKind) -> float | None:
    return kind.rate_period.total_seconds() if kind.rate is not None and kind.rate_period else None


def send_metrics(request: BaseHTTPRequestHandler, metrics: Metrics) -> None:
    """Answer an HTTP GET /metrics from a handler of tenure's own health endpoints."""
    data, content_type = metrics.exposition()
    request.send_response(200)
    request.send_header("Content-Type", content_type)
    request.send_header("Content-Length", str(len(data)))
    request.end_headers()
    request.wfile.write(data)


class MetricsServer:
    """Serves a :class:`Metrics` registry at ``http://host:port/metrics`` on a background thread."""

    def __init__(self, metrics: Metrics, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.metrics = metrics
        self.host, self.port = host, port
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        assert self._server is not None, "start the server first"
        return f"http://{self.host}:{self._server.server_port}/metrics"

    def start(self) -> MetricsServer:
        self._server, self._thread = start_http_server(
            self.port, addr=self.host, registry=self.metrics.registry
        )
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> MetricsServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
