"""A `Worker` with the default, adaptive prefetch, in this process on memory://.

Its claims start at threads plus threads (the window's starting size) and
grow while short tasks keep the queue full; a fixed ``prefetch`` keeps
them fixed. Long tasks claimed in bulk by a window grown on short ones go
back for a peer once long runs have shrunk it. The rule itself is tested
in tests/core/test_prefetch_window.py, the scheduler's room in
tests/worker/test_adaptive_room.py.
"""

from __future__ import annotations

import threading

from tests.core import tasks
from tests.core.test_worker import CountingBackend, worker
from tests.faults.runs import wait_until
from threadmill_core import Broker, TaskResultStatus, Worker


def test_a_default_worker_claims_growing_batches_of_short_tasks(broker: Broker) -> None:
    """400 quick tasks, one thread, no --prefetch: the first claims are of two, later ones
    larger than any fixed default would ask; every task ran once, nothing was given back."""
    records = broker.enqueue_many(tasks.echo, [((i,), {}) for i in range(400)])
    w = worker(broker, threads=1, maintenance=False)
    assert w.prefetch is None
    counted = CountingBackend(broker)
    counted.install(w)
    assert w.run(burst=True) == 400
    assert counted.claims[:2] == [2, 2], counted.claims
    assert max(counted.claims) > 4, counted.claims
    assert counted.released == []
    finals = [broker.get_result(r.id) for r in records]
    assert {(f.status, f.attempts) for f in finals} == {(TaskResultStatus.SUCCESSFUL, 1)}


def test_a_fixed_prefetch_keeps_its_claims_fixed(broker: Broker) -> None:
    """prefetch=3 with one thread: every claim asks for four, as before."""
    broker.enqueue_many(tasks.echo, [((i,), {}) for i in range(40)])
    w = worker(broker, threads=1, prefetch=3, maintenance=False)
    counted = CountingBackend(broker)
    counted.install(w)
    assert w.run(burst=True) == 40
    assert counted.claims[:10] == [4] * 10


def test_long_tasks_claimed_in_bulk_after_short_ones_are_shared_with_a_peer(
    broker: Broker,
) -> None:
    """A worker grown on short tasks claims 24 of 100 ms in one batch with 41 short ones;
    once long runs shrink its room it gives back all it has not started, uncharged, and a
    peer that runs only the long tasks takes its share: neither runs two thirds of them."""
    broker.enqueue_many(tasks.echo, [((i,), {}) for i in range(1_000)])
    first = Worker(broker, queues=["long", "default"], poll_interval=0.05, worker_id="first")
    peer = Worker(broker, queues=["long"], poll_interval=0.05, worker_id="peer")
    runners = [threading.Thread(target=w.run) for w in (first, peer)]
    runners[0].start()
    try:
        # Claims double from 2 to 65 within the first 136 tasks.
        wait_until(lambda: len(tasks.calls) >= 200, 60, "the first worker's window to grow")
        longs = broker.enqueue_many(tasks.nap.using(queue="long"), [((0.1,), {})] * 24)
        wait_until(
            lambda: all(broker.get_result(r.id).status is not TaskResultStatus.READY
                        for r in longs),
            60, "the first worker to claim the long tasks",
        )  # fmt: skip
        runners[1].start()
        wait_until(
            lambda: all(broker.get_result(r.id).status is TaskResultStatus.SUCCESSFUL
                        for r in longs),
            60, "the long tasks to finish",
        )  # fmt: skip
    finally:
        first.stop()
        peer.stop()
        for runner in runners:
            runner.join(timeout=30)
    assert not any(runner.is_alive() for runner in runners)
    finals = [broker.get_result(r.id) for r in longs]
    assert {(f.attempts, f.errors) for f in finals} == {(1, ())}
    ran = [sum(f.worker_ids == (name,) for f in finals) for name in ("first", "peer")]
    assert sum(ran) == 24
    assert max(ran) <= 16, ran
