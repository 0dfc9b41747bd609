"""Corrupt records: poison never hurts its neighbours (guarantee 11).

Each scenario damages one task per `Harness.corruptions` entry, placed
between good tasks of one segment (READY, DEFERRED, RUNNING, finished),
then drives that segment the way workers and maintenance do: a claim, a
promotion, a reaper pass, a batch of decisions and renewals, a listing and
a purge. Every good neighbour must be processed exactly as if the corrupt
ones were not there, and every corrupt one must end FAILED with an error
(quarantined), or be gone where no record was left to mark; none may be
handed to a worker. An operator's action on a corrupt record (`cancel`,
`requeue`, `request_cancel`) raises `PayloadError` naming the task, or
finds no task, and changes nothing; an `enqueue` repeating its id raises
`PayloadError` and never stores over it. A backend whose harness lists no
corruptions passes them trivially.
"""

from __future__ import annotations

from datetime import timedelta

from threadmill_core.errors import PayloadError
from threadmill_core.models import Decision, Lease, TaskResult, TaskResultStatus
from threadmill_core.testing._scenarios.kit import (
    CLAIM_TTL,
    FAILED,
    LEASE_TTL,
    PAST_A_LEASE,
    READY,
    SUCCESSFUL,
    Scenario,
    expect,
    failed,
    mark,
    new_task,
    registering,
    succeeded,
)
from threadmill_core.testing.harness import Harness

#: This module's scenarios, by name (`threadmill_core.testing.scenarios.SCENARIOS` holds all).
SCENARIOS: dict[str, Scenario] = {}
scenario = registering(SCENARIOS)


def _enqueue_mixed(harness: Harness, **fields: object) -> tuple[list[str], dict[str, str]]:
    """Enqueue a good task, then per corruption a task to damage and another good one.

    Returns the good ids in enqueue order and the doomed ids by corruption
    name (nothing is damaged yet).
    """
    good, doomed, records = ["good-0"], {}, [new_task("good-0", **fields)]  # type: ignore[arg-type]
    for n, name in enumerate(sorted(harness.corruptions), 1):
        doomed[name] = f"corrupt-{n}"
        good.append(f"good-{n}")
        records += [new_task(doomed[name], **fields), new_task(good[-1], **fields)]  # type: ignore[arg-type]
    harness.backend.enqueue(records)
    return good, doomed


def _damage(harness: Harness, doomed: dict[str, str]) -> None:
    for name, task_id in doomed.items():
        harness.corruptions[name](task_id)


def _settled(harness: Harness, doomed: dict[str, str], after: str) -> None:
    """Each damaged task is FAILED with an error, or gone; never handed out again."""
    for name, task_id in doomed.items():
        try:
            record = harness.backend.get(task_id)
        except PayloadError as exc:
            expect(False, f"{after}: the task with {name} must be quarantined, not left", got=exc)
            return
        if record is None:
            continue
        expect(
            record.status is FAILED and bool(record.errors) and bool(record.errors[-1].message),
            f"{after}: a task with {name} must end FAILED with an error saying what was wrong "
            "(or be gone where no record is left)",
            "FAILED with an error",
            record,
        )
    again = harness.backend.claim(["default"], worker="w2", lease_ttl=LEASE_TTL, limit=100)
    expect(
        again == [],
        f"{after}: nothing may be left to claim (a corrupt task handed out, or a good one lost)",
        [],
        [lease.task_id for lease in again],
    )


def _claim_good(harness: Harness, good: list[str], after: str) -> list[Lease]:
    """Claim with room for every task: exactly the good ones, in order, must come."""
    leases = harness.backend.claim(["default"], worker="w1", lease_ttl=LEASE_TTL, limit=100)
    got = [lease.task_id for lease in leases]
    expect(
        got == good,
        f"{after}: a claim must hand out every good task beside corrupt ones, in order, "
        "and no corrupt one",
        good,
        got,
    )
    return leases


def _complete_all(harness: Harness, leases: list[Lease], after: str) -> None:
    decisions = [Decision(lease=lease, record=succeeded(lease)) for lease in leases]
    done = harness.backend.decide_many(decisions)
    expect(
        all(record is not None and record.status is SUCCESSFUL for record in done),
        f"{after}: every good task's completion must be applied",
        [SUCCESSFUL] * len(leases),
        [None if record is None else record.status for record in done],
    )


