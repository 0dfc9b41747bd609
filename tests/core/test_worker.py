"""The in-process Worker on the memory backend and a fake clock: no sleeping through time."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import pytest

from tests.core import tasks
from tests.faults.flaky import FlakyBackend
from tests.faults.runs import wait_until
from threadmill_core import (
    Broker,
    ExponentialBackoff,
    FakeClock,
    Task,
    TaskContext,
    TaskResult,
    TaskResultStatus,
    Worker,
    task,
)
from threadmill_core.ids import new_task_id
from threadmill_core.models import Decision
from threadmill_core.retry import INTERRUPTION_RETRIES
from threadmill_core.worker import scheduler
from threadmill_core.worker.execution import UNKNOWN_TASK_DELAY, UNKNOWN_TASK_GRACE
from threadmill_core.worker.maintenance import reap
from threadmill_memory import MemoryBackend

READY, DEFERRED, SUCCESSFUL, FAILED = (
    TaskResultStatus.READY,
    TaskResultStatus.DEFERRED,
    TaskResultStatus.SUCCESSFUL,
    TaskResultStatus.FAILED,
)


def worker(broker: Broker, **options: object) -> Worker:
    return Worker(broker, queues=["default", "other"], **options)  # type: ignore[arg-type]  # options are passed through as given


def watched(broker: Broker) -> tuple[Broker, FlakyBackend]:
    """The same store behind a backend that counts the calls made to it."""
    counted = FlakyBackend(broker.backend)
    return Broker(counted, url="memory://"), counted


def wait_for_a_mark(counted: FlakyBackend) -> None:
    """Until the worker's heartbeat thread has recorded a start (a task ran MARK_DELAY)."""
    wait_until(lambda: counted.calls["mark_started"] >= 1, 30, "a start to be recorded")


def test_burst_runs_everything_ready_and_returns(broker: Broker) -> None:
    """run(burst=True) runs every ready task to an outcome, then returns."""
    records = [tasks.echo.using(broker=broker).enqueue(i) for i in range(5)]
    records.append(tasks.add.using(broker=broker).enqueue(2, 3))
    assert worker(broker, threads=3).run(burst=True) == 6
    finals = [broker.get_result(r.id) for r in records]
    assert [(f.status, f.return_value) for f in finals] == [
        *[(SUCCESSFUL, i) for i in range(5)],
        (SUCCESSFUL, 5),
    ]
    assert all(f.attempts == 1 and f.worker_ids for f in finals)


def test_burst_on_an_empty_queue_returns_at_once(broker: Broker) -> None:
    """With nothing ready, burst mode returns having run nothing."""
    assert worker(broker).run(burst=True) == 0


@task(retry=ExponentialBackoff(base_delay=timedelta(milliseconds=100), max_retries=1, jitter=0))
def fails_once(context: TaskContext) -> int:
    """Fail the first attempt; the retry comes 0.1 s later."""
    if context.attempt == 1:
        raise ConnectionError("first attempt")
    return context.attempt


@pytest.mark.parametrize("maintenance", [True, False], ids=["own-maintenance", "supervised"])
def test_a_burst_waits_for_a_retry_due_within_the_poll_interval(maintenance: bool) -> None:
    """A retry due 0.1 s after its failure runs in the same burst, which then returns (the
    backend's real clock: the wait is what is under test)."""
    from threadmill_memory import MemoryBackend

    with Broker(MemoryBackend(), url="memory://") as broker:
        record = fails_once.using(broker=broker).enqueue()
        ran = worker(broker, poll_interval=1.0, maintenance=maintenance).run(burst=True)
        final = broker.get_result(record.id)
    assert ran == 2
    assert (final.status, final.return_value) == (SUCCESSFUL, 2)


def test_flaky_task_retries_with_backoff_until_it_succeeds(
    broker: Broker, clock: FakeClock
) -> None:
    """A failing attempt is deferred by the backoff; advancing the clock lets it succeed."""
    record = tasks.flaky.using(broker=broker).enqueue(fail_times=2)
    w = worker(broker)
    w.run(burst=True)
    first = broker.get_result(record.id)
    assert (first.status, first.attempts) == (DEFERRED, 1)
    assert first.run_after == clock.now() + timedelta(seconds=10)

    clock.advance(timedelta(seconds=9))
    w.run(burst=True)
    assert broker.get_result(record.id).attempts == 1  # not due yet

    clock.advance(timedelta(seconds=1))
    w.run(burst=True)
    second = broker.get_result(record.id)
    assert (second.status, second.attempts) == (DEFERRED, 2)
    assert second.run_after == clock.now() + timedelta(seconds=20)

    clock.advance(timedelta(seconds=20))
    w.run(burst=True)
    final = broker.get_result(record.id)
    assert (final.status, final.return_value, final.attempts) == (SUCCESSFUL, "ok after 3", 3)
    assert [e.exception_class_path for e in final.errors] == ["builtins.ConnectionError"] * 2
    assert "attempt 1 failed" in final.errors[0].traceback


