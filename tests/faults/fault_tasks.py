"""Tasks for the fault tests; runs and acknowledgements are recorded on a separate server.

A run pushes ``start:<n>:<pid>:<attempt>`` before its work and
``end:<n>:<pid>:<attempt>`` after it; a plugin hook pushes ``acked:<n>:<pid>``
once the worker's acknowledgement has landed. They go to the list
``threadmill-test:<tag>`` on the server at ``log_url`` (never the server
under test, which the tests kill), so the tests can tell whether a task ran
again after it was acknowledged.
"""

from __future__ import annotations

import os
import random
import signal
import time
from datetime import timedelta

import redis

from threadmill_core import ExponentialBackoff, TaskContext, TaskResult, hookimpl, task
from threadmill_core.plugins import plugin_manager
from threadmill_core.retry import no_retry

#: Expired leases are retried quickly and forever: no fault may turn into a FAILED task.
RETRY = ExponentialBackoff(base_delay=timedelta(milliseconds=50), max_retries=None, jitter=0)

_clients: dict[str, redis.Redis] = {}


def log_event(log_url: str, tag: str, event: str) -> None:
    client = _clients.get(log_url)
    if client is None:
        client = _clients[log_url] = redis.Redis.from_url(log_url)
    client.rpush(f"threadmill-test:{tag}", event)


@task(retry=RETRY)
def work(context: TaskContext, log_url: str, tag: str, n: int, max_ms: int) -> int:
    """Sleep 0..max_ms milliseconds, recording start and end; returns `n`."""
    log_event(log_url, tag, f"start:{n}:{os.getpid()}:{context.attempt}")
    time.sleep(random.uniform(0, max_ms) / 1000)
    log_event(log_url, tag, f"end:{n}:{os.getpid()}:{context.attempt}")
    return n


#: One retry, at once: the crash tests' running task meets this policy after its kill.
RETRY_ONCE = ExponentialBackoff(base_delay=0, max_delay=0, max_retries=1, jitter=0)


@task(retry=RETRY_ONCE)
def hold(context: TaskContext, log_url: str, tag: str, n: int) -> int:
    """Record the start; on the first attempt, block (the test kills or stops its worker)."""
    log_event(log_url, tag, f"start:{n}:{os.getpid()}:{context.attempt}")
    if context.attempt == 1:
        time.sleep(120)
    log_event(log_url, tag, f"end:{n}:{os.getpid()}:{context.attempt}")
    return n


# No retry, so the charge that ends the give-backs is final (the default would retry it).
@task(retry=no_retry)
def kills_its_worker(context: TaskContext, log_url: str, tag: str) -> None:
    """Record the start, then SIGKILL the worker process at once, before any mark."""
    log_event(log_url, tag, f"start:0:{os.getpid()}:{context.attempt}")
    os.kill(os.getpid(), signal.SIGKILL)


@task
def echo(value: object) -> object:
    """Return `value` unchanged."""
    return value


class AckRecorder:
    """Records each acknowledgement of `work` that landed (the worker calls this hook after it)."""

    @hookimpl
    def threadmill_task_finished(self, record: TaskResult) -> None:
        if record.task_path == work.path:
            log_url, tag, n, _max_ms = record.args
            log_event(log_url, tag, f"acked:{n}:{os.getpid()}")


if plugin_manager().get_plugin("threadmill-fault-tests") is None:
    plugin_manager().register(AckRecorder(), name="threadmill-fault-tests")
