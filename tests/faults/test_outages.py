"""Outages in-process: the worker and the maintenance loop ride them out, on a fake clock.

The backend is the memory backend behind `FlakyBackend`, which fails calls on
cue. Backoffs here are zero, so no test sleeps through one; how the delays
grow is checked on `Outage` itself.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from datetime import timedelta

import pytest

from tests.faults import fault_tasks
from tests.faults.flaky import FlakyBackend
from tests.faults.runs import wait_until
from threadmill_core import Broker, ExponentialBackoff, FakeClock, TaskResultStatus, Worker, task
from threadmill_core.errors import BackendUnavailable
from threadmill_core.worker.maintenance import reap
from threadmill_core.worker.outage import RECONNECT_BACKOFF, Outage
from threadmill_core.worker.settings import BackendNeverReached, reach_at_start
from threadmill_core.worker.supervisor import Supervisor, WorkerSettings, connect_when_reachable
from threadmill_memory import MemoryBackend

NO_WAIT = ExponentialBackoff(base_delay=0, max_delay=0, max_retries=None, jitter=0)
WARNING = "backend unavailable"
BACK = "backend reachable again"
DOWN = BackendUnavailable("connection refused (test)")

release = threading.Event()
started = threading.Event()


@task
def wait_for_release() -> str:
    """Block until the test releases it."""
    started.set()
    assert release.wait(timeout=30), "the test never released the task"
    return "released"


@pytest.fixture(autouse=True)
def _fresh_events() -> Iterator[None]:
    release.clear()
    started.clear()
    yield
    release.set()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def memory(clock: FakeClock) -> MemoryBackend:
    return MemoryBackend(clock=clock)


@pytest.fixture
def flaky(memory: MemoryBackend) -> FlakyBackend:
    return FlakyBackend(memory)


@pytest.fixture
def broker(flaky: FlakyBackend) -> Iterator[Broker]:
    with Broker(flaky, url="flaky+memory://") as made:
        yield made


def worker(broker: Broker, **options: object) -> Worker:
    options.setdefault("poll_interval", timedelta(milliseconds=10))
    return Worker(broker, reconnect_backoff=NO_WAIT, **options)  # type: ignore[arg-type]  # options as keywords, checked by Worker


def lines(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


def enqueue(broker: Broker, count: int) -> list[str]:
    work = fault_tasks.echo.using(broker=broker)
    return [r.id for r in broker.enqueue_many(work, [((n,), {}) for n in range(count)])]


# --- Outage, the shared log and backoff ---------------------------------------------------


def test_an_outage_is_logged_once_each_way(caplog: pytest.LogCaptureFixture) -> None:
    """Many failed calls log one warning, the first call through one line; a new outage, again."""
    caplog.set_level(logging.INFO)
    outage = Outage(logging.getLogger("threadmill.test"), NO_WAIT)
    for attempt in range(1, 6):
        outage.failed(DOWN, attempt, started=float(attempt))
    assert outage.down
    outage.reached(started=10.0)
    outage.reached(started=11.0)
    outage.failed(DOWN, 1, started=1e12)
    outage.reached(started=2e12)
    assert not outage.down
    assert outage.count == 2
    assert len(lines(caplog, WARNING)) == 2
    assert len(lines(caplog, BACK)) == 2
    assert "5 failed calls" in lines(caplog, BACK)[0]
    assert not any(r.exc_info for r in caplog.records), "no tracebacks"


def test_calls_racing_the_edges_of_an_outage_log_nothing_more(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A call older than the outage does not end it; one older than its end does not reopen it."""
    caplog.set_level(logging.INFO)
    outage = Outage(logging.getLogger("threadmill.test"), NO_WAIT)
    outage.failed(DOWN, 1, started=100.0)
    outage.reached(started=99.0)  # in flight when the outage began; its reply came before
    assert outage.down
    outage.reached(started=101.0)  # ends it (at monotonic now)
    outage.failed(DOWN, 1, started=101.0)  # in flight when it ended; its failure came after
    assert not outage.down
    assert (len(lines(caplog, WARNING)), len(lines(caplog, BACK))) == (1, 1)