def test_failure_outside_retry_on_is_final(broker: Broker) -> None:
    """An exception the policy does not retry fails the task on its first attempt."""
    record = tasks.wrong_kind.using(broker=broker).enqueue()
    worker(broker).run(burst=True)
    final = broker.get_result(record.id)
    assert (final.status, final.attempts) == (FAILED, 1)
    assert final.errors[0].exception_class_path == "builtins.KeyError"
    assert "Traceback" in final.errors[0].traceback


def test_an_exception_whose_text_is_not_valid_unicode_is_recorded(broker: Broker) -> None:
    """A failure whose message holds a lone surrogate is acknowledged like any other, its
    text kept with the surrogate escaped, not left to lapse as an interruption."""
    record = tasks.raises_undecodable_text.using(broker=broker).enqueue()
    worker(broker).run(burst=True)
    final = broker.get_result(record.id)
    assert (final.status, final.attempts) == (FAILED, 1)
    [error] = final.errors
    assert error.exception_class_path == "builtins.FileNotFoundError"
    assert error.message == "no such file: report-\\udcff.txt"
    assert "report-\\udcff.txt" in error.traceback


def test_an_exception_whose_str_raises_is_recorded(broker: Broker) -> None:
    """A failure whose str() itself raises is recorded as the task's own failure, with a
    placeholder message, not left to lapse as an interruption."""
    record = tasks.raises_unprintable.using(broker=broker).enqueue()
    worker(broker).run(burst=True)
    final = broker.get_result(record.id)
    assert (final.status, final.attempts) == (FAILED, 1)
    [error] = final.errors
    assert error.exception_class_path == "tests.core.tasks.Unprintable"
    assert error.message == "<exception str() failed>"


def test_async_task_runs(broker: Broker) -> None:
    """An async def task is awaited and its value stored."""
    record = tasks.async_double.using(broker=broker).enqueue(21)
    worker(broker).run(burst=True)
    assert broker.get_result(record.id).return_value == 42


def test_task_asking_for_context_gets_attempt_and_token(broker: Broker) -> None:
    """A first parameter named context receives the record, attempt and lease token."""
    record = tasks.report_context.using(broker=broker).enqueue()
    worker(broker).run(burst=True)
    value = broker.get_result(record.id).return_value
    assert value["attempt"] == 1
    assert value["id"] == record.id
    assert isinstance(value["token"], str)
    assert value["token"]


def test_return_value_the_codec_cannot_carry_fails_the_task(broker: Broker) -> None:
    """A datetime return value fails the task with an error naming the problem."""
    record = tasks.returns_datetime.using(broker=broker).enqueue()
    worker(broker).run(burst=True)
    final = broker.get_result(record.id)
    assert final.status is FAILED
    assert final.errors[-1].exception_class_path == "threadmill_core.errors.UnsupportedValue"
    assert "the return value is a datetime.datetime" in final.errors[-1].message


def test_an_unknown_task_goes_back_uncharged_then_is_quarantined_after_the_grace(
    broker: Broker, clock: FakeClock
) -> None:
    """A record naming a path no loaded task has is never imported nor run: it is given back
    uncharged, due UNKNOWN_TASK_DELAY later, until UNKNOWN_TASK_GRACE after its enqueue, then
    quarantined FAILED by the next worker that claims it and does not know it either."""
    planted = TaskResult(id=new_task_id(), task_path="os:system", args=["touch /tmp/pwned"])
    broker.backend.enqueue([planted])
    enqueued = clock.now()
    while clock.now() - enqueued < UNKNOWN_TASK_GRACE:
        worker(broker).run(burst=True)
        back = broker.get_result(planted.id)
        assert (back.status, back.attempts, back.errors, back.worker_ids) == (DEFERRED, 0, (), ())
        assert back.run_after == clock.now() + UNKNOWN_TASK_DELAY
        clock.advance(timedelta(minutes=3))
    worker(broker).run(burst=True)
    final = broker.get_result(planted.id)
    assert (final.status, final.attempts) == (FAILED, 1)
    assert [e.exception_class_path for e in final.errors] == [
        "threadmill_core.errors.TaskQuarantined"
    ]
    assert "os:system is not registered" in final.errors[-1].message


