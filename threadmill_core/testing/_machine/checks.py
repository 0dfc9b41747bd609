"""The state machine's base: a backend beside the model, and every check that compares them.

`CheckingMachine` holds the harness, the model and what the checks
remember between steps; its helpers raise `ProtocolViolation` naming the
broken rule, and its invariant compares the stored segments with the
model's after every step. It has no rules of its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar, NoReturn

from hypothesis.stateful import RuleBasedStateMachine, invariant

from threadmill_core.clock import duration_ms, from_ms, to_ms
from threadmill_core.models import Lease, TaskResult, TaskResultStatus
from threadmill_core.testing._judge import (
    ORDERS,
    order_problem,
    record_diff,
    show,
    time_order_problem,
)
from threadmill_core.testing._machine.values import (
    FULL_CHECK_EVERY,
    RESULT_TTL_MARGIN,
    LeaseRef,
    decisions,
    leases,
    task_ids,
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


class CheckingMachine(RuleBasedStateMachine):
    """The backend under test and the model, compared; subclasses add the rules."""

    harness_factory: ClassVar[HarnessFactory]

    task_ids = task_ids
    leases = leases
    decisions = decisions

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
        if got.unstarted_expiries != expected.unstarted_expiries:
            self.fail(
                f"{op} returned a lease with the wrong unstarted_expiries (a worker's lease "
                "carries how many expired unstarted claims of the task were given back; a "
                "reaper's, 0)",
                expected.unstarted_expiries,
                got.unstarted_expiries,
            )
        if got.cancel_requested is not expected.cancel_requested:
            self.fail(
                f"{op} returned a lease with cancel_requested {got.cancel_requested!r} (a new "
                "claim never carries a cancel request: a READY task is cancelled directly)",
                expected.cancel_requested,
                got.cancel_requested,
            )
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
