"""Django tasks run by threadmill workers, on a memory backend with a fake clock.

Retries with Django's context, run_after, priority order, cancellation,
Django's signals, and tasks that end by SystemExit: each through Django's
task API, with a `threadmill_core.Worker` in this process.
"""

from __future__ import annotations

import inspect
import traceback
from datetime import timedelta
from typing import Any

import django.tasks.base
import pytest
from django.tasks import TaskContext as DjangoTaskContext
from django.tasks import TaskResultStatus as Status
from django.tasks.base import DEFAULT_TASK_PRIORITY, DEFAULT_TASK_QUEUE_NAME
from django.utils import timezone

from tests.django.bench import Bench, Signals
from tests.django.djapp import tasks
from threadmill_core.errors import AcknowledgementTimeout
from threadmill_core.models import TaskError
from threadmill_core.worker.execution import UNKNOWN_TASK_GRACE
from threadmill_core.worker.maintenance import reap
from threadmill_django import Task, TaskBackend, TaskCancelled, TaskContext, runner
from threadmill_django.results import django_error


def test_a_task_runs_and_its_result_is_stored(bench: Bench) -> None:
    """An enqueued task runs once; its result reads back SUCCESSFUL with every field set."""
    result = tasks.add.enqueue(2, 3)
    assert result.status == Status.READY
    assert bench.work() == 1
    result.refresh()
    assert result.status == Status.SUCCESSFUL
    assert result.return_value == 5
    assert result.enqueued_at <= result.started_at <= result.finished_at
    assert result.last_attempted_at == result.started_at
    assert result.attempts == 1
    assert len(result.worker_ids) == 1
    assert result.errors == []


def test_retries_see_djangos_context(bench: Bench, runs: list[Any]) -> None:
    """A failing attempt asks the retry callback with Django's context; its delay is kept."""
    result = tasks.flaky.enqueue(succeed_on=3)
    bench.work()
    result.refresh()
    assert result.status == Status.READY  # DEFERRED, ten seconds out, reads READY
    assert bench.work() == 0  # not due yet
    bench.clock.advance(timedelta(seconds=10))
    bench.work()
    bench.clock.advance(timedelta(seconds=10))
    bench.work()
    result.refresh()
    assert result.status == Status.SUCCESSFUL
    assert result.return_value == 3
    assert [e.exception_class_path for e in result.errors] == ["builtins.ValueError"] * 2
    assert runs == [
        ("run", 1, Status.RUNNING),
        ("policy", TaskContext, 1, "builtins.ValueError"),
        ("run", 2, Status.RUNNING),
        ("policy", TaskContext, 2, "builtins.ValueError"),
        ("run", 3, Status.RUNNING),
    ]
    assert issubclass(TaskContext, DjangoTaskContext)


def test_the_retry_callback_gives_up(bench: Bench, runs: list[Any]) -> None:
    """When the callback returns None the task is FAILED, with every attempt's error."""
    result = tasks.flaky.enqueue(succeed_on=99)
    for _ in range(3):
        bench.work()
        bench.clock.advance(timedelta(seconds=10))
    result.refresh()
    assert result.status == Status.FAILED
    assert result.attempts == 3
    assert result.errors[-1].exception_class is ValueError
    assert result.errors[-1].traceback.endswith("ValueError: attempt 3 fails\n")


def test_threadmills_own_backoff_works_on_a_django_task(bench: Bench) -> None:
    """ExponentialBackoff, given as the task's retry option, retries once, then fails."""
    result = tasks.always_fails.enqueue()
    bench.work()
    result.refresh()
    assert result.status == Status.READY
    assert result.attempts == 1
    bench.clock.advance(timedelta(seconds=5))
    bench.work()
    result.refresh()
    assert result.status == Status.FAILED
    assert result.attempts == 2


def test_an_expired_lease_goes_through_the_django_retry_callback(
    bench: Bench, runs: list[Any]
) -> None:
    """A worker dies running the task: the reaper asks the callback, with the timeout last."""
    result = tasks.abandoned.enqueue()
    backend = bench.broker.backend
    [lease] = backend.claim(["default"], worker="doomed", lease_ttl=timedelta(seconds=60))
    assert backend.mark_started([lease]) == [True]  # it ran, then its worker died
    bench.clock.advance(timedelta(seconds=61))
    assert reap(backend, claim_ttl=timedelta(seconds=30)) == 1
    path = f"{AcknowledgementTimeout.__module__}.{AcknowledgementTimeout.__qualname__}"
    assert runs == [("policy", TaskContext, 1, path)]
    result.refresh()
    assert result.status == Status.READY  # deferred by ten seconds
    assert result.errors[-1].exception_class is AcknowledgementTimeout
    assert "AcknowledgementTimeout: the lease of attempt 1 expired" in result.errors[-1].traceback
    assert lease.token  # the dead worker's lease is fenced out by the reaper's claim


