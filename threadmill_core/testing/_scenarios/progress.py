"""Progress: what a running task reported, stored by its lease holder and kept.

`record_progress` is fenced as `extend` is (a current token on a RUNNING
task, a reaper's included), stamps each progress with the backend's clock, keeps the last value
of a batch, changes nothing else, and the progress stays on the record
through retries and after the task finishes, until `requeue`.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import attrs

from threadmill_core.models import Progress
from threadmill_core.testing._scenarios.kit import (
    READY,
    Scenario,
    claim_one,
    expect,
    failed,
    new_task,
    reap,
    registering,
    start_one,
    succeeded,
)
from threadmill_core.testing.harness import Harness

#: This module's scenarios, by name (`threadmill_core.testing.scenarios.SCENARIOS` holds all).
SCENARIOS: dict[str, Scenario] = {}
scenario = registering(SCENARIOS)

#: A time no backend's clock shows: what a caller sends as `updated_at` is ignored.
LONG_AGO = datetime(2001, 1, 1, tzinfo=UTC)


def without_stamp(progress: Progress | None) -> Progress | None:
    return None if progress is None else attrs.evolve(progress, updated_at=None)


@scenario
def record_progress_stores_the_last_value_stamped_with_now(harness: Harness) -> None:
    """The last progress of a batch is stored, stamped with `now()`, and nothing else changes."""
    backend = harness.backend
    backend.enqueue([new_task("t")])
    lease = claim_one(backend, "t")  # an unstarted claim reports too: it is current
    first = Progress(done=1, total=10, message="a", updated_at=LONG_AGO)
    last = Progress(done=2.5, total=10, message="ünïcode 🚀")
    before = backend.now()
    answers = backend.record_progress([(lease, first), (lease, last)])
    expect(
        answers == [True, True], "record_progress() refused a current lease", [True, True], answers
    )
    stored = backend.get("t")
    assert stored is not None
    expect(
        without_stamp(stored.progress) == without_stamp(last),
        "record_progress() must keep the last progress of the batch",
        last,
        stored.progress,
    )
    stamp = stored.progress.updated_at if stored.progress is not None else None
    expect(
        stamp is not None and stamp >= before and stamp != LONG_AGO,
        "record_progress() must stamp updated_at with now(), whatever the caller sent",
        f"at or after {before}",
        stamp,
    )
    if harness.exact_clock:
        expect(stamp == backend.now(), "updated_at must be now()", backend.now(), stamp)
    expect(
        attrs.evolve(stored, progress=None) == lease.record,
        "record_progress() must change nothing but progress",
        lease.record,
        stored,
    )
    renewed = backend.extend(lease, timedelta(minutes=1))
    expect(
        renewed is not None and renewed.record == stored,
        "extend() must carry the stored progress",
        stored,
        renewed,
    )


@scenario
def record_progress_is_fenced(harness: Harness) -> None:
    """A stale lease, a reaper's claim taken over, and a finished task are refused; the
    others in the batch go on."""
    backend = harness.backend
    backend.enqueue([new_task("stale")])
    stale = start_one(backend, "stale", worker="slow")
    reap(harness, "stale")
    backend.enqueue([new_task("done"), new_task("live")])
    done = start_one(backend, "done")
    live = start_one(backend, "live")
    backend.complete(done, succeeded(done))
    progress = Progress(done=1)
    answers = backend.record_progress([(stale, progress), (done, progress), (live, progress)])
    expect(
        answers == [False, False, True],
        "record_progress() must refuse a stale token and a finished task, and take the others",
        [False, False, True],
        answers,
    )
    for task_id in ("stale", "done"):
        record = backend.get(task_id)
        expect(
            record is not None and record.progress is None,
            f"a refused record_progress() stored progress on {task_id!r}",
            None,
            record,
        )


@scenario
def progress_is_kept_through_retries_and_after_the_task_finishes(harness: Harness) -> None:
    """A retry keeps the progress (the next attempt sees it), and so does the final record."""
    backend = harness.backend
    backend.enqueue([new_task("t")])
    lease = start_one(backend, "t")
    backend.record_progress([(lease, Progress(done=5, total=10, message="half"))])
    back = backend.retry(lease, failed(lease), timedelta(0))
    expect(
        back is not None and back.status is READY and without_stamp(back.progress) is not None,
        "retry() must keep the progress stored",
        "READY with the progress",
        back,
    )
    again = claim_one(backend, "t")
    expect(
        again.record.progress is not None and again.record.progress.done == 5,
        "claim() must carry the progress the last attempt stored",
        5,
        again.record.progress,
    )
    backend.record_progress([(again, Progress(done=10, total=10))])
    done = backend.complete(again, succeeded(again, "ok"))
    expect(
        done is not None and done.progress is not None and done.progress.done == 10,
        "complete() must keep the progress stored",
        10,
        None if done is None else done.progress,
    )