def test_the_backoff_doubles_up_to_its_cap_with_bounded_jitter() -> None:
    """Waits go 0.1, 0.2, 0.4 s ... up to 5 s, each plus at most half again at random."""
    outage = Outage(logging.getLogger("threadmill.test"))
    assert outage.backoff is RECONNECT_BACKOFF
    for attempt in range(1, 12):
        base = min(0.1 * 2 ** (attempt - 1), 5.0)
        delay = outage.failed(DOWN, attempt, started=0.0)
        assert base <= delay <= base * 1.5


# --- the worker ----------------------------------------------------------------------------


@pytest.mark.parametrize("maintenance", [True, False], ids=["maintenance", "claims"])
def test_a_burst_worker_rides_out_an_outage(
    broker: Broker, flaky: FlakyBackend, caplog: pytest.LogCaptureFixture, maintenance: bool
) -> None:
    """A burst worker whose first calls all fail neither stops nor crashes; every task succeeds."""
    caplog.set_level(logging.INFO, logger="threadmill")
    ids = enqueue(broker, 5)
    flaky.fail_all(times=6)
    assert worker(broker, threads=2, maintenance=maintenance).run(burst=True) == 5
    assert [broker.get_result(i).status for i in ids] == [TaskResultStatus.SUCCESSFUL] * 5
    assert sum(flaky.failures.values()) == 6
    # The worker's first call registers it (see threadmill_core.worker.presence); then its loop's.
    first_loop_call = "claim_expired" if maintenance else "claim"
    assert set(flaky.failures) == {"register_worker", first_loop_call}
    assert len(lines(caplog, WARNING)) == 1
    assert len(lines(caplog, BACK)) == 1
    assert not any(r.exc_info for r in caplog.records), "no tracebacks"


def test_an_acknowledgement_is_sent_again_until_it_lands(
    broker: Broker, flaky: FlakyBackend, caplog: pytest.LogCaptureFixture
) -> None:
    """An acknowledgement that cannot be delivered is repeated with the same lease until it is."""
    caplog.set_level(logging.INFO, logger="threadmill")
    [task_id] = enqueue(broker, 1)
    flaky.fail("decide_many", times=3)
    w = worker(broker)
    assert w.run(burst=True) == 1
    final = broker.get_result(task_id)
    assert (final.status, final.attempts, final.errors) == (TaskResultStatus.SUCCESSFUL, 1, ())
    assert flaky.failures == {"decide_many": 3}
    assert not lines(caplog, "refused")


def test_an_acknowledgement_applied_but_unanswered_is_recognised_on_repeat(
    broker: Broker, flaky: FlakyBackend, caplog: pytest.LogCaptureFixture
) -> None:
    """A repeat of an acknowledgement whose reply was lost counts once and is not a lost lease."""
    caplog.set_level(logging.INFO, logger="threadmill")
    [task_id] = enqueue(broker, 1)
    flaky.fail("decide_many", times=2, applied=True)
    assert worker(broker).run(burst=True) == 1
    final = broker.get_result(task_id)
    assert (final.status, final.return_value, final.attempts) == (TaskResultStatus.SUCCESSFUL, 0, 1)
    assert not lines(caplog, "refused")
    assert not lines(caplog, "lost its lease")


