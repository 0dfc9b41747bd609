"""Idle workers block on LISTEN: woken at once, never misled, silent while they wait."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta

import pytest

from tests.conftest import PostgresDatabase
from tests.postgres.conftest import LEASE, CountingConnection, admin, tasks
from threadmill_core import Broker, Worker
from threadmill_core.backend import NOTHING_DEFERRED
from threadmill_core.models import TaskResultStatus
from threadmill_core.testing import Harness
from threadmill_postgres import PostgresBackend

pytestmark = pytest.mark.postgres

QUIET = timedelta(milliseconds=300)
LONG = timedelta(seconds=30)


def listener_pid(database: PostgresDatabase, backend: PostgresBackend) -> int | None:
    """The server process of `backend`'s LISTEN connection, if it has one."""
    rows = admin(
        database,
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND query = %s",
        (f'LISTEN "{backend.channel}"',),
    )
    return rows[0][0] if rows else None


def timed(fn: Callable[[], bool]) -> tuple[bool, float]:
    started = time.monotonic()
    answer = fn()
    return answer, time.monotonic() - started


def test_a_wait_says_whether_a_wake_up_came(make_backend: Callable[..., PostgresBackend]) -> None:
    """False after a quiet timeout; True at once when another process stores a task."""
    namespace = make_backend().namespace
    waiter, producer = make_backend(namespace=namespace), make_backend(namespace=namespace)
    # The LISTEN connection up first, so that the claim marks where the wait counts from
    # (a wait with no mark looks at the table instead, and a look may find a task before
    # its notification arrives, which then reads as a wake-up still to take).
    assert waiter.wait_for_tasks(["a", "b"], QUIET) is False
    waiter.claim(["a", "b"], worker="w", lease_ttl=LEASE)  # empty: the wait counts from here
    assert waiter.wait_for_tasks(["a", "b"], QUIET) is False
    producer.enqueue(tasks(1, queue="b"))
    woken, took = timed(lambda: waiter.wait_for_tasks(["a", "b"], LONG))
    assert woken is True
    assert took < 5.0
    assert waiter.wait_for_tasks(["a", "b"], QUIET) is False, "the wake-up was taken"
    # A deferred task wakes a worker too, so that it learns when the task falls due.
    producer.enqueue(tasks(1, queue="a", run_after=producer.now() + timedelta(hours=1)))
    assert waiter.wait_for_tasks(["a", "b"], LONG) is True
    assert waiter.wait_for_tasks(["a", "b"], QUIET) is False


def test_a_task_stored_between_an_empty_claim_and_the_wait_is_not_slept_through(
    make_backend: Callable[..., PostgresBackend],
) -> None:
    """The wake-up that came after the claim began, but before the wait, ends the wait at once."""
    namespace = make_backend().namespace
    waiter, producer = make_backend(namespace=namespace), make_backend(namespace=namespace)
    assert waiter.wait_for_tasks(["q"], QUIET) is False  # the LISTEN connection is up
    assert waiter.claim(["q"], worker="w", lease_ttl=LEASE) == []
    producer.enqueue(tasks(1, queue="q"))
    time.sleep(0.2)  # the notification arrives before the wait begins
    woken, took = timed(lambda: waiter.wait_for_tasks(["q"], LONG))
    assert woken is True
    assert took < 1.0
    assert len(waiter.claim(["q"], worker="w", lease_ttl=LEASE)) == 1


def test_other_queues_and_other_namespaces_do_not_wake_a_wait(
    make_backend: Callable[..., PostgresBackend],
) -> None:
    """A task for a queue not waited on, or in another namespace, leaves the wait asleep."""
    mine = make_backend()
    same_queues_elsewhere = make_backend()
    neighbour = make_backend(namespace=mine.namespace)
    mine.claim(["q"], worker="w", lease_ttl=LEASE)
    assert mine.wait_for_tasks(["q"], QUIET) is False
    result: list[bool] = []
    waiting = threading.Thread(target=lambda: result.append(mine.wait_for_tasks(["q"], QUIET * 3)))
    waiting.start()
    time.sleep(0.1)
    same_queues_elsewhere.enqueue(tasks(1, queue="q"))
    neighbour.enqueue(tasks(1, queue="other"))
    waiting.join(timeout=10)
    assert result == [False]


