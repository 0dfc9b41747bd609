"""The state machine's rules for inspection and operators: get, peek, requeue, cancel, purge,
and pausing schedules (against `PauseModel`).

`forge` makes up a lease the backend never issued, which every fenced
operation must refuse like a stale one.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import multiple, precondition, rule

from threadmill_core.backend import PURGEABLE_STATUSES
from threadmill_core.clock import from_ms, to_ms
from threadmill_core.models import Lease, TaskResultStatus
from threadmill_core.testing import strategies as ts
from threadmill_core.testing._judge import show
from threadmill_core.testing._machine.calls import CallingMachine
from threadmill_core.testing._machine.values import RUNNING, LeaseRef, leases, task_ids
from threadmill_core.testing.pause_model import PauseModel

#: The schedules the machine pauses and resumes.
SCHEDULE_NAMES = ("nightly", "poll-eu", "ünï code")


class OperatorRules(CallingMachine):
    """What the inspector and an operator do, and a made-up lease."""

    # --- inspection and operator actions ---------------------------------------------

    @rule(task_id=task_ids)
    def get(self, task_id: str) -> None:
        """Read one record."""
        self.begin(f"get({task_id!r})", task_id)
        got = self.backend.get(task_id)
        expected = self.model.get(task_id)
        if expected is None:
            if got is not None:
                self.fail("get() returned a record for a task that does not exist", None, show(got))
        elif got is None:
            self.fail("get() lost a stored task", show(expected), None)
        else:
            self.check_record("get()", expected, got)

    @precondition(lambda self: bool(self.model.tasks))
    @rule(
        queue=ts.queue_names(),
        status=st.sampled_from(TaskResultStatus),
        offset=st.integers(min_value=0, max_value=3),
        limit=st.integers(min_value=1, max_value=4),
    )
    def peek(self, queue: str, status: TaskResultStatus, offset: int, limit: int) -> None:
        """Read a page of one segment: the same page of the listing the invariant checks."""
        self.begin(f"peek({queue!r}, {status.value}, offset={offset}, limit={limit})")
        got = self.backend.peek(queue, status, offset=offset, limit=limit)
        self.check_records_listed(f"peek(offset={offset}, limit={limit})", got)
        listing = self.backend.peek(queue, status, offset=0, limit=10_000)
        want = [record.id for record in listing[offset : offset + limit]]
        if [record.id for record in got] != want:
            self.fail(
                f"peek(offset={offset}, limit={limit}) of {status.value} is not that page "
                "of the whole segment",
                want,
                [record.id for record in got],
            )
        segment = self.model.segment(queue, status)
        self.check_listing(f"peek() of {status.value}", status, segment, listing)

    @rule(task_id=task_ids)
    def requeue(self, task_id: str) -> None:
        """Operator requeue: only FAILED or CANCELLED tasks go back to READY."""
        self.begin(f"requeue({task_id!r})", task_id)
        outcome = self.model.requeue(task_id)
        self.check_outcome("requeue()", outcome, self.backend.requeue(task_id))

    @rule(task_id=task_ids)
    def cancel(self, task_id: str) -> None:
        """Operator cancel: only READY or DEFERRED tasks become CANCELLED."""
        self.begin(f"cancel({task_id!r})", task_id)
        outcome = self.model.cancel(task_id)
        self.check_outcome("cancel()", outcome, self.backend.cancel(task_id))

    @precondition(lambda self: bool(self.model.tasks))
    @rule(
        queue=ts.queue_names(),
        status=st.sampled_from([s for s in TaskResultStatus if s in PURGEABLE_STATUSES]),
    )
    def purge(self, queue: str, status: TaskResultStatus) -> None:
        """Drop one segment of one queue."""
        self.begin(f"purge({queue!r}, {status.value})")
        got = self.backend.purge(queue, status)
        expected = self.model.purge(queue, status)
        if got != expected:
            self.fail(f"purge() reported {got} tasks deleted from {status.value}", expected, got)

    @rule(name=st.sampled_from(SCHEDULE_NAMES), paused=st.booleans())
    def set_schedule_paused(self, name: str, paused: bool) -> None:
        """Pause or resume a schedule: stored as of now; setting it again changes nothing."""
        self.begin(f"set_schedule_paused({name!r}, {paused})")
        model: PauseModel | None = getattr(self, "pause_model", None)
        if model is None:
            model = self.pause_model = PauseModel()
        before = model.states.get(name)
        got = self.backend.set_schedule_paused(name, paused)
        # On a server clock the kit cannot predict the time: it takes the backend's.
        expected = model.set(name, paused, self.model.now_ms if self.exact else to_ms(got.since))
        if (got.paused, to_ms(got.since)) != expected:
            rule = (
                "set_schedule_paused() of the state it had must change nothing"
                if before is not None and before[0] == paused
                else "set_schedule_paused() must store the flag as of now()"
            )
            self.fail(rule, expected, (got.paused, to_ms(got.since)))
        listed = {n: (p.paused, to_ms(p.since)) for n, p in self.backend.schedule_pauses().items()}
        if listed != model.states:
            self.fail("schedule_pauses() does not list what was stored", model.states, listed)

    @precondition(lambda self: self.has(RUNNING))
    @rule(target=leases, task_id=task_ids)
    def forge(self, task_id: str) -> Any:
        """Make up a lease on a running task, with a token the backend never issued."""
        task = self.model.tasks.get(task_id)
        if task is None or task.status is not RUNNING:
            return multiple()
        serial = self.model.forge(task_id)
        token = f"forged:{serial}:🦝"
        if token in self.tokens_seen.get(task_id, set()):
            return multiple()
        record = self.model.record(task)
        lease = Lease(token=token, deadline=from_ms(self.model.now_ms), record=record)
        return multiple(LeaseRef(serial, "forged", lease))
