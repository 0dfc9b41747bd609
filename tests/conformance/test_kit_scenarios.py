"""The kit's named scenarios catch the bugs they are written for.

Each broken backend below is the memory backend with one plausible bug put
back in; the scenario written for that bug must fail on it, naming its rule,
while the unbroken backend passes it (test_conformance.py runs every
scenario on every bundled backend).
"""

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import attrs
import pytest

from tests.conftest import memory_harness
from threadmill_core.models import (
    Lease,
    QueueRates,
    TaskCall,
    TaskResult,
    TaskResultStatus,
    call_record,
)
from threadmill_core.testing import ProtocolViolation
from threadmill_core.testing.scenarios import BAD_INPUT_CASES, SCENARIOS
from threadmill_memory import MemoryBackend

pytestmark = pytest.mark.memory


class PoisonReleasingBackend(MemoryBackend):
    """A broken backend, as the memory, PostgreSQL and SQLite backends were: release() reads
    every task it gives back, so one corrupt record raises for the whole batch."""

    def release(
        self, leases: Sequence[Lease], delay: timedelta = timedelta(0)
    ) -> list[TaskResult | None]:
        for lease in leases:
            self.get(lease.task_id)
        return super().release(leases, delay)


class PoisonMarkingBackend(MemoryBackend):
    """A broken backend: mark_started() reads every task it marks (to check its worker, say),
    so one corrupt record raises for the whole heartbeat."""

    def mark_started(self, leases: Sequence[Lease]) -> list[bool]:
        for lease in leases:
            self.get(lease.task_id)
        return super().mark_started(leases)


class LastCallWinsBackend(MemoryBackend):
    """A broken backend: enqueue_calls() writes the calls in one go keyed by id, so of an id
    given twice the last call is stored, and the calls lose their order."""

    def enqueue_calls(self, template: TaskResult, calls: Sequence[TaskCall]) -> list[TaskResult]:
        last = {call[0]: call for call in calls}
        stored = {r.id: r for r in self.enqueue([call_record(template, c) for c in last.values()])}
        return [stored[call[0]] for call in calls]


class ReadyCallsBackend(MemoryBackend):
    """A broken backend: enqueue_calls() stores every call READY, whatever its run_after."""

    def enqueue_calls(self, template: TaskResult, calls: Sequence[TaskCall]) -> list[TaskResult]:
        return self.enqueue([attrs.evolve(call_record(template, c), run_after=None) for c in calls])


class GiveBackCountingBackend(MemoryBackend):
    """A broken backend: release() counts the tasks it gives back as having entered the
    queue, as if they had been enqueued again."""

    def release(
        self, leases: Sequence[Lease], delay: timedelta = timedelta(0)
    ) -> list[TaskResult | None]:
        answers = super().release(leases, delay)
        with self._lock:
            now_ms = self._now_ms()
            for answer in answers:
                if answer is not None:
                    self._history.record(answer.queue, now_ms, entered=1)
        return answers


