"""The memory backend's own behaviour: codec, clock, result expiry, poison and bad arguments.

The cross-backend protocol is the conformance kit's; the few protocol tests
here pin down choices this backend makes (fresh tokens, repeats) directly.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.memory.helpers import LEASE, RESULT_TTL, make_task
from threadmill_core import codec
from threadmill_core.backend import NOTHING_DEFERRED
from threadmill_core.clock import FakeClock, to_ms
from threadmill_core.errors import InvalidOption, PayloadError, UnsupportedValue
from threadmill_core.ids import new_task_id
from threadmill_core.models import (
    Decision,
    RetryPolicySpec,
    TaskError,
    TaskResult,
    TaskResultStatus,
)
from threadmill_memory import MemoryBackend

READY = TaskResultStatus.READY
DEFERRED = TaskResultStatus.DEFERRED
RUNNING = TaskResultStatus.RUNNING
SUCCESSFUL = TaskResultStatus.SUCCESSFUL
FAILED = TaskResultStatus.FAILED
CANCELLED = TaskResultStatus.CANCELLED
MS = timedelta(milliseconds=1)
BOOM = TaskError(exception_class_path="builtins.RuntimeError", message="boom")


def succeed(record: TaskResult, value: object = None) -> TaskResult:
    return attrs.evolve(record, status=SUCCESSFUL, return_value=value)


def fail(record: TaskResult) -> TaskResult:
    return attrs.evolve(record, status=FAILED, errors=(*record.errors, BOOM))


# --- clock and construction -----------------------------------------------------------


def test_default_clock_is_the_system_clock() -> None:
    """Without a clock the backend tells the machine's time, truncated to milliseconds."""
    before = to_ms(datetime.now(UTC))
    now = MemoryBackend().now()
    after = to_ms(datetime.now(UTC))
    assert before <= to_ms(now) <= after
    assert now.microsecond % 1000 == 0


def test_times_are_whole_milliseconds() -> None:
    """Every timestamp and deadline the backend writes is its clock truncated to milliseconds."""
    clock = FakeClock(datetime(2030, 1, 1, 12, 0, 0, 123_456, tzinfo=UTC))
    backend = MemoryBackend(clock=clock)
    truncated = datetime(2030, 1, 1, 12, 0, 0, 123_000, tzinfo=UTC)
    assert backend.now() == truncated
    [stored] = backend.enqueue([make_task()])
    assert stored.enqueued_at == truncated
    [lease] = backend.claim(["default"], worker="w", lease_ttl=timedelta(microseconds=1500))
    assert lease.record.started_at == truncated
    assert lease.deadline == truncated + 2 * MS  # a duration is rounded up, never shortened


@pytest.mark.parametrize("result_ttl", [timedelta(0), timedelta(seconds=-1)])
def test_result_ttl_must_be_positive(result_ttl: timedelta) -> None:
    """A result_ttl that is not positive is refused when the backend is built."""
    with pytest.raises(InvalidOption, match="result_ttl"):
        MemoryBackend(result_ttl=result_ttl)


# --- the codec ------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
    max_leaves=20,
)


@given(args=st.lists(json_values, max_size=4), value=json_values)
def test_values_round_trip_value_for_value(args: list[object], value: object) -> None:
    """Arguments and return values come back from storage equal to what was stored."""
    backend = MemoryBackend(clock=FakeClock())
    [stored] = backend.enqueue([make_task(args=args, kwargs={"value": value})])
    assert (stored.args, stored.kwargs) == (args, {"value": value})
    [lease] = backend.claim(["default"], worker="w", lease_ttl=LEASE)
    done = backend.complete(lease, succeed(lease.record, value))
    assert done is not None
    assert done.return_value == value
    assert backend.get(stored.id) == done


