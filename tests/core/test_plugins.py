"""Plugin discovery, scheme conflicts, lifecycle hooks and the `threadmill` command."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator, Sequence
from datetime import timedelta
from io import StringIO

import pytest

from tests.core import tasks
from threadmill_core import (
    BackendConflict,
    BackendScheme,
    Broker,
    FakeClock,
    Lease,
    TaskResult,
    TaskResultStatus,
    Worker,
    hookimpl,
)
from threadmill_core.cli import main
from threadmill_core.plugins import installed_backends, plugin_manager
from threadmill_core.worker.execution import UNKNOWN_TASK_GRACE
from threadmill_core.worker.maintenance import reap


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        #: The ids of each `threadmill_tasks_finished` call, in order.
        self.batches: list[list[str]] = []

    @hookimpl
    def threadmill_task_enqueued(self, record: TaskResult) -> None:
        self.events.append(("enqueued", record.id))

    @hookimpl
    def threadmill_task_started(self, lease: Lease) -> None:
        self.events.append(("started", lease.task_id))

    @hookimpl
    def threadmill_task_retried(self, record: TaskResult, delay: timedelta) -> None:
        self.events.append(("retried", record.id))

    @hookimpl
    def threadmill_task_finished(self, record: TaskResult) -> None:
        self.events.append(("finished", record.id))

    @hookimpl
    def threadmill_tasks_finished(self, records: Sequence[TaskResult]) -> None:
        # After the per-record hook for each of them: all are among the events already.
        assert all(("finished", r.id) in self.events for r in records)
        self.batches.append([r.id for r in records])


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    made = Recorder()
    plugin_manager().register(made, name="test-recorder")
    yield made
    plugin_manager().unregister(made)


def test_bundled_backends_come_from_entry_points() -> None:
    """memory:// is listed as coming from the threadmill distribution's entry point."""
    memory = next(b for b in installed_backends() if b.scheme == "memory")
    assert memory.source.startswith("threadmill ")
    assert memory.plugin == "memory"


def test_two_plugins_claiming_one_scheme_raise_naming_both() -> None:
    """A scheme registered twice is an error naming both sources."""

    class Impostor:
        @hookimpl
        def threadmill_backend_schemes(self) -> list[BackendScheme]:
            return [BackendScheme("memory", "another memory")]

    plugin_manager().register(Impostor(), name="impostor")
    try:
        with pytest.raises(BackendConflict) as info:
            installed_backends()
    finally:
        plugin_manager().unregister(name="impostor")
    assert info.value.scheme == "memory"
    assert any("impostor" in source for source in info.value.sources)
    assert any("threadmill" in source for source in info.value.sources)


def test_lifecycle_hooks_fire_in_order(
    broker: Broker, clock: FakeClock, recorder: Recorder
) -> None:
    """enqueued, started, retried, started again, finished: each hook sees the task."""
    record = tasks.flaky.using(broker=broker).enqueue(fail_times=1)
    w = Worker(broker)
    w.run(burst=True)
    broker.backend.promote_due(limit=10)  # not due yet: stays deferred
    assert broker.get_result(record.id).status is TaskResultStatus.DEFERRED
    clock.advance(timedelta(seconds=10))
    w.run(burst=True)
    assert recorder.events == [
        ("enqueued", record.id),
        ("started", record.id),
        ("retried", record.id),
        ("started", record.id),
        ("finished", record.id),
    ]


def test_every_task_a_batch_finishes_is_announced_once(
    broker: Broker, clock: FakeClock, recorder: Recorder
) -> None:
    """Successes, a final failure and a quarantined task finish; a retried one does not yet.

    One worker pass acknowledges them all in one batch, announced together.
    """
    done = [tasks.echo.using(broker=broker).enqueue(n) for n in range(3)]
    failed = tasks.wrong_kind.using(broker=broker).enqueue()
    retried = tasks.flaky.using(broker=broker).enqueue(fail_times=1)
    [unknown] = broker.backend.enqueue([TaskResult(id="unknown", task_path="nowhere:fn")])
    clock.advance(UNKNOWN_TASK_GRACE)  # unknown to every worker that long: quarantined
    Worker(broker, prefetch=10).run(burst=True)
    finished = [task_id for event, task_id in recorder.events if event == "finished"]
    assert sorted(finished) == sorted([*(r.id for r in done), failed.id, unknown.id])
    assert ("retried", retried.id) in recorder.events
    statuses = {task_id: broker.get_result(task_id).status for task_id in finished}
    assert statuses[failed.id] is statuses[unknown.id] is TaskResultStatus.FAILED


def test_a_batch_that_finishes_tasks_is_announced_once_in_order(
    broker: Broker, recorder: Recorder
) -> None:
    """One acknowledgement, one threadmill_tasks_finished call: the records in decided order."""
    done = [tasks.echo.using(broker=broker).enqueue(n) for n in range(5)]
    tasks.flaky.using(broker=broker).enqueue(fail_times=1)  # retried: not finished, not in it
    # One thread: with more, one may find nothing ready and send what is done so far.
    Worker(broker, threads=1, prefetch=10).run(burst=True)
    finished = [task_id for event, task_id in recorder.events if event == "finished"]
    assert recorder.batches == [finished]
    assert sorted(finished) == sorted(r.id for r in done)


