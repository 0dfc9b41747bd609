"""The state machine's rules for inspection and operators: get, peek, requeue, cancel, purge,
pausing schedules (against `PauseModel`), and live workers' entries (against
`LiveWorkerModel`).

`forge` makes up a lease the backend never issued, which every fenced
operation must refuse like a stale one.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import attrs
from hypothesis import strategies as st
from hypothesis.stateful import multiple, precondition, rule

from threadmill_core.backend import PURGEABLE_STATUSES
from threadmill_core.clock import from_ms, to_ms
from threadmill_core.models import Lease, TaskResultStatus
from threadmill_core.testing import strategies as ts
from threadmill_core.testing._judge import show
from threadmill_core.testing._machine.calls import CallingMachine
from threadmill_core.testing._machine.values import RUNNING, LeaseRef, leases, task_ids
from threadmill_core.testing._scenarios.live_workers import worker_info
from threadmill_core.testing.live_worker_model import LiveWorkerModel
from threadmill_core.testing.pause_model import PauseModel

#: The schedules the machine pauses and resumes.
SCHEDULE_NAMES = ("nightly", "poll-eu", "ünï code")

#: The workers the machine registers and removes, and the ttls it gives them (seconds).
WORKER_IDS = ("box-1:10:aaaaaa", "box-2:20:bbbbbb")
WORKER_TTLS = (1, 30, 600)


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

    @precondition(lambda self: bool(self.bundle("leases")))
    @rule(lease=leases, task_id=task_ids, of_a_lease=st.booleans())
    def request_cancel(self, lease: LeaseRef, task_id: str, of_a_lease: bool) -> None:
        """Operator cancel of a running task (often one a lease is on, so that its holder
        hears of it): stored once, told to its lease holder; any other task refused."""
        if of_a_lease:
            task_id = lease.task_id
        self.begin(f"request_cancel({task_id!r})", task_id)
        outcome = self.model.request_cancel(task_id)
        self.check_outcome("request_cancel()", outcome, self.backend.request_cancel(task_id))

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

    # --- live workers --------------------------------------------------------------------

    def _live_model(self) -> LiveWorkerModel:
        model: LiveWorkerModel | None = getattr(self, "live_worker_model", None)
        if model is None:
            model = self.live_worker_model = LiveWorkerModel()
        return model

    @rule(
        worker=st.sampled_from(WORKER_IDS),
        ttl=st.sampled_from(WORKER_TTLS),
        running=st.lists(task_ids, max_size=2, unique=True),
    )
    def register_worker(self, worker: str, ttl: int, running: list[str]) -> None:
        """Register (or refresh) a worker's entry: seen now, live for `ttl` seconds."""
        self.begin(f"register_worker({worker!r}, ttl={ttl} s, running={running!r})")
        info = worker_info(worker, *running)
        got = self.backend.register_worker(info, timedelta(seconds=ttl))
        assert got.last_seen is not None  # a WorkerInfo the backend stored always has it
        seen = to_ms(got.last_seen)
        if self.exact and seen != self.model.now_ms:
            self.fail("register_worker() must stamp last_seen with now()", self.model.now_ms, seen)
        self._live_model().register(info, ttl * 1000, seen)
        self._check_live_workers()

    @rule(worker=st.sampled_from(WORKER_IDS))
    def unregister_worker(self, worker: str) -> None:
        """Remove a worker's entry; whether a live one was there."""
        self.begin(f"unregister_worker({worker!r})")
        got = self.backend.unregister_worker(worker)
        expected = self._live_model().unregister(worker, self.model.now_ms)
        if self.exact and got != expected:
            self.fail("unregister_worker() answers whether a live entry was there", expected, got)
        self._check_live_workers()

    @rule()
    def list_workers(self) -> None:
        """List the live workers, after whatever time passed since the last change."""
        self.begin("workers()")
        self._check_live_workers()

    def _check_live_workers(self) -> None:
        """`workers()` lists what the model says is live now (only on a clock the kit sets:
        `advance` on a server clock moves expiries, not the clock the entries are stamped by)."""
        if not self.exact:
            return
        listed = [attrs.evolve(w, last_seen=None) for w in self.backend.workers()]
        expected = self._live_model().listed(self.model.now_ms)
        if listed != expected:
            self.fail("workers() must list the live entries, by id, and no lapsed one",
                      [w.id for w in expected], [w.id for w in listed])  # fmt: skip

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