def _listed(harness: Harness, status: TaskResultStatus) -> list[TaskResult]:
    """A segment of "default" as `peek` lists it; where a page holds a record that does not
    decode (`PayloadError`, as the protocol allows), read one record at a time, as the
    inspector does, leaving out those that raise."""
    try:
        return harness.backend.peek("default", status, offset=0, limit=100)
    except PayloadError:
        pass
    listed: list[TaskResult] = []
    for position in range(100):
        try:
            one = harness.backend.peek("default", status, offset=position, limit=1)
        except PayloadError:
            continue
        if not one:
            break
        listed.extend(one)
    return listed


@scenario
def a_corrupt_ready_record_never_costs_its_neighbours_their_claim(harness: Harness) -> None:
    """Corrupt READY records claimed in one batch with good ones: the good ones all run."""
    if not harness.corruptions:
        return
    good, doomed = _enqueue_mixed(harness)
    _damage(harness, doomed)
    leases = _claim_good(harness, good, "corrupt READY records")
    _complete_all(harness, leases, "corrupt READY records")
    _settled(harness, doomed, "corrupt READY records claimed")
    counts = harness.backend.counts().get("default")
    expect(
        counts is not None and counts.ready == 0 and counts.successful == len(good),
        "corrupt READY records: counts() must show no READY task and every good one SUCCESSFUL",
        got=counts,
    )


@scenario
def a_corrupt_deferred_record_never_stops_its_neighbours_falling_due(harness: Harness) -> None:
    """Corrupt DEFERRED records beside good ones: promotion moves every good one to READY."""
    if not harness.corruptions:
        return
    later = harness.backend.now() + timedelta(minutes=1)
    good, doomed = _enqueue_mixed(harness, run_after=later)
    _damage(harness, doomed)
    harness.advance(PAST_A_LEASE)
    harness.backend.promote_due(limit=100)
    for task_id in good:
        record = harness.backend.get(task_id)
        expect(
            record is not None and record.status is READY,
            "corrupt DEFERRED records: promote_due() must promote every good task due",
            READY,
            record,
        )
    leases = _claim_good(harness, good, "corrupt DEFERRED records")
    _complete_all(harness, leases, "corrupt DEFERRED records")
    _settled(harness, doomed, "corrupt DEFERRED records promoted")


@scenario
def a_corrupt_running_record_never_stops_its_neighbours_being_reaped(harness: Harness) -> None:
    """Corrupt RUNNING records beside good ones: renewals and the reaper take every good one."""
    if not harness.corruptions:
        return
    good, doomed = _enqueue_mixed(harness)
    leases = harness.backend.claim(["default"], worker="w1", lease_ttl=LEASE_TTL, limit=100)
    mark(harness.backend, *leases)
    _damage(harness, doomed)
    renewed = harness.backend.extend_many(leases, LEASE_TTL)
    got_renewed = [lease.task_id for lease in renewed if lease is not None]
    expect(
        set(good) <= set(got_renewed),
        "corrupt RUNNING records: extend_many() must renew every good lease of its batch",
        good,
        got_renewed,
    )
    harness.advance(PAST_A_LEASE)
    reaped = harness.backend.claim_expired(limit=100, claim_ttl=CLAIM_TTL)
    got = sorted(lease.task_id for lease in reaped)
    expect(
        got == sorted(good),
        "corrupt RUNNING records: claim_expired() must claim every good expired task "
        "and no corrupt one",
        sorted(good),
        got,
    )
    _complete_all(harness, reaped, "corrupt RUNNING records")
    _settled(harness, doomed, "corrupt RUNNING records reaped")
    counts = harness.backend.counts().get("default")
    expect(
        counts is not None and counts.running == 0,
        "corrupt RUNNING records: after the reaper pass no task may be left RUNNING",
        got=counts,
    )


