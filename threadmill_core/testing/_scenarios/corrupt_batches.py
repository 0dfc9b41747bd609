"""Corrupt records in a worker's own batches: releases, start marks, progress, cut leases.

`corrupt` drives each segment the way workers and maintenance do; this
module holds the batches a worker sends about the tasks it holds, which
carry a corrupt record beside good ones just as often: a `release` at
shutdown, a heartbeat's `mark_started` and `record_progress`, and a
supervisor's `expire_leases` after the worker died. Every good task of the
batch must be processed as if the corrupt ones were not there, the call must
not raise for them, and every corrupt one must still end quarantined (or
gone) once the reaper or a claim meets it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from threadmill_core.models import Progress
from threadmill_core.testing._scenarios.corrupt import (
    _claim_good,
    _complete_all,
    _damage,
    _enqueue_mixed,
    _settled,
)
from threadmill_core.testing._scenarios.kit import (
    CLAIM_TTL,
    LEASE_TTL,
    PAST_A_LEASE,
    READY,
    Scenario,
    expect,
    registering,
)
from threadmill_core.testing.harness import Harness

#: This module's scenarios, by name (`threadmill_core.testing.scenarios.SCENARIOS` holds all).
SCENARIOS: dict[str, Scenario] = {}
scenario = registering(SCENARIOS)

T = TypeVar("T")


def _answers(send: Callable[[], list[T]], rule: str) -> list[T]:
    """The answers of `send()`, a batch call; whatever it raises is the violation of `rule`."""
    try:
        return send()
    except Exception as exc:
        expect(False, rule, "an answer per lease", exc)
        raise  # expect() has raised the violation already


@scenario
def a_corrupt_running_record_never_costs_its_batch_its_release(harness: Harness) -> None:
    """Corrupt RUNNING records released in one batch with good ones (a worker shutting down
    with its prefetch): every good one goes back to READY, in the order given."""
    if not harness.corruptions:
        return
    backend = harness.backend
    good, doomed = _enqueue_mixed(harness)
    leases = backend.claim(["default"], worker="w1", lease_ttl=LEASE_TTL, limit=100)
    _damage(harness, doomed)
    answers = _answers(
        lambda: backend.release(leases),
        "corrupt RUNNING records: release() must give back every good task of its batch, "
        "not raise for a corrupt one (refuse it, or give it back, and go on)",
    )
    released = [
        lease.task_id
        for lease, record in zip(leases, answers, strict=True)
        if record is not None and record.status is READY and lease.task_id in good
    ]
    expect(
        released == good,
        "corrupt RUNNING records: release() must give back every good task of its batch",
        good,
        released,
    )
    leases = _claim_good(harness, good, "corrupt RUNNING records released")
    _complete_all(harness, leases, "corrupt RUNNING records released")
    harness.advance(PAST_A_LEASE)  # a corrupt one release() refused is the reaper's
    reaped = backend.claim_expired(limit=100, claim_ttl=CLAIM_TTL)
    expect(
        reaped == [],
        "corrupt RUNNING records: the reaper must quarantine a corrupt record, not claim it",
        [],
        [lease.task_id for lease in reaped],
    )
    _settled(harness, doomed, "corrupt RUNNING records released")


@scenario
def a_corrupt_running_record_never_costs_its_batch_its_marks_or_progress(
    harness: Harness,
) -> None:
    """Corrupt RUNNING records in a heartbeat's batch with good ones: every good start mark
    and progress is taken, and a dead worker's every good lease is cut for the reaper."""
    if not harness.corruptions:
        return
    backend = harness.backend
    good, doomed = _enqueue_mixed(harness)
    leases = backend.claim(["default"], worker="w1", lease_ttl=LEASE_TTL, limit=100)
    _damage(harness, doomed)
    ours = [lease for lease in leases if lease.task_id in good]
    calls: dict[str, Callable[[], list[bool]]] = {
        "mark_started()": lambda: backend.mark_started(leases),
        "record_progress()": lambda: backend.record_progress(
            [(lease, Progress(done=1, total=2)) for lease in leases]
        ),
    }
    for name, send in calls.items():
        marks = _answers(
            send,
            f"corrupt RUNNING records: {name} must take every good task of its batch, "
            "not raise for a corrupt one",
        )
        taken = [
            lease.task_id
            for lease, answer in zip(leases, marks, strict=True)
            if answer is True and lease.task_id in good
        ]
        expect(
            taken == good,
            f"corrupt RUNNING records: {name} must take every good task of its batch",
            good,
            taken,
        )
    for lease in ours:
        record = backend.get(lease.task_id)
        expect(
            record is not None and record.progress is not None and record.progress.done == 1,
            "corrupt RUNNING records: record_progress() must store every good task's progress",
            1,
            None if record is None else record.progress,
        )
    cut = backend.expire_leases("w1")
    expect(
        type(cut) is int and len(good) <= cut <= len(leases),
        "corrupt RUNNING records: expire_leases() must cut every good lease of the dead worker",
        f"{len(good)} to {len(leases)}",
        cut,
    )
    reaped = backend.claim_expired(limit=100, claim_ttl=CLAIM_TTL)
    got = sorted(lease.task_id for lease in reaped)
    expect(
        got == sorted(good),
        "corrupt RUNNING records: after expire_leases() the reaper must claim every good "
        "task, started as marked, and no corrupt one",
        sorted(good),
        got,
    )
    _complete_all(harness, reaped, "corrupt RUNNING records marked")
    harness.advance(PAST_A_LEASE)  # a corrupt one still RUNNING is the reaper's to quarantine
    backend.claim_expired(limit=100, claim_ttl=CLAIM_TTL)
    _settled(harness, doomed, "corrupt RUNNING records marked")