def test_a_task_unknown_to_one_worker_runs_on_a_worker_that_knows_it(
    broker: Broker, clock: FakeClock
) -> None:
    """A rolling deploy in one process: a worker without the task gives it back, not charged;
    a worker with it runs it once due: attempt 1, no error."""
    record = tasks.echo.using(broker=broker).enqueue("new")
    old = worker(broker, tasks={tasks.add.path: tasks.add})
    for _ in range(3):
        old.run(burst=True)
        back = broker.get_result(record.id)
        assert (back.status, back.attempts, back.errors) == (DEFERRED, 0, ())
        clock.advance(UNKNOWN_TASK_DELAY)
    worker(broker).run(burst=True)
    final = broker.get_result(record.id)
    assert (final.status, final.return_value, final.attempts, final.errors) == (
        SUCCESSFUL, "new", 1, (),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("make", "kind", "message"),
    [
        (lambda b: tasks.exits.using(broker=b).enqueue(2), "builtins.SystemExit", "2"),
        (lambda b: tasks.exits.using(broker=b).enqueue("bye"), "builtins.SystemExit", "bye"),
        (lambda b: tasks.interrupts.using(broker=b).enqueue(), "builtins.KeyboardInterrupt",
         "from the task"),
        (lambda b: tasks.cancelled.using(broker=b).enqueue(), "asyncio.exceptions.CancelledError",
         "cancelled inside the task"),
    ],
    ids=["sys.exit(2)", "sys.exit(str)", "KeyboardInterrupt", "CancelledError"],
)  # fmt: skip
def test_a_base_exception_from_a_task_is_its_failure_and_the_worker_goes_on(
    broker: Broker, make: Any, kind: str, message: str
) -> None:
    """SystemExit, KeyboardInterrupt or CancelledError raised by task code fail that task,
    with its traceback; the worker runs the next task and returns normally."""
    ended = make(broker)
    after = tasks.echo.using(broker=broker).enqueue("next")
    assert worker(broker, threads=1, prefetch=0).run(burst=True) == 2
    final = broker.get_result(ended.id)
    assert (final.status, final.attempts) == (FAILED, 1)
    [error] = final.errors
    assert (error.exception_class_path, error.message) == (kind, message)
    assert error.traceback.startswith("Traceback (most recent call last):")
    assert broker.get_result(after.id).return_value == "next"


def test_a_task_that_exits_meets_its_retry_policy(broker: Broker, clock: FakeClock) -> None:
    """SystemExit goes through the task's retry policy like any failure."""
    record = tasks.exits_then_succeeds.using(broker=broker).enqueue()
    w = worker(broker)
    w.run(burst=True)
    first = broker.get_result(record.id)
    assert (first.status, first.attempts) == (DEFERRED, 1)
    assert first.errors[0].exception_class_path == "builtins.SystemExit"
    clock.advance(timedelta(seconds=10))
    w.run(burst=True)
    final = broker.get_result(record.id)
    assert (final.status, final.return_value, final.attempts) == (
        SUCCESSFUL,
        "second time lucky",
        2,
    )


def test_expired_lease_is_reaped_and_retried_by_policy(broker: Broker, clock: FakeClock) -> None:
    """A task whose worker died while it ran is reaped after its lease, retried, and then
    succeeds."""
    record = tasks.flaky.using(broker=broker).enqueue(fail_times=0)
    [ghost] = broker.backend.claim(["default"], worker="ghost", lease_ttl=timedelta(seconds=30))
    assert ghost.task_id == record.id
    assert broker.backend.mark_started([ghost]) == [True]  # it ran, then its worker died

    clock.advance(timedelta(seconds=31))
    worker(broker).run(burst=True)  # its maintenance pass reaps the ghost's lease
    reaped = broker.get_result(record.id)
    assert (reaped.status, reaped.attempts) == (DEFERRED, 1)
    assert reaped.errors[0].exception_class_path == "threadmill_core.errors.AcknowledgementTimeout"

    clock.advance(timedelta(seconds=10))
    worker(broker).run(burst=True)
    final = broker.get_result(record.id)
    assert (final.status, final.attempts, final.return_value) == (SUCCESSFUL, 2, "ok after 2")
    assert broker.backend.complete(ghost, final) is None  # the ghost's late ack is refused


