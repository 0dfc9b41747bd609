"""Helpers for the supervisor fault tests: run one in a thread, read what its tasks logged."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta

import attrs
import pytest

from threadmill_core import Broker, ExponentialBackoff
from threadmill_core.worker.supervisor import Supervisor, WorkerSettings
from threadmill_postgres import PostgresBackend
from threadmill_postgres import testing as postgres_testing
from threadmill_redis import RedisBackend
from threadmill_redis import testing as redis_testing

MODULE = "tests.faults.fault_tasks"

#: Quick reconnects, so the tests spend little time waiting out backoffs.
QUICK_RECONNECT = ExponentialBackoff(
    base_delay=timedelta(milliseconds=50), max_delay=0.5, max_retries=None, jitter=0.5
)


def wait_until(condition: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


def burst_settings(broker_url: str, **overrides: object) -> WorkerSettings:
    """A burst run of `fault_tasks` with short leases and quick reconnects."""
    options: dict[str, object] = {
        "broker_url": broker_url,
        "modules": (MODULE,),
        "processes": 2,
        "threads": 2,
        "lease_ttl": timedelta(seconds=2),
        "poll_interval": timedelta(milliseconds=100),
        "burst": True,
        "log_level": "INFO",
        "shutdown_timeout": timedelta(seconds=10),
        "reconnect_backoff": QUICK_RECONNECT,
    }
    options.update(overrides)
    return WorkerSettings(**options)  # type: ignore[arg-type]  # options as keywords, checked by WorkerSettings


@contextmanager
def supervising(settings: WorkerSettings) -> Iterator[tuple[Supervisor, threading.Thread]]:
    """A supervisor running in a thread; stopped and joined on the way out, whatever happened."""
    supervisor = Supervisor(settings)
    runner = threading.Thread(target=supervisor.run, name="supervisor")
    runner.start()
    try:
        yield supervisor, runner
    finally:
        if runner.is_alive():
            supervisor.request_stop()
            runner.join(timeout=60)


@attrs.frozen
class Runs:
    """What `fault_tasks.work` logged: where each task started and was acknowledged."""

    events: list[str]

    def of(self, kind: str) -> list[tuple[int, int]]:
        """(position in the log, task number) of every event of `kind`."""
        return [
            (at, int(event.split(":")[1]))
            for at, event in enumerate(self.events)
            if event.startswith(kind + ":")
        ]

    @property
    def starts(self) -> Counter[int]:
        return Counter(n for _, n in self.of("start"))

    @property
    def acks(self) -> Counter[int]:
        return Counter(n for _, n in self.of("acked"))

    def markers(self, kind: str) -> list[int]:
        """Positions of the test's own markers (``kill:<i>``, ``restart:<i>``)."""
        return [at for at, event in enumerate(self.events) if event.startswith(kind + ":")]

    def check(self, total: int, outages: list[tuple[int, int]]) -> set[int]:
        """Assert at-least-once without waste; returns the tasks that ran more than once.

        `outages` are the log positions of each kill's and restart's markers.
        Every task ran and was acknowledged exactly once; none started again
        after its acknowledgement; and a task that ran twice was in flight at
        some outage: its first run started before the restart (no task can
        be claimed while the server is down, so a start logged after the
        kill marker was claimed before the kill) and it was acknowledged only
        after the kill.
        """
        assert set(self.starts) == set(range(total)), "every task ran"
        assert self.acks == Counter(range(total)), "every task acknowledged exactly once"
        acked_at = {n: at for at, n in self.of("acked")}
        first_start: dict[int, int] = {}
        for at, n in self.of("start"):
            first_start.setdefault(n, at)
            assert at < acked_at[n], f"task {n} started again after it was acknowledged"
        rerun = {n for n, count in self.starts.items() if count > 1}
        for n in rerun:
            assert any(
                first_start[n] < restart and kill < acked_at[n] for kill, restart in outages
            ), f"task {n} ran twice but was not in flight at any outage"
        return rerun


def start_recorded(broker: Broker, task_id: str) -> bool:
    """Whether the start of `task_id`'s current claim is recorded, on Redis or PostgreSQL."""
    backend = broker.backend
    if isinstance(backend, RedisBackend):
        return redis_testing.start_recorded(backend, task_id)
    assert isinstance(backend, PostgresBackend)
    return postgres_testing.start_recorded(backend, task_id)
