"""A `Worker` with the default, adaptive prefetch, in this process on memory://.

Its claims start at threads plus threads (the window's starting size) and
grow while short tasks keep the queue full; a fixed ``prefetch`` keeps
them fixed. The rule itself is tested in tests/core/test_prefetch_window.py
(its give-back of long tasks claimed in bulk too, in a virtual-time
simulation of two workers), the scheduler's room and give-back in
tests/worker/test_adaptive_room.py. A two-worker test on real threads
proved timing-dependent under CI's load (the peer started only once the
first worker had claimed every long task), so it is not here.
"""

from __future__ import annotations

from tests.core import tasks
from tests.core.test_worker import CountingBackend, worker
from threadmill_core import Broker, TaskResultStatus


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