def test_a_dead_workers_prefetch_goes_back_uncharged_and_runs_once(
    broker: Broker, clock: FakeClock
) -> None:
    """A task a dead worker claimed but never started runs later as its first attempt: no
    error, no retry decision, whatever its retry policy."""
    record = tasks.echo.using(broker=broker).enqueue(1)
    broker.backend.claim(["default"], worker="ghost", lease_ttl=timedelta(seconds=30))
    clock.advance(timedelta(seconds=31))
    worker(broker).run(burst=True)  # its maintenance pass gives the task back, then runs it
    final = broker.get_result(record.id)
    assert (final.status, final.attempts, final.errors) == (SUCCESSFUL, 1, ())
    assert len(final.worker_ids) == 1
    assert "ghost" not in final.worker_ids


def test_a_task_given_back_has_its_start_recorded_before_it_runs(
    broker: Broker, clock: FakeClock
) -> None:
    """A task a dead worker claimed and never started runs later with its start recorded first:
    inside it, its lease can no longer be given back (release refuses a started claim)."""
    backend = broker.backend
    tasks.release_backend[:] = [backend]
    tasks.gave_back.clear()
    record = tasks.gives_itself_back.using(broker=broker).enqueue()
    backend.claim(["default"], worker="ghost", lease_ttl=timedelta(seconds=30))
    clock.advance(timedelta(seconds=31))
    worker(broker).run(burst=True)  # its maintenance pass gives the task back, then runs it
    assert tasks.gave_back == [None], "the start was not recorded before the task ran"
    final = broker.get_result(record.id)
    assert (final.status, final.attempts, final.errors) == (SUCCESSFUL, 1, ())


def test_a_task_given_back_after_an_expiry_that_a_worker_does_not_know_goes_back_unmarked(
    broker: Broker, clock: FakeClock
) -> None:
    """A task given back after an unstarted claim expired, then claimed by a worker that does
    not know it, goes back uncharged with no start recorded, and runs once on a worker that
    knows it: attempt 1, no error."""
    record = tasks.echo.using(broker=broker).enqueue("new")
    broker.backend.claim(["default"], worker="ghost", lease_ttl=timedelta(seconds=30))
    clock.advance(timedelta(seconds=31))
    worker(broker, tasks={tasks.add.path: tasks.add}).run(burst=True)  # reaped, then given back
    back = broker.get_result(record.id)
    assert (back.status, back.attempts, back.errors) == (DEFERRED, 0, ())
    clock.advance(UNKNOWN_TASK_DELAY)
    worker(broker).run(burst=True)
    final = broker.get_result(record.id)
    assert (final.status, final.return_value, final.attempts, final.errors) == (
        SUCCESSFUL, "new", 1, (),
    )  # fmt: skip


def test_expired_leases_under_the_default_policy_are_retried_up_to_the_bound(
    broker: Broker, clock: FakeClock
) -> None:
    """A started task that names no policy is retried after each of its first
    INTERRUPTION_RETRIES lease expiries, and FAILED after the next one."""
    record = tasks.echo.using(broker=broker).enqueue(1)
    for attempt in range(1, INTERRUPTION_RETRIES + 2):
        clock.advance(timedelta(seconds=5))  # past the previous retry's delay (1, 2, 4 s + 10 %)
        leases = broker.backend.claim(["default"], worker="ghost", lease_ttl=timedelta(seconds=5))
        assert [lease.record.attempts for lease in leases] == [attempt]
        broker.backend.mark_started(leases)
        clock.advance(timedelta(seconds=6))
        assert reap(broker.backend) == 1
        retried = broker.get_result(record.id)
        assert retried.status is (FAILED if attempt > INTERRUPTION_RETRIES else DEFERRED)
    assert [e.exception_class_path for e in retried.errors] == [
        "threadmill_core.errors.AcknowledgementTimeout"
    ] * (INTERRUPTION_RETRIES + 1)


@pytest.mark.parametrize("waits", [tasks.wait_for_release, tasks.wait_for_release_without_context])
def test_lost_lease_is_told_to_the_task_and_its_outcome_not_written(
    broker: Broker, clock: FakeClock, waits: Task[[], bool], caplog: pytest.LogCaptureFixture
) -> None:
    """When a heartbeat is refused the context (if the task takes one) says so and the
    result is not sent, nor stored."""
    record = waits.using(broker=broker).enqueue()
    through, counted = watched(broker)
    w = worker(through, lease_ttl=timedelta(seconds=30))
    runner = threading.Thread(target=w.run, kwargs={"burst": True})
    runner.start()
    try:
        assert tasks.started.wait(timeout=30)  # the task runs, its lease in the heartbeat
        wait_for_a_mark(counted)  # and its start is recorded: an expiry charges it
        clock.advance(timedelta(seconds=31))
        assert reap(broker.backend) == 1  # no_retry: FAILED by the reaper
        w.heartbeat()  # refused: the worker learns the lease is lost
    finally:
        tasks.release.set()
        runner.join(timeout=30)
    final = broker.get_result(record.id)
    assert final.status is FAILED
    assert final.return_value is None  # the task returned True, but it was not written
    assert final.errors[-1].exception_class_path.endswith("AcknowledgementTimeout")
    assert "outcome not written" in caplog.text  # not sent to be refused: not sent at all