def test_special_values_survive_storage(backend: MemoryBackend) -> None:
    """Large integers, exact floats, NaN, empty containers and unicode survive storage."""
    args = [10**40, -(2**63) - 1, 0.1, math.pi, math.inf, [], {}, "żółw 🐢", {"b": 1, "a": 2}]
    [stored] = backend.enqueue([make_task(args=args, kwargs={"nan": math.nan})])
    fetched = backend.get(stored.id)
    assert fetched is not None
    assert fetched.args == args
    assert list(fetched.args[-1]) == ["b", "a"]  # dict key order is kept
    assert math.isnan(fetched.kwargs["nan"])


def test_returned_records_never_alias_stored_state(backend: MemoryBackend) -> None:
    """Mutating a record given to or returned by the backend leaves the stored task unchanged."""
    given_record = make_task(args=[[1]], kwargs={"k": {"v": 1}})
    [stored] = backend.enqueue([given_record])
    given_record.args[0].append("given")
    stored.args[0].append("returned")
    fetched = backend.get(stored.id)
    assert fetched is not None
    fetched.kwargs["k"]["v"] = "fetched"
    [lease] = backend.claim(["default"], worker="w", lease_ttl=LEASE)
    lease.record.args.append("leased")
    assert backend.get(stored.id) == attrs.evolve(lease.record, args=[[1]])
    assert lease.record.kwargs == {"k": {"v": 1}}


class Colour(enum.IntEnum):
    RED = 1


@pytest.mark.parametrize(
    ("fields", "path"),
    [
        ({"args": [(1, 2)]}, "args[0]"),
        ({"args": [datetime(2030, 1, 1, tzinfo=UTC)]}, "args[0]"),
        ({"args": [[{1, 2}]]}, "args[0][0]"),
        ({"args": [Colour.RED]}, "args[0]"),
        ({"kwargs": {"when": {1: "int key"}}}, "kwargs['when'][1]"),
        ({"retry": RetryPolicySpec(path="m:p", options={"delays": (1, 2)})}, "retry.options"),
    ],
)
def test_enqueue_refuses_values_the_codec_cannot_carry(
    backend: MemoryBackend, fields: dict[str, object], path: str
) -> None:
    """A value the codec cannot carry unchanged fails the whole enqueue, naming where it sits."""
    with pytest.raises(UnsupportedValue) as raised:
        backend.enqueue([make_task(), make_task(**fields)])
    assert raised.value.path.startswith(path)
    assert backend.counts() == {}


def test_enqueue_refuses_a_str_utf8_cannot_encode(backend: MemoryBackend) -> None:
    """A str with a lone surrogate is refused at enqueue as an UnsupportedValue."""
    with pytest.raises(UnsupportedValue, match="not valid Unicode"):
        backend.enqueue([make_task(args=["\ud800"])])
    assert backend.counts() == {}


def test_complete_refuses_a_return_value_the_codec_cannot_carry(backend: MemoryBackend) -> None:
    """An unsupported return value fails `complete` and leaves the lease good for another try."""
    backend.enqueue([make_task()])
    [lease] = backend.claim(["default"], worker="w", lease_ttl=LEASE)
    with pytest.raises(UnsupportedValue, match="return_value"):
        backend.complete(lease, succeed(lease.record, (1, 2)))
    assert backend.peek("default", RUNNING) == [lease.record]
    done = backend.complete(lease, succeed(lease.record, [1, 2]))
    assert done is not None
    assert done.return_value == [1, 2]


# --- enqueue --------------------------------------------------------------------------


def test_enqueue_ignores_the_fields_the_backend_owns(
    backend: MemoryBackend, clock: FakeClock
) -> None:
    """Status, timestamps, attempts, errors, workers and return value given to enqueue are reset."""
    past = clock.now() - timedelta(days=1)
    record = make_task(
        status=SUCCESSFUL,
        enqueued_at=past,
        started_at=past,
        last_attempted_at=past,
        finished_at=past,
        attempts=7,
        errors=(BOOM,),
        worker_ids=("w",),
        return_value=42,
    )
    [stored] = backend.enqueue([record])
    assert stored == make_task(id=record.id, enqueued_at=clock.now())