class PurgeKeepsGiveBacksBackend(MemoryBackend):
    """A broken backend: it keeps each id's count of give-backs in a table of its own, beside
    the tasks, which purge() never clears; so an id enqueued again inherits the old count."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.given_back: dict[str, int] = {}

    def claim(
        self, queues: Sequence[str], *, worker: str, lease_ttl: timedelta, limit: int = 1
    ) -> list[Lease]:
        leases = super().claim(queues, worker=worker, lease_ttl=lease_ttl, limit=limit)
        return [
            attrs.evolve(lease, unstarted_expiries=self.given_back.get(lease.task_id, 0))
            for lease in leases
        ]

    def claim_expired(self, *, limit: int, claim_ttl: timedelta) -> list[Lease]:
        running = {
            record.id
            for queue in self.counts()
            for record in self.peek(queue, TaskResultStatus.RUNNING, limit=1000)
        }
        leases = super().claim_expired(limit=limit, claim_ttl=claim_ttl)
        for task_id in running:
            record = self.get(task_id)
            if record is not None and record.status is TaskResultStatus.READY:
                self.given_back[task_id] = self.given_back.get(task_id, 0) + 1
        return leases


class TruncatingDelayBackend(MemoryBackend):
    """A broken backend: retry() turns its delay into milliseconds by truncating, so a delay
    under a millisecond becomes zero and sends the task to the READY tail."""

    def retry(self, lease: Lease, record: TaskResult, delay: timedelta) -> TaskResult | None:
        whole = timedelta(milliseconds=delay // timedelta(milliseconds=1))
        return super().retry(lease, record, whole)


class UncheckedWindowBackend(MemoryBackend):
    """A broken backend: its rates() override answers a window that is not a positive
    timedelta with no rates, instead of refusing it (`check_window`)."""

    def rates(self, window: timedelta) -> Mapping[str, QueueRates] | None:
        if not isinstance(window, timedelta) or window <= timedelta(0):
            return {}
        return super().rates(window)


class MicrosecondClockBackend(MemoryBackend):
    """A broken backend: now() reads its clock to the microsecond, as `datetime.now` does."""

    def now(self) -> datetime:
        return super().now() + timedelta(microseconds=123)


class WindowAsAskedBackend(MemoryBackend):
    """A broken backend: rates() says it covered the window asked for, even one longer than
    the history it keeps."""

    def rates(self, window: timedelta) -> Mapping[str, QueueRates] | None:
        answer = super().rates(window) or {}
        return {queue: attrs.evolve(rates, window=window) for queue, rates in answer.items()}


@pytest.mark.parametrize(
    ("broken", "scenario", "rule"),
    [
        (
            PoisonReleasingBackend,
            "a_corrupt_running_record_never_costs_its_batch_its_release",
            "corrupt RUNNING records: release() must give back every good task",
        ),
        (
            PoisonMarkingBackend,
            "a_corrupt_running_record_never_costs_its_batch_its_marks_or_progress",
            "corrupt RUNNING records: mark_started() must take every good task",
        ),
        (
            LastCallWinsBackend,
            "enqueue_calls_keeps_every_promise_of_enqueue",
            "enqueue_calls() must store the call's args",
        ),
        (
            ReadyCallsBackend,
            "enqueue_calls_defers_by_the_templates_run_after",
            "enqueue_calls() due later must store the call's run_after",
        ),
        (
            GiveBackCountingBackend,
            "rates_count_what_entered_and_finished_and_nothing_else",
            "rates() after release(), cancel() and requeue() must count",
        ),
        (
            PurgeKeepsGiveBacksBackend,
            "an_id_purged_and_enqueued_again_counts_its_give_backs_from_zero",
            "an id purged (READY) and enqueued again is a new task",
        ),
        (
            TruncatingDelayBackend,
            "a_delay_under_a_millisecond_rounds_up_to_one",
            "retry() with a delay under a millisecond must defer the task",
        ),
        (
            UncheckedWindowBackend,
            "rates() with a zero window",
            "rates() with a zero window must raise ValueError",
        ),
        (
            WindowAsAskedBackend,
            "rates_count_what_entered_and_finished_and_nothing_else",
            "rates() after enqueue() of new ids and of stored ones must count",
        ),
        (
            MicrosecondClockBackend,
            "every_time_the_backend_tells_is_utc_on_a_whole_millisecond",
            "now() must be an aware UTC datetime at millisecond resolution",
        ),
    ],
)
def test_a_scenario_names_the_rule_a_broken_backend_breaks(
    broken: Callable[..., MemoryBackend], scenario: str, rule: str
) -> None:
    """The scenario written for a bug fails on a backend with that bug, naming its rule."""
    harness = memory_harness(broken)
    try:
        with pytest.raises(ProtocolViolation) as failure:
            {**SCENARIOS, **BAD_INPUT_CASES}[scenario](harness)
    finally:
        harness.close()
    assert str(failure.value).startswith(rule), failure.value
