"""The conformance state machine: a backend under test, run step for step beside the model.

Every backend, bundled or third-party, runs it through `ConformanceSuite`;
outside pytest, or to pass settings of its own::

    from threadmill_core.testing import run_machine

    def test_my_backend_matches_the_model():
        run_machine(make_my_harness)

`make_machine(factory)` builds a Hypothesis `RuleBasedStateMachine` whose every
test case starts from `factory()` (a fresh, empty backend) and closes it at
the end. Each rule makes one call on the backend and the same call on
`ProtocolModel`, and compares the answers; after every rule an invariant
compares `counts()` and the segments the rule may have changed (contents,
order, records), and every segment of every queue every few rules and at
the end. Leases that lost their token stay in the `leases` bundle, so later
rules use them and the backend must refuse them.

A disagreement raises `ProtocolViolation` (an `AssertionError`) whose first
line names the broken rule in words ("complete() accepted a stale token (a
reaper claim replaced it)", "claim() returned tasks out of order: ... by
priority (higher first)", "a reaper claim counted as an attempt"), followed
by the step and the expected and actual values.

Time. Durations are whole hours; every advance is whole hours plus one
minute. So any two moments the kit compares (a deadline and "now", two due
times) are either equal by construction or at least a minute apart, and a
backend on a server clock (`Harness.exact_clock` False), whose time also
creeps forward in real time while the test runs, still sees the same side
of every boundary as the model. Such a backend is checked for timestamps'
presence and order, not their values, and ties (two calls at one model
instant) may come out in either order. On an exact clock everything is
compared exactly, and one more rule stops the clock exactly on the next due
time or lease deadline, since both "due" and "expired" include that moment.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, ClassVar, NoReturn

import attrs
import hypothesis
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    invariant,
    multiple,
    precondition,
    rule,
    run_state_machine_as_test,
)

from threadmill_core.backend import PURGEABLE_STATUSES
from threadmill_core.clock import duration_ms, from_ms, to_ms
from threadmill_core.models import (
    JSON,
    Decision,
    Lease,
    RetryPolicySpec,
    TaskError,
    TaskResult,
    TaskResultStatus,
)
from threadmill_core.testing import strategies as ts
from threadmill_core.testing._judge import (
    CLAIM_ORDER,
    EXPIRED_ORDER,
    ORDERS,
    order_problem,
    record_diff,
    show,
    time_order_problem,
)
from threadmill_core.testing.harness import Harness, HarnessFactory
from threadmill_core.testing.model import (
    APPLIED,
    Candidate,
    Chooser,
    ExpectedLease,
    GroupKey,
    Outcome,
    ProtocolModel,
    ProtocolViolation,
)

READY = TaskResultStatus.READY
DEFERRED = TaskResultStatus.DEFERRED
RUNNING = TaskResultStatus.RUNNING
SUCCESSFUL = TaskResultStatus.SUCCESSFUL
FAILED = TaskResultStatus.FAILED

MINUTE = timedelta(minutes=1)
HOUR = timedelta(hours=1)
#: An advance is whole hours plus this; at most `MAX_ADVANCES` of them keep
#: their sum's minutes below the hour (see the module doc).
PHASE = MINUTE
MAX_ADVANCES = 50
#: Every segment is read at least once in this many steps (see the invariant).
FULL_CHECK_EVERY = 5
#: Kept between the total advance and `Harness.result_ttl`.
RESULT_TTL_MARGIN = HOUR

LEASE_TTLS = (HOUR, 2 * HOUR, 3 * HOUR)
CLAIM_TTLS = (HOUR, 2 * HOUR)
RETRY_DELAYS = (timedelta(0), HOUR, 2 * HOUR)
#: `run_after` relative to now; None enqueues without one.
RUN_AFTER_OFFSETS = (None, None, -HOUR, timedelta(0), HOUR, 2 * HOUR)
ADVANCES = (PHASE, HOUR + PHASE, 2 * HOUR + PHASE, 3 * HOUR + PHASE)

#: A decision: a status finalizes (`complete`), a delay sends back (`retry`).
Verdict = TaskResultStatus | timedelta
VERDICTS: st.SearchStrategy[Verdict] = st.sampled_from((SUCCESSFUL, FAILED, *RETRY_DELAYS))

#: Fields of an enqueued record that the backend sets itself, whatever the caller sent.
BACKEND_FIELDS = (
    "status",
    "enqueued_at",
    "started_at",
    "last_attempted_at",
    "finished_at",
    "attempts",
    "errors",
    "worker_ids",
    "return_value",
)
REAPER_HINTS = {
    "attempts": "a reaper claim counted as an attempt",
    "worker_ids": "a reaper claim was recorded as a worker's attempt (worker_ids changed)",
    "last_attempted_at": "a reaper claim moved last_attempted_at (it is not an attempt)",
    "started_at": "a reaper claim moved started_at (it is not an attempt)",
}


# --- the things rules pass around ----------------------------------------------------


@dataclass(frozen=True)
class LeaseRef:
    """A lease the backend returned, paired with the model's serial for it."""

    serial: int
    kind: str
    lease: Lease

    @property
    def task_id(self) -> str:
        return self.lease.record.id

    def __repr__(self) -> str:
        return f"<{self.kind} lease #{self.serial} on {self.task_id!r}>"