def test_enqueue_is_idempotent_on_id(backend: MemoryBackend) -> None:
    """Enqueueing a stored id again, even within one batch, returns the stored record unchanged."""
    first = make_task(args=[1])
    again = attrs.evolve(first, args=[2])
    stored = backend.enqueue([first, again])
    assert stored[0] == stored[1]
    assert stored[0].args == [1]
    assert backend.enqueue([again]) == [stored[0]]
    assert backend.counts()["default"].ready == 1


def test_deferred_only_when_run_after_is_later_than_now(
    backend: MemoryBackend, clock: FakeClock
) -> None:
    """A task is DEFERRED only if its run_after is after now; at or before now it is READY."""
    now = clock.now()
    stored = backend.enqueue(
        [make_task(run_after=now - MS), make_task(run_after=now), make_task(run_after=now + MS)]
    )
    assert [record.status for record in stored] == [READY, READY, DEFERRED]


def test_next_due_follows_the_earliest_deferred_task(
    backend: MemoryBackend, clock: FakeClock
) -> None:
    """next_due is the fake clock's time to the first DEFERRED task: exact, then zero, then none."""
    assert backend.next_due() == NOTHING_DEFERRED
    now = clock.now()
    backend.enqueue(
        [make_task(queue="a", run_after=now + 5 * MS), make_task(queue="b", run_after=now + 3 * MS)]
    )
    assert backend.next_due() == 3 * MS
    clock.advance(2 * MS)
    assert backend.next_due() == MS
    clock.advance(2 * MS)
    assert backend.next_due() == timedelta(0)
    assert backend.promote_due(limit=1) == 1
    assert backend.next_due() == MS
    clock.advance(MS)
    assert backend.promote_due(limit=10) == 1
    assert backend.next_due() == NOTHING_DEFERRED


# --- result expiry --------------------------------------------------------------------


def _finish(backend: MemoryBackend, how: str) -> TaskResult:
    [stored] = backend.enqueue([make_task()])
    if how == "cancel":
        cancelled = backend.cancel(stored.id)
        assert cancelled is not None
        return cancelled
    [lease] = backend.claim(["default"], worker="w", lease_ttl=LEASE)
    done = backend.complete(
        lease, succeed(lease.record) if how == "succeed" else fail(lease.record)
    )
    assert done is not None
    return done


@pytest.mark.parametrize("how", ["succeed", "fail", "cancel"])
def test_results_disappear_after_result_ttl(
    backend: MemoryBackend, clock: FakeClock, how: str
) -> None:
    """A terminal task is readable until finished_at + result_ttl, then gone with its queue."""
    done = _finish(backend, how)
    clock.advance(RESULT_TTL - MS)
    assert backend.get(done.id) == done
    assert backend.peek("default", done.status) == [done]
    assert backend.counts()["default"].of(done.status) == 1
    clock.advance(MS)
    assert backend.get(done.id) is None
    assert backend.peek("default", done.status) == []
    assert backend.counts() == {}
    assert backend.requeue(done.id) is None


def test_pending_tasks_never_expire(backend: MemoryBackend, clock: FakeClock) -> None:
    """Result expiry drops only terminal tasks; the queue stays listed while others are pending."""
    done = _finish(backend, "succeed")
    [waiting] = backend.enqueue([make_task(run_after=clock.now() + 10 * RESULT_TTL)])
    clock.advance(2 * RESULT_TTL)
    assert backend.get(done.id) is None
    assert backend.get(waiting.id) == waiting
    assert backend.counts()["default"].deferred == 1


def test_expired_id_can_be_enqueued_anew(backend: MemoryBackend, clock: FakeClock) -> None:
    """Once a result expired, its id is free: enqueueing it stores a fresh task."""
    done = _finish(backend, "succeed")
    clock.advance(RESULT_TTL)
    [again] = backend.enqueue([make_task(id=done.id)])
    assert (again.status, again.attempts) == (READY, 0)


# --- poison ---------------------------------------------------------------------------

QUARANTINED = "threadmill_core.errors.TaskQuarantined"


