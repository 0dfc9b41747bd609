"""connect(), the default broker, results and waiting."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator, Sequence

import pytest

from tests.core import tasks
from threadmill_core import (
    Broker,
    InvalidOption,
    TaskNotFound,
    TaskResult,
    TaskResultStatus,
    UnknownBackend,
    UnsupportedValue,
    WaitTimeout,
    Worker,
    connect,
    plugins,
)
from threadmill_core import broker as broker_module
from threadmill_memory import MemoryBackend


def test_connect_memory_gives_a_working_broker() -> None:
    """connect('memory://') builds the bundled memory backend through its entry point."""
    with connect("memory://") as broker:
        record = tasks.echo.using(broker=broker).enqueue("hi")
        assert broker.get_result(record.id).status is TaskResultStatus.READY
        assert type(broker.backend).__module__.startswith("threadmill_memory")


def test_unknown_scheme_lists_installed_schemes() -> None:
    """An unknown scheme names itself and every installed scheme."""
    with pytest.raises(UnknownBackend) as info:
        connect("nosuch://somewhere")
    assert info.value.scheme == "nosuch"
    assert "memory" in info.value.installed
    assert "memory://" in str(info.value)


def test_known_but_missing_scheme_names_its_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """A scheme threadmill knows but nothing installed serves says which extra adds it."""
    monkeypatch.setitem(plugins.KNOWN_EXTRAS, "fancydb", "fancydb")  # type: ignore[index]  # a test adds an extra to the read-only mapping
    with pytest.raises(UnknownBackend, match=r"pip install 'threadmill\[fancydb\]'"):
        connect("fancydb://somewhere")


def test_url_without_scheme_is_refused() -> None:
    """A string that is not a URL is refused with an example of one."""
    with pytest.raises(InvalidOption, match="memory://"):
        connect("localhost:6379")


def test_memory_backend_options_are_checked() -> None:
    """An unknown backend option raises InvalidOption naming it."""
    with pytest.raises(InvalidOption, match="colour"):
        connect("memory://", colour="blue")


def test_get_result_of_unknown_id_is_task_not_found(broker: Broker) -> None:
    """get_result raises TaskNotFound (a LookupError) carrying the id."""
    with pytest.raises(TaskNotFound) as info:
        broker.get_result("0000")
    assert info.value.task_id == "0000"
    assert isinstance(info.value, LookupError)


def test_wait_returns_the_finished_record(broker: Broker) -> None:
    """wait blocks until a worker finishes the task and returns its final record."""
    record = tasks.echo.using(broker=broker).enqueue([1, 2])
    worker = Worker(broker, poll_interval=0.01)
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        final = broker.wait(record.id, timeout=30)
    finally:
        worker.stop()
        thread.join()
    assert (final.status, final.return_value) == (TaskResultStatus.SUCCESSFUL, [1, 2])


def test_wait_times_out_with_the_task_id(broker: Broker) -> None:
    """wait raises WaitTimeout when nobody runs the task in time."""
    record = tasks.echo.using(broker=broker).enqueue(1)
    with pytest.raises(WaitTimeout) as info:
        broker.wait(record.id, timeout=0.05)
    assert info.value.task_id == record.id


@pytest.mark.parametrize("timeout", [float("nan"), None, "5", True])
def test_wait_refuses_a_timeout_that_is_no_number_of_seconds(
    broker: Broker, timeout: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A NaN timeout (which no deadline ever passes) or one that is no number is refused
    before wait polls, as a ValueError naming it."""

    def no_polling(seconds: float) -> None:
        raise AssertionError(f"wait polled (sleeping {seconds} s) with timeout={timeout!r}")

    monkeypatch.setattr(broker_module.time, "sleep", no_polling)
    record = tasks.echo.using(broker=broker).enqueue(1)
    with pytest.raises(ValueError, match="timeout"):
        broker.wait(record.id, timeout=timeout)  # type: ignore[arg-type]  # the bad input


def test_default_broker_follows_threadmill_url(monkeypatch: pytest.MonkeyPatch) -> None:
    """enqueue without a broker uses THREADMILL_URL's broker, shared across calls."""
    monkeypatch.setenv("THREADMILL_URL", "memory://?result_ttl=60")
    first = tasks.echo.enqueue(1)
    second = tasks.echo.enqueue(2)
    shared = broker_module.default_broker()
    assert shared.url == "memory://?result_ttl=60"
    assert shared.get_result(first.id).args == [1]
    assert shared.get_result(second.id).args == [2]


class _Watching(MemoryBackend):
    """A memory backend that notes whether the collector was on during each enqueue."""

    def __init__(self) -> None:
        super().__init__()
        self.collecting: list[bool] = []

    def enqueue(self, records: Sequence[TaskResult]) -> list[TaskResult]:
        self.collecting.append(gc.isenabled())
        return super().enqueue(records)


@pytest.fixture
def collector_on() -> Iterator[None]:
    """The collector on for the test, and as it was after."""
    was = gc.isenabled()
    gc.enable()
    try:
        yield
    finally:
        (gc.enable if was else gc.disable)()


@pytest.mark.usefixtures("collector_on")
def test_enqueue_many_leaves_the_garbage_collector_as_the_application_set_it() -> None:
    """A batch never turns the collector off, nor on: that is the application's business."""
    backend = _Watching()
    with Broker(backend) as broker:
        stored = broker.enqueue_many(tasks.echo, [((n,), {}) for n in range(3)])
        assert gc.isenabled()
        gc.disable()
        broker.enqueue_many(tasks.echo, [((3,), {})])
        assert not gc.isenabled()
        gc.enable()
        with pytest.raises(UnsupportedValue):
            broker.enqueue_many(tasks.echo, [((4,), {}), (({5},), {})])
        assert gc.isenabled()
        assert backend.collecting == [True, False, True]
        assert [broker.get_result(r.id).args for r in stored] == [[0], [1], [2]]


def test_enqueue_many_stores_under_the_ids_given_once_each() -> None:
    """With `ids`, the calls are stored under them; an id stored already is not stored again,
    and a count of ids other than the calls' stores nothing."""
    from threadmill_core.ids import new_task_id

    broker = Broker(MemoryBackend())
    named = [new_task_id(), new_task_id()]
    stored = broker.enqueue_many(tasks.echo, [((1,), {}), ((2,), {})], ids=named)
    assert [record.id for record in stored] == named
    again = broker.enqueue_many(tasks.echo, [((3,), {})], ids=named[:1])
    assert again[0].args == [1]
    assert broker.counts()["default"].ready == 2
    with pytest.raises(ValueError, match=r"one id per call \(2\)"):
        broker.enqueue_many(tasks.echo, [((4,), {}), ((5,), {})], ids=[new_task_id()])
    assert broker.counts()["default"].ready == 2
