"""The metrics plugin counts the events that happen in one process (no worker command here)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta

import pytest
from prometheus_client import CollectorRegistry

from tests.core import tasks
from threadmill_core import Broker, FakeClock, TaskResult, TaskResultStatus, Worker
from threadmill_core.ids import new_task_id
from threadmill_core.plugins import unregister_plugin
from threadmill_core.worker.maintenance import reap
from threadmill_memory import MemoryBackend


@pytest.fixture
def registry() -> Iterator[CollectorRegistry]:
    """The plugin installed in this process, its metrics readable through a registry."""
    from threadmill_core.worker import metrics

    made = CollectorRegistry()
    for metric in (metrics.FINISHED, metrics.RETRIED, metrics.EXPIRED, metrics.QUARANTINED,
                   metrics.GIVEN_BACK):  # fmt: skip
        made.register(metric)
    metrics.install()
    yield made
    unregister_plugin(metrics.PLUGIN_NAME)


@pytest.fixture
def queue() -> str:
    """A queue of this test's own: the counters are the process's."""
    return f"metrics-{uuid.uuid4().hex[:8]}"


def count(registry: CollectorRegistry, name: str, **labels: str) -> float:
    from threadmill_core.worker.metrics import flush

    flush()  # a worker's loop turn does it; a reaper's pass in a test has none
    return registry.get_sample_value(name, labels) or 0.0


def test_an_unknown_task_is_counted_given_back_then_quarantined(
    registry: CollectorRegistry, queue: str
) -> None:
    """A task no worker loaded is counted as given back while its grace lasts, then as
    quarantined and failed, under the ``unregistered`` task label (never its path)."""
    clock = FakeClock()
    broker = Broker(MemoryBackend(clock=clock))
    gone = TaskResult(id=new_task_id(), task_path="tests.core.nowhere:gone", queue=queue)
    broker.backend.enqueue([gone])
    worker = Worker(broker, queues=[queue])
    worker.run(burst=True)
    labels = {"queue": queue, "task": "unregistered"}
    assert count(registry, "threadmill_tasks_given_back_total", **labels) == 1
    assert count(registry, "threadmill_tasks_quarantined_total", **labels) == 0
    clock.advance(timedelta(minutes=11))
    worker.run(burst=True)
    assert count(registry, "threadmill_tasks_quarantined_total", **labels) == 1
    assert count(registry, "threadmill_tasks_finished_total", status="failed", **labels) == 1
    assert count(registry, "threadmill_tasks_given_back_total", **labels) == 1


def test_an_expired_lease_is_counted_once_with_what_the_reaper_decided(
    registry: CollectorRegistry, queue: str
) -> None:
    """A lease the reaper takes over counts as expired once, and as retried or failed as its
    retry policy decided."""
    clock = FakeClock()
    broker = Broker(MemoryBackend(clock=clock))
    tasks.add.using(broker=broker, queue=queue).enqueue(1, 2)
    [lease] = broker.backend.claim([queue], worker="gone", lease_ttl=timedelta(seconds=30))
    broker.backend.mark_started([lease])  # it ran: an unstarted one goes back uncharged
    clock.advance(timedelta(seconds=31))
    assert reap(broker.backend) == 1
    labels = {"queue": queue, "task": "tests.core.tasks:add"}
    assert count(registry, "threadmill_leases_expired_total", **labels) == 1
    retried = count(registry, "threadmill_tasks_retried_total", **labels)
    failed = count(registry, "threadmill_tasks_finished_total", status="failed", **labels)
    assert retried + failed == 1


def test_a_quarantined_task_requeued_and_run_is_counted_quarantined_once(
    registry: CollectorRegistry, queue: str
) -> None:
    """A task quarantined (no worker loaded it), requeued by an operator once its module is
    deployed and then run to success, is counted quarantined once: its success is not a
    second quarantine, though its last error is still the quarantine's."""
    clock = FakeClock()
    broker = Broker(MemoryBackend(clock=clock))
    record = tasks.echo.using(broker=broker, queue=queue).enqueue(1)
    clock.advance(timedelta(minutes=11))
    Worker(broker, queues=[queue], tasks={}).run(burst=True)  # a worker without the task
    labels = {"queue": queue, "task": "tests.core.tasks:echo"}
    assert count(registry, "threadmill_tasks_quarantined_total", **labels) == 1
    assert broker.requeue(record.id) is not None
    Worker(broker, queues=[queue]).run(burst=True)
    assert broker.get_result(record.id).status is TaskResultStatus.SUCCESSFUL
    assert count(registry, "threadmill_tasks_finished_total", status="successful", **labels) == 1
    assert count(registry, "threadmill_tasks_quarantined_total", **labels) == 1