def _assert_quarantined(backend: MemoryBackend, task_id: str, queue: str = "default") -> None:
    record = backend.get(task_id)
    assert record is not None
    assert (record.status, record.queue, record.finished_at) == (FAILED, queue, backend.now())
    [error] = record.errors
    assert error.exception_class_path == QUARANTINED
    assert "could not be decoded" in error.message
    assert task_id in error.message


def test_claim_quarantines_poison_and_claims_the_rest(backend: MemoryBackend) -> None:
    """Undecodable bytes at the head of READY are finalized FAILED; the claim still fills limit."""
    good = backend.enqueue([make_task() for _ in range(3)])
    backend._plant_raw("poison-1", b"\xff not json", priority=10)
    backend._plant_raw("poison-2", b'{"id": "poison-2"}', priority=10)
    leases = backend.claim(["default"], worker="w", lease_ttl=LEASE, limit=3)
    assert [lease.task_id for lease in leases] == [record.id for record in good]
    _assert_quarantined(backend, "poison-1")
    _assert_quarantined(backend, "poison-2")
    assert backend.counts()["default"].failed == 2


def test_claim_expired_quarantines_poison_and_reclaims_the_rest(
    backend: MemoryBackend, clock: FakeClock
) -> None:
    """An undecodable RUNNING task is finalized FAILED by the reaper, and its pass goes on."""
    backend.enqueue([make_task()])
    [lease] = backend.claim(["default"], worker="w", lease_ttl=LEASE)
    assert backend.mark_started([lease]) == [True]
    backend._plant_raw("poison", b"[]", status=RUNNING, queue="other", at=clock.now())
    clock.advance(LEASE)
    [reclaimed] = backend.claim_expired(limit=1, claim_ttl=LEASE)
    assert reclaimed.task_id == lease.task_id
    _assert_quarantined(backend, "poison", queue="other")
    assert backend.claim_expired(limit=1, claim_ttl=LEASE) == []


def test_foreign_record_bytes_are_poison(backend: MemoryBackend) -> None:
    """Bytes that decode to a different task's record are treated as undecodable."""
    other = make_task(id="someone-else")
    backend._plant_raw("mine", codec.encode_record(other))
    with pytest.raises(PayloadError, match="someone-else"):
        backend.get("mine")
    assert backend.claim(["default"], worker="w", lease_ttl=LEASE) == []
    _assert_quarantined(backend, "mine")


def test_reading_poison_raises_payload_error_and_purge_removes_it(backend: MemoryBackend) -> None:
    """get and peek raise PayloadError naming undecodable tasks; counts and purge still work."""
    backend._plant_raw("poison", b"{", status=FAILED)
    with pytest.raises(PayloadError, match="'poison'"):
        backend.get("poison")
    with pytest.raises(PayloadError, match="'poison'"):
        backend.peek("default", FAILED)
    with pytest.raises(PayloadError, match="'poison'"):
        backend.requeue("poison")
    assert backend.counts()["default"].failed == 1
    assert backend.purge("default", FAILED) == 1
    assert backend.get("poison") is None


def test_promote_moves_poison_unchanged_for_claim_to_quarantine(
    backend: MemoryBackend, clock: FakeClock
) -> None:
    """A due undecodable DEFERRED task is promoted as it is, then quarantined when claimed."""
    backend._plant_raw("poison", b"", status=DEFERRED, at=clock.now() + LEASE)
    clock.advance(LEASE)
    assert backend.promote_due(limit=10) == 1
    assert backend.counts()["default"].ready == 1
    assert backend.claim(["default"], worker="w", lease_ttl=LEASE) == []
    _assert_quarantined(backend, "poison")


# --- bad arguments --------------------------------------------------------------------

ZERO = timedelta(0)


