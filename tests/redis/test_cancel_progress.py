"""Cancel requests and progress on Redis (and fakeredis): the shared checks, and a corrupt
stored progress."""

from __future__ import annotations

import pytest

from tests.redis.cancel_progress_checks import (
    LEASE,
    check_a_requested_task_going_back_ends_cancelled,
    check_progress_is_fenced,
    check_request_cancel_on_running,
    one_task,
)
from threadmill_core.models import Progress, TaskResultStatus
from threadmill_core.testing import Harness
from threadmill_redis import RedisBackend


def test_request_cancel_on_running(harness: Harness) -> None:
    check_request_cancel_on_running(harness)


def test_progress_is_fenced(harness: Harness) -> None:
    check_progress_is_fenced(harness)


def test_a_requested_task_going_back_ends_cancelled(harness: Harness) -> None:
    check_a_requested_task_going_back_ends_cancelled(harness)


@pytest.mark.parametrize("garbage", [b"not json", b'{"done":-1}', b"[]"])
def test_a_corrupt_progress_reads_as_none_and_harms_nothing(
    harness: Harness, garbage: bytes
) -> None:
    """A stored progress that does not decode reads as none: the task is read, renewed,
    completed and given a fresh progress as usual (it is no poison)."""
    backend = harness.backend
    assert isinstance(backend, RedisBackend)
    backend.enqueue([one_task("t1")])
    [lease] = backend.claim(["default"], worker="w", lease_ttl=LEASE)
    backend.client.hset(backend.keys.store("progress"), "t1", garbage)
    stored = backend.get("t1")
    assert stored is not None
    assert stored.progress is None
    assert backend.extend(lease, LEASE) is not None
    assert backend.record_progress([(lease, Progress(done=1))]) == [True]
    fixed = backend.get("t1")
    assert fixed is not None
    assert fixed.progress is not None
    assert fixed.progress.done == 1


def test_a_purged_task_leaves_no_progress_or_request(harness: Harness) -> None:
    backend = harness.backend
    assert isinstance(backend, RedisBackend)
    backend.enqueue([one_task("t1")])
    [lease] = backend.claim(["default"], worker="w", lease_ttl=LEASE)
    backend.record_progress([(lease, Progress(done=1))])
    backend.request_cancel("t1")
    backend.retry(lease, lease.record, LEASE)  # finalized CANCELLED
    assert backend.purge("default", TaskResultStatus.CANCELLED) == 1
    for name in ("progress", "cancel_requests"):
        assert backend.client.hlen(backend.keys.store(name)) == 0
