"""The admin's list of a queue of 100,000 tasks is fast on Redis and PostgreSQL: each page is one
`peek` at an offset, whatever the page, and the count comes from `counts`.

What the test holds is that shape, read from the backend's calls, and a
bound generous enough for a loaded CI machine (`BOUND`) that a page reading
the whole queue would still break. The figures it prints (`pytest -s`) are
the issue's "under 300 ms", measured on an idle machine: this VM's speed
moves by a third and more within an hour, so a bound at the floor itself
fails on a busy run without any change to the code.
"""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.test import Client

from tests.conftest import PostgresDatabase, RedisServer
from tests.django import admin_bench as ab
from tests.django.djapp import tasks
from threadmill_core import Broker, TaskResultStatus, connect
from threadmill_django.admin.reading import PER_PAGE
from threadmill_django.testing import use_broker

TASKS = 100_000
#: A generous bound for rendering one page: 3x the issue's 300 ms. Idle, this VM renders a page of
#: PostgreSQL's in 90-130 ms and of Redis's in 15 ms; reading all 100,000 records takes seconds.
BOUND = 1.0


def _url(request: pytest.FixtureRequest) -> str:
    if request.param == "redis":
        server: RedisServer = request.getfixturevalue("redis_server")
        return f"{server.url}?namespace=admin-{uuid.uuid4().hex[:8]}"
    database: PostgresDatabase = request.getfixturevalue("postgres_database")
    return f"{database.url}?namespace=admin_{uuid.uuid4().hex[:8]}"


@pytest.fixture(
    params=[
        pytest.param("redis", marks=pytest.mark.redis),
        pytest.param("postgres", marks=pytest.mark.postgres),
    ]
)
def full_queue(request: pytest.FixtureRequest) -> Iterator[Broker]:
    """The default alias on a real backend whose default queue holds 100,000 READY tasks."""
    broker = connect(_url(request))
    add = ab.core_task(tasks.add)
    for start in range(0, TASKS, 10_000):
        broker.enqueue_many(add, [((i, i), {}) for i in range(start, start + 10_000)])
    try:
        with use_broker("default", broker):
            yield broker
    finally:
        broker.purge("default", TaskResultStatus.READY)
        broker.close()


def timed(get: Callable[[], object], runs: int = 5) -> float:
    """The median of `runs` timings of `get`, in seconds, after one run to warm up."""
    get()
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        get()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


@contextmanager
def reads(broker: Broker) -> Iterator[list[tuple[str, dict[str, object]]]]:
    """The read calls the backend gets while the block runs: (name, keyword arguments), where
    a queue and a status given by position are named too."""
    calls: list[tuple[str, dict[str, object]]] = []
    backend = broker.backend
    for name in ("peek", "counts", "get", "rates"):
        real = getattr(backend, name)

        def spy(*args: Any, _name: str = name, _real: Any = real, **kwargs: Any) -> Any:
            named = dict(zip(("queue", "status"), args, strict=False)) if _name == "peek" else {}
            calls.append((_name, {**named, **kwargs}))
            return _real(*args, **kwargs)

        setattr(backend, name, spy)
    try:
        yield calls
    finally:
        for name in ("peek", "counts", "get", "rates"):
            delattr(backend, name)


@pytest.mark.slow
def test_a_page_of_a_queue_of_100000_tasks_is_one_peek_and_renders_fast(
    full_queue: Broker, request: pytest.FixtureRequest
) -> None:
    """The first, a middle and the last page of 100,000 READY tasks: each is one `peek` at its
    offset and one `counts`, and renders within `BOUND`."""
    ab.migrate()
    client = Client()
    client.force_login(ab.user(ab.VIEW))
    url = ab.url("list", "default", "default", "ready")
    pages = TASKS // PER_PAGE
    figures = {}
    for number in (1, pages // 2, pages):
        with reads(full_queue) as calls:
            response = client.get(url, {"p": number})
        page = ab.text(response)
        assert response.status_code == 200
        assert f"100000 tasks, page {number} of {pages}" in page
        assert page.count('<th scope="row"><a href=') == PER_PAGE
        offset = (number - 1) * PER_PAGE
        peek = {
            "queue": "default",
            "status": TaskResultStatus.READY,
            "offset": offset,
            "limit": PER_PAGE,
        }
        assert sorted(calls, key=lambda call: call[0]) == [("counts", {}), ("peek", peek)]
        figures[number] = timed(lambda number=number: client.get(url, {"p": number}))
    overview = timed(lambda: client.get(ab.url("changelist")))
    backend = request.node.callspec.params["full_queue"]
    shown = ", ".join(f"page {n}: {seconds * 1000:.0f} ms" for n, seconds in figures.items())
    print(f"\n{backend}: {shown}; overview: {overview * 1000:.0f} ms")
    assert all(seconds < BOUND for seconds in figures.values()), figures
    assert overview < BOUND, overview
