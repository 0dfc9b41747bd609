"""threadmill: a durable task queue with a pluggable broker."""

from threadmill_core.backend import Backend
from threadmill_core.clock import Clock, FakeClock, SystemClock
from threadmill_core.errors import (
    AcknowledgementTimeout,
    BackendConflict,
    InvalidOption,
    InvalidTaskDefinition,
    PayloadError,
    TaskNotFound,
    TaskQuarantined,
    ThreadmillError,
    UnknownBackend,
    UnsupportedValue,
    WaitTimeout,
)
from threadmill_core.hookspecs import BackendScheme, hookimpl
from threadmill_core.models import (
    Lease,
    QueueCounts,
    RetryPolicySpec,
    TaskContext,
    TaskError,
    TaskResult,
    TaskResultStatus,
)

__all__ = [
    "AcknowledgementTimeout",
    "Backend",
    "BackendConflict",
    "BackendScheme",
    "Clock",
    "FakeClock",
    "InvalidOption",
    "InvalidTaskDefinition",
    "Lease",
    "PayloadError",
    "QueueCounts",
    "RetryPolicySpec",
    "SystemClock",
    "TaskContext",
    "TaskError",
    "TaskNotFound",
    "TaskQuarantined",
    "TaskResult",
    "TaskResultStatus",
    "ThreadmillError",
    "UnknownBackend",
    "UnsupportedValue",
    "WaitTimeout",
    "hookimpl",
]
