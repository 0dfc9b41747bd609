"""Fixtures for the inspector tests: a memory backend on a fake clock, queues in every segment.

`threadmill` runs the command line in-process, as `main(argv, broker=...)`,
so the commands see the test's memory backend (no URL could reach it from
another process); the real-Redis tests run the command as a subprocess.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Callable, Iterator
from datetime import timedelta

import attrs
import pytest

from tests.inspector import tasks
from threadmill_core import Broker, FakeClock, Lease, TaskResult, Worker
from threadmill_core.cli import main
from threadmill_memory import MemoryBackend

RESULT_TTL = timedelta(days=7)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def backend(clock: FakeClock) -> Iterator[MemoryBackend]:
    made = MemoryBackend(clock=clock, result_ttl=RESULT_TTL)
    yield made
    made.close()


@pytest.fixture
def broker(backend: MemoryBackend) -> Broker:
    return Broker(backend, url="memory://")


@attrs.frozen
class Ran:
    """What one run of the command line gave: exit code, stdout, stderr."""

    code: int
    out: str
    err: str


Threadmill = Callable[..., Ran]


@pytest.fixture
def threadmill(
    broker: Broker, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Threadmill:
    """Runs ``threadmill ARGS...`` on the test's broker; `stdin` is what the user types."""
    monkeypatch.delenv("THREADMILL_URL", raising=False)

    def run(*argv: str, stdin: str = "") -> Ran:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
        capsys.readouterr()
        code = main(list(argv), broker=broker)
        captured = capsys.readouterr()
        return Ran(code=code, out=captured.out, err=captured.err)

    return run


@attrs.frozen(kw_only=True)
class Fleet:
    """Tasks in every segment: which ids sit where."""

    successful: list[str]
    failed: list[str]
    ready: list[str]
    deferred: list[str]
    running: list[str]
    lease: Lease


def make_fleet(broker: Broker) -> Fleet:
    """emails: 3 SUCCESSFUL, 1 READY, 1 DEFERRED, 1 RUNNING; reports: 2 FAILED (ValueError)."""
    emails = tasks.send_email.using(broker=broker)
    done = [emails.enqueue(f"user{n}@example.com") for n in range(3)]
    failed = [tasks.parse_report.using(broker=broker).enqueue(t) for t in ("n/a", "12x")]
    Worker(broker, queues=["emails", "reports"], maintenance=False).run(burst=True)
    running = emails.enqueue("busy@example.com")
    (lease,) = broker.backend.claim(["emails"], worker="elsewhere", lease_ttl=timedelta(minutes=5))
    broker.backend.mark_started([lease])  # running elsewhere: its expiry goes to the reaper
    ready = emails.enqueue("later@example.com")
    deferred = emails.using(run_after=timedelta(hours=1)).enqueue("tomorrow@example.com")
    return Fleet(
        successful=[r.id for r in done],
        failed=[r.id for r in failed],
        ready=[ready.id],
        deferred=[deferred.id],
        running=[running.id],
        lease=lease,
    )


@pytest.fixture
def fleet(broker: Broker) -> Fleet:
    return make_fleet(broker)


def stored(broker: Broker, task_id: str) -> TaskResult:
    record = broker.backend.get(task_id)
    assert record is not None, f"task {task_id} is gone"
    return record


def shared_start(fleet: Fleet) -> str:
    """The start every id of the fleet shares: UUIDv7 ids made together share their time."""
    every = [*fleet.failed, *fleet.successful, *fleet.ready, *fleet.deferred, *fleet.running]
    shared = every[0]
    while not all(task_id.startswith(shared) for task_id in every):
        shared = shared[:-1]
    assert len(shared) >= 4, every
    return shared