@dataclass(frozen=True)
class SentDecision:
    """A complete (`delay` None) or retry decision as it was sent, kept to send it again."""

    ref: LeaseRef
    record: TaskResult
    delay: timedelta | None
    #: The record also carried fields the backend must not take (queue, attempts, ...).
    tampered: bool

    def __repr__(self) -> str:
        what = self.record.status.value if self.delay is None else f"retry after {self.delay}"
        return f"<{what} with {self.ref!r}>"


@attrs.frozen(kw_only=True)
class TaskSpec:
    """What a rule draws for one new task."""

    id_prefix: str
    queue: str
    priority: int
    run_after: timedelta | None
    args: list[JSON]
    kwargs: dict[str, JSON]
    retry: RetryPolicySpec | None
    #: Also send the fields the backend must ignore (status, attempts, ...), filled with junk.
    tamper: bool


def task_specs() -> st.SearchStrategy[TaskSpec]:
    """New tasks for the machine to enqueue."""
    return st.builds(
        TaskSpec,
        id_prefix=st.integers(min_value=0, max_value=0xFFF).map("{:03x}".format),
        queue=ts.queue_names(),
        priority=ts.priorities(),
        run_after=st.sampled_from(RUN_AFTER_OFFSETS),
        args=ts.task_args(),
        kwargs=ts.task_kwargs(),
        retry=ts.retry_specs(),
        tamper=st.booleans(),
    )


# --- the machine ---------------------------------------------------------------------


