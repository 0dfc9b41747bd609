"""Live workers: what each worker process says of itself in the backend.

Every `Worker` registers itself when its `run` begins
(`Backend.register_worker`), refreshes its entry with each heartbeat (one
write per beat, whatever it holds), and removes it when `run` returns
(`Backend.unregister_worker`). An entry lives `lease_ttl` (the worker's)
after its last refresh: the heartbeat beats at least three times in that
time, so a live worker's entry never lapses while the backend answers, and
a worker killed without a word (SIGKILL, a lost machine) is gone from
`Backend.workers` at most `lease_ttl` after its last beat. ``threadmill
workers`` and the TUI read `Backend.workers`.

An entry is `WorkerInfo`; backends store it packed (`pack`, JSON text they
never look into) beside its expiry, and read it back with `unpack`.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import attrs

from threadmill_core.checks import ttl_ms
from threadmill_core.clock import from_ms, to_ms

__all__ = ["RunningTask", "WorkerInfo", "check_worker", "check_worker_id", "pack", "unpack"]


@attrs.frozen
class RunningTask:
    """A task a worker runs now: its id and the path of its function."""

    id: str
    task_path: str


@attrs.frozen
class WorkerInfo:
    """One live worker as it registered (see the module doc).

    `last_seen` is the backend's clock at the worker's latest registration
    or refresh; it is set by the backend (what a caller passes to
    `Backend.register_worker` is ignored). `running` lists the tasks that
    run now (prefetched ones, not yet started, are not listed).
    """

    id: str
    host: str
    pid: int
    queues: tuple[str, ...]
    threads: int
    version: str
    started_at: datetime
    running: tuple[RunningTask, ...] = ()
    last_seen: datetime | None = None


def check_worker_id(worker_id: object) -> str:
    """`worker_id` if it can name a worker (a non-empty printable str of at most 200 chars);
    else `ValueError` naming it, before anything changes."""
    if (
        not isinstance(worker_id, str)
        or not worker_id
        or len(worker_id) > 200
        or not worker_id.isprintable()
    ):
        raise ValueError(
            f"a worker id is a non-empty printable str of at most 200 chars, got {worker_id!r}"
        )
    return worker_id


def check_worker(info: object, ttl: object) -> tuple[str, int]:
    """The packed `info` and `ttl` in whole milliseconds (rounded up), for
    `Backend.register_worker`; `ValueError` naming what is wrong, before anything changes."""
    if not isinstance(info, WorkerInfo):
        raise ValueError(f"register_worker takes a WorkerInfo, got {type(info).__name__}")
    check_worker_id(info.id)
    return pack(info), ttl_ms("ttl", ttl)


def pack(info: WorkerInfo) -> str:
    """`info` as JSON text, `last_seen` left out (the backend keeps it)."""
    return json.dumps(
        {
            "id": info.id,
            "host": info.host,
            "pid": info.pid,
            "queues": list(info.queues),
            "threads": info.threads,
            "version": info.version,
            "started_at": to_ms(info.started_at),
            "running": [[task.id, task.task_path] for task in info.running],
        },
        separators=(",", ":"),
        ensure_ascii=False,
    )


def unpack(text: str | bytes, last_seen_ms: int) -> WorkerInfo:
    """The `WorkerInfo` `pack` made, seen last at `last_seen_ms` (the backend's clock)."""
    fields: dict[str, Any] = json.loads(text)
    return WorkerInfo(
        id=str(fields["id"]),
        host=str(fields["host"]),
        pid=int(fields["pid"]),
        queues=tuple(str(queue) for queue in fields["queues"]),
        threads=int(fields["threads"]),
        version=str(fields["version"]),
        started_at=from_ms(int(fields["started_at"])),
        running=tuple(RunningTask(str(i), str(path)) for i, path in fields["running"]),
        last_seen=from_ms(last_seen_ms),
    )
