"""tenure: high availability for services that share one PostgreSQL database."""

from tenure.driver import Driver, HeartbeatStatus, PrimaryEntry, TaskEnqueued, TaskLease, TaskRow, TaskStatus
from tenure.elector import ElectionTiming, Elector
from tenure.errors import (
    ClaimLost,
    FencingError,
    InvalidArgument,
    InvalidConfiguration,
    InvalidTransition,
    LeaseLost,
    NotFound,
    NotPrimary,
    TenureError,
)
from tenure.health import PrimaryEndpoint, PrimaryWatch

__all__ = [
    "ClaimLost",
    "Driver",
    "ElectionTiming",
    "Elector",
    "FencingError",
    "HeartbeatStatus",
    "InvalidArgument",
    "InvalidConfiguration",
    "InvalidTransition",
    "LeaseLost",
    "NotFound",
    "NotPrimary",
    "PrimaryEndpoint",
    "PrimaryEntry",
    "PrimaryWatch",
    "TaskEnqueued",
    "TaskLease",
    "TaskRow",
    "TaskStatus",
    "TenureError",
]