def test_run_after_defers_until_due(bench: Bench) -> None:
    """A task with run_after reads READY, does not run before its time, and runs after it."""
    due = bench.clock.now() + timedelta(minutes=5)
    result = tasks.add.using(run_after=due).enqueue(1, 1)
    assert result.status == Status.READY
    assert result.task.run_after == due
    assert bench.work() == 0
    bench.clock.advance(timedelta(minutes=5))
    assert bench.work() == 1
    result.refresh()
    assert result.status == Status.SUCCESSFUL
    assert tasks.add.get_result(result.id).task.run_after == due


def test_a_naive_run_after_is_local_time_without_time_zones(bench: Bench) -> None:
    """With USE_TZ = False, Django's naive datetimes are local times, both ways."""
    from django.test import override_settings

    with override_settings(USE_TZ=False, TIME_ZONE="Europe/Paris"):
        due = timezone.make_naive(bench.clock.now() + timedelta(hours=1))
        result = tasks.add.using(run_after=due).enqueue(1, 2)
        assert timezone.is_naive(result.enqueued_at)
        stored = bench.broker.get_result(result.id)
        assert stored.run_after == timezone.make_aware(due)
        bench.clock.advance(timedelta(hours=1))
        bench.work()
        result.refresh()
        assert result.status == Status.SUCCESSFUL
        assert timezone.is_naive(result.finished_at)


def test_higher_priority_runs_first(bench: Bench, runs: list[Any]) -> None:
    """Within a queue, higher priority runs first, then first come first served."""
    for label, priority in [("low", -10), ("mid-1", 0), ("top", 50), ("mid-2", 0)]:
        tasks.note_default.using(priority=priority).enqueue(label)
    bench.work(prefetch=0)
    assert runs == ["top", "mid-1", "mid-2", "low"]


def test_queues_are_claimed_in_the_order_given(bench: Bench, runs: list[Any]) -> None:
    """A worker on queues (high, default) drains high before default; one on low runs neither."""
    tasks.note_default.enqueue("default")
    tasks.note.enqueue("high")
    assert bench.work("low") == 0
    bench.work("high", "default", prefetch=0)
    assert runs == ["high", "default"]


def test_a_cancelled_task_reads_failed_with_a_cancelled_error(bench: Bench) -> None:
    """CANCELLED is not a Django status: it reads FAILED, the last error saying why."""
    result = tasks.add.enqueue(1, 2)
    assert bench.broker.cancel(result.id) is not None
    result.refresh()
    assert result.status == Status.FAILED
    assert result.errors[-1].exception_class is TaskCancelled
    assert "cancelled" in result.errors[-1].traceback
    assert bench.work() == 0  # never runs
    with pytest.raises(ValueError, match="Task failed"):
        result.return_value  # noqa: B018  # the property raises


def test_signals_are_sent_where_djangos_backends_send_them(
    bench: Bench, signals_seen: Signals
) -> None:
    """enqueued at enqueue; started as the attempt starts; finished once, after it is stored."""
    ok = tasks.add.enqueue(1, 2)
    retried = tasks.flaky.enqueue(succeed_on=2)
    assert signals_seen.of("task_enqueued") == [
        ("task_enqueued", ok.id, "READY", TaskBackend),
        ("task_enqueued", retried.id, "READY", TaskBackend),
    ]
    bench.work()
    # The failed attempt of `retried` will be retried: it started, it did not finish.
    assert [(e[1], e[2]) for e in signals_seen.of("task_started")] == [
        (ok.id, "RUNNING"),
        (retried.id, "RUNNING"),
    ]
    assert [(e[1], e[2]) for e in signals_seen.of("task_finished")] == [(ok.id, "SUCCESSFUL")]
    bench.clock.advance(timedelta(seconds=10))
    bench.work()
    assert [(e[1], e[2]) for e in signals_seen.of("task_finished")] == [
        (ok.id, "SUCCESSFUL"),
        (retried.id, "SUCCESSFUL"),
    ]
    assert {e[3] for e in signals_seen.seen} == {TaskBackend}


def test_task_finished_comes_after_the_outcome_is_stored(bench: Bench) -> None:
    """A task_finished receiver that reads the result back finds it final."""
    from django.tasks.signals import task_finished

    read: list[Any] = []

    def receiver(sender: Any, task_result: Any, **_: Any) -> None:
        read.append(tasks.add.get_result(task_result.id).status)

    task_finished.connect(receiver)
    try:
        tasks.add.enqueue(1, 2)
        bench.work()
    finally:
        task_finished.disconnect(receiver)
    assert read == [Status.SUCCESSFUL]


