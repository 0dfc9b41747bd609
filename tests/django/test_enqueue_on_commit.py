"""``enqueue_on_commit``: inside ``transaction.atomic()`` a task is stored at commit, and one
enqueued in a block or savepoint that rolls back is never stored."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import transaction
from django.tasks import task_backends
from django.tasks.exceptions import TaskResultDoesNotExist
from django.test import override_settings

from tests.conftest import RedisServer
from tests.django import admin_bench as ab
from tests.django.bench import Bench, Signals
from tests.django.djapp import tasks
from threadmill_core import (
    InvalidCall,
    PayloadTooLarge,
    TaskNotFound,
    TaskResultStatus,
    ThreadmillError,
    UnsupportedValue,
    Worker,
    connect,
)
from threadmill_django.testing import use_broker


def alias(**options: Any) -> dict[str, Any]:
    return {
        "default": {
            "BACKEND": "threadmill_django.TaskBackend",
            "QUEUES": ["default", "high", "low"],
            "OPTIONS": {"url": "memory://", "enqueue_on_commit": True, **options},
        }
    }


@pytest.fixture
def on_commit(bench: Bench) -> Iterator[Bench]:
    """The default alias with enqueue_on_commit, on the bench's broker; the database ready."""
    ab.migrate()
    with override_settings(TASKS=alias()):
        yield bench


class Rollback(Exception):
    """Raised to roll a block back."""


def stored(task_id: str) -> bool:
    """Whether the default alias knows the task (its get_result does not raise)."""
    try:
        tasks.add.get_result(task_id)
    except TaskResultDoesNotExist:
        return False
    return True


def test_a_task_enqueued_in_a_block_that_rolls_back_is_never_stored(on_commit: Bench) -> None:
    """Rolled back: no worker runs the task and get_result does not know its id."""
    with contextlib.suppress(Rollback), transaction.atomic():
        result = tasks.add.enqueue(1, 2)
        assert result.status == "READY"
        raise Rollback
    assert not stored(result.id)
    assert on_commit.work() == 0
    assert on_commit.broker.counts() == {}


def test_a_task_enqueued_in_a_block_is_claimable_only_after_commit(
    on_commit: Bench, signals_seen: Signals
) -> None:
    """Inside the block a worker finds nothing and get_result raises; after commit the task is
    stored under the id enqueue returned, task_enqueued is sent, and a worker runs it."""
    with transaction.atomic():
        result = tasks.add.enqueue(1, 2)
        assert on_commit.work() == 0
        assert not stored(result.id)
        assert signals_seen.of("task_enqueued") == []
    assert tasks.add.get_result(result.id).status == "READY"
    assert [event[1] for event in signals_seen.of("task_enqueued")] == [result.id]
    assert on_commit.work() == 1
    assert tasks.add.get_result(result.id).return_value == 3


def test_a_savepoint_that_rolls_back_drops_only_its_tasks(on_commit: Bench) -> None:
    """A nested atomic block that rolls back drops its task; the outer block's is stored."""
    with transaction.atomic():
        kept = tasks.add.enqueue(1, 1)
        with contextlib.suppress(Rollback), transaction.atomic():
            dropped = tasks.add.enqueue(2, 2)
            raise Rollback
        inner = tasks.add.enqueue(3, 3)
    assert stored(kept.id)
    assert stored(inner.id)
    assert not stored(dropped.id)


def test_outside_a_transaction_the_task_is_stored_at_once(on_commit: Bench) -> None:
    """Without an atomic block, enqueue stores as without the option."""
    result = tasks.add.enqueue(1, 2)
    assert tasks.add.get_result(result.id).status == "READY"


def test_a_refused_call_raises_at_enqueue_inside_the_block(on_commit: Bench) -> None:
    """A call that does not fit the signature, or is too large, raises at enqueue, not at
    commit, and nothing is stored when the block commits."""
    with transaction.atomic():
        with pytest.raises(InvalidCall):
            tasks.add.enqueue(1, 2, 3)
        with pytest.raises(PayloadTooLarge):
            tasks.echo.enqueue("a" * (on_commit.broker.max_payload_bytes + 1))
    assert on_commit.broker.counts() == {}


def test_a_value_the_codec_cannot_carry_raises_at_enqueue_and_spares_the_rest(
    on_commit: Bench,
) -> None:
    """A value Django passes but the codec refuses (a lone surrogate, a dict with an int key)
    raises UnsupportedValue at enqueue, inside the block: the commit stores the block's
    other tasks, none of them skipped for it."""
    with transaction.atomic():
        with pytest.raises(UnsupportedValue, match="surrogate"):
            tasks.echo.enqueue("\ud800")
        with pytest.raises(UnsupportedValue, match=r"args\[0\]"):
            tasks.echo.enqueue({1: "a"})
        good = tasks.add.enqueue(1, 2)
    assert tasks.add.get_result(good.id).status == "READY"
    assert on_commit.broker.counts()["default"].ready == 1


def test_the_option_must_be_a_bool() -> None:
    """A value other than True or False is a system check error naming the option."""
    with override_settings(TASKS=alias(enqueue_on_commit="yes")):
        messages = task_backends["default"].check()
    assert any(
        "TASKS['default']['OPTIONS']['enqueue_on_commit'] must be True or False, got 'yes'"
        in message.msg
        for message in messages
    )


@pytest.mark.redis
def test_on_redis_a_rolled_back_task_is_never_stored(redis_server: RedisServer) -> None:
    """On a real Redis: the rolled-back block's task is not there, the committed one is."""
    ab.migrate()
    broker = connect(f"{redis_server.url}?namespace=commit-{uuid.uuid4().hex[:8]}")
    try:
        with override_settings(TASKS=alias()), use_broker("default", broker):
            with contextlib.suppress(Rollback), transaction.atomic():
                dropped = tasks.add.enqueue(1, 2)
                raise Rollback
            with transaction.atomic():
                kept = tasks.add.enqueue(3, 4)
                assert broker.counts() == {}
            assert Worker(broker, queues=["default"]).run(burst=True) == 1
            assert broker.get_result(kept.id).status is TaskResultStatus.SUCCESSFUL
            with pytest.raises(TaskNotFound):
                broker.get_result(dropped.id)
    finally:
        broker.close()


def test_a_backend_unreachable_at_commit_raises_from_the_block(on_commit: Bench) -> None:
    """The task cannot be stored at commit: the block's exit raises the backend's error, and
    the transaction is committed all the same (what the docs say the option can lose)."""
    from django.contrib.auth.models import Group

    name = f"g-{uuid.uuid4().hex[:6]}"

    def write_and_enqueue() -> None:
        with transaction.atomic():
            Group.objects.create(name=name)
            tasks.add.enqueue(1, 2)

    broker = connect("redis://127.0.0.1:9/0?socket_timeout=0.5")  # nothing listens there
    with use_broker("default", broker), pytest.raises(ThreadmillError) as raised:
        write_and_enqueue()
    assert "127.0.0.1:9" in str(raised.value)
    assert Group.objects.filter(name=name).exists()
    broker.close()
