"""`register_plugin`: observers installed at start-up see the lifecycle hooks of that process."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from tests.core import tasks
from threadmill_core import Broker, TaskResult, Worker, hookimpl
from threadmill_core.plugins import plugin_manager, register_plugin, unregister_plugin
from threadmill_memory import MemoryBackend

NAME = "tests.core.recording-observer"


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    @hookimpl
    def threadmill_task_enqueued(self, record: TaskResult) -> None:
        self.events.append(("enqueued", record.id))

    @hookimpl
    def threadmill_task_finished(self, record: TaskResult) -> None:
        self.events.append(("finished", record.status.value))


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    made = Recorder()
    register_plugin(made, NAME)
    yield made
    unregister_plugin(NAME)


def test_a_registered_observer_sees_the_hooks(recorder: Recorder) -> None:
    """Hooks reach an in-process plugin from the producer and from the worker."""
    broker = Broker(MemoryBackend())
    record = tasks.add.using(broker=broker).enqueue(1, 2)
    Worker(broker, queues=[record.queue]).run(burst=True)
    assert recorder.events == [("enqueued", record.id), ("finished", "SUCCESSFUL")]


def test_registering_again_is_harmless_and_unregistering_stops_it(recorder: Recorder) -> None:
    """The same object twice is one registration; once unregistered, it hears nothing."""
    register_plugin(recorder, NAME)
    assert len(plugin_manager().hook.threadmill_task_finished.get_hookimpls()) >= 1
    assert unregister_plugin(NAME) is recorder
    assert unregister_plugin(NAME) is None
    broker = Broker(MemoryBackend())
    tasks.add.using(broker=broker).enqueue(1, 2)
    assert recorder.events == []
    register_plugin(recorder, NAME)  # for the fixture's teardown


def test_another_plugin_under_a_taken_name_is_refused(recorder: Recorder) -> None:
    """Two observers cannot share a name; the error names the one already there."""
    other: Any = SimpleNamespace()
    with pytest.raises(ValueError, match="registered already"):
        register_plugin(other, NAME)