class BackendMachine(RuleBasedStateMachine):
    """Rules over the whole storage interface; `make_machine` sets `harness_factory`."""

    harness_factory: ClassVar[HarnessFactory]

    task_ids = Bundle("task_ids")
    leases = Bundle("leases")
    decisions = Bundle("decisions")

    def __init__(self) -> None:
        super().__init__()
        self.harness: Harness = type(self).harness_factory()
        self.backend = self.harness.backend
        self.exact = self.harness.exact_clock
        self.start_ms = to_ms(self.backend.now())
        self.model = ProtocolModel(self.start_ms)
        self.budget_ms = duration_ms(self.harness.result_ttl - RESULT_TTL_MARGIN)
        self.advances = 0
        self.ids_made = 0
        self.tokens_seen: dict[str, set[str]] = {}
        self.step = "the start (an empty backend)"
        self.last_refusal: str | None = None
        #: Task ids the current step named (see `every_segment_matches_the_model`).
        self.named: set[str] = set()
        #: Invariant checks so far; the check that last read every segment; the
        #: check that last read each segment; the model's segments as last compared.
        self.checks = 0
        self.full_check_at = 0
        self.read_at: dict[tuple[str, TaskResultStatus], int] = {}
        self.last_seen: dict[tuple[str, TaskResultStatus], list[tuple[GroupKey, TaskResult]]] = {}
        #: False from the start of a step until the invariant has passed after it.
        self.settled = True

    def teardown(self) -> None:
        try:
            if self.settled:  # not after a failure, which must be reported as it is
                self.full_check_at = -FULL_CHECK_EVERY
                self.step = f"the end of the test case (last step: {self.step})"
                self.every_segment_matches_the_model()
        finally:
            self.harness.close()

    def has(self, status: TaskResultStatus) -> bool:
        """Whether the model holds a task with `status` (rules that need one wait for it)."""
        return any(task.status is status for task in self.model.tasks.values())

    # --- reporting -------------------------------------------------------------------

    def fail(self, rule: str, expected: object = None, got: object = None, *notes: str) -> NoReturn:
        """Raise a `ProtocolViolation` naming `rule`, the step, and expected vs got."""
        lines = [rule, f"  during:   {self.step}"]
        if expected is not None or got is not None:
            lines += [f"  expected: {expected!r}", f"  got:      {got!r}"]
        lines += [f"  {note}" for note in notes]
        raise ProtocolViolation("\n".join(lines))

    def begin(self, step: str, *task_ids: str) -> None:
        """Start a step: name it and the tasks it acts on; forget the last refusal."""
        self.step = step
        self.named = set(task_ids)
        self.last_refusal = None
        self.settled = False

    def check_record(
        self,
        op: str,
        expected: TaskResult,
        got: object,
        hints: Mapping[str, str] | None = None,
        notes: Sequence[str] = (),
    ) -> None:
        """Fail unless `got` is the record `expected`; `hints` name the rule per field.

        `notes` are added to the failure message.
        """
        if not isinstance(got, TaskResult):
            self.fail(f"{op} must return a TaskResult", show(expected), got)
        hints = hints or {}
        diff = record_diff(expected, got, exact=self.exact)
        if diff:
            field = diff[0]
            rule = hints.get(field) or hints.get("*") or f"{op} stored the wrong {field}"
            fields = [
                f"{name}: expected {getattr(expected, name)!r}, got {getattr(got, name)!r}"
                for name in diff
            ]
            self.fail(f"{rule} (task {expected.id!r})", None, None, *fields, *notes)
        if not self.exact:
            problem = time_order_problem(got)
            if problem:
                self.fail(f"{op} stored timestamps out of order: {problem}", None, got, *notes)

    def check_outcome(
        self,
        op: str,
        outcome: Outcome,
        got: TaskResult | None,
        hints: Mapping[str, str] | None = None,
    ) -> None:
        """Fail unless the backend accepted or refused as the model says, with its record."""
        expected = outcome.record
        if expected is None:
            if got is not None:
                self.fail(f"{op} accepted {outcome.verdict}", None, show(got))
            self.last_refusal = f"{op} refused {outcome.verdict} (correctly)"
            return
        repeat = outcome.verdict != APPLIED
        if got is None:
            must = "; it must answer as the first time" if repeat else ""
            self.fail(f"{op} refused {outcome.verdict}{must}", show(expected), None)
        if repeat:
            hints = {"*": f"a repeated {op} must change nothing and return the stored record"}
        self.check_record(op, expected, got, hints)

    def check_new_lease(
        self, op: str, expected: ExpectedLease, got: object, hints: Mapping[str, str]
    ) -> LeaseRef:
        """Check a lease from `claim`/`claim_expired`, including that its token is fresh."""
        if not isinstance(got, Lease):
            self.fail(f"{op} must return Lease objects", expected, got)
        self.check_record(op, expected.record, got.record, hints)
        self.check_deadline(op, expected.deadline_ms, got)
        if not isinstance(got.token, str) or not got.token:
            self.fail(f"{op} returned a lease without a token", None, got.token)
        seen = self.tokens_seen.setdefault(expected.task_id, set())
        if got.token in seen:
            self.fail(
                f"{op} reused a token task {expected.task_id!r} had before; "
                "every claim must get a fresh token",
                "a new token",
                got.token,
            )
        seen.add(got.token)
        return LeaseRef(expected.serial, self.model.leases[expected.serial].kind, got)

    def check_deadline(self, op: str, expected_ms: int, got: Lease) -> None:
        """On an exact clock, the lease deadline must be the model's to the millisecond."""
        if self.exact and to_ms(got.deadline) != expected_ms:
            self.fail(
                f"{op} set the wrong lease deadline (it is now() + the ttl given)",
                from_ms(expected_ms),
                got.deadline,
            )

    def chooser(
        self, op: str, parts: Sequence[str], got_ids: Sequence[str], stranger: str
    ) -> Chooser:
        """A `Chooser` that checks the backend took the right tasks and tells the model which."""

        def choose(candidates: list[Candidate], limit: int) -> list[str]:
            problem = order_problem(
                op, parts, candidates, limit, got_ids, exact=self.exact, stranger=stranger
            )
            if problem:
                want = [task_id for _, task_id in candidates[:limit]]
                self.fail(problem, want, list(got_ids))
            return list(got_ids)

        return choose

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
            renewed.append(LeaseRef(ref.serial, ref.kind, answer))
        return multiple(*renewed)

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
                for name in ("queue", "priority", "args", "attempts", "worker_ids", "started_at")
                if decision.tampered
            }
            hints["return_value"] = f"{op} must store return_value for SUCCESSFUL only"
            self.check_outcome(op, self.predict(decision), answer, hints)

    @rule(
        target=decisions,
        lease=leases,
        status=st.sampled_from((SUCCESSFUL, FAILED)),
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
    def release(self, batch: list[LeaseRef]) -> None:
        """Give back claimed tasks (a worker's prefetch at shutdown), current or stale."""
        # A reaper's lease is decided, never released (see Backend.release).
        batch = [ref for ref in batch if ref.kind != "reaper"]
        if not batch:
            return
        self.begin(f"release({batch})", *(ref.task_id for ref in batch))
        got = self.backend.release([ref.lease for ref in batch])
        if not isinstance(got, list) or len(got) != len(batch):
            self.fail("release() must answer once per lease, in order", len(batch), got)
        hints = {
            "attempts": "release() must undo the claim's attempt (attempts - 1)",
            "worker_ids": "release() must drop the claim's worker from worker_ids",
            "started_at": "release() must clear started_at when no attempt is left",
            "last_attempted_at": "release() must clear last_attempted_at when no attempt is left",
            "status": "release() must send the task back to READY",
        }
        for ref, answer in zip(batch, got, strict=True):
            self.check_outcome("release()", self.model.release(ref.serial), answer, hints)

    @rule(decision=decisions, many=st.booleans())
    def repeat_decision(self, decision: SentDecision, many: bool) -> None:
        """Send a decision again, as a client does after a lost reply."""
        self.begin(
            f"the same decision again ({decision!r}){' in decide_many()' if many else ''}",
            decision.ref.task_id,
        )
        self.send([decision], many=many)

    # --- maintenance -----------------------------------------------------------------

    def do_claim_expired(self, limit: int, claim_ttl: timedelta) -> list[LeaseRef]:
        """One reaper pass on both sides; the leases it must have returned."""
        got = self.backend.claim_expired(limit=limit, claim_ttl=claim_ttl)
        if not isinstance(got, list) or not all(isinstance(lease, Lease) for lease in got):
            self.fail("claim_expired() must return a list of Lease", "list[Lease]", got)
        expected = self.model.claim_expired(
            limit=limit,
            claim_ttl_ms=duration_ms(claim_ttl),
            choose=self.chooser(
                "claim_expired()",
                EXPIRED_ORDER,
                [lease.record.id for lease in got],
                "claimed tasks whose lease (or reaper claim) has not expired",
            ),
        )
        return [
            self.check_new_lease("claim_expired()", e, g, REAPER_HINTS)
            for e, g in zip(expected, got, strict=True)
        ]

    @precondition(lambda self: self.has(RUNNING))
    @rule(
        target=leases,
        limit=st.integers(min_value=1, max_value=4),
        claim_ttl=st.sampled_from(CLAIM_TTLS),
    )
    def claim_expired(self, limit: int, claim_ttl: timedelta) -> Any:
        """A reaper pass over expired leases."""
        self.begin(f"claim_expired(limit={limit}, claim_ttl={claim_ttl})")
        return multiple(*self.do_claim_expired(limit, claim_ttl))

    @precondition(lambda self: self.has(RUNNING))
    @rule(
        target=leases,
        lease=leases,
        actions=st.permutations(("complete", "retry", "extend", "decide_many")),
        claim_ttl=st.sampled_from(CLAIM_TTLS),
        error=ts.task_errors(),
    )
    def use_lease_after_reap(
        self, lease: LeaseRef, actions: list[str], claim_ttl: timedelta, error: TaskError
    ) -> Any:
        """Let a current lease expire and reap it, then try every fenced operation with it.

        Each must be refused and change nothing. All four are tried (in a
        drawn order) because this is the race fencing exists for, and a
        missing token check in any one of them is the commonest bug.
        """
        task = self.model.tasks.get(lease.task_id)
        if (
            self.model.refusal(lease.serial) is not None
            or task is None
            or task.status is not RUNNING
        ):
            return multiple()
        assert task.deadline is not None
        late_by = task.deadline - self.model.now_ms  # expired at the deadline itself
        if late_by > 0:
            hours = -(-late_by // duration_ms(HOUR))
            self.begin(f"advance past the deadline of {lease!r}")
            if not self.advance_ms(late_by if self.exact else duration_ms(hours * HOUR + PHASE)):
                return multiple()
        self.begin(f"claim_expired() after {lease!r} expired")
        reaped = self.do_claim_expired(len(self.model.expired()), claim_ttl)
        verdicts: dict[str, Verdict] = {"complete": SUCCESSFUL, "retry": timedelta(0)}
        for action in actions:
            self.every_segment_matches_the_model()
            self.begin(f"{action} with {lease!r} after a reaper claimed its task", lease.task_id)
            if action == "extend":
                self.do_extend([lease], LEASE_TTLS[0], many=False)
            else:
                decision = self.decision(lease, verdicts.get(action, FAILED), 1, error, False)
                self.send([decision], many=action == "decide_many")
        return multiple(*reaped)

    @precondition(lambda self: self.has(DEFERRED))
    @rule(limit=st.integers(min_value=1, max_value=4))
    def promote_due(self, limit: int) -> None:
        """Promote due DEFERRED tasks of every queue."""
        self.begin(f"promote_due(limit={limit})")
        got = self.backend.promote_due(limit=limit)

        def choose(candidates: list[Candidate], limit: int) -> list[str]:
            expected = candidates[:limit]
            if got != len(expected):
                self.fail(
                    f"promote_due() promoted {got} tasks where {len(expected)} were due "
                    f"(limit {limit})",
                    len(expected),
                    got,
                )
            if self.exact or not expected:
                return [task_id for _, task_id in expected]
            # A limit that cuts a tie: which of the tied tasks went is the backend's choice.
            cut = expected[-1][0]
            sure = [task_id for key, task_id in expected if key != cut]
            tied = [task_id for key, task_id in candidates if key == cut]
            went = [i for i in tied if (r := self.backend.get(i)) is not None and r.status is READY]
            return sure + went

        self.model.promote_due(limit=limit, choose=choose)

    @precondition(lambda self: self.has(RUNNING) or self.has(DEFERRED))
    @rule(offset=st.sampled_from(ADVANCES))
    def advance(self, offset: timedelta) -> None:
        """Let time pass (leases expire, deferred tasks fall due)."""
        self.begin(f"advance({offset})")
        self.advance_ms(duration_ms(offset))

    @precondition(lambda self: self.exact and bool(self.moments_ahead()))
    @rule()
    def advance_to_the_next_moment(self) -> None:
        """Stop the clock exactly on the next due time or lease deadline (exact clocks only)."""
        self.begin("advance exactly to the next due time or lease deadline")
        self.advance_ms(min(self.moments_ahead()) - self.model.now_ms)

    def moments_ahead(self) -> list[int]:
        """Future due times and lease deadlines, epoch ms: where the boundaries are."""
        now = self.model.now_ms
        return [
            moment
            for t in self.model.tasks.values()
            for moment in (t.run_after if t.status is DEFERRED else t.deadline,)
            if moment is not None and moment > now
        ]

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

    def check_records_listed(self, op: str, got: object) -> None:
        """A listing must be a list of records."""
        if not isinstance(got, list) or not all(isinstance(r, TaskResult) for r in got):
            self.fail(f"{op} must return a list of TaskResult", "list[TaskResult]", got)

    def check_listing(
        self,
        op: str,
        status: TaskResultStatus,
        segment: list[tuple[GroupKey, TaskResult]],
        got: list[TaskResult],
        notes: Sequence[str] = (),
    ) -> None:
        """Check a whole segment as listed: the model's tasks in segment order, its records."""
        problem = order_problem(
            op,
            ORDERS[status],
            [(key, record.id) for key, record in segment],
            len(segment),
            [record.id for record in got],
            exact=self.exact,
            stranger=f"listed tasks that are not {status.value} in this queue",
        )
        if problem:
            self.fail(problem, [r.id for _, r in segment], [r.id for r in got], *notes)
        by_id = {record.id: record for _, record in segment}
        for record in got:
            self.check_record(op, by_id[record.id], record, notes=notes)

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

    # --- invariants ------------------------------------------------------------------

    @invariant()
    def every_segment_matches_the_model(self) -> None:
        """Every segment the step may have changed holds the model's tasks, in order, as records.

        `counts()` is compared after every step, and a segment is read where
        the model's copy changed in the step or holds a task the step acted
        on (a refused call must leave it alone). Every non-empty segment is
        read when `counts()` disagrees, at least every `FULL_CHECK_EVERY`
        steps, and at the end of each test case, so a change nothing asked
        for is still found. Reading every segment after every step would
        double what the kit costs on a backend with round trips.
        """
        self.checks += 1
        counts = dict(self.backend.counts())
        expected = self.model.counts()
        segments = {
            (queue, status): self.model.segment(queue, status)
            for queue, tally in expected.items()
            for status in TaskResultStatus
            if tally.of(status)
        }
        touched = {
            key
            for key in segments.keys() | self.last_seen.keys()
            if not same_segment(segments.get(key, []), self.last_seen.get(key, []))
        }
        touched |= {
            (task.queue, task.status)
            for task_id in self.named
            if (task := self.model.tasks.get(task_id)) is not None
        }
        to_read = set(touched)
        if counts != expected or self.checks - self.full_check_at >= FULL_CHECK_EVERY:
            self.full_check_at = self.checks
            to_read |= {
                (queue, status)
                for tallies in (counts, expected)
                for queue, tally in tallies.items()
                for status in TaskResultStatus
                if tally.of(status)
            }
        for queue in sorted({queue for queue, _ in to_read}):
            for status in TaskResultStatus:
                key = (queue, status)
                if key in to_read:
                    since = None if key in touched else self.checks - self.read_at.get(key, 0)
                    self.check_segment(queue, status, segments.get(key, []), since)
                    self.read_at[key] = self.checks
        if counts != expected:
            self.fail("counts() disagrees with the model", expected, counts)
        self.last_seen = segments
        self.settled = True

    def check_segment(
        self,
        queue: str,
        status: TaskResultStatus,
        segment: list[tuple[GroupKey, TaskResult]],
        since: int | None,
    ) -> None:
        """Read one whole segment and fail unless it is the model's, in order, record for record.

        `since` is None for a segment the step acted on; otherwise how many
        steps ago it was last read, any of which may have changed it.
        """
        if since is None:
            prefix = (
                f"{self.last_refusal}, but it changed the stored state: "
                if self.last_refusal
                else ""
            )
            notes: list[str] = []
        else:
            prefix = "a step changed a segment it had no business with: "
            notes = [
                f"this step should not have changed this segment; it was last read {since} "
                "step(s) before, so one of the steps since did (the steps are listed below)"
            ]
        got = self.backend.peek(queue, status, offset=0, limit=10_000)
        self.check_records_listed("peek()", got)
        want_ids = {record.id for _, record in segment}
        got_ids = {record.id for record in got}
        if want_ids != got_ids:
            self.fail(
                f"{prefix}the {status.value} segment of queue {queue!r} holds the wrong tasks",
                sorted(want_ids),
                sorted(got_ids),
                *notes,
                *(self.whereabouts(i) for i in sorted(want_ids ^ got_ids)),
            )
        self.check_listing(f"{prefix}peek() of {status.value}", status, segment, got, notes)

    def whereabouts(self, task_id: str) -> str:
        """Where the model and the backend each have a task, for a failure message."""
        want = self.model.get(task_id)
        have = self.backend.get(task_id)
        return (
            f"task {task_id!r}: the model has it "
            f"{'nowhere' if want is None else f'{want.status.value} in {want.queue!r}'}, the "
            f"backend {'nowhere' if have is None else f'{have.status.value} in {have.queue!r}'}"
        )


def same_segment(
    first: list[tuple[GroupKey, TaskResult]], second: list[tuple[GroupKey, TaskResult]]
) -> bool:
    """Whether two copies of a model segment are the same, value for value (``nan`` included)."""
    return len(first) == len(second) and all(
        key == other_key and not record_diff(record, other, exact=True)
        for (key, record), (other_key, other) in zip(first, second, strict=True)
    )


def make_machine(factory: HarnessFactory) -> type[BackendMachine]:
    """A state machine class that tests the backends `factory` builds (one per test case)."""
    name = getattr(factory, "__name__", type(factory).__name__)
    return type(
        f"BackendMachine[{name}]", (BackendMachine,), {"harness_factory": staticmethod(factory)}
    )


def run_machine(factory: HarnessFactory, settings: hypothesis.settings | None = None) -> None:
    """Run the conformance state machine on `factory`'s backends; raise on the first violation.

    `settings` defaults to the active Hypothesis profile. Hypothesis's explain
    phase is left out: on this machine it takes longer than finding and
    shrinking the failure together, and the failure message already names
    the rule broken.
    """
    chosen = settings if settings is not None else hypothesis.settings()
    phases = [phase for phase in chosen.phases if phase is not hypothesis.Phase.explain]
    run_state_machine_as_test(
        make_machine(factory), settings=hypothesis.settings(chosen, phases=phases)
    )
