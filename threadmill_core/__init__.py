"""threadmill: a durable task queue with a pluggable broker.

The package is laid out by audience, in three layers:

- the top level is what applications and backend authors use: the protocol
  every backend implements (`backend` with its `maintenance_spec` and
  `operator_spec`, with the types it stores: `models`, `live_workers`,
  `pauses`; its argument `checks`), what a running task may know and do
  (`context`), the producer's API
  (`task`, `broker`, `calls`, `options`, `retry`, `periodic`, `headers`,
  `payload_limit`, `tracing`), the stored form of values (`codec`,
  `values`, `display`, `ids`, `clock`), `errors`, `urls`, and the plugin
  machinery (`hookspecs`, `plugins`);
- `threadmill_core.worker` is the worker runtime: the `Worker`, its
  threads, maintenance, and the supervisor of ``threadmill worker`` with its
  health and metrics endpoints;
- `threadmill_core.cli` is the ``threadmill`` command line, the inspector
  and the TUI.

Each layer imports only the ones above it in this list (the top level
imports `Worker` only to re-export it below); tests/core/test_layers.py
checks it. `threadmill_core.testing` is the conformance kit for backends.
"""

from threadmill_core.backend import Backend
from threadmill_core.broker import Broker, connect, default_broker
from threadmill_core.clock import Clock, FakeClock, SystemClock
from threadmill_core.context import TaskContext
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
    TaskCancelled,
    TaskNotFound,
    TaskQuarantined,
    ThreadmillError,
    TimeLimitExceeded,
    UnknownBackend,
    UnsupportedValue,
    WaitTimeout,
)
from threadmill_core.hookspecs import BackendScheme, hookimpl
from threadmill_core.models import (
    Lease,
    Progress,
    QueueCounts,
    QueueRates,
    RetryPolicySpec,
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
    "Progress",
    "QueueCounts",
    "QueueRates",
    "RetryPolicySpec",
    "SystemClock",
    "Task",
    "TaskCancelled",
    "TaskContext",
    "TaskError",
    "TaskNotFound",
    "TaskQuarantined",
    "TaskResult",
    "TaskResultStatus",
    "ThreadmillError",
    "Tick",
    "TimeLimitExceeded",
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
