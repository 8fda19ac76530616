"""tenure: high availability for services that share one PostgreSQL database.

Everything an application needs is importable from here: the ``Driver`` (one
method per SQL function) with its row types and errors, and the runtimes that
schedule the calls (``Elector``, ``Claimer``, ``TaskWorker``, ``SubmissionPool``,
``ReplicaManager``, ``Maintainer``) with their HTTP endpoints, and the schedules
declared next to their processors (``schedule``, ``Schedules``, ``sync_schedules``).
"""

from tenure.connect import connect, connection_options
from tenure.driver import (
    BatchEnqueued,
    BatchGrant,
    BatchKey,
    BatchRow,
    ClaimGrant,
    ClaimInstance,
    ClaimRow,
    Driver,
    HeartbeatStatus,
    PrimaryEntry,
    ReplicaGrant,
    ReplicaHolder,
    Resolution,
    ScheduleInfo,
    ScheduleRow,
    ScheduleSlot,
    TableVacuum,
    TaskCycled,
    TaskDependency,
    TaskEnqueued,
    TaskKind,
    TaskLease,
    TaskRow,
    TaskStatus,
)
from tenure.errors import (
    ClaimLost,
    CommitNotConfirmed,
    FencingError,
    InvalidArgument,
    InvalidConfiguration,
    InvalidTransition,
    LeaseLost,
    NotFound,
    NotPrimary,
    TenureError,
)
from tenure.http.claims import ClaimsEndpoint
from tenure.http.primary import PrimaryEndpoint, PrimaryWatch, ask_primary
from tenure.http.replica import ReplicaServer, active_only
from tenure.metrics import Metrics, MetricsServer
from tenure.runtime.batches import SubmissionPool
from tenure.runtime.claims import Claimer, Keys
from tenure.runtime.heartbeat import ElectionTiming, Elector
from tenure.runtime.maintain import Maintainer, MaintainerStats, Retention
from tenure.runtime.replicas import ReplicaManager, ReplicaTiming
from tenure.runtime.schedules import Schedules, ScheduleSpec, schedule, sync_schedules
from tenure.runtime.shutdown import shutdown_signals, wait_for_shutdown
from tenure.runtime.tasks import (
    Complete,
    Fail,
    Next,
    Outcome,
    Processor,
    Release,
    Task,
    TaskWorker,
    WorkerStats,
    Writes,
)

__all__ = [
    "BatchEnqueued",
    "BatchGrant",
    "BatchKey",
    "BatchRow",
    "ClaimGrant",
    "ClaimInstance",
    "ClaimLost",
    "ClaimRow",
    "Claimer",
    "ClaimsEndpoint",
    "CommitNotConfirmed",
    "Complete",
    "Driver",
    "ElectionTiming",
    "Elector",
    "Fail",
    "FencingError",
    "HeartbeatStatus",
    "InvalidArgument",
    "InvalidConfiguration",
    "InvalidTransition",
    "Keys",
    "LeaseLost",
    "Maintainer",
    "MaintainerStats",
    "Metrics",
    "MetricsServer",
    "Next",
    "NotFound",
    "NotPrimary",
    "Outcome",
    "PrimaryEndpoint",
    "PrimaryEntry",
    "PrimaryWatch",
    "Processor",
    "Release",
    "ReplicaGrant",
    "ReplicaHolder",
    "ReplicaManager",
    "ReplicaServer",
    "ReplicaTiming",
    "Resolution",
    "Retention",
    "ScheduleInfo",
    "ScheduleRow",
    "ScheduleSlot",
    "ScheduleSpec",
    "Schedules",
    "SubmissionPool",
    "TableVacuum",
    "Task",
    "TaskCycled",
    "TaskDependency",
    "TaskEnqueued",
    "TaskKind",
    "TaskLease",
    "TaskRow",
    "TaskStatus",
    "TaskWorker",
    "TenureError",
    "WorkerStats",
    "Writes",
    "active_only",
    "ask_primary",
    "connect",
    "connection_options",
    "schedule",
    "shutdown_signals",
    "sync_schedules",
    "wait_for_shutdown",
]