def test_task_finished_is_sent_with_the_result_task_started_was(bench: Bench) -> None:
    """As Django's own backends do: one result per attempt, brought up to its stored end."""
    from django.tasks.signals import task_finished, task_started

    started: list[Any] = []
    finished: list[Any] = []

    def on_started(sender: Any, task_result: Any, **_: Any) -> None:
        started.append(task_result)

    def on_finished(sender: Any, task_result: Any, **_: Any) -> None:
        finished.append(task_result)

    task_started.connect(on_started)
    task_finished.connect(on_finished)
    try:
        ok = tasks.add.enqueue(1, 2)
        retried = tasks.flaky.enqueue(succeed_on=2)
        bench.work()
        bench.clock.advance(timedelta(seconds=10))
        bench.work()
    finally:
        task_started.disconnect(on_started)
        task_finished.disconnect(on_finished)
    assert [r.id for r in started] == [ok.id, retried.id, retried.id]
    assert [r.id for r in finished] == [ok.id, retried.id]
    assert finished[0] is started[0]
    assert finished[1] is started[2]  # the attempt that succeeded, not the first one
    for result in finished:
        stored = tasks.add.get_backend().get_result(result.id)
        assert (result.status, result.return_value) == (Status.SUCCESSFUL, stored.return_value)
        assert (result.started_at, result.finished_at) == (stored.started_at, stored.finished_at)
        assert result.worker_ids == stored.worker_ids
        assert [e.traceback for e in result.errors] == [e.traceback for e in stored.errors]
    assert (len(finished[1].errors), finished[1].attempts) == (1, 2)


def test_a_retried_attempt_leaves_no_result_behind(bench: Bench) -> None:
    """Its attempt ended (a retry, not a finish): the result it started with is not kept."""
    from threadmill_django import runner

    retried = tasks.flaky.enqueue(succeed_on=2)
    bench.work()
    assert bench.broker.get_result(retried.id).status.name == "DEFERRED"
    assert runner.started_result(retried.id) is None


def test_a_failing_task_finished_receiver_is_logged_and_the_others_still_hear(
    bench: Bench, signals_seen: Signals, caplog: pytest.LogCaptureFixture
) -> None:
    """A receiver raising for one task of a batch stops neither that task nor the others."""
    from django.tasks.signals import task_finished

    first, second = tasks.add.enqueue(1, 2), tasks.add.enqueue(3, 4)

    def receiver(sender: Any, task_result: Any, **_: Any) -> None:
        if task_result.id == first.id:
            raise RuntimeError("receiver bug")

    task_finished.connect(receiver)
    try:
        assert bench.work() == 2
    finally:
        task_finished.disconnect(receiver)
    heard = [e[1] for e in signals_seen.of("task_finished")]
    assert sorted(heard) == sorted([first.id, second.id])
    assert [tasks.add.get_result(r.id).return_value for r in (first, second)] == [3, 7]
    assert any(first.id in r.getMessage() and r.exc_info for r in caplog.records)


@pytest.mark.parametrize(
    ("task", "args", "kind", "last_line"),
    [
        (tasks.exits, ("leaving",), SystemExit, "SystemExit: leaving"),
        (tasks.exits, (1,), SystemExit, "SystemExit: 1"),
        (tasks.interrupts, (), KeyboardInterrupt, "KeyboardInterrupt: from the task"),
    ],
)
def test_a_task_that_exits_is_failed_and_the_worker_goes_on(
    bench: Bench, signals_seen: Signals, task: Any, args: tuple[Any, ...], kind: type,
    last_line: str,
) -> None:  # fmt: skip
    """SystemExit from a task ends it FAILED with that error; the next task still runs."""
    ended = task.enqueue(*args)
    after = tasks.add.enqueue(2, 2)
    assert bench.work() == 2
    ended.refresh()
    assert ended.status == Status.FAILED
    assert ended.errors[-1].exception_class is kind
    assert ended.errors[-1].traceback.startswith("Traceback (most recent call last):")
    assert ended.errors[-1].traceback.endswith(f"{last_line}\n")
    assert tasks.add.get_result(after.id).return_value == 4
    assert ("task_finished", ended.id, "FAILED", TaskBackend) in signals_seen.seen
    stored = bench.broker.get_result(ended.id)  # threadmill's own view names the same class
    assert stored.errors[-1].exception_class_path == f"{kind.__module__}.{kind.__qualname__}"


def test_a_return_value_django_cannot_normalise_fails_the_task(bench: Bench) -> None:
    """As with Django's immediate backend: a lambda returned is a TypeError, FAILED."""
    result = tasks.returns_a_lambda.enqueue()
    bench.work()
    result.refresh()
    assert result.status == Status.FAILED
    assert result.errors[-1].exception_class is TypeError
    assert "Unsupported type" in result.errors[-1].traceback


