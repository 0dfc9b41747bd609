"""Tasks for the worker-process tests; each records its runs in Redis.

Every run pushes ``start:<n>:<pid>:<attempt>`` before its work and
``end:<n>:<pid>:<attempt>`` after, to the list ``threadmill-test:<tag>``;
a hook pushes ``acked:<n>:<pid>:<attempts>`` once a worker's acknowledgement
of a `sleepy` task has landed. The tests read those lists to tell what ran
where, how often, whether a run was interrupted, and what was in flight.
"""

from __future__ import annotations

import os
import random
import time
from datetime import timedelta

import redis

from threadmill_core import ExponentialBackoff, TaskContext, TaskResult, hookimpl, task
from threadmill_core.plugins import plugin_manager

#: Lease expiry is retried (quickly) forever: the crash test's kills must never lose a task.
RETRY = ExponentialBackoff(base_delay=timedelta(milliseconds=50), max_retries=None, jitter=0)

_clients: dict[str, redis.Redis] = {}


def _log(url: str, tag: str, event: str, n: int, attempt: int) -> None:
    client = _clients.get(url)
    if client is None:
        client = _clients[url] = redis.Redis.from_url(url)
    client.rpush(f"threadmill-test:{tag}", f"{event}:{n}:{os.getpid()}:{attempt}")


@task(retry=RETRY)
def sleepy(context: TaskContext, url: str, tag: str, n: int, max_ms: int) -> int:
    """Sleep 0..max_ms milliseconds, recording start and end."""
    _log(url, tag, "start", n, context.attempt)
    time.sleep(random.uniform(0, max_ms) / 1000)
    _log(url, tag, "end", n, context.attempt)
    return n


@task(retry=RETRY)
def long_running(context: TaskContext, url: str, tag: str, seconds: float) -> bool:
    """Run for `seconds`; returns whether the lease was lost meanwhile."""
    _log(url, tag, "start", 0, context.attempt)
    time.sleep(seconds)
    _log(url, tag, "end", 0, context.attempt)
    return context.lease_lost


@task
def interrupted_once(context: TaskContext, url: str, tag: str, seconds: float) -> int:
    """Run `seconds` on attempt 1 (long enough to be stopped hard), at once on later ones.

    It names no retry policy: the default's.
    """
    _log(url, tag, "start", 0, context.attempt)
    if context.attempt == 1:
        time.sleep(seconds)
    _log(url, tag, "end", 0, context.attempt)
    return context.attempt


@task
def refuses(context: TaskContext, url: str, tag: str) -> None:
    """Fail with an exception of its own; it names no retry policy: the default's."""
    _log(url, tag, "start", 1, context.attempt)
    raise ValueError("refused by the task itself")


@task
def first_step(url: str, tag: str) -> str:
    """Enqueue `second_step` without naming a broker (the default one); returns its id."""
    return second_step.enqueue(url, tag).id


@task
def second_step(url: str, tag: str) -> int:
    """Record its run; returns the pid of the process that ran it."""
    _log(url, tag, "start", 2, 1)
    return os.getpid()


class AckRecorder:
    """Records each acknowledgement of `sleepy` that landed (the worker calls this hook after)."""

    @hookimpl
    def threadmill_task_finished(self, record: TaskResult) -> None:
        if record.task_path == sleepy.path:
            url, tag, n, _max_ms = record.args
            _log(url, tag, "acked", n, record.attempts)


if plugin_manager().get_plugin("threadmill-worker-tests") is None:
    plugin_manager().register(AckRecorder(), name="threadmill-worker-tests")
