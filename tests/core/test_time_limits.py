"""Time limits in the in-process Worker: the soft stop, the hard limit, and bad input."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import timedelta

import pytest

from tests.core import stopped_tasks
from tests.faults.runs import wait_until
from threadmill_core import (
    Broker,
    InvalidOption,
    Task,
    TaskResult,
    TaskResultStatus,
    Worker,
    task,
)
from threadmill_core.worker.settings import WorkerSettings

READY, SUCCESSFUL, FAILED = (
    TaskResultStatus.READY,
    TaskResultStatus.SUCCESSFUL,
    TaskResultStatus.FAILED,
)
LIMIT_PATH = "threadmill_core.errors.TimeLimitExceeded"
#: The grace between a stop and the hard limit in these tests.
GRACE = 0.5


@pytest.fixture(autouse=True)
def _fresh_events() -> Iterator[None]:
    with stopped_tasks.events_lock:
        stopped_tasks.events.clear()
    stopped_tasks.gate.clear()
    yield
    stopped_tasks.gate.set()


def worker(broker: Broker, **options: object) -> Worker:
    """A worker whose heartbeat beats every 0.1 s, with a short grace."""
    settings: dict[str, object] = {
        "threads": 2,
        "lease_ttl": 0.3,
        "time_limit_grace": GRACE,
        "poll_interval": 0.05,
    }
    settings.update(options)
    return Worker(broker, **settings)  # type: ignore[arg-type]  # passed through as given


def on(broker: Broker, made: Task[..., object]) -> Task[..., object]:
    return made.using(broker=broker)


def ran_out(record: TaskResult) -> bool:
    return record.status is FAILED and record.errors[-1].exception_class_path == LIMIT_PATH


def test_a_task_looping_in_python_fails_at_its_limit(broker: Broker) -> None:
    """A sync task looping in Python gets TimeLimitExceeded at its limit: its finally runs, it
    fails through its retry policy, and a neighbour in the same process ends uncharged."""
    spins = on(broker, stopped_tasks.spins).enqueue()
    neighbour = on(broker, stopped_tasks.neighbour).enqueue(1.5)
    made = worker(broker)
    started = time.monotonic()
    assert made.run(burst=True) == 2
    final = broker.get_result(spins.id)
    assert ran_out(final)
    assert "time limit of 0:00:01" in final.errors[-1].message
    assert time.monotonic() - started < 1 + GRACE + 1.5
    assert stopped_tasks.seen("spins:finally")
    beside = broker.get_result(neighbour.id)
    assert (beside.status, beside.return_value, beside.errors, beside.attempts) == (
        SUCCESSFUL, "fine", (), 1,
    )  # fmt: skip
    assert made.stuck_threads == []


def test_an_async_task_is_cancelled_on_its_loop_at_its_limit(broker: Broker) -> None:
    """An async task awaiting for ever is cancelled at its limit and fails with
    TimeLimitExceeded; its finally runs."""
    awaits = on(broker, stopped_tasks.awaits).enqueue()
    neighbour = on(broker, stopped_tasks.neighbour).enqueue(0.2)
    made = worker(broker)
    started = time.monotonic()
    made.run(burst=True)
    assert time.monotonic() - started < 1 + GRACE + 1
    assert ran_out(broker.get_result(awaits.id))
    assert stopped_tasks.seen("awaits:finally")
    assert broker.get_result(neighbour.id).status is SUCCESSFUL
    assert made.stuck_threads == []


def test_a_task_blocked_in_c_meets_the_hard_limit(broker: Broker) -> None:
    """A task in time.sleep(600) is recorded FAILED with TimeLimitExceeded at its hard limit;
    the worker claims nothing more, gives its prefetch back uncharged, lets its neighbour
    finish, returns naming the stuck thread, and a later run serves on."""
    sleeps = on(broker, stopped_tasks.sleeps).enqueue()
    neighbour = on(broker, stopped_tasks.neighbour).enqueue(2.5)
    waiting = [on(broker, stopped_tasks.neighbour).enqueue(0) for _ in range(2)]
    made = worker(broker, prefetch=2)
    started = time.monotonic()
    made.run(burst=True)
    took = time.monotonic() - started
    final = broker.get_result(sleeps.id)
    assert ran_out(final)
    assert "did not stop within 0.5 s" in final.errors[-1].message
    assert "time.sleep(600)" in final.errors[-1].traceback  # where it was stuck
    assert final.finished_at is not None
    assert 1 + GRACE <= took < 2.5 + 1.5
    beside = broker.get_result(neighbour.id)
    assert (beside.status, beside.errors, beside.attempts) == (SUCCESSFUL, (), 1)
    for record in waiting:
        back = broker.get_result(record.id)
        assert (back.status, back.attempts, back.errors) == (READY, 0, ())
    assert len(made.stuck_threads) == 1
    assert made.stuck_threads[0].is_alive()
    assert made.run(burst=True) == 2  # the worker keeps serving
    assert all(broker.get_result(r.id).status is SUCCESSFUL for r in waiting)


def test_a_call_limit_overrides_the_task_and_the_worker_default_applies(
    broker: Broker,
) -> None:
    """using(time_limit=...) limits one call; a task with no limit gets the worker's."""
    limited = on(broker, stopped_tasks.unlimited).using(time_limit=0.3).enqueue(5)
    free = on(broker, stopped_tasks.unlimited).enqueue(0.1)
    assert limited.time_limit == timedelta(seconds=0.3)
    worker(broker).run(burst=True)
    assert ran_out(broker.get_result(limited.id))
    assert broker.get_result(free.id).status is SUCCESSFUL
    by_default = on(broker, stopped_tasks.unlimited).enqueue(5)
    started = time.monotonic()
    worker(broker, time_limit=timedelta(seconds=0.3)).run(burst=True)
    assert ran_out(broker.get_result(by_default.id))
    assert time.monotonic() - started < 0.3 + GRACE + 1


