"""The producer's default broker: memory:// by omission warns once when nothing could run it."""

from __future__ import annotations

import warnings

import pytest

from tests.core import tasks
from threadmill_core import MemoryBrokerWarning, Worker, connect
from threadmill_core import broker as broker_module


@pytest.fixture
def unconfigured(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process with THREADMILL_URL unset that has not warned, nor made a Worker, yet."""
    monkeypatch.delenv("THREADMILL_URL", raising=False)
    monkeypatch.setattr(broker_module, "_may_warn", True)


@pytest.mark.usefixtures("unconfigured")
def test_the_first_enqueue_on_the_memory_default_without_a_worker_warns_once() -> None:
    """The warning names THREADMILL_URL and using(broker=...); a second enqueue is silent."""
    with pytest.warns(MemoryBrokerWarning) as caught:
        first = tasks.echo.enqueue(1)
    [warning] = caught
    assert "THREADMILL_URL" in str(warning.message)
    assert "using(broker=...)" in str(warning.message)
    assert warning.filename == __file__, "it points at the enqueue that caused it"
    second = tasks.echo.enqueue(2)  # an error if it warned: pytest runs with filterwarnings=error
    assert broker_module.default_broker().get_result(second.id).args == [2]
    assert broker_module.default_broker().get_result(first.id).args == [1]


@pytest.mark.usefixtures("unconfigured")
def test_a_warning_made_an_error_stores_nothing() -> None:
    """Under a filter that turns the warning into an error, the task is not stored."""
    before = broker_module.default_broker().counts()
    with warnings.catch_warnings():
        warnings.simplefilter("error", MemoryBrokerWarning)
        with pytest.raises(MemoryBrokerWarning):
            tasks.echo.enqueue(1)
    assert broker_module.default_broker().counts() == before


@pytest.mark.usefixtures("unconfigured")
def test_no_warning_when_a_worker_runs_in_the_process() -> None:
    """A Worker made in this process can run what the memory default holds: no warning."""
    Worker(broker_module.default_broker())
    record = tasks.echo.enqueue(1)
    assert broker_module.default_broker().get_result(record.id).args == [1]


@pytest.mark.usefixtures("unconfigured")
def test_memory_chosen_through_threadmill_url_does_not_warn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """THREADMILL_URL=memory:// says memory:// is meant (a test suite's way to silence it)."""
    monkeypatch.setenv("THREADMILL_URL", "memory://")
    tasks.echo.enqueue(1)


@pytest.mark.usefixtures("unconfigured")
def test_a_task_naming_its_broker_does_not_warn() -> None:
    """Only the default broker is concerned."""
    with connect("memory://") as named:
        tasks.echo.using(broker=named).enqueue(1)