def test_an_acknowledgement_is_refused_once_the_reaper_took_the_task_over(
    broker: Broker,
    flaky: FlakyBackend,
    memory: MemoryBackend,
    clock: FakeClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """If the lease of a started task expires and is reaped during the outage, the late
    acknowledgement is refused and the reaper's decision stands: under the default policy a
    retry, which runs when due and succeeds, the AcknowledgementTimeout kept."""
    caplog.set_level(logging.INFO, logger="threadmill")
    record = wait_for_release.using(broker=broker).enqueue()

    def lease_expires_and_is_reaped() -> None:
        clock.advance(timedelta(seconds=31))
        assert reap(memory) == 1

    flaky.fail("decide_many", times=1, before=lease_expires_and_is_reaped)
    w = worker(broker, lease_ttl=timedelta(seconds=30), maintenance=False)
    runner = threading.Thread(target=w.run, kwargs={"burst": True})
    runner.start()
    try:
        assert started.wait(timeout=30)
        wait_until(lambda: flaky.calls["mark_started"] >= 1, 30, "the start to be recorded")
    finally:
        release.set()
        runner.join(timeout=30)
    retried = broker.get_result(record.id)
    assert retried.status is TaskResultStatus.DEFERRED  # the default retries an interruption
    assert retried.return_value is None
    assert len(lines(caplog, "acknowledgement refused")) == 1
    clock.advance(timedelta(seconds=2))
    worker(broker, maintenance=False).run(burst=True)
    final = broker.get_result(record.id)
    assert (final.status, final.return_value, final.attempts) == (
        TaskResultStatus.SUCCESSFUL, "released", 2,
    )  # fmt: skip
    assert [e.exception_class_path.rpartition(".")[2] for e in final.errors] == [
        "AcknowledgementTimeout"
    ]


def test_a_task_whose_start_was_not_recorded_runs_again_when_its_acknowledgement_is_late(
    broker: Broker,
    flaky: FlakyBackend,
    memory: MemoryBackend,
    clock: FakeClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A short task decided before it was marked, whose lease expires during the outage, goes
    back uncharged: its late acknowledgement is refused and it runs again, as its first attempt."""
    caplog.set_level(logging.INFO, logger="threadmill")
    [task_id] = enqueue(broker, 1)

    def lease_expires_and_is_given_back() -> None:
        clock.advance(timedelta(seconds=31))
        assert reap(memory) == 0  # nothing for the reaper to decide
        assert memory.get(task_id).status is TaskResultStatus.READY  # type: ignore[union-attr]  # stored

    flaky.fail("decide_many", times=1, before=lease_expires_and_is_given_back)
    assert worker(broker, lease_ttl=timedelta(seconds=30), maintenance=False).run(burst=True) == 1
    final = broker.get_result(task_id)
    assert (final.status, final.attempts, final.errors) == (TaskResultStatus.SUCCESSFUL, 1, ())
    assert len(lines(caplog, "acknowledgement refused")) == 1


def test_heartbeats_during_an_outage_keep_the_lease(
    broker: Broker, flaky: FlakyBackend, memory: MemoryBackend, clock: FakeClock
) -> None:
    """A heartbeat that fails is not a lost lease; the next one renews it and the task succeeds."""
    record = wait_for_release.using(broker=broker).enqueue()
    w = worker(broker, lease_ttl=timedelta(seconds=30))
    runner = threading.Thread(target=w.run, kwargs={"burst": True})
    runner.start()
    try:
        assert started.wait(timeout=30)
        flaky.fail("extend_many", times=2)
        w.heartbeat()
        w.heartbeat()
        # Both failed and were counted as an outage. Whether it is still down
        # now is a race: the worker's own loop may get a claim through first.
        assert flaky.failures == {"extend_many": 2}
        assert w.outage.count >= 1
        clock.advance(timedelta(seconds=20))
        w.heartbeat()  # through: renewed for another 30 s from now
        assert not w.outage.down
        clock.advance(timedelta(seconds=20))
        assert reap(memory) == 0
    finally:
        release.set()
        runner.join(timeout=30)
    final = broker.get_result(record.id)
    assert (final.status, final.return_value, final.attempts) == (
        TaskResultStatus.SUCCESSFUL,
        "released",
        1,
    )


def test_a_failing_idle_wait_does_not_stop_the_worker(
    broker: Broker, flaky: FlakyBackend, caplog: pytest.LogCaptureFixture
) -> None:
    """An idle worker whose waits fail keeps looking, and runs what is enqueued later."""
    caplog.set_level(logging.INFO, logger="threadmill")
    flaky.fail("wait_for_tasks", times=3)
    w = worker(broker)
    runner = threading.Thread(target=w.run)
    runner.start()
    try:
        wait_until(lambda: flaky.failures.get("wait_for_tasks") == 3, 30, "three failed idle waits")
        [task_id] = enqueue(broker, 1)
        record = broker.wait(task_id, timeout=30)
    finally:
        w.stop()
        runner.join(timeout=30)
    assert not runner.is_alive()
    assert record.status is TaskResultStatus.SUCCESSFUL
    assert flaky.failures == {"wait_for_tasks": 3}
    # Claims got through between the failed waits: three short outages, each closed.
    assert len(lines(caplog, WARNING)) == len(lines(caplog, BACK)) == 3


# --- the supervisor's maintenance loop and start-up --------------------------------------


def test_maintenance_passes_ride_out_an_outage_with_one_warning(
    flaky: FlakyBackend, caplog: pytest.LogCaptureFixture
) -> None:
    """Failing reaper passes log one warning and no traceback; the first pass through, one line."""
    caplog.set_level(logging.INFO, logger="threadmill")
    settings = WorkerSettings(broker_url="redis://unused", modules=(), reconnect_backoff=NO_WAIT)
    supervisor = Supervisor(settings)
    flaky.fail("claim_expired", times=3)
    for _ in range(4):
        supervisor._maintain(flaky)
    assert flaky.failures == {"claim_expired": 3}
    assert (len(lines(caplog, WARNING)), len(lines(caplog, BACK))) == (1, 1)
    assert not any(r.exc_info for r in caplog.records), "no tracebacks"


def test_connecting_waits_for_an_unavailable_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    """A backend that cannot be reached when built is tried again after a backoff, not given up."""
    attempts: list[str] = []
    broker = Broker(MemoryBackend(), url="memory://")

    def connect(url: str) -> Broker:
        attempts.append(url)
        if len(attempts) < 3:
            raise DOWN
        return broker

    monkeypatch.setattr("threadmill_core.worker.settings.connect", connect)
    pauses: list[float] = []
    outage = Outage(logging.getLogger("threadmill.test"), NO_WAIT)
    assert connect_when_reachable("x://", outage, pauses.append) is broker
    assert (len(attempts), len(pauses)) == (3, 2)
    assert not outage.down
    attempts.clear()
    assert connect_when_reachable("x://", outage, lambda _delay: True) is None, "stopped"


def test_a_backend_that_never_answers_at_start_is_given_up_after_the_connect_timeout(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """At start, a backend that has not answered once within the timeout raises
    BackendNeverReached (after one outage warning); one that answers in time is used."""
    flaky = FlakyBackend(MemoryBackend())
    monkeypatch.setattr(
        "threadmill_core.worker.settings.connect", lambda url: Broker(flaky, url=url)
    )
    caplog.set_level(logging.INFO, logger="threadmill")
    outage = Outage(logging.getLogger("threadmill.test"), NO_WAIT)
    flaky.fail("now", times=1_000)
    pauses: list[float] = []

    def pause(delay: float) -> None:
        pauses.append(delay)
        time.sleep(0.01)

    with pytest.raises(BackendNeverReached, match=r"did not answer within 0\.2 s") as raised:
        reach_at_start("redis://u:pw@h:1/0", outage, pause, timedelta(seconds=0.2))
    assert "redis://u:***@h:1/0" in str(raised.value)
    assert isinstance(raised.value.__cause__, BackendUnavailable)
    assert len(lines(caplog, WARNING)) == 1
    assert len(pauses) > 1, "it tried again before giving up"

    flaky.fail("now", times=2)
    broker = reach_at_start("x://", outage, lambda _delay: None, timedelta(seconds=30))
    assert broker is not None
    assert broker.backend is flaky
    assert not outage.down, "the outage ended once it answered"