def test_heartbeat_keeps_a_long_task_alive(broker: Broker, clock: FakeClock) -> None:
    """Heartbeats renew the lease, so a task outliving several TTLs is not reaped."""
    record = tasks.wait_for_release.using(broker=broker).enqueue()
    w = worker(broker, lease_ttl=timedelta(seconds=30))
    runner = threading.Thread(target=w.run, kwargs={"burst": True})
    runner.start()
    try:
        assert tasks.started.wait(timeout=30)
        for _ in range(4):  # four lease lifetimes, each renewed before it lapses
            clock.advance(timedelta(seconds=20))
            w.heartbeat()
            assert reap(broker.backend) == 0
    finally:
        tasks.release.set()
        runner.join(timeout=30)
    final = broker.get_result(record.id)
    assert (final.status, final.return_value, final.attempts) == (SUCCESSFUL, False, 1)


@pytest.mark.parametrize("threads", [0, -1, 1.5])
def test_bad_thread_count_is_refused(broker: Broker, threads: object) -> None:
    """A worker needs a positive whole number of threads."""
    with pytest.raises(ValueError, match="threads"):
        Worker(broker, threads=threads)  # type: ignore[arg-type]  # the bad value under test


class CountingBackend:
    """Wraps a backend and records the batch size of every claim and decide_many."""

    def __init__(self, broker: Broker) -> None:
        self.inner = broker.backend
        self.claims: list[int] = []
        self.decisions: list[int] = []
        self.released: list[int] = []
        self.marks: list[int] = []

    def install(self, w: Worker) -> None:
        inner = self.inner

        def claim(*args: object, **kwargs: object) -> list[object]:
            leases = inner.claim(*args, **kwargs)  # type: ignore[arg-type]  # a stand-in: calls pass through as they come
            self.claims.append(len(leases))
            return leases  # type: ignore[return-value]  # a stand-in: calls pass through as they come

        def decide_many(decisions: list[object]) -> list[object]:
            self.decisions.append(len(decisions))
            return inner.decide_many(decisions)  # type: ignore[arg-type,return-value]  # a stand-in: calls pass through as they come

        def release(leases: list[object]) -> list[object]:
            self.released.append(len(leases))
            return inner.release(leases)  # type: ignore[arg-type,return-value]  # a stand-in: calls pass through as they come

        def mark_started(leases: list[object]) -> list[bool]:
            self.marks.append(len(leases))
            return inner.mark_started(leases)  # type: ignore[arg-type]  # a stand-in: calls pass through as they come

        w.backend = type("Counted", (), {})()  # only what the worker calls, no fallbacks
        for name in ("now", "extend", "extend_many", "wait_for_tasks", "claim_expired",
                     "promote_due", "get", "next_due", "peek"):  # fmt: skip
            setattr(w.backend, name, getattr(inner, name))
        w.backend.claim = claim  # type: ignore[attr-defined]  # a stand-in backend, built attribute by attribute
        w.backend.decide_many = decide_many  # type: ignore[attr-defined]  # a stand-in backend, built attribute by attribute
        w.backend.release = release  # type: ignore[attr-defined]  # a stand-in backend, built attribute by attribute
        w.backend.mark_started = mark_started  # type: ignore[attr-defined]  # a stand-in backend, built attribute by attribute


def counted_burst(broker: Broker, *, threads: int, prefetch: int) -> tuple[int, CountingBackend]:
    """Run a burst worker whose claims and acknowledgements are counted; (tasks run, counts)."""
    w = worker(broker, threads=threads, prefetch=prefetch, maintenance=False)
    counted = CountingBackend(broker)
    counted.install(w)
    return w.run(burst=True), counted


def test_prefetch_claims_in_batches_and_every_task_is_acknowledged_once(broker: Broker) -> None:
    """One thread with a prefetch of 8: claims bring several tasks; every outcome lands."""
    records = broker.enqueue_many(tasks.echo, [((i,), {}) for i in range(40)])
    ran, counted = counted_burst(broker, threads=1, prefetch=8)
    assert ran == 40
    finals = [broker.get_result(r.id) for r in records]
    assert [(f.status, f.return_value, f.attempts) for f in finals] == [
        (SUCCESSFUL, i, 1) for i in range(40)
    ]
    assert counted.claims[0] == 9  # the thread's task and the prefetch, in one claim
    assert len(counted.claims) < 40 / 4, counted.claims
    assert sum(counted.decisions) == 40
    assert counted.released == []
    assert counted.marks == [], "tasks decided within MARK_DELAY are never marked"


