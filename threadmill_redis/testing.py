"""Test support: a conformance-kit `Harness` over a Redis client, on a fresh namespace.

`advance` makes the namespace behave as if the server clock (``TIME``) moved
forward: ``lua/harness_advance.lua`` moves every scheduling key (due times,
lease deadlines, finished times; see keys.py) and every telemetry bucket
(by whole seconds, rounded up) back, leaving the timestamps records show as
they were. The shipped operation scripts have no such
switch; this is the only script that moves time, and only tests run it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import timedelta

from threadmill_core.clock import duration_ms
from threadmill_core.testing import Harness
from threadmill_redis import replies, scripts
from threadmill_redis.backend import RedisBackend
from threadmill_redis.clients import Client
from threadmill_redis.keys import STATE_FIELDS


def make_harness(client: Client, *, result_ttl: timedelta, **options: object) -> Harness:
    """A harness on a new random namespace of `client` (redis.Redis, a cluster, or fakeredis).

    `close()` deletes every key of the namespace; the client stays open.
    """
    backend = RedisBackend(
        client, namespace=f"threadmill-test-{uuid.uuid4().hex}", result_ttl=result_ttl, **options
    )
    return Harness(
        backend=backend,
        advance=lambda delta: advance(backend, delta),
        exact_clock=False,
        close=lambda: delete_namespace(backend),
        result_ttl=result_ttl,
        corruptions=corruptions(backend),
    )


def corruptions(backend: RedisBackend) -> dict[str, Callable[[str], None]]:
    """Named ways to damage a stored task of `backend` (see `Harness.corruptions`).

    Each writes one hash entry of the task as a crash, a bug or a hand edit
    could (see keys.py for the layout): its state deleted, replaced by bytes
    of no layout, or with a number field that is not a number; or its
    payload replaced by bytes that do not decode.
    """
    client = backend.client
    state, payload = backend.keys.store("state"), backend.keys.store("payload")

    def state_missing(task_id: str) -> None:
        client.hdel(state, task_id)

    def state_garbled(task_id: str) -> None:
        client.hset(state, task_id, b"\xff\x00not a state")

    def number_garbled(task_id: str) -> None:
        raw = client.hget(state, task_id)
        assert isinstance(raw, bytes), f"task {task_id!r} has no state to damage"
        fields = raw.split(b"|", len(STATE_FIELDS) - 1)
        fields[STATE_FIELDS.index("attempts")] = b"two"
        client.hset(state, task_id, b"|".join(fields))

    def payload_garbled(task_id: str) -> None:
        client.hset(payload, task_id, b"{not a record")

    return {
        "state missing": state_missing,
        "state garbled": state_garbled,
        "state number field garbled": number_garbled,
        "payload garbled": payload_garbled,
    }


def advance(backend: RedisBackend, delta: timedelta) -> None:
    """Make `backend`'s namespace behave as if the server clock moved forward by `delta`."""
    if delta < timedelta(0):
        raise ValueError(f"time only moves forward; got {delta}")
    script = scripts.load("harness_advance")
    keys = [backend.keys.store(name) for name in script.key_names]
    scripts.evalsha(backend.client.execute_command, script, keys, [duration_ms(delta)])


def delete_namespace(backend: RedisBackend) -> None:
    """Delete every key of `backend`'s namespace, then close the backend."""
    keys = list(backend.client.scan_iter(match=backend.keys.pattern(), count=1000))
    if keys:
        backend.client.delete(*keys)
    backend.close()


def start_recorded(backend: RedisBackend, task_id: str) -> bool:
    """Whether the task's current claim has its start recorded (`Backend.mark_started`).

    Read from the ``starts`` hash and the task's state (see keys.py), for
    tests that must know a worker's heartbeat thread has marked a task
    before they kill it.
    """
    state = backend.client.hget(backend.keys.store("state"), task_id)
    held = backend.client.hget(backend.keys.store("starts"), task_id)
    if not isinstance(state, bytes) or not isinstance(
        held, bytes
    ):  # absent (the client never decodes)
        return False
    token = replies.parse_state(state).token
    return token is not None and held.split(b"|", 1)[1] == token.encode()