BAD_CALLS = {
    "claim-limit-0": lambda b, lease: b.claim(["default"], worker="w", lease_ttl=LEASE, limit=0),
    "claim-lease_ttl-0": lambda b, lease: b.claim(["default"], worker="w", lease_ttl=ZERO),
    "claim-lease_ttl-negative": lambda b, lease: b.claim(["default"], worker="w", lease_ttl=-LEASE),
    "claim_expired-limit-0": lambda b, lease: b.claim_expired(limit=0, claim_ttl=LEASE),
    "claim_expired-claim_ttl-0": lambda b, lease: b.claim_expired(limit=1, claim_ttl=ZERO),
    "promote_due-limit-0": lambda b, lease: b.promote_due(limit=0),
    "extend-lease_ttl-0": lambda b, lease: b.extend(lease, ZERO),
    "extend_many-negative": lambda b, lease: b.extend_many([lease], -LEASE),
    "retry-negative-delay": lambda b, lease: b.retry(lease, lease.record, -MS),
    "complete-status-running": lambda b, lease: b.complete(lease, lease.record),
    "complete-status-ready": lambda b, lease: b.complete(
        lease, attrs.evolve(lease.record, status=READY)
    ),
    "complete-record-of-another-task": lambda b, lease: b.complete(lease, succeed(make_task())),
    "decide_many-one-bad": lambda b, lease: b.decide_many(
        [
            Decision(lease=lease, record=succeed(lease.record)),
            Decision(lease=lease, record=lease.record, retry_delay=-MS),
        ]
    ),
    "purge-running": lambda b, lease: b.purge("default", RUNNING),
    "peek-limit-0": lambda b, lease: b.peek("default", READY, limit=0),
    "peek-offset-negative": lambda b, lease: b.peek("default", READY, offset=-1),
    # As Redis has them: True is not a limit, and "1" is a ValueError, not a TypeError.
    "claim-limit-true": lambda b, lease: b.claim(
        ["default"], worker="w", lease_ttl=LEASE, limit=True
    ),
    "claim-limit-str": lambda b, lease: b.claim(
        ["default"], worker="w", lease_ttl=LEASE, limit="1"
    ),
    "promote_due-limit-true": lambda b, lease: b.promote_due(limit=True),
    "peek-offset-true": lambda b, lease: b.peek("default", READY, offset=True),
}


@pytest.mark.parametrize("call", BAD_CALLS.values(), ids=BAD_CALLS.keys())
def test_bad_arguments_raise_value_error_and_change_nothing(
    backend: MemoryBackend, clock: FakeClock, call: Callable[..., object]
) -> None:
    """Each bad argument raises ValueError before anything changes."""
    backend.enqueue([make_task(), make_task(), make_task(run_after=clock.now())])
    [lease] = backend.claim(["default"], worker="w", lease_ttl=LEASE)
    backend.enqueue([make_task(run_after=clock.now() + MS)])
    clock.advance(LEASE)
    before = {status: backend.peek("default", status) for status in TaskResultStatus}
    with pytest.raises(ValueError):  # noqa: PT011 - each case has its own message
        call(backend, lease)
    assert {status: backend.peek("default", status) for status in TaskResultStatus} == before


def test_queues_given_as_a_str_are_refused(backend: MemoryBackend) -> None:
    """A bare str for queues raises TypeError instead of claiming from one-letter queues."""
    backend.enqueue([make_task(queue="d")])
    with pytest.raises(TypeError, match="list of queue names"):
        backend.claim("default", worker="w", lease_ttl=LEASE)
    assert backend.counts()["d"].ready == 1


# --- tokens and repeats ---------------------------------------------------------------


def test_every_claim_and_reaper_claim_gets_a_fresh_token(
    backend: MemoryBackend, clock: FakeClock
) -> None:
    """Tokens from claims and reaper claims are never reused, across tasks and across claims."""
    backend.enqueue([make_task() for _ in range(3)])
    tokens: list[str] = []
    for _ in range(4):
        leases = backend.claim(["default"], worker="w", lease_ttl=LEASE, limit=3)
        assert backend.mark_started(leases) == [True] * 3
        tokens += [lease.token for lease in leases]
        clock.advance(LEASE)
        reaped = backend.claim_expired(limit=3, claim_ttl=LEASE)
        tokens += [lease.token for lease in reaped]
        for lease in reaped:
            assert backend.retry(lease, lease.record, ZERO) is not None
    assert len(tokens) == len(set(tokens)) == 24


