"""The memory backend under threads: atomic operations, and idle waiters woken by new work.

Waits are bounded by generous `join` timeouts, never asserted on timing: a
waiter blocked for a minute must come back well within the bound once work
arrives, however slow the machine.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta

import attrs
import pytest

from tests.memory.helpers import LEASE, make_task
from threadmill_core.clock import FakeClock
from threadmill_core.models import Lease, TaskResultStatus
from threadmill_memory import MemoryBackend

THREADS = 8
#: How long a waiter would block if nothing woke it; the test fails long before.
LONG_WAIT = timedelta(minutes=10)
#: How long a test gives a woken waiter to return.
BOUND = 30.0


def run_threads(target: Callable[[int], None], count: int = THREADS) -> None:
    """Run `target(index)` in `count` threads started together; re-raise the first failure."""
    barrier = threading.Barrier(count)
    failures: list[BaseException] = []

    def body(index: int) -> None:
        try:
            barrier.wait(timeout=BOUND)
            target(index)
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=body, args=(i,), daemon=True) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=BOUND)
    assert not any(thread.is_alive() for thread in threads), "a thread is stuck"
    if failures:
        raise failures[0]


def test_concurrent_claims_take_each_task_exactly_once(backend: MemoryBackend) -> None:
    """Eight threads claiming and completing 500 tasks together claim each task exactly once."""
    stored = backend.enqueue([make_task() for _ in range(500)])
    claimed: list[list[str]] = [[] for _ in range(THREADS)]

    def work(index: int) -> None:
        while leases := backend.claim(
            ["default"], worker=f"w{index}", lease_ttl=LEASE, limit=1 + index % 4
        ):
            for lease in leases:
                claimed[index].append(lease.task_id)
                done = attrs.evolve(lease.record, status=TaskResultStatus.SUCCESSFUL)
                assert backend.complete(lease, done) is not None

    run_threads(work)
    every = [task_id for ids in claimed for task_id in ids]
    assert sorted(every) == sorted(record.id for record in stored)
    assert backend.counts()["default"].successful == 500


def test_concurrent_enqueues_of_one_id_store_it_once(backend: MemoryBackend) -> None:
    """Threads enqueueing the same ids at once store each id once and all get the same record."""
    records = [make_task() for _ in range(50)]
    answers: list[list[object]] = [[] for _ in range(THREADS)]

    def produce(index: int) -> None:
        answers[index] = list(backend.enqueue(records))

    run_threads(produce)
    assert all(answer == answers[0] for answer in answers)
    assert backend.counts()["default"].ready == 50


def test_concurrent_reapers_never_share_a_task(backend: MemoryBackend, clock: FakeClock) -> None:
    """Reapers racing over expired leases each claim disjoint started tasks, every one once,
    and give back every unstarted one once."""
    backend.enqueue([make_task() for _ in range(400)])
    leases = backend.claim(["default"], worker="w", lease_ttl=LEASE, limit=400)
    started = leases[::2]
    assert backend.mark_started(started) == [True] * 200
    clock.advance(LEASE)
    reaped: list[list[Lease]] = [[] for _ in range(THREADS)]

    def reap(index: int) -> None:
        while leases := backend.claim_expired(limit=3, claim_ttl=LEASE):
            reaped[index] += leases

    run_threads(reap)
    ids = [lease.task_id for leases in reaped for lease in leases]
    assert len(ids) == len(set(ids)) == 200
    assert set(ids) == {lease.task_id for lease in started}
    back = backend.peek("default", TaskResultStatus.READY, limit=1000)
    assert len(back) == 200
    assert all(record.attempts == 0 for record in back)


class Waiter:
    """A thread blocked in `wait_for_tasks` on `queues` for a long time."""

    def __init__(self, backend: MemoryBackend, queues: list[str]) -> None:
        started = threading.Event()

        def wait() -> None:
            started.set()
            backend.wait_for_tasks(queues, LONG_WAIT)

        self.thread = threading.Thread(target=wait, daemon=True)  # a failed test must not hang
        self.thread.start()
        # The waiter usually runs on until it blocks, so the wake-up path is
        # what gets tested (with notify_all removed, these tests fail); if it
        # has not blocked yet, it finds the work already there and returns too.
        started.wait(timeout=BOUND)

    def returned(self) -> bool:
        self.thread.join(timeout=BOUND)
        return not self.thread.is_alive()


@attrs.frozen
class Idle:
    """A backend with nothing READY in "default": one task RUNNING, one FAILED, one DEFERRED."""

    backend: MemoryBackend
    clock: FakeClock
    running: Lease


def make_idle(backend: MemoryBackend, clock: FakeClock) -> Idle:
    backend.enqueue([make_task(), make_task(), make_task(run_after=clock.now() + LEASE)])
    running, failing = backend.claim(["default"], worker="w", lease_ttl=LEASE, limit=2)
    failed = attrs.evolve(failing.record, status=TaskResultStatus.FAILED)
    assert backend.complete(failing, failed) is not None
    return Idle(backend=backend, clock=clock, running=running)


def _enqueue(idle: Idle) -> None:
    idle.backend.enqueue([make_task()])


def _retry_now(idle: Idle) -> None:
    assert idle.backend.retry(idle.running, idle.running.record, timedelta(0)) is not None


def _requeue(idle: Idle) -> None:
    [failed] = idle.backend.peek("default", TaskResultStatus.FAILED)
    assert idle.backend.requeue(failed.id) is not None


def _promote(idle: Idle) -> None:
    idle.clock.advance(LEASE)
    assert idle.backend.promote_due(limit=1) == 1


def _give_back_expired(idle: Idle) -> None:
    idle.clock.advance(LEASE)  # the running task's claim, never started, expires
    assert idle.backend.claim_expired(limit=1, claim_ttl=LEASE) == []


def _close(idle: Idle) -> None:
    idle.backend.close()


@pytest.mark.parametrize(
    "wake",
    [_enqueue, _retry_now, _requeue, _promote, _give_back_expired, _close],
    ids=["enqueue", "zero-delay-retry", "requeue", "promote_due", "give-back", "close"],
)
def test_an_idle_waiter_wakes_when_a_task_becomes_ready(
    backend: MemoryBackend, clock: FakeClock, wake: Callable[[Idle], None]
) -> None:
    """A worker waiting with a long timeout returns promptly once a task becomes READY."""
    idle = make_idle(backend, clock)
    waiter = Waiter(backend, ["default"])
    wake(idle)
    assert waiter.returned()


def test_wait_returns_at_once_when_work_is_already_there(
    backend: MemoryBackend, clock: FakeClock
) -> None:
    """A wait on queues holding a READY or a due DEFERRED task returns without blocking."""
    backend.enqueue(
        [make_task(queue="ready"), make_task(queue="due", run_after=clock.now() + LEASE)]
    )
    clock.advance(LEASE)
    assert Waiter(backend, ["empty", "ready"]).returned()
    assert Waiter(backend, ["due"]).returned()


def test_wait_with_no_time_left_returns(backend: MemoryBackend) -> None:
    """A wait with a zero or negative timeout returns even though nothing is ready."""
    assert backend.wait_for_tasks(["default"], timedelta(0)) is False
    assert backend.wait_for_tasks(["default"], timedelta(seconds=-1)) is False


def test_a_wait_says_whether_it_found_work(backend: MemoryBackend, clock: FakeClock) -> None:
    """wait_for_tasks says False after a quiet timeout, True once a READY or due task is there."""
    assert backend.wait_for_tasks(["default"], timedelta(milliseconds=1)) is False
    backend.enqueue([make_task(queue="later", run_after=clock.now() + LEASE)])
    assert backend.wait_for_tasks(["later"], timedelta(milliseconds=1)) is False
    clock.advance(LEASE)
    assert backend.wait_for_tasks(["later"], timedelta(milliseconds=1)) is True
    backend.enqueue([make_task()])
    assert backend.wait_for_tasks(["default"], LONG_WAIT) is True