def test_async_tasks_run(bench: Bench) -> None:
    """A coroutine task runs to its return value."""
    result = tasks.sleeps_then_returns.enqueue(7)
    bench.work()
    assert tasks.sleeps_then_returns.get_result(result.id).return_value == 7


def test_whether_a_task_is_a_coroutine_is_asked_once_not_at_each_call(
    bench: Bench, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Django's `Task.call` asks at every call; a runner asks when it is made, then calls."""
    asked: list[Any] = []

    def counting(func: Any) -> bool:
        asked.append(func)
        return inspect.iscoroutinefunction(func)

    monkeypatch.setattr(django.tasks.base, "iscoroutinefunction", counting)
    monkeypatch.setattr(runner, "iscoroutinefunction", counting)
    plain = [tasks.add.enqueue(1, 2) for _ in range(3)]
    awaited = [tasks.sleeps_then_returns.enqueue(n) for n in range(3)]
    assert bench.work() == 6
    assert asked == []
    assert [tasks.add.get_result(r.id).return_value for r in plain] == [3, 3, 3]
    values = [tasks.sleeps_then_returns.get_result(r.id).return_value for r in awaited]
    assert values == [0, 1, 2]


def _doubled(value: int) -> int:
    return 2 * value


class CallingTask(Task):
    """A task class with a ``call`` of its own."""

    def call(self, *args: Any, **kwargs: Any) -> Any:
        return {"called by": "CallingTask.call", "value": Task.call(self, *args, **kwargs)}


def test_a_task_class_with_a_call_of_its_own_has_it_called(bench: Bench) -> None:
    """The runner calls the function directly only when the task class keeps Django's call."""
    # Every field given: Django 6.0's Task has no defaults for them.
    doubled = CallingTask(
        func=_doubled,
        backend="default",
        priority=DEFAULT_TASK_PRIORITY,
        queue_name=DEFAULT_TASK_QUEUE_NAME,
        run_after=None,
    )
    result = doubled.enqueue(4)
    assert bench.work() == 1
    assert doubled.get_result(result.id).return_value == {
        "called by": "CallingTask.call",
        "value": 8,
    }


def test_a_task_that_takes_context_gets_djangos_with_threadmills_facts(bench: Bench) -> None:
    """The context is Django's (with refresh working) plus the attempt's token and lease state."""
    result = tasks.context_facts.enqueue()
    bench.work()
    facts = tasks.context_facts.get_result(result.id).return_value
    assert facts == {
        "type": "threadmill_django.task.TaskContext",
        "id": result.id,
        "status": "RUNNING",
        "attempt": 1,
        "token": True,
        "lease_lost": False,
    }


def test_database_connections_are_closed_after_each_task(bench: Bench, runs: list[Any]) -> None:
    """As after a request: the connection a task opened is closed when it ends."""
    first = tasks.uses_the_database.enqueue()
    second = tasks.uses_the_database.enqueue()
    bench.work(threads=1)
    assert runs == [("db", True), ("db", True)]
    assert tasks.uses_the_database.get_result(second.id).return_value is True
    assert tasks.uses_the_database.get_result(first.id).status == Status.SUCCESSFUL


def test_a_record_of_an_unregistered_function_is_quarantined(bench: Bench) -> None:
    """Only registered tasks run: a stored call of any other path fails once no worker knew it
    for UNKNOWN_TASK_GRACE after its enqueue, nothing imported."""
    from threadmill_core import task as core_task

    record = core_task(tasks.add.func).using(broker=bench.broker).enqueue(1, 2)
    from threadmill_core.task import unregister_task

    unregister_task(record.task_path)  # as in a worker that never loaded the module
    try:
        bench.work()
        assert bench.broker.get_result(record.id).status.value == "DEFERRED"  # given back
        bench.clock.advance(UNKNOWN_TASK_GRACE)
        bench.work()
        stored = bench.broker.get_result(record.id)
        assert stored.status.value == "FAILED"
        assert "not registered" in stored.errors[-1].message
    finally:
        tasks.add.using(priority=1)  # validating registers the task again


def test_djangos_view_of_a_system_exit_is_that_exception_causes_and_all() -> None:
    """A SystemExit recorded by the core worker reads in Django as itself, with its causes."""
    try:
        try:
            raise ValueError("inner")
        except ValueError as inner:
            raise SystemExit("outer") from inner
    except SystemExit as exc:
        error = TaskError.from_exception(exc, "".join(traceback.format_exception(exc)))
    shown = django_error(error)
    assert shown.exception_class is SystemExit
    assert shown.traceback.startswith("Traceback (most recent call last):")
    assert "ValueError: inner" in shown.traceback
    assert shown.traceback.endswith("SystemExit: outer\n")