@scenario
def a_corrupt_running_record_never_costs_its_batch_its_decisions(harness: Harness) -> None:
    """Corrupt RUNNING records decided in one batch with good ones: every good decision applies."""
    if not harness.corruptions:
        return
    good, doomed = _enqueue_mixed(harness)
    leases = harness.backend.claim(["default"], worker="w1", lease_ttl=LEASE_TTL, limit=100)
    mark(harness.backend, *leases)
    _damage(harness, doomed)
    done = harness.backend.decide_many(
        [Decision(lease=lease, record=succeeded(lease)) for lease in leases]
    )
    applied = [
        lease.task_id
        for lease, record in zip(leases, done, strict=True)
        if record is not None and record.status is SUCCESSFUL
    ]
    expect(
        set(good) <= set(applied),
        "corrupt RUNNING records: decide_many() must apply every good decision of its batch",
        good,
        applied,
    )
    harness.advance(PAST_A_LEASE)  # a corrupt one left RUNNING is the reaper's to quarantine
    reaped = harness.backend.claim_expired(limit=100, claim_ttl=CLAIM_TTL)
    expect(
        reaped == [],
        "corrupt RUNNING records: the reaper must quarantine a corrupt record, not claim it",
        [],
        [lease.task_id for lease in reaped],
    )


@scenario
def a_corrupt_finished_record_never_hides_its_neighbours(harness: Harness) -> None:
    """Corrupt finished records beside good ones: the good ones are listed, and purge takes all."""
    if not harness.corruptions:
        return
    good, doomed = _enqueue_mixed(harness)
    leases = harness.backend.claim(["default"], worker="w1", lease_ttl=LEASE_TTL, limit=100)
    _complete_all(harness, leases, "finished tasks")
    _damage(harness, doomed)
    listed = [record.id for record in _listed(harness, SUCCESSFUL) if record.id in good]
    expect(
        listed == good,
        "corrupt finished records: peek() must list every good neighbour, in order (a page "
        "that holds a corrupt record may raise PayloadError; then each one is read alone)",
        good,
        listed,
    )
    counts = harness.backend.counts().get("default")
    expect(counts is not None, "corrupt finished records: counts() must still count the queue")
    harness.backend.purge("default", SUCCESSFUL)
    for task_id in [*good, *doomed.values()]:
        try:
            left: TaskResult | None = harness.backend.get(task_id)
        except PayloadError as exc:  # a corrupt record purge left behind
            expect(False, "corrupt finished records: purge() must delete them too", got=exc)
            return
        expect(
            left is None or left.status is FAILED,
            "corrupt finished records: purge() of SUCCESSFUL must delete every task of it",
            None,
            left,
        )


def _acted_on_nothing(harness: Harness, action: str, task_id: str, before: object) -> None:
    """Run the operator's `action` on the corrupt task `task_id`: it must raise `PayloadError`
    naming the task, or answer None, and leave the counts (which never decode) as `before`."""
    try:
        answered = getattr(harness.backend, action)(task_id)
    except PayloadError as exc:
        expect(
            task_id in str(exc),
            f"{action}() of a corrupt record: the PayloadError must name the task",
            task_id,
            str(exc),
        )
    else:
        expect(
            answered is None,
            f"{action}() of a corrupt record must raise PayloadError (or find no task), "
            "not answer a record",
            None,
            answered,
        )
    after = harness.backend.counts().get("default")
    expect(
        after == before,
        f"{action}() of a corrupt record must change nothing, even where it raises",
        before,
        after,
    )


