"""The ``threadmill`` command."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from datetime import timedelta

from threadmill_core.errors import ThreadmillError


def _demo(args: argparse.Namespace) -> int:
    from threadmill_core.demo import run_demo
    from threadmill_core.models import TaskResultStatus

    logging.basicConfig(level=logging.ERROR if not args.verbose else logging.INFO)
    final = run_demo()
    expected = {TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED}
    return 0 if all(r.status in expected for r in final) else 1


def _backends(args: argparse.Namespace) -> int:
    from threadmill_core.plugins import KNOWN_EXTRAS, installed_backends

    rows = installed_backends()
    width = max([len(r.scheme) for r in rows] + [6]) + 3
    print(f"{'scheme':<{width}} {'from':<28} description")
    for row in rows:
        print(f"{row.scheme + '://':<{width}} {row.source:<28} {row.description}")
    installed = {r.scheme for r in rows}
    missing = sorted({extra for scheme, extra in KNOWN_EXTRAS.items() if scheme not in installed})
    for extra in missing:
        print(f"(more with: pip install 'threadmill[{extra}]')")
    return 0


def _worker(args: argparse.Namespace) -> int:
    from threadmill_core.supervisor import LOG_FORMAT, Supervisor, WorkerSettings

    logging.basicConfig(level=args.log_level, format=LOG_FORMAT)
    url = args.broker or os.environ.get("THREADMILL_URL")
    if not url:
        print("threadmill worker: give --broker URL or set THREADMILL_URL", file=sys.stderr)
        return 2
    settings = WorkerSettings(
        broker_url=url,
        modules=tuple(args.modules),
        queues=tuple(q.strip() for q in args.queues.split(",") if q.strip()),
        processes=args.processes,
        threads=args.threads,
        lease_ttl=timedelta(seconds=args.lease_ttl),
        poll_interval=timedelta(seconds=args.poll_interval),
        max_tasks=args.max_tasks,
        max_tasks_jitter=args.max_tasks_jitter,
        burst=args.burst,
        shutdown_timeout=timedelta(seconds=args.shutdown_timeout),
        log_level=args.log_level,
    )
    return Supervisor(settings).run()


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    return value


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="threadmill", description="A durable task queue with a pluggable broker."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = commands.add_parser(
        "demo",
        help="run a short tour on the in-memory backend",
        description="Enqueue a batch of tasks on the in-memory backend and run a worker on "
        "them: successes, a retry with backoff, a permanent failure, and a lease that "
        "expires when its worker dies and is recovered by the reaper.",
    )
    demo.add_argument("-v", "--verbose", action="store_true", help="also show the worker's log")
    demo.set_defaults(handler=_demo)

    worker = commands.add_parser(
        "worker",
        help="run worker processes and the maintenance loop",
        description="Run a supervisor with worker processes that claim, run and acknowledge "
        "tasks, plus the maintenance loop (reaper and mover). Only tasks defined with @task "
        "in the named modules (and what they import) run; a stored task naming anything else "
        "is finalized FAILED. SIGTERM or Ctrl-C stops gracefully; a second one stops at once.",
    )
    worker.add_argument(
        "modules", nargs="+", metavar="MODULE", help="import path of a module defining tasks"
    )
    worker.add_argument(
        "--broker", "-b", metavar="URL", help="backend URL (default: $THREADMILL_URL)"
    )
    worker.add_argument(
        "--queues",
        "-Q",
        default="default",
        metavar="A,B",
        help="queues to claim from, most preferred first (default: default)",
    )
    worker.add_argument(
        "--processes",
        "-p",
        type=_positive_int,
        default=os.cpu_count() or 1,
        metavar="N",
        help="worker processes (default: the number of CPUs, here %(default)s)",
    )
    worker.add_argument(
        "--threads",
        "-t",
        type=_positive_int,
        default=4,
        metavar="M",
        help="task threads per process (default: %(default)s)",
    )
    worker.add_argument(
        "--lease-ttl",
        type=_positive_float,
        default=30.0,
        metavar="SECONDS",
        help="how long a claim lives without a heartbeat; heartbeats renew it every third of "
        "it, so it bounds how fast a dead worker is noticed, not how long a task may run "
        "(default: %(default)s)",
    )
    worker.add_argument(
        "--poll-interval",
        type=_positive_float,
        default=1.0,
        metavar="SECONDS",
        help="longest idle wait between looks for work, and the maintenance interval "
        "(default: %(default)s)",
    )
    worker.add_argument(
        "--max-tasks",
        type=_positive_int,
        default=None,
        metavar="K",
        help="recycle a worker process after K tasks (default: never)",
    )
    worker.add_argument(
        "--max-tasks-jitter",
        type=int,
        default=0,
        metavar="J",
        help="add 0..J to --max-tasks per process, so they do not all restart at once",
    )
    worker.add_argument(
        "--burst",
        action="store_true",
        help="exit once nothing is ready, due or running in the queues",
    )
    worker.add_argument(
        "--shutdown-timeout",
        type=_positive_float,
        default=30.0,
        metavar="SECONDS",
        help="on SIGTERM/Ctrl-C, how long running tasks may take to finish (default: "
        "%(default)s); tasks still running then are retried after their lease expires",
    )
    worker.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="(default: %(default)s)",
    )
    worker.set_defaults(handler=_worker)

    backends = commands.add_parser(
        "backends",
        help="list installed backends",
        description="List the URL schemes of the installed backends and where each comes from.",
    )
    backends.set_defaults(handler=_backends)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args))
    except ThreadmillError as exc:
        print(f"threadmill: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