def test_a_reaper_pass_announces_the_tasks_it_failed_as_one_batch(
    broker: Broker, clock: FakeClock, recorder: Recorder
) -> None:
    """Expired leases with no retry left finish FAILED together; one with retries does not."""
    given_up = [tasks.final.using(broker=broker).enqueue(n) for n in range(3)]
    retried = tasks.flaky.using(broker=broker).enqueue(fail_times=1)
    leases = broker.backend.claim(["default"], worker="gone", lease_ttl=timedelta(seconds=5),
                                  limit=10)  # fmt: skip
    assert broker.backend.mark_started(leases) == [True] * 4  # they ran: attempts to charge
    clock.advance(timedelta(seconds=6))
    assert reap(broker.backend) == 4
    assert [sorted(batch) for batch in recorder.batches] == [sorted(r.id for r in given_up)]
    assert ("retried", retried.id) in recorder.events


def test_a_failing_observer_does_not_change_the_outcome(broker: Broker) -> None:
    """An exception in a plugin's hook is logged; the task still succeeds."""

    class Broken:
        @hookimpl
        def threadmill_task_finished(self, record: TaskResult) -> None:
            raise RuntimeError("observer bug")

    plugin_manager().register(Broken(), name="broken")
    try:
        record = tasks.echo.using(broker=broker).enqueue(1)
        Worker(broker).run(burst=True)
    finally:
        plugin_manager().unregister(name="broken")
    assert broker.get_result(record.id).status is TaskResultStatus.SUCCESSFUL


def test_backends_command_lists_schemes(capsys: pytest.CaptureFixture[str]) -> None:
    """`threadmill backends` prints each installed scheme and its source."""
    assert main(["backends"]) == 0
    out = capsys.readouterr().out
    assert "memory://" in out
    assert "threadmill 0.1.0" in out


def test_backends_json_lists_each_scheme_and_the_extras_not_installed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`threadmill backends --json`: the rows the table shows, as objects, and the extras its
    "more with" lines name."""
    assert main(["backends"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert main(["backends", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    rows = {row["scheme"]: row for row in listed["backends"]}
    assert {row.scheme for row in installed_backends()} == set(rows)
    assert [line.split()[0] for line in table[1:] if not line.startswith("(")] == [
        f"{scheme}://" for scheme in rows
    ]
    assert rows["memory"]["source"] == "threadmill 0.1.0"
    assert "not durable" in rows["memory"]["description"]
    more = [line for line in table if line.startswith("(more with")]
    assert more == [
        f"(more with: pip install 'threadmill[{extra}]')"
        for extra in listed["extras_not_installed"]
    ]


def test_demo_shows_every_path_of_the_protocol() -> None:
    """The demo ends with successes, a retried success, a final failure and a reaped lease."""
    from threadmill_core.cli.demo import run_demo

    out = StringIO()
    final = {r.task_path.split(":")[1]: r for r in run_demo(out)}
    assert final["resize_image"].status is TaskResultStatus.SUCCESSFUL
    assert (final["flaky_upload"].status, final["flaky_upload"].attempts) == (
        TaskResultStatus.SUCCESSFUL,
        3,
    )
    assert (final["parse_report"].status, final["parse_report"].attempts) == (
        TaskResultStatus.FAILED,
        2,
    )
    crunched = final["crunch_numbers"]
    assert crunched.status is TaskResultStatus.SUCCESSFUL
    assert crunched.return_value == 6 + 2**70
    assert crunched.errors[0].exception_class_path.endswith("AcknowledgementTimeout")
    text = out.getvalue()
    assert "lease expired" in text
    assert "retry in" in text


def test_demo_command_runs_as_a_user_would() -> None:
    """`threadmill demo` exits 0 and prints the final table."""
    done = subprocess.run(
        [sys.executable, "-m", "threadmill_core.cli", "demo"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "SUCCESSFUL" in done.stdout
    assert "FAILED" in done.stdout


def test_demo_shows_every_call_whole_and_ends_with_what_to_try_next() -> None:
    """`threadmill demo`'s table cuts no call short (the big integer included), and its last
    lines say how to go on with a real server."""
    done = subprocess.run(
        [sys.executable, "-m", "threadmill_core.cli", "demo"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    [row] = [line for line in done.stdout.splitlines() if line.startswith("crunch_numbers(")]
    assert row.startswith(f"crunch_numbers([1, 2, 3, {2**70}]) ")
    assert row.endswith(f"SUCCESSFUL      2  {6 + 2**70}")
    last = done.stdout.rstrip().splitlines()[-6:]
    assert last[0].startswith("Next, with a Redis server")
    assert any(line.strip().startswith("threadmill worker myapp.tasks") for line in last)