@scenario
def an_operator_action_on_a_corrupt_record_changes_nothing(harness: Harness) -> None:
    """cancel (READY), requeue (FAILED) and request_cancel (RUNNING) of corrupt records
    raise PayloadError naming the task, or find none, and change nothing at all."""
    if not harness.corruptions:
        return
    backend = harness.backend
    for n, damage in enumerate(harness.corruptions.values()):
        ready, dead, running = f"ready-{n}", f"failed-{n}", f"running-{n}"
        backend.enqueue([new_task(dead), new_task(running)])
        leases = backend.claim(["default"], worker="w1", lease_ttl=LEASE_TTL, limit=2)
        expect(
            [lease.task_id for lease in leases] == [dead, running],
            "claim() must hand out the READY tasks in order",
            [dead, running],
            [lease.task_id for lease in leases],
        )
        [finished] = backend.decide_many([Decision(lease=leases[0], record=failed(leases[0]))])
        expect(finished is not None and finished.status is FAILED, "a failure must apply")
        backend.enqueue([new_task(ready)])
        for task_id in (ready, dead, running):
            damage(task_id)
        before = backend.counts().get("default")
        _acted_on_nothing(harness, "cancel", ready, before)
        _acted_on_nothing(harness, "requeue", dead, before)
        _acted_on_nothing(harness, "request_cancel", running, before)
        renewed = backend.extend(leases[1], LEASE_TTL)
        expect(
            renewed is None or not renewed.cancel_requested,
            "request_cancel() of a corrupt record must store no request: its holder's "
            "renewal may be refused, not told to stop",
            False,
            renewed,
        )
        harness.advance(PAST_A_LEASE)  # the RUNNING one is the reaper's to quarantine
        backend.claim_expired(limit=100, claim_ttl=CLAIM_TTL)
        expect(
            backend.claim(["default"], worker="w2", lease_ttl=LEASE_TTL) == [],
            "a corrupt READY record an operator tried to cancel must still never be handed out",
        )
        counts = backend.counts().get("default")
        expect(
            counts is not None and counts.ready == counts.running == 0,
            "every corrupt record must end quarantined (FAILED) or gone, as if never acted on",
            got=counts,
        )


@scenario
def an_enqueue_repeating_a_corrupt_records_id_never_replaces_it(harness: Harness) -> None:
    """enqueue of a batch that repeats the id of a stored corrupt record raises PayloadError
    naming it and never stores over it; the batch's new tasks are stored as given, once, or
    not at all (enqueue may be atomic per task), and another enqueue stores them."""
    if not harness.corruptions:
        return
    backend = harness.backend
    for n, damage in enumerate(harness.corruptions.values()):
        corrupt, before_it, after_it = f"stored-{n}", f"new-{n}-a", f"new-{n}-b"
        backend.enqueue([new_task(corrupt)])
        damage(corrupt)
        counted = backend.counts().get("default")
        try:
            answered = backend.enqueue([new_task(before_it), new_task(corrupt), new_task(after_it)])
        except PayloadError as exc:
            expect(
                corrupt in str(exc),
                "enqueue() repeating a corrupt record's id: the PayloadError must name it",
                corrupt,
                str(exc),
            )
        else:
            expect(
                False,
                "enqueue() repeating the id of a record that does not decode must raise "
                "PayloadError, not answer a record in its place",
                got=answered,
            )
        added = backend.counts().get("default")
        ready_before = 0 if counted is None else counted.ready
        ready_after = 0 if added is None else added.ready
        expect(
            ready_after in (ready_before, ready_before + 2),
            "enqueue() that raised for a corrupt id must store the batch's new tasks once "
            "each, or none of them, and never the corrupt id again",
            f"{ready_before} or {ready_before + 2} READY",
            ready_after,
        )
        stored = backend.enqueue([new_task(before_it), new_task(after_it)])
        expect(
            [(r.id, r.status) for r in stored] == [(before_it, READY), (after_it, READY)],
            "the batch's new tasks, enqueued again without the corrupt id, must be READY",
            [(before_it, READY), (after_it, READY)],
            [(r.id, r.status) for r in stored],
        )
        try:
            kept = backend.get(corrupt)
        except PayloadError:
            continue  # still the corrupt bytes: nothing was stored over them
        expect(
            kept is None or kept.status is FAILED,
            "enqueue() must never store a new record over a corrupt one (it may only be "
            "quarantined FAILED, or gone where nothing was left to read)",
            "PayloadError, None or FAILED",
            kept,
        )
    leases = backend.claim(["default"], worker="w1", lease_ttl=LEASE_TTL, limit=100)
    expect(
        sorted(lease.task_id for lease in leases)
        == sorted(f"new-{n}-{x}" for n in range(len(harness.corruptions)) for x in "ab"),
        "a claim must hand out each new task once, and no corrupt one",
        got=[lease.task_id for lease in leases],
    )
