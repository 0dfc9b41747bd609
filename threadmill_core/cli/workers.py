"""``threadmill workers``: the live worker processes, and what each runs now.

::

    threadmill workers [--json] [--broker URL]

One row per worker process registered in the backend (see
`threadmill_core.live_workers`): its id, host, pid, queues, threads,
threadmill version, when it started, when it was last seen (its latest
heartbeat), and the tasks it runs now, each under it with its id and task.
A worker that stopped is gone at once; one killed without a word (SIGKILL,
a lost machine) is listed until its entry lapses, its ``--lease-ttl``
after its last heartbeat. Read-only: it creates nothing in the backend.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any

from threadmill_core.cli.exit_codes import EXIT_CODES_HELP, ExitCode

if TYPE_CHECKING:
    from threadmill_core.broker import Broker
    from threadmill_core.live_workers import WorkerInfo

DESCRIPTION = (
    "The live worker processes registered in the backend, and the tasks each runs now. A "
    "worker that stops removes itself; one killed without a word is listed until its entry "
    "lapses, its --lease-ttl after its last heartbeat."
)

HEADERS = ("id", "host", "pid", "queues", "threads", "version", "started", "last seen", "running")


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``workers`` command, added to `commands`."""
    parser = commands.add_parser(
        "workers",
        help="list the live worker processes and the tasks they run",
        description=DESCRIPTION,
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--broker", "-b", metavar="URL", help="backend URL (default: $THREADMILL_URL)"
    )
    parser.add_argument("--json", action="store_true", help="print JSON for scripts")


def run(args: argparse.Namespace, opened: Callable[[], AbstractContextManager[Broker]]) -> int:
    """List the live workers (see the module doc); the exit code. `opened` gives the broker."""
    from threadmill_core.cli.inspector import dumps, live_workers

    with opened() as broker:
        read = live_workers(broker)
    found, now = list(read.workers), read.now
    if args.json:
        print(dumps([as_json(info) for info in found]), flush=True)
    else:
        print(as_text(found, now), flush=True)
    return ExitCode.DONE


def as_json(info: WorkerInfo) -> dict[str, Any]:
    """One worker as ``threadmill workers --json`` prints it."""
    return {
        "id": info.id,
        "host": info.host,
        "pid": info.pid,
        "queues": list(info.queues),
        "threads": info.threads,
        "version": info.version,
        "started_at": info.started_at.isoformat(),
        "last_seen": None if info.last_seen is None else info.last_seen.isoformat(),
        "running": [{"id": task.id, "task_path": task.task_path} for task in info.running],
    }


def ago(moment: datetime | None, now: datetime) -> str:
    """How long before `now` `moment` was, to the tenth of a second: ``2.5 s ago``."""
    if moment is None:
        return "-"
    return f"{max((now - moment).total_seconds(), 0.0):.1f} s ago"


def row(info: WorkerInfo, now: datetime) -> list[str]:
    """The cells of one worker's row (see `HEADERS`)."""
    from threadmill_core.cli.inspector.text import format_time

    return [
        info.id,
        info.host,
        str(info.pid),
        ",".join(info.queues),
        str(info.threads),
        info.version,
        format_time(info.started_at),
        ago(info.last_seen, now),
        str(len(info.running)),
    ]


def as_text(found: list[WorkerInfo], now: datetime) -> str:
    """The table of ``threadmill workers``: a row per worker, its running tasks under it."""
    from threadmill_core.cli.inspector.text import table

    if not found:
        return "no live workers"
    lines = table(HEADERS, [row(info, now) for info in found], right=(2, 4, 8)).splitlines()
    out = [lines[0]]
    for info, line in zip(found, lines[1:], strict=True):
        out.append(line)
        out.extend(f"    running {task.id}  {task.task_path}" for task in info.running)
    count = len(found)
    running = sum(len(info.running) for info in found)
    out.append(f"{count} worker{'s' if count != 1 else ''}, {running} task(s) running")
    return "\n".join(out)