def test_one_thread_claims_whole_batches_once_its_prefetch_has_run_out(broker: Broker) -> None:
    """Nothing runs while the only thread claims, so it claims the whole prefetch each time.

    A half-empty refill would only halve every batch (and double the round
    trips); with several threads the others run the rest meanwhile.
    """
    # Tasks slow enough that outcomes are sent while the prefetch still holds
    # some (each waits at most ACK_DELAY), which is when a refill could start.
    broker.enqueue_many(tasks.nap, [((0.004,), {})] * 20)
    ran, counted = counted_burst(broker, threads=1, prefetch=8)
    assert ran == 20
    assert counted.claims[:3] == [9, 9, 2], counted.claims
    assert sum(counted.decisions) == 20
    assert len(counted.decisions) > len(counted.claims)  # outcomes did go mid-prefetch


def test_a_claims_worth_of_outcomes_goes_in_one_acknowledgement(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A room bigger than ACK_BATCH is acknowledged whole, not as ACK_BATCH and a straggler.

    The oldest outcome's deadline (ACK_DELAY) is set far off: sixty-five tasks
    on a loaded machine can outlast 10 ms, and the batch would go early.
    """
    monkeypatch.setattr(scheduler, "ACK_DELAY", 60.0)
    broker.enqueue_many(tasks.echo, [((i,), {}) for i in range(130)])
    ran, counted = counted_burst(broker, threads=1, prefetch=64)
    assert ran == 130
    assert counted.claims[:2] == [65, 65]
    assert counted.decisions == [65, 65]


def test_prefetch_zero_claims_only_for_free_threads(broker: Broker) -> None:
    """prefetch=0 holds no task beyond the threads: each claim asks for what is free."""
    broker.enqueue_many(tasks.echo, [((i,), {}) for i in range(6)])
    ran, counted = counted_burst(broker, threads=2, prefetch=0)
    assert ran == 6
    assert max(counted.claims) <= 2


@pytest.mark.parametrize("prefetch", [-1, 1.5, "2"])
def test_bad_prefetch_is_refused(broker: Broker, prefetch: object) -> None:
    """prefetch is a whole number of tasks, 0 or more."""
    with pytest.raises(ValueError, match="prefetch"):
        Worker(broker, prefetch=prefetch)  # type: ignore[arg-type]  # the bad value under test


def test_a_graceful_stop_gives_back_the_prefetch_without_counting_attempts(
    broker: Broker,
) -> None:
    """stop() while the only thread runs a task: the prefetched tasks go back READY at once,
    their claim undone, while that task runs on."""
    first = tasks.wait_for_release.using(broker=broker).enqueue()
    rest = broker.enqueue_many(tasks.echo, [((i,), {}) for i in range(5)])
    w = worker(broker, threads=1, prefetch=5, maintenance=False)
    counted = CountingBackend(broker)
    counted.install(w)
    runner = threading.Thread(target=w.run)
    runner.start()
    try:
        assert tasks.started.wait(timeout=30)
        assert [broker.get_result(r.id).status for r in rest] == [TaskResultStatus.RUNNING] * 5
        w.stop()
        wait_until(
            lambda: all(broker.get_result(r.id).status is READY for r in rest),
            30,
            "the prefetch to go back while the task runs",
        )
        assert broker.get_result(first.id).status is TaskResultStatus.RUNNING
    finally:
        tasks.release.set()
        runner.join(timeout=30)
    assert not runner.is_alive()
    assert counted.released == [5]  # in one call, by the heartbeat thread
    assert broker.get_result(first.id).status is SUCCESSFUL
    for record in rest:
        back = broker.get_result(record.id)
        assert (back.status, back.attempts, back.worker_ids, back.started_at) == (
            READY,
            0,
            (),
            None,
        )


def test_an_outcome_lands_within_the_delay_while_the_only_thread_runs_a_long_task(
    broker: Broker,
) -> None:
    """Regression: with one thread, a task's outcome waited for the end of the long task run
    after it; it lands within ACK_DELAY (here, well within a second) while that one runs."""
    [short] = broker.enqueue_many(tasks.echo, [((1,), {})])
    long = tasks.wait_for_release.using(broker=broker).enqueue()
    w = worker(broker, threads=1, prefetch=1, maintenance=False)
    runner = threading.Thread(target=w.run)
    runner.start()
    try:
        assert tasks.started.wait(timeout=30)  # the short task has ended: the long one runs
        began = time.monotonic()
        wait_until(lambda: broker.get_result(short.id).status is SUCCESSFUL, 10, "the outcome")
        landed = time.monotonic() - began
        assert broker.get_result(long.id).status is TaskResultStatus.RUNNING
    finally:
        w.stop()
        tasks.release.set()
        runner.join(timeout=30)
    assert not runner.is_alive()
    assert landed < 1.0, landed
    assert broker.get_result(short.id).return_value == 1
    assert broker.get_result(long.id).status is SUCCESSFUL


def test_a_stop_before_run_is_kept_and_run_claims_nothing(broker: Broker) -> None:
    """stop() before run (a signal while a worker process starts): run returns at once and
    claims nothing; the stop is spent, so the next run works."""
    [record] = broker.enqueue_many(tasks.echo, [((1,), {})])
    w = worker(broker, threads=1, maintenance=False)
    w.stop()
    ran: list[int] = []
    runner = threading.Thread(target=lambda: ran.append(w.run()))
    runner.start()
    runner.join(timeout=10)
    if runner.is_alive():  # the stop was forgotten: end the run the test started
        w.stop()
        runner.join(timeout=30)
        pytest.fail("run() forgot a stop() made before it")
    assert ran == [0]
    assert broker.get_result(record.id).status is READY
    assert not w.stopping
    assert w.run(burst=True) == 1
    assert broker.get_result(record.id).status is SUCCESSFUL


def test_stop_now_gives_back_the_prefetch_and_abandons_the_running_task(
    broker: Broker, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A forced stop gives the prefetch back in one call at once, names the task it abandons
    and what becomes of it, and renews nothing more: the reaper then charges that task."""
    running = tasks.wait_for_release.using(broker=broker).enqueue()
    rest = broker.enqueue_many(tasks.echo, [((i,), {}) for i in range(3)])
    through, counted = watched(broker)
    w = worker(through, threads=1, prefetch=3, maintenance=False)
    runner = threading.Thread(target=w.run)
    runner.start()
    try:
        assert tasks.started.wait(timeout=30)
        wait_for_a_mark(counted)
        assert w.stop_now() == [running.id]
        for record in rest:
            back = broker.get_result(record.id)
            assert (back.status, back.attempts, back.worker_ids) == (READY, 0, ())
        assert counted.calls["release"] == 1
        assert broker.get_result(running.id).status is TaskResultStatus.RUNNING
    finally:
        tasks.release.set()
        runner.join(timeout=30)
    assert not runner.is_alive()
    [line] = [r.getMessage() for r in caplog.records if "abandoned" in r.getMessage()]
    assert running.id in line
    assert "its retry policy decides" in line
    assert broker.get_result(running.id).status is TaskResultStatus.RUNNING  # outcome not sent
    clock.advance(timedelta(seconds=31))
    assert reap(broker.backend) == 1  # started, so charged, under no_retry: FAILED
    assert broker.get_result(running.id).status is FAILED


class StopsDuringAnAcknowledgement(MemoryBackend):
    """A memory backend that calls `during` inside its first `decide_many`, before it
    decides: whatever `during` does happens while that acknowledgement is on its way."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock=clock)
        self.during: Callable[[], object] | None = None

    def decide_many(self, decisions: Sequence[Decision]) -> list[TaskResult | None]:
        during, self.during = self.during, None
        if during is not None:
            during()
        return super().decide_many(decisions)


def test_outcomes_sent_by_stop_now_during_an_acknowledgement_are_all_counted(
    clock: FakeClock,
) -> None:
    """A forced stop that sends the outcome waiting for its batch while another batch is on
    its way: both tasks are acknowledged, and `processed` and `run` count both."""
    backend = StopsDuringAnAcknowledgement(clock)
    broker = Broker(backend, url="memory://")
    quick = tasks.echo.using(broker=broker).enqueue(1)
    slow = tasks.wait_for_release_without_context.using(broker=broker).enqueue()
    w = worker(broker, threads=2, prefetch=0, maintenance=False)

    def stop_now_once_the_slow_outcome_waits() -> None:
        tasks.release.set()  # the slow task ends; its outcome waits for this one to land
        wait_until(lambda: w.census() == (0, 0), 30, "the slow task to end")
        assert w.stop_now() == []

    backend.during = stop_now_once_the_slow_outcome_waits
    ran: list[int] = []
    runner = threading.Thread(target=lambda: ran.append(w.run()))
    runner.start()
    runner.join(timeout=30)
    assert not runner.is_alive()
    assert [broker.get_result(r.id).status for r in (quick, slow)] == [SUCCESSFUL, SUCCESSFUL]
    assert (w.processed, ran) == (2, [2])


def test_heartbeats_renew_prefetched_leases_too(broker: Broker, clock: FakeClock) -> None:
    """A prefetched task waiting behind a long one keeps its lease and runs once."""
    long = tasks.wait_for_release.using(broker=broker).enqueue()
    waiting = tasks.echo.using(broker=broker).enqueue("later")
    w = worker(broker, threads=1, prefetch=1, lease_ttl=timedelta(seconds=30))
    runner = threading.Thread(target=w.run, kwargs={"burst": True})
    runner.start()
    try:
        assert tasks.started.wait(timeout=30)
        assert broker.get_result(waiting.id).status is TaskResultStatus.RUNNING
        for _ in range(3):
            clock.advance(timedelta(seconds=20))
            w.heartbeat()
            assert reap(broker.backend) == 0
    finally:
        tasks.release.set()
        runner.join(timeout=30)
    assert broker.get_result(long.id).status is SUCCESSFUL
    final = broker.get_result(waiting.id)
    assert (final.status, final.return_value, final.attempts) == (SUCCESSFUL, "later", 1)


def test_a_prefetched_task_whose_lease_was_lost_is_not_run_under_it(
    broker: Broker, clock: FakeClock
) -> None:
    """When both leases lapse, the reaper charges the running task and gives the waiting one
    back uncharged; the worker drops the waiting one, then claims it afresh and runs it once."""
    long = tasks.wait_for_release.using(broker=broker).enqueue()
    waiting = tasks.echo.using(broker=broker).enqueue("twice?")
    through, counted = watched(broker)
    w = worker(through, threads=1, prefetch=1, lease_ttl=timedelta(seconds=30), maintenance=False)
    runner = threading.Thread(target=w.run, kwargs={"burst": True})
    runner.start()
    try:
        assert tasks.started.wait(timeout=30)
        wait_for_a_mark(counted)
        clock.advance(timedelta(seconds=31))
        assert reap(broker.backend) == 1  # the running one: echo's wait never started
        back = broker.get_result(waiting.id)
        assert (back.status, back.attempts, back.errors) == (READY, 0, ())
        w.heartbeat()  # refused for both: the running task learns it, the waiting one is dropped
    finally:
        tasks.release.set()
        runner.join(timeout=30)
    final = broker.get_result(waiting.id)
    assert (final.status, final.attempts, final.errors) == (SUCCESSFUL, 1, ())
    assert tasks.calls.count(("echo", "twice?")) == 1
    assert broker.get_result(long.id).status is FAILED


def test_an_unexpected_backend_error_stops_the_worker_and_is_raised(broker: Broker) -> None:
    """Not an outage but a bug: the worker finishes what it holds, stops, and run() raises it."""
    records = broker.enqueue_many(tasks.echo, [((i,), {}) for i in range(5)])
    w = worker(broker, threads=2, prefetch=0, maintenance=False)
    inner_claim = broker.backend.claim

    class Broken(RuntimeError):
        pass

    def claim(*args: object, **kwargs: object) -> list[object]:
        if not claimed:
            claimed.extend(inner_claim(*args, **kwargs))  # type: ignore[arg-type]  # a stand-in: calls pass through as they come
            return claimed
        raise Broken("a bug in the backend")

    claimed: list[object] = []
    w.backend = type("Half", (), {})()
    for name in ("now", "extend", "extend_many", "wait_for_tasks", "next_due", "decide_many",
                 "release", "mark_started", "get"):  # fmt: skip
        setattr(w.backend, name, getattr(broker.backend, name))
    w.backend.claim = claim  # type: ignore[attr-defined]  # a stand-in backend, built attribute by attribute
    raised: list[BaseException] = []

    def run() -> None:
        try:
            w.run(burst=True)
        except BaseException as exc:
            raised.append(exc)

    runner = threading.Thread(target=run)
    runner.start()
    runner.join(timeout=30)
    assert not runner.is_alive(), "the worker hung after the error"
    assert [type(e) for e in raised] == [Broken]
    assert w.stopping
    # What it had claimed before the error still ran and was acknowledged.
    assert len(claimed) == 2
    finals = [broker.get_result(r.id).status for r in records]
    assert finals.count(SUCCESSFUL) == 2
    assert finals.count(READY) == 3
