"""What an idle worker and maintenance loop cost on Redis: `next_due` and quiet waits."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta

import pytest
import redis

from tests.redis.conftest import tasks
from threadmill_core.backend import NOTHING_DEFERRED
from threadmill_core.models import TaskResultStatus
from threadmill_core.testing import Harness
from threadmill_redis import RedisBackend
from threadmill_redis.testing import delete_namespace

#: Commands of ours: the INFO calls that measure are left out.
Spent = dict[str, int]


@pytest.fixture
def measured(real_client: redis.Redis) -> Iterator[tuple[RedisBackend, Callable[..., Spent]]]:
    """A backend on a fresh namespace, and what a call costs in server commands (scripts' too)."""
    backend = RedisBackend(real_client, namespace=f"idle-{uuid.uuid4().hex}")

    def calls() -> dict[str, int]:
        stats = real_client.info("commandstats")
        return {name.removeprefix("cmdstat_"): int(s["calls"]) for name, s in stats.items()}

    def cost(fn: Callable[[], object]) -> Spent:
        before = calls()
        fn()
        after = calls()
        after["info"] -= 1  # the `before` INFO, counted in `after`
        return {n: c - before.get(n, 0) for n, c in after.items() if c - before.get(n, 0)}

    try:
        yield backend, cost
    finally:
        delete_namespace(backend)


@pytest.mark.redis
def test_next_due_reads_the_clock_only_when_something_is_deferred(
    measured: tuple[RedisBackend, Callable[..., Spent]],
) -> None:
    """An idle namespace's next_due costs one ZRANGE in its script; with a deferred task, a TIME."""
    backend, cost = measured
    backend.next_due()  # loads the script, so no SCRIPT LOAD is counted below
    assert cost(backend.next_due) == {"evalsha": 1, "zrange": 1}
    assert backend.next_due() == NOTHING_DEFERRED
    backend.enqueue(tasks(1, run_after=backend.now() + timedelta(hours=1)))
    assert cost(backend.next_due) == {"evalsha": 1, "zrange": 1, "time": 1}
    due = backend.next_due()
    assert due is not None
    assert timedelta(minutes=59) < due <= timedelta(hours=1)


def test_a_wait_says_whether_a_wake_up_came(harness: Harness) -> None:
    """wait_for_tasks answers True when it took a wake-up token, False after a quiet timeout."""
    backend = harness.backend
    assert backend.wait_for_tasks(["a", "b"], timedelta(milliseconds=20)) is False
    backend.enqueue(tasks(1, queue="b"))
    assert backend.wait_for_tasks(["a", "b"], timedelta(seconds=30)) is True
    # The one token is taken. A deferred task wakes one worker too, so that
    # it learns when the task falls due (next_due); then all is quiet again.
    backend.enqueue(tasks(1, queue="a", run_after=backend.now() + timedelta(hours=1)))
    assert backend.wait_for_tasks(["a", "b"], timedelta(seconds=30)) is True
    assert backend.wait_for_tasks(["a", "b"], timedelta(milliseconds=20)) is False


@pytest.mark.redis
def test_an_idle_worker_without_maintenance_runs_a_task_deferred_meanwhile_when_due(
    real_client: redis.Redis,
) -> None:
    """A deferred enqueue wakes an idle worker, which learns the due time and claims it then.

    Nothing else would: this worker runs no mover, and its quiet waits only
    end in a claim after `QUIET_WAITS_PER_CLAIM` of them (30 s here).
    """
    from tests.faults import fault_tasks
    from threadmill_core import Broker, Worker

    backend = RedisBackend(real_client, namespace=f"idle-{uuid.uuid4().hex}")
    broker = Broker(backend, url="redis://")
    worker = Worker(broker, threads=1, poll_interval=1.0, maintenance=False)
    runner = threading.Thread(target=worker.run)
    runner.start()
    try:
        time.sleep(1.5)  # idle: claimed nothing, waiting quietly
        later = fault_tasks.echo.using(broker=broker, run_after=timedelta(milliseconds=300))
        record = later.enqueue("later")
        deadline = time.monotonic() + 10
        while broker.get_result(record.id).status is not TaskResultStatus.SUCCESSFUL:
            assert time.monotonic() < deadline, "the deferred task did not run once due"
            time.sleep(0.05)
    finally:
        worker.stop()
        runner.join(timeout=30)
        delete_namespace(backend)
