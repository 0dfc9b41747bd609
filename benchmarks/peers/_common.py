"""What every peer's tasks share: the Redis keys the harness reads, and a client for them.

Every system under test runs the same two tasks:

- ``incr()``: ``INCR`` the counter at `COUNT_KEY`. The harness polls the
  counter to time a drain.
- ``started(sent)``: the first thing it does is read the clock; it pushes
  ``now - sent`` (seconds) onto `STARTED_KEY`, where the harness BLPOPs it.
  `sent` is the producer's ``time.time()`` taken just before its enqueue
  call, so the figure is enqueue-to-start as a caller sees it.

Worker processes learn the server from ``BENCH_REDIS_URL``, which the harness
sets for them (and for itself before it imports a peer module).
"""

from __future__ import annotations

import os
import time

import redis

COUNT_KEY = "bench:count"
STARTED_KEY = "bench:started"
URL_VARIABLE = "BENCH_REDIS_URL"

_clients: dict[int, redis.Redis] = {}


def redis_url() -> str:
    """The benchmark server's URL, from the environment the harness set."""
    return os.environ.get(URL_VARIABLE, "redis://127.0.0.1:6379/0")


def client() -> redis.Redis:
    """A redis-py client for this process (made again after a fork)."""
    pid = os.getpid()
    made = _clients.get(pid)
    if made is None:
        made = _clients[pid] = redis.Redis.from_url(redis_url())
    return made


def incr() -> None:
    client().incr(COUNT_KEY)


def started(sent: float) -> None:
    latency = time.time() - sent
    client().rpush(STARTED_KEY, repr(latency))
