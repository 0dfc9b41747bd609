"""The calls the state machine's rules make: each on the backend and on the model, then checked.

`CallingMachine` adds to `CheckingMachine` what several rules share: moving
both clocks, building the records a producer would send, and enqueueing,
renewing, deciding and reaping on both sides with every answer checked.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import attrs
from hypothesis.stateful import multiple

from threadmill_core.clock import duration_ms, from_ms, to_ms
from threadmill_core.models import JSON, Decision, Lease, Progress, TaskError, TaskResult
from threadmill_core.testing import strategies as ts
from threadmill_core.testing._judge import EXPIRED_ORDER
from threadmill_core.testing._machine.checks import CheckingMachine
from threadmill_core.testing._machine.values import (
    BACKEND_FIELDS,
    CANCEL_EXPIRED_HINTS,
    CANCELLED,
    DEFERRED,
    GIVE_BACK_HINTS,
    MAX_ADVANCES,
    READY,
    REAPER_HINTS,
    RUNNING,
    SUCCESSFUL,
    LeaseRef,
    SentDecision,
    TaskSpec,
    Verdict,
)
from threadmill_core.testing.model import APPLIED, Candidate, Outcome


class CallingMachine(CheckingMachine):
    """Both-sided calls for the rules; no rules of its own."""

    # --- time ------------------------------------------------------------------------

    def advance_ms(self, ms: int) -> bool:
        """Advance harness and model by `ms` if the budget allows; return whether it did."""
        if self.advances >= MAX_ADVANCES or self.model.now_ms + ms - self.start_ms > self.budget_ms:
            return False
        self.harness.advance(timedelta(milliseconds=ms))
        self.model.advance(ms)
        self.advances += 1
        if self.exact and to_ms(self.backend.now()) != self.model.now_ms:
            self.fail(
                "Harness.advance() did not move the backend's clock by the amount given",
                from_ms(self.model.now_ms),
                self.backend.now(),
            )
        return True

    def backend_time(self, offset: timedelta) -> datetime:
        """An absolute time `offset` from now, as the user would compute it for this backend."""
        if self.exact:
            return from_ms(self.model.now_ms) + offset
        return self.backend.now() + offset

    # --- producing -------------------------------------------------------------------

    def new_id(self, prefix: str) -> str:
        """A fresh task id. Ids are not in creation order, so "then by id" is really tested."""
        self.ids_made += 1
        return f"{prefix}-{self.ids_made}"

    def build(self, task_id: str, spec: TaskSpec) -> tuple[TaskResult, TaskResult]:
        """The record sent to the backend, and the same one on the model's clock."""
        record = TaskResult(
            id=task_id,
            task_path="app.tasks:send_email",
            args=spec.args,
            kwargs=spec.kwargs,
            queue=spec.queue,
            priority=spec.priority,
            retry=spec.retry,
            headers=dict(spec.headers),
            time_limit=spec.time_limit,
        )
        if spec.tamper:
            junk = from_ms(self.start_ms - 86_400_000)
            record = attrs.evolve(
                record,
                status=SUCCESSFUL,
                enqueued_at=junk,
                started_at=junk,
                last_attempted_at=junk,
                finished_at=junk,
                attempts=7,
                errors=(TaskError(exception_class_path="x.Junk", message="junk"),),
                worker_ids=("junk",),
                return_value="junk",
                progress=Progress(done=7, message="junk", updated_at=junk),
                cancel_requested_at=junk,
            )
        if spec.run_after is None:
            return record, record
        sent = attrs.evolve(record, run_after=self.backend_time(spec.run_after))
        modelled = attrs.evolve(record, run_after=from_ms(self.model.now_ms) + spec.run_after)
        return sent, modelled

    def do_enqueue(self, pairs: list[tuple[TaskResult, TaskResult]], tampered: set[str]) -> None:
        """Enqueue (sent, modelled) record pairs on both sides and check every answer."""
        sent = [s for s, _ in pairs]
        got = self.backend.enqueue(sent)
        known = {record.id for record in sent if record.id in self.model.tasks}
        expected = self.model.enqueue([m for _, m in pairs])
        if not isinstance(got, list) or len(got) != len(expected):
            self.fail("enqueue() must return one record per record given", len(expected), got)
        seen: set[str] = set()
        for want, have in zip(expected, got, strict=True):
            if want.id in known or want.id in seen:
                hints = {"*": "enqueue() of a stored id must return the stored record, unchanged"}
            elif want.id in tampered:
                hints = {
                    name: f"enqueue() kept the caller's {name}; the backend sets it itself"
                    for name in BACKEND_FIELDS
                }
            else:
                hints = {}
            seen.add(want.id)
            self.check_record("enqueue()", want, have, hints)

    def do_extend(self, refs: Sequence[LeaseRef], lease_ttl: timedelta, *, many: bool) -> Any:
        """Renew leases (one `extend`, or one `extend_many`); return the renewed ones."""
        op = "extend_many()" if many else "extend()"
        if many:
            got = self.backend.extend_many([ref.lease for ref in refs], lease_ttl)
            if not isinstance(got, list) or len(got) != len(refs):
                self.fail("extend_many() must answer once per lease, in order", len(refs), got)
        else:
            got = [self.backend.extend(refs[0].lease, lease_ttl)]
        renewed = []
        for ref, answer in zip(refs, got, strict=True):
            if answer is not None and not isinstance(answer, Lease):
                self.fail(f"{op} must answer a Lease or None", "Lease | None", answer)
            outcome = self.model.extend(ref.serial, lease_ttl_ms=duration_ms(lease_ttl))
            if outcome.refused or answer is None:
                self.check_outcome(op, outcome, None if answer is None else answer.record)
                continue
            assert outcome.lease is not None
            if answer.token != ref.lease.token:
                self.fail(
                    f"{op} changed the lease's token; a renewal keeps it",
                    ref.lease.token,
                    answer.token,
                )
            self.check_record(op, outcome.lease.record, answer.record)
            self.check_deadline(op, outcome.lease.deadline_ms, answer)
            if answer.cancel_requested is not outcome.lease.cancel_requested:
                self.fail(
                    f"{op} must say on the renewed lease whether a cancel was requested "
                    "(cancel_requested)",
                    outcome.lease.cancel_requested,
                    answer.cancel_requested,
                )
            renewed.append(LeaseRef(ref.serial, ref.kind, answer))
        return multiple(*renewed)

    def decision(
        self,
        ref: LeaseRef,
        verdict: Verdict,
        return_value: JSON,
        error: TaskError,
        tamper: bool,
    ) -> SentDecision:
        """A decision as a worker (or the reaper) makes it from what its lease says.

        A status finalizes (`complete`), a delay sends back (`retry`). With
        `tamper` the record also changes fields the backend must not take.
        """
        base = ref.lease.record
        if isinstance(verdict, timedelta):
            record = attrs.evolve(base, errors=(*base.errors, error))
        elif verdict is SUCCESSFUL:
            record = attrs.evolve(base, status=verdict, return_value=return_value)
        else:
            record = attrs.evolve(
                base, status=verdict, errors=(*base.errors, error), return_value=return_value
            )
        if tamper:
            other_queue = next(q for q in ts.QUEUE_NAMES if q != base.queue)
            record = attrs.evolve(
                record,
                queue=other_queue,
                priority=-base.priority if base.priority else 1,
                args=["tampered"],
                attempts=base.attempts + 5,
                worker_ids=(*base.worker_ids, "intruder"),
                started_at=from_ms(self.start_ms - 1000),
                finished_at=from_ms(self.start_ms - 1000),
                progress=Progress(done=0, message="tampered"),
                cancel_requested_at=from_ms(self.start_ms - 1000),
            )
        delay = verdict if isinstance(verdict, timedelta) else None
        return SentDecision(ref, record, delay, tamper)

    def predict(self, decision: SentDecision) -> Outcome:
        """What the model says `decision` must be answered (and does to its state)."""
        if decision.delay is None:
            return self.model.complete(
                decision.ref.serial,
                status=decision.record.status,
                errors=decision.record.errors,
                return_value=decision.record.return_value,
            )
        return self.model.retry(
            decision.ref.serial,
            errors=decision.record.errors,
            delay_ms=duration_ms(decision.delay),
        )

    def send(self, batch: Sequence[SentDecision], *, many: bool) -> None:
        """Send decisions (one call each, or one `decide_many`) and check every answer."""
        if many:
            got = self.backend.decide_many(
                [Decision(lease=d.ref.lease, record=d.record, retry_delay=d.delay) for d in batch]
            )
            if not isinstance(got, list) or len(got) != len(batch):
                self.fail("decide_many() must answer once per decision, in order", len(batch), got)
        else:
            got = [
                self.backend.complete(d.ref.lease, d.record)
                if d.delay is None
                else self.backend.retry(d.ref.lease, d.record, d.delay)
                for d in batch
            ]
        for decision, answer in zip(batch, got, strict=True):
            op = "complete()" if decision.delay is None else "retry()"
            if many:
                op = f"decide_many() deciding {op}"
            takes = "status, errors and return_value" if decision.delay is None else "errors"
            hints = {
                name: f"{op} took {name} from the caller's record; it takes only {takes}"
                for name in (
                    "queue",
                    "priority",
                    "args",
                    "attempts",
                    "worker_ids",
                    "started_at",
                    "progress",
                    "cancel_requested_at",
                )
                if decision.tampered
            }
            hints["return_value"] = f"{op} must store return_value for SUCCESSFUL only"
            self.check_outcome(op, self.predict(decision), answer, hints)

    def do_mark_started(self, refs: Sequence[LeaseRef]) -> None:
        """Mark starts in one `mark_started` on both sides and check every answer."""
        got = self.backend.mark_started([ref.lease for ref in refs])
        if not isinstance(got, list) or len(got) != len(refs):
            self.fail("mark_started() must answer once per lease, in order", len(refs), got)
        for ref, answer in zip(refs, got, strict=True):
            if type(answer) is not bool:
                self.fail("mark_started() must answer True or False per lease", "a bool", answer)
            outcome = self.model.mark_started(ref.serial)
            if outcome.refused and answer:
                self.fail(f"mark_started() accepted {outcome.verdict}", False, answer)
            if not outcome.refused and not answer:
                again = (
                    "; a mark repeated must be answered True" if outcome.verdict != APPLIED else ""
                )
                self.fail(f"mark_started() refused {outcome.verdict}{again}", True, answer)
            if outcome.refused:
                self.last_refusal = f"mark_started() refused {outcome.verdict} (correctly)"

    def do_record_progress(self, updates: Sequence[tuple[LeaseRef, Progress]]) -> None:
        """Store progress in one `record_progress` on both sides and check every answer (the
        records are checked by the invariant, as for `mark_started`)."""
        got = self.backend.record_progress([(ref.lease, progress) for ref, progress in updates])
        if not isinstance(got, list) or len(got) != len(updates):
            self.fail("record_progress() must answer once per update, in order", len(updates), got)
        for (ref, progress), answer in zip(updates, got, strict=True):
            if type(answer) is not bool:
                self.fail(
                    "record_progress() must answer True or False per update", "a bool", answer
                )
            outcome = self.model.record_progress(ref.serial, progress)
            if outcome.refused and answer:
                self.fail(f"record_progress() accepted {outcome.verdict}", False, answer)
            if not outcome.refused and not answer:
                self.fail(f"record_progress() refused {outcome.verdict}", True, answer)
            if outcome.refused:
                self.last_refusal = f"record_progress() refused {outcome.verdict} (correctly)"

    def do_release(self, refs: Sequence[LeaseRef], delay: timedelta = timedelta(0)) -> None:
        """Give back claimed tasks in one `release` on both sides and check every answer."""
        got = self.backend.release([ref.lease for ref in refs], delay)
        if not isinstance(got, list) or len(got) != len(refs):
            self.fail("release() must answer once per lease, in order", len(refs), got)
        hints = {
            "status": "release() must send the task back to READY (DEFERRED with a delay)",
            "run_after": "release() with a delay must make run_after now() + delay",
            "attempts": "release() must undo the claim's attempt (attempts - 1)",
            "worker_ids": "release() must drop the claim's worker from worker_ids",
            "started_at": "release() must clear started_at when no attempt is left",
            "last_attempted_at": "release() must clear last_attempted_at when no attempt is left",
        }
        for ref, answer in zip(refs, got, strict=True):
            expected = self.model.release(ref.serial, duration_ms(delay))
            self.check_outcome("release()", expected, answer, hints)

    # --- maintenance -----------------------------------------------------------------

    def do_claim_expired(self, limit: int, claim_ttl: timedelta) -> list[LeaseRef]:
        """One reaper pass on both sides; the leases it must have returned.

        Before the model moves, the tasks it would give back (unstarted
        claims) and charge are known, so a backend that charges the one or
        gives back the other is told which rule it broke.
        """
        got = self.backend.claim_expired(limit=limit, claim_ttl=claim_ttl)
        if not isinstance(got, list) or not all(isinstance(lease, Lease) for lease in got):
            self.fail("claim_expired() must return a list of Lease", "list[Lease]", got)
        got_ids = [lease.record.id for lease in got]
        expired = {task_id for _, task_id in self.model.expired()}
        uncharged = {task_id for task_id in expired if self.model.uncharged(task_id)}
        for task_id in got_ids:
            if task_id in uncharged and self.model.tasks[task_id].cancel_requested_at is not None:
                self.fail(
                    f"claim_expired() claimed task {task_id!r}, which has a cancel request: "
                    "it must finalize it CANCELLED, not hand it to the reaper",
                    "CANCELLED",
                    "claimed",
                )
            if task_id in uncharged:
                self.fail(
                    f"claim_expired() charged task {task_id!r}, whose expired claim never "
                    "recorded a start: it must go back to READY uncharged, not to the reaper",
                    "given back",
                    "claimed",
                )
        claimed_ids = set(got_ids)

        def settle(tied: list[str]) -> list[str]:
            # Tied with the pass's last claim: whether the pass reached one is
            # the backend's order within the tie, so its state says.
            reached = (READY, CANCELLED)
            return [
                i for i in tied if (r := self.backend.get(i)) is not None and r.status in reached
            ]

        choose = self.chooser(
            "claim_expired()",
            EXPIRED_ORDER,
            got_ids,
            "claimed tasks whose lease (or reaper claim) has not expired",
        )

        def choose_charged(candidates: list[Candidate], wanted: int) -> list[str]:
            for _, task_id in candidates[:wanted]:
                stored = self.backend.get(task_id)
                if (
                    task_id not in claimed_ids
                    and stored is not None
                    and stored.status is not RUNNING
                ):
                    self.fail(
                        f"claim_expired() gave back task {task_id!r}, whose expired claim was "
                        "charged (a recorded start, or a reaper's claim): the reaper must claim it",
                        "claimed",
                        f"given back ({stored.status.value})",
                    )
            return choose(candidates, wanted)

        expected = self.model.claim_expired(
            limit=limit,
            claim_ttl_ms=duration_ms(claim_ttl),
            choose=choose_charged,
            settle=None if self.exact else settle,
        )
        for task_id in sorted(uncharged):
            model_task = self.model.tasks[task_id]
            if model_task.status in (READY, CANCELLED):
                hints = GIVE_BACK_HINTS if model_task.status is READY else CANCEL_EXPIRED_HINTS
                self.check_record(
                    "claim_expired()", self.model.record(model_task), self.backend.get(task_id),
                    hints,
                )  # fmt: skip
        return [
            self.check_new_lease("claim_expired()", e, g, REAPER_HINTS)
            for e, g in zip(expected, got, strict=True)
        ]

    def moments_ahead(self) -> list[int]:
        """Future due times and lease deadlines, epoch ms: where the boundaries are."""
        now = self.model.now_ms
        return [
            moment
            for t in self.model.tasks.values()
            for moment in (t.run_after if t.status is DEFERRED else t.deadline,)
            if moment is not None and moment > now
        ]
