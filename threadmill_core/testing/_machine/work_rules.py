"""The state machine's rules for producing and working: enqueue, claim, renew, decide, release.

Each rule draws its arguments, names the step, makes the call on both sides
through `CallingMachine` and checks the answer.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import attrs
from hypothesis import strategies as st
from hypothesis.stateful import multiple, precondition, rule

from threadmill_core.clock import duration_ms
from threadmill_core.models import JSON, Lease, Progress, TaskError, TaskResultStatus
from threadmill_core.testing import strategies as ts
from threadmill_core.testing._judge import CLAIM_ORDER
from threadmill_core.testing._machine.calls import CallingMachine
from threadmill_core.testing._machine.values import (
    CANCELLED,
    FAILED,
    LEASE_TTLS,
    READY,
    RETRY_DELAYS,
    SUCCESSFUL,
    VERDICTS,
    LeaseRef,
    SentDecision,
    TaskSpec,
    Verdict,
    decisions,
    leases,
    task_ids,
    task_specs,
)


class WorkRules(CallingMachine):
    """What producers and workers do."""

    @rule(
        target=task_ids, specs=st.lists(task_specs(), min_size=1, max_size=4), twice=st.booleans()
    )
    def enqueue(self, specs: list[TaskSpec], twice: bool) -> Any:
        """Enqueue new tasks (READY or DEFERRED), maybe one id twice in the batch."""
        ids = [self.new_id(spec.id_prefix) for spec in specs]
        pairs = [self.build(task_id, spec) for task_id, spec in zip(ids, specs, strict=True)]
        if twice:
            pairs.append(self.build(ids[0], attrs.evolve(specs[-1], args=["second"])))
        self.begin(f"enqueue({ids}{' with the first id twice' if twice else ''})", *ids)
        self.do_enqueue(pairs, {i for i, s in zip(ids, specs, strict=True) if s.tamper})
        return multiple(*ids)

    @precondition(lambda self: bool(self.bundle("task_ids")))
    @rule(ids=st.lists(task_ids, min_size=1, max_size=3), spec=task_specs())
    def enqueue_again(self, ids: list[str], spec: TaskSpec) -> None:
        """Enqueue ids that may be stored already, with other contents: idempotent on id."""
        self.begin(f"enqueue({ids}) again with other contents", *ids)
        self.do_enqueue([self.build(task_id, spec) for task_id in ids], set())

    # --- working ---------------------------------------------------------------------

    @precondition(lambda self: self.has(READY) or bool(self.model.due()))
    @rule(
        target=leases,
        queues=st.lists(ts.queue_names(), min_size=1, max_size=3, unique=True),
        worker=ts.worker_names(),
        lease_ttl=st.sampled_from(LEASE_TTLS),
        limit=st.integers(min_value=1, max_value=4),
    )
    def claim(self, queues: list[str], worker: str, lease_ttl: timedelta, limit: int) -> Any:
        """Claim from some queues in a given order."""
        self.begin(f"claim({queues}, worker={worker!r}, lease_ttl={lease_ttl}, limit={limit})")
        got = self.backend.claim(queues, worker=worker, lease_ttl=lease_ttl, limit=limit)
        if not isinstance(got, list) or not all(isinstance(lease, Lease) for lease in got):
            self.fail("claim() must return a list of Lease", "list[Lease]", got)
        expected = self.model.claim(
            queues,
            worker=worker,
            lease_ttl_ms=duration_ms(lease_ttl),
            limit=limit,
            choose=self.chooser(
                "claim()",
                CLAIM_ORDER,
                [lease.record.id for lease in got],
                "took tasks that were neither READY nor due in the queues given",
            ),
        )
        hints = {
            "attempts": "claim() must add one to attempts",
            "worker_ids": "claim() must append the worker to worker_ids",
            "status": "claim() must move the task to RUNNING",
            "last_attempted_at": "claim() must set last_attempted_at to now()",
            "started_at": "claim() must set started_at on the first claim only",
        }
        refs = [
            self.check_new_lease("claim()", e, g, hints) for e, g in zip(expected, got, strict=True)
        ]
        return multiple(*refs)

    @rule(target=leases, lease=leases, lease_ttl=st.sampled_from(LEASE_TTLS))
    def extend(self, lease: LeaseRef, lease_ttl: timedelta) -> Any:
        """Renew one lease, current or stale."""
        self.begin(f"extend({lease!r}, {lease_ttl})", lease.task_id)
        return self.do_extend([lease], lease_ttl, many=False)

    @precondition(lambda self: bool(self.bundle("leases")))
    @rule(
        target=leases,
        batch=st.lists(leases, min_size=1, max_size=4),
        lease_ttl=st.sampled_from(LEASE_TTLS),
    )
    def extend_many(self, batch: list[LeaseRef], lease_ttl: timedelta) -> Any:
        """Renew several leases at once (a heartbeat)."""
        self.begin(f"extend_many({batch}, {lease_ttl})", *(ref.task_id for ref in batch))
        return self.do_extend(batch, lease_ttl, many=True)

    @rule(
        target=decisions,
        lease=leases,
        status=st.sampled_from((SUCCESSFUL, FAILED, CANCELLED)),
        return_value=ts.sample_values(),
        error=ts.task_errors(),
        tamper=st.booleans(),
    )
    def complete(
        self,
        lease: LeaseRef,
        status: TaskResultStatus,
        return_value: JSON,
        error: TaskError,
        tamper: bool,
    ) -> SentDecision:
        """Finalize with a lease, current or stale."""
        decision = self.decision(lease, status, return_value, error, tamper)
        self.begin(f"complete({lease!r}, {status.value})", lease.task_id)
        self.send([decision], many=False)
        return decision

    @rule(
        target=decisions,
        lease=leases,
        delay=st.sampled_from(RETRY_DELAYS),
        error=ts.task_errors(),
        tamper=st.booleans(),
    )
    def retry(
        self, lease: LeaseRef, delay: timedelta, error: TaskError, tamper: bool
    ) -> SentDecision:
        """Send a task back with a lease, with a zero or positive delay."""
        decision = self.decision(lease, delay, None, error, tamper)
        self.begin(f"retry({lease!r}, delay={decision.delay})", lease.task_id)
        self.send([decision], many=False)
        return decision

    @precondition(lambda self: bool(self.bundle("leases")))
    @rule(
        target=decisions,
        batch=st.lists(
            st.tuples(leases, VERDICTS, ts.sample_values(), ts.task_errors()),
            min_size=1,
            max_size=4,
        ),
    )
    def decide_many(self, batch: list[tuple[LeaseRef, Verdict, JSON, TaskError]]) -> Any:
        """Send a mixed batch of decisions, maybe two for one lease."""
        sent = [
            self.decision(ref, verdict, value, err, False) for ref, verdict, value, err in batch
        ]
        self.begin(f"decide_many({sent})", *(d.ref.task_id for d in sent))
        self.send(sent, many=True)
        return multiple(*sent)

    @precondition(lambda self: bool(self.bundle("leases")))
    @rule(batch=st.lists(leases, min_size=1, max_size=4))
    def mark_started(self, batch: list[LeaseRef]) -> None:
        """Record that claimed tasks began to run (a worker's start marks), current or stale."""
        self.begin(f"mark_started({batch})", *(ref.task_id for ref in batch))
        self.do_mark_started(batch)

    @precondition(lambda self: bool(self.bundle("leases")))
    @rule(batch=st.lists(st.tuples(leases, ts.progresses()), min_size=1, max_size=3))
    def record_progress(self, batch: list[tuple[LeaseRef, Progress]]) -> None:
        """Store the progress running tasks reported (a heartbeat's), current or stale."""
        self.begin(f"record_progress({batch})", *(ref.task_id for ref, _ in batch))
        self.do_record_progress(batch)

    @precondition(lambda self: bool(self.bundle("leases")))
    @rule(
        batch=st.lists(leases, min_size=1, max_size=4),
        delay=st.sampled_from([timedelta(0), timedelta(seconds=5)]),
    )
    def release(self, batch: list[LeaseRef], delay: timedelta) -> None:
        """Give back claimed tasks (a worker's prefetch at shutdown; with a delay, a task it
        did not load): current or stale, started or not, a worker's or a reaper's lease."""
        self.begin(f"release({batch}, {delay!r})", *(ref.task_id for ref in batch))
        self.do_release(batch, delay)

    @rule(decision=decisions, many=st.booleans())
    def repeat_decision(self, decision: SentDecision, many: bool) -> None:
        """Send a decision again, as a client does after a lost reply."""
        self.begin(
            f"the same decision again ({decision!r}){' in decide_many()' if many else ''}",
            decision.ref.task_id,
        )
        self.send([decision], many=many)
