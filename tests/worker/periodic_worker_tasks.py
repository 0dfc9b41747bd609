"""A task with an every-second schedule, for the multi-worker scheduling test.

Each run pushes ``<tick ms>:<pid>`` to the Redis list ``threadmill-test:<tag>``
(the URL and tag from $THREADMILL_TEST_EVENTS and $THREADMILL_TEST_TAG), so the
test can tell how many times each tick's task ran, and where.
"""

from __future__ import annotations

import os
from datetime import timedelta

import redis

from threadmill_core import TaskContext, periodic, task, tick_of

_client: list[redis.Redis] = []


@periodic(every=timedelta(seconds=1), name="beat-every-second")
@task()
def beat(context: TaskContext) -> int:
    """Record which tick this run is, and in which process."""
    tick = tick_of(context)
    assert tick is not None, context.record.id
    if not _client:
        _client.append(redis.Redis.from_url(os.environ["THREADMILL_TEST_EVENTS"]))
    at = int(tick.at.timestamp() * 1000)
    _client[0].rpush(f"threadmill-test:{os.environ['THREADMILL_TEST_TAG']}", f"{at}:{os.getpid()}")
    return at