def test_repeated_complete_returns_the_stored_record(
    backend: MemoryBackend, clock: FakeClock
) -> None:
    """A complete repeated with the same lease returns the stored record and changes nothing."""
    backend.enqueue([make_task()])
    [lease] = backend.claim(["default"], worker="w", lease_ttl=LEASE)
    done = backend.complete(lease, succeed(lease.record, 1))
    clock.advance(LEASE)
    assert backend.complete(lease, succeed(lease.record, 2)) == done
    assert backend.retry(lease, lease.record, ZERO) is None  # not the decision that was made
    assert backend.get(lease.task_id) == done


def test_requeue_ends_the_repeat_window(backend: MemoryBackend) -> None:
    """After requeue a repeated decision with the old lease is refused."""
    backend.enqueue([make_task()])
    [lease] = backend.claim(["default"], worker="w", lease_ttl=LEASE)
    failed = backend.complete(lease, fail(lease.record))
    assert backend.complete(lease, fail(lease.record)) == failed
    requeued = backend.requeue(lease.task_id)
    assert requeued is not None
    assert (requeued.status, requeued.errors, requeued.attempts) == (READY, (BOOM,), 1)
    assert backend.complete(lease, fail(lease.record)) is None
    assert backend.get(lease.task_id) == requeued


def test_repeated_retry_returns_the_stored_record_until_claimed_again(
    backend: MemoryBackend, clock: FakeClock
) -> None:
    """A repeated retry is answered while the task waits, through promotion, until a new claim."""
    backend.enqueue([make_task()])
    [lease] = backend.claim(["default"], worker="w", lease_ttl=LEASE)
    record = attrs.evolve(lease.record, errors=(BOOM,))
    deferred = backend.retry(lease, record, LEASE)
    assert deferred is not None
    assert (deferred.status, deferred.run_after) == (DEFERRED, clock.now() + LEASE)
    assert backend.retry(lease, record, LEASE) == deferred
    clock.advance(LEASE)
    assert backend.promote_due(limit=1) == 1
    promoted = backend.retry(lease, record, LEASE)
    assert promoted == attrs.evolve(deferred, status=READY)
    [again] = backend.claim(["default"], worker="w", lease_ttl=LEASE)
    assert again.record.attempts == 2
    assert backend.retry(lease, record, LEASE) is None


def test_reaper_claim_is_not_an_attempt(backend: MemoryBackend, clock: FakeClock) -> None:
    """claim_expired fences out the worker but leaves attempts and workers unchanged."""
    backend.enqueue([make_task()])
    [lease] = backend.claim(["default"], worker="w", lease_ttl=LEASE)
    assert backend.mark_started([lease]) == [True]
    clock.advance(LEASE)  # a deadline at now has passed
    [reaped] = backend.claim_expired(limit=5, claim_ttl=LEASE)
    assert reaped.record == lease.record
    assert reaped.token != lease.token
    assert reaped.deadline == clock.now() + LEASE
    assert backend.extend(lease, LEASE) is None
    assert backend.complete(lease, succeed(lease.record)) is None
    assert backend.claim_expired(limit=5, claim_ttl=LEASE) == []


def test_cancel_refuses_running_and_unknown_tasks(backend: MemoryBackend) -> None:
    """cancel is refused for a running task and an unknown id, and works on READY."""
    [first, second] = backend.enqueue([make_task(), make_task()])
    [lease] = backend.claim(["default"], worker="w", lease_ttl=LEASE)
    assert backend.cancel(lease.task_id) is None
    assert backend.cancel(new_task_id()) is None
    cancelled = backend.cancel(second.id)
    assert cancelled is not None
    assert (cancelled.status, cancelled.finished_at) == (CANCELLED, backend.now())
    assert first.id == lease.task_id
