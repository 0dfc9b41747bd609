"""Operator actions on Redis read and decode the task, then act only if it is unchanged.

A script cannot decode the codec's bytes, so `cancel`, `requeue` and
`request_cancel` read the record first and send the bytes they decoded;
the action applies only if the task still holds them (``lib/unchanged``).
These tests change the task between the two steps, through the public
interface of the same backend, and check that the action reads again and
answers for the task as it is now. (Poison, which is why the read comes
first, is the conformance kit's `an_operator_action_on_a_corrupt_record_changes_nothing`.)
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import attrs
import pytest

from tests.redis.cancel_progress_checks import one_task
from threadmill_core.models import Decision, Lease, TaskResultStatus
from threadmill_core.testing import Harness
from threadmill_redis import RedisBackend

LEASE = timedelta(seconds=30)
READY, RUNNING = TaskResultStatus.READY, TaskResultStatus.RUNNING
FAILED, SUCCESSFUL = TaskResultStatus.FAILED, TaskResultStatus.SUCCESSFUL


def meddle(
    monkeypatch: pytest.MonkeyPatch,
    backend: RedisBackend,
    action: str,
    change: Callable[[], object],
) -> list[str]:
    """Run `change` once, just before the first `action` script; return the scripts run."""
    run, ran = backend._run, []

    def spy(name: str, args: Any, **options: Any) -> Any:
        ran.append(name)
        if name == action and ran.count(action) == 1:
            change()
        return run(name, args, **options)

    monkeypatch.setattr(backend, "_run", spy)
    return ran


def claimed(harness: Harness) -> tuple[RedisBackend, Lease]:
    """The harness's Redis backend, holding the lease of its one task, "t1"."""
    backend = harness.backend
    assert isinstance(backend, RedisBackend)
    backend.enqueue([one_task("t1")])
    [lease] = backend.claim(["default"], worker="w", lease_ttl=LEASE)
    return backend, lease


def test_a_cancel_of_a_task_claimed_meanwhile_is_refused(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = harness.backend
    assert isinstance(backend, RedisBackend)
    backend.enqueue([one_task("t1")])
    leases = []
    ran = meddle(
        monkeypatch,
        backend,
        "cancel",
        lambda: leases.extend(backend.claim(["default"], worker="w", lease_ttl=LEASE)),
    )
    assert backend.cancel("t1") is None  # RUNNING by the time it applied: refused
    assert ran == ["get", "cancel", "claim", "get", "cancel"]
    [lease] = leases
    assert backend.extend(lease, LEASE) is not None, "the claim stands"
    stored = backend.get("t1")
    assert stored is not None
    assert stored.status is RUNNING


def test_a_requeue_of_a_task_purged_meanwhile_finds_none(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend, lease = claimed(harness)
    backend.decide_many([Decision(lease=lease, record=attrs.evolve(lease.record, status=FAILED))])
    ran = meddle(monkeypatch, backend, "requeue", lambda: backend.purge("default", FAILED))
    assert backend.requeue("t1") is None
    assert ran == ["get", "requeue", "purge", "get"]
    assert backend.get("t1") is None
    assert "default" not in backend.counts()


def test_a_cancel_request_for_a_task_finished_meanwhile_is_refused(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend, lease = claimed(harness)
    done = attrs.evolve(lease.record, status=SUCCESSFUL)
    ran = meddle(monkeypatch, backend, "request_cancel", lambda: backend.complete(lease, done))
    assert backend.request_cancel("t1") is None
    assert ran == ["get", "request_cancel", "complete", "get", "request_cancel"]
    stored = backend.get("t1")
    assert stored is not None
    assert (stored.status, stored.cancel_requested_at) == (SUCCESSFUL, None)


def test_an_unchanged_task_is_acted_on_after_one_read(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = harness.backend
    assert isinstance(backend, RedisBackend)
    backend.enqueue([one_task("t1"), one_task("t2")])
    ran = meddle(monkeypatch, backend, "no script is named so", lambda: None)
    cancelled = backend.cancel("t1")
    assert cancelled is not None
    assert cancelled.status is TaskResultStatus.CANCELLED
    requeued = backend.requeue("t1")
    assert requeued is not None
    assert requeued.status is READY
    [lease] = backend.claim(["default"], worker="w", lease_ttl=LEASE)
    requested = backend.request_cancel(lease.task_id)
    assert requested is not None
    assert requested.cancel_requested_at is not None
    assert ran == ["get", "cancel", "get", "requeue", "claim", "get", "request_cancel"]
