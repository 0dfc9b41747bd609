"""Live workers: entries registered, refreshed, removed, and gone once their time is up.

What ``threadmill workers`` rests on (see `threadmill_core.live_workers`):
`register_worker` stores a worker's entry on the backend's clock,
`unregister_worker` removes it, and `workers` never lists one whose time
is up. The naive model is `threadmill_core.testing.live_worker_model`.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import attrs

from threadmill_core.clock import duration_ms, to_ms
from threadmill_core.live_workers import RunningTask, WorkerInfo
from threadmill_core.testing._scenarios.kit import Scenario, expect, registering
from threadmill_core.testing.harness import Harness
from threadmill_core.testing.live_worker_model import LiveWorkerModel

#: This module's scenarios, by name (`threadmill_core.testing.scenarios.SCENARIOS` holds all).
SCENARIOS: dict[str, Scenario] = {}
scenario = registering(SCENARIOS)

MINUTE = timedelta(minutes=1)


def worker_info(worker_id: str, *running: str) -> WorkerInfo:
    """An entry as a worker would make it, started at a whole millisecond."""
    return WorkerInfo(
        id=worker_id,
        host="kit-host.example",
        pid=4242,
        queues=("default", "emails ünïcode"),
        threads=4,
        version="0.1.0",
        started_at=datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=UTC),
        running=tuple(RunningTask(task_id, "app.tasks:work") for task_id in running),
    )


def _unseen(entries: list[WorkerInfo]) -> list[WorkerInfo]:
    return [attrs.evolve(info, last_seen=None) for info in entries]


@scenario
def live_workers_are_listed_refreshed_and_removed(harness: Harness) -> None:
    """register_worker stores an entry seen now, a refresh replaces it, unregister removes it."""
    backend = harness.backend
    model = LiveWorkerModel()
    expect(backend.workers() == [], "a new backend lists no worker")
    before = backend.now()
    for info in (worker_info("w-b"), worker_info("w-a", "t1", "t2")):
        stored = backend.register_worker(info, MINUTE)
        model.register(info, duration_ms(MINUTE), to_ms(before))
        expect(attrs.evolve(stored, last_seen=None) == info,
               "register_worker() must answer the entry as given", info, stored)  # fmt: skip
        seen = stored.last_seen
        expect(seen is not None and seen >= before,
               "register_worker() must stamp last_seen with now()", before, seen)  # fmt: skip
    listed = backend.workers()
    expected = model.listed(to_ms(before))
    expect(_unseen(listed) == expected, "workers() must list each entry, by id", expected, listed)
    harness.advance(timedelta(seconds=50))
    refreshed = backend.register_worker(worker_info("w-a", "t3"), MINUTE)
    model.register(worker_info("w-a", "t3"), duration_ms(MINUTE), to_ms(before) + 50_000)
    first = listed[0].last_seen
    assert first is not None
    assert refreshed.last_seen is not None
    later = first + (timedelta(seconds=50) if harness.exact_clock else timedelta(0))
    expect(refreshed.last_seen >= later, "a refresh must stamp last_seen anew", later,
           refreshed.last_seen)  # fmt: skip
    listed = backend.workers()
    expected = model.listed(to_ms(before) + 50_000)
    expect(_unseen(listed) == expected, "a refresh must replace the entry", expected, listed)
    harness.advance(timedelta(seconds=20))  # w-b's minute is up, w-a's refreshed one is not
    expected = model.listed(to_ms(before) + 70_000)
    listed = backend.workers()
    expect(_unseen(listed) == expected, "workers() must leave out an entry whose time is up",
           expected, listed)  # fmt: skip
    expect(backend.unregister_worker("w-b") is False,
           "unregister_worker() of an entry whose time is up must answer False")  # fmt: skip
    expect(backend.unregister_worker("w-a") is True,
           "unregister_worker() of a live entry must answer True")  # fmt: skip
    expect(backend.unregister_worker("w-a") is False,
           "unregister_worker() repeated must answer False")  # fmt: skip
    expect(backend.workers() == [], "an unregistered worker must not be listed", [],
           backend.workers())  # fmt: skip


@scenario
def an_entry_whose_time_is_up_is_not_live_among_many(harness: Harness) -> None:
    """unregister_worker() answers False for an expired entry even when more have expired
    than a backend deletes in one go (a backend that prunes in batches must still check
    the entry's own time)."""
    backend = harness.backend
    for n in range(150):
        backend.register_worker(worker_info(f"w-{n:03}"), MINUTE)
    backend.register_worker(worker_info("w-last"), MINUTE + timedelta(seconds=1))
    harness.advance(2 * MINUTE)
    expect(backend.unregister_worker("w-last") is False,
           "unregister_worker() of an entry whose time is up must answer False, however "
           "many others are up too")  # fmt: skip
    expect(backend.workers() == [], "workers() must leave out every entry whose time is up",
           [], backend.workers())  # fmt: skip


@scenario
def register_worker_refuses_bad_input_and_stores_nothing(harness: Harness) -> None:
    """A bad entry, worker id or ttl is a ValueError naming it, and nothing is stored."""
    backend = harness.backend
    good = worker_info("w-good")
    backend.register_worker(good, MINUTE)
    register: Callable[[object, object], object] = backend.register_worker  # type: ignore[assignment]
    bad_calls: list[tuple[str, Callable[[], object]]] = [
        ("an entry that is not a WorkerInfo", lambda: register({"id": "x"}, MINUTE)),
        ("an empty id", lambda: register(worker_info(""), MINUTE)),
        ("an id with a newline", lambda: register(worker_info("a\nb"), MINUTE)),
        ("an id of 201 chars", lambda: register(worker_info("x" * 201), MINUTE)),
        ("a zero ttl", lambda: register(worker_info("w"), timedelta(0))),
        ("a negative ttl", lambda: register(worker_info("w"), -MINUTE)),
        ("a ttl in seconds", lambda: register(worker_info("w"), 60)),
        ("unregistering an empty id", lambda: backend.unregister_worker("")),
    ]
    for what, call in bad_calls:
        try:
            call()
        except ValueError:
            pass
        else:
            expect(False, f"{what} must raise ValueError")
    listed = backend.workers()
    expect(_unseen(listed) == [good], "a refused call must store nothing", [good], listed)