def test_a_task_within_its_limit_succeeds(broker: Broker) -> None:
    """A task that ends before its limit keeps its outcome, however many run."""
    records = [
        on(broker, stopped_tasks.unlimited).using(time_limit=5).enqueue(0) for _ in range(20)
    ]
    worker(broker, threads=4).run(burst=True)
    assert all(broker.get_result(r.id).status is SUCCESSFUL for r in records)


def test_a_limit_shorter_than_the_beat_is_met_on_time(broker: Broker) -> None:
    """The heartbeat thread wakes for a limit that falls before its next beat."""
    record = on(broker, stopped_tasks.unlimited).using(time_limit=0.2).enqueue(5)
    started = time.monotonic()
    worker(broker, lease_ttl=30).run(burst=True)
    assert ran_out(broker.get_result(record.id))
    assert time.monotonic() - started < 1.5


@pytest.mark.parametrize(
    "bad", [0, -1, timedelta(0), timedelta(seconds=-1), "5", True, float("nan"), float("inf")]
)
def test_bad_time_limits_are_refused_naming_the_option(broker: Broker, bad: object) -> None:
    """A zero, negative, non-numeric or non-finite time limit is an InvalidOption naming it."""
    with pytest.raises(InvalidOption, match="time_limit"):
        task(time_limit=bad)  # type: ignore[call-overload]  # bad on purpose
    with pytest.raises(InvalidOption, match="time_limit"):
        stopped_tasks.unlimited.using(time_limit=bad)  # type: ignore[arg-type]  # bad on purpose
    with pytest.raises(InvalidOption, match="time_limit"):
        Worker(broker, time_limit=bad)  # type: ignore[arg-type]  # bad on purpose


def test_worker_settings_refuse_a_bad_time_limit() -> None:
    """WorkerSettings refuse a time limit or grace that is not positive."""
    with pytest.raises(InvalidOption, match="time_limit"):
        WorkerSettings(broker_url="redis://x", modules=(), time_limit=timedelta(0))
    with pytest.raises(InvalidOption, match="time_limit_grace"):
        WorkerSettings(broker_url="redis://x", modules=(), time_limit_grace=timedelta(0))


def test_a_task_told_to_stop_is_not_interrupted_after_it_returns(broker: Broker) -> None:
    """Many short tasks each with a limit just above their run: no stop lands in the worker's
    own code, whatever the timing (each ends SUCCESSFUL or FAILED with TimeLimitExceeded)."""
    records = [
        on(broker, stopped_tasks.unlimited).using(time_limit=0.05).enqueue(0.05) for _ in range(30)
    ]
    made = worker(broker, threads=3)
    runner = threading.Thread(target=made.run, kwargs={"burst": True})
    runner.start()
    runner.join(30)
    assert not runner.is_alive()
    finals = [broker.get_result(r.id) for r in records]
    assert all(f.status is SUCCESSFUL or ran_out(f) for f in finals)
    wait_until(lambda: not made.stuck_threads, 1, "no thread to be stuck")
