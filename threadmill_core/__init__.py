"""threadmill: a durable task queue with a pluggable broker."""

from threadmill_core.backend import Backend
from threadmill_core.broker import Broker, connect, default_broker
from threadmill_core.clock import Clock, FakeClock, SystemClock
from threadmill_core.errors import (
    AcknowledgementTimeout,
    BackendConflict,
    BackendUnavailable,
    InvalidCall,
    InvalidOption,
    InvalidTaskDefinition,
    MemoryBrokerWarning,
    PayloadError,
    PayloadTooLarge,
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
    QueueRates,
    RetryPolicySpec,
    TaskContext,
    TaskError,
    TaskResult,
    TaskResultStatus,
)
from threadmill_core.periodic import InvalidSchedule, Tick, periodic, tick_of
from threadmill_core.retry import ExponentialBackoff
from threadmill_core.task import Task, task
from threadmill_core.worker import Worker

__all__ = [
    "AcknowledgementTimeout",
    "Backend",
    "BackendConflict",
    "BackendScheme",
    "BackendUnavailable",
    "Broker",
    "Clock",
    "ExponentialBackoff",
    "FakeClock",
    "InvalidCall",
    "InvalidOption",
    "InvalidSchedule",
    "InvalidTaskDefinition",
    "Lease",
    "MemoryBrokerWarning",
    "PayloadError",
    "PayloadTooLarge",
    "QueueCounts",
    "QueueRates",
    "RetryPolicySpec",
    "SystemClock",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskNotFound",
    "TaskQuarantined",
    "TaskResult",
    "TaskResultStatus",
    "ThreadmillError",
    "Tick",
    "UnknownBackend",
    "UnsupportedValue",
    "WaitTimeout",
    "Worker",
    "connect",
    "default_broker",
    "hookimpl",
    "periodic",
    "task",
    "tick_of",
]