def test_an_idle_wait_sends_no_statement(counted: Harness) -> None:
    """A quiet wait of a second costs the pool nothing: only the LISTEN connection is open."""
    backend = counted.backend
    assert isinstance(backend, PostgresBackend)
    backend.claim(["q"], worker="w", lease_ttl=LEASE)
    backend.wait_for_tasks(["q"], QUIET)  # starts the LISTEN connection
    backend.claim(["q"], worker="w", lease_ttl=LEASE)
    before = len(CountingConnection.executed)
    assert backend.wait_for_tasks(["q"], timedelta(seconds=1)) is False
    assert CountingConnection.executed[before:] == []
    listener = backend._listener
    assert listener is not None
    assert listener.connections == 1


def test_a_lost_listen_connection_is_made_again_and_waits_go_on(
    make_backend: Callable[..., PostgresBackend], database: PostgresDatabase
) -> None:
    """pg_terminate_backend on the LISTEN connection: the wait returns, the next ones are woken."""
    namespace = make_backend().namespace
    waiter, producer = make_backend(namespace=namespace), make_backend(namespace=namespace)
    waiter.claim(["q"], worker="w", lease_ttl=LEASE)
    assert waiter.wait_for_tasks(["q"], QUIET) is False
    pid = listener_pid(database, waiter)
    assert pid is not None
    answers: list[bool] = []
    waiting = threading.Thread(target=lambda: answers.append(waiter.wait_for_tasks(["q"], LONG)))
    waiting.start()
    time.sleep(0.1)
    admin(database, "SELECT pg_terminate_backend(%s)", (pid,))
    waiting.join(timeout=10)
    assert answers == [True], "a wait cannot tell what it missed while disconnected"
    deadline = time.monotonic() + 10
    while listener_pid(database, waiter) in (None, pid):
        assert time.monotonic() < deadline, "the LISTEN connection was not made again"
        time.sleep(0.05)
    waiter.claim(["q"], worker="w", lease_ttl=LEASE)
    producer.enqueue(tasks(1, queue="q"))
    assert waiter.wait_for_tasks(["q"], LONG) is True
    listener = waiter._listener
    assert listener is not None
    assert listener.connections == 2


def test_close_ends_every_wait_at_once(make_backend: Callable[..., PostgresBackend]) -> None:
    """A backend closed while threads wait on it returns them all within a moment."""
    backend = make_backend()
    backend.claim(["q"], worker="w", lease_ttl=LEASE)
    backend.wait_for_tasks(["q"], QUIET)
    answers: list[bool] = []
    waiting = [
        threading.Thread(target=lambda: answers.append(backend.wait_for_tasks(["q"], LONG)))
        for _ in range(3)
    ]
    for thread in waiting:
        thread.start()
    time.sleep(0.1)
    started = time.monotonic()
    backend.close()
    for thread in waiting:
        thread.join(timeout=10)
    assert answers == [True, True, True]
    assert time.monotonic() - started < 5


def test_next_due_counts_down_to_the_earliest_deferred_task(harness: Harness) -> None:
    """next_due: nothing deferred, then the earliest due time on the database's clock."""
    backend = harness.backend
    assert backend.next_due() == NOTHING_DEFERRED
    backend.enqueue(tasks(1, run_after=backend.now() + timedelta(minutes=5)))
    backend.enqueue(tasks(1, run_after=backend.now() + timedelta(minutes=2)))
    assert backend.next_due() == timedelta(minutes=2)
    harness.advance(timedelta(minutes=3))
    assert backend.next_due() == timedelta(0)


def test_an_idle_worker_without_maintenance_runs_a_task_deferred_meanwhile_when_due(
    make_backend: Callable[..., PostgresBackend],
) -> None:
    """A deferred enqueue wakes an idle worker, which learns the due time and claims it then."""
    from tests.faults import fault_tasks

    backend = make_backend()
    broker = Broker(backend, url="postgresql://")
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
