"""tenure: high availability for services that share one PostgreSQL database."""

from tenure.driver import Driver, HeartbeatStatus, PrimaryEntry
from tenure.elector import ElectionTiming, Elector
from tenure.errors import (
    FencingError,
    InvalidArgument,
    InvalidConfiguration,
    NotPrimary,
    TenureError,
)
from tenure.health import PrimaryEndpoint, PrimaryWatch

__all__ = [
    "Driver",
    "ElectionTiming",
    "Elector",
    "FencingError",
    "HeartbeatStatus",
    "InvalidArgument",
    "InvalidConfiguration",
    "NotPrimary",
    "PrimaryEndpoint",
    "PrimaryEntry",
    "PrimaryWatch",
    "TenureError",
]
