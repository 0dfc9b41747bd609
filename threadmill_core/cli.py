"""The ``threadmill`` command.

``demo``, ``worker`` and ``backends`` run and list things; ``stats``, ``ls``,
``show``, ``requeue``, ``cancel``, ``purge`` and ``inspect`` look at queues
and steer them (their logic is `threadmill_core.inspector`, shared with the
TUI in `threadmill_core.tui`). `main` takes an optional `Broker` so tests and
embedding programs can run the inspecting commands on a backend they hold,
such as a memory backend on a fake clock, which no URL could reach from
another process.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING

from threadmill_core.errors import ThreadmillError
from threadmill_core.models import TaskResultStatus

if TYPE_CHECKING:
    from threadmill_core.broker import Broker
    from threadmill_core.inspector import Report


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
        prefetch=args.prefetch,
        lease_ttl=timedelta(seconds=args.lease_ttl),
        poll_interval=timedelta(seconds=args.poll_interval),
        max_tasks=args.max_tasks,
        max_tasks_jitter=args.max_tasks_jitter,
        burst=args.burst,
        shutdown_timeout=timedelta(seconds=args.shutdown_timeout),
        log_level=args.log_level,
    )
    return Supervisor(settings).run()


# --- inspecting and steering ---------------------------------------------------------


@contextlib.contextmanager
def _opened(args: argparse.Namespace) -> Iterator[Broker]:
    """The broker given to `main`, else one connected to ``--broker`` and closed afterwards."""
    given: Broker | None = args.given_broker
    if given is not None:
        yield given
        return
    from threadmill_core.broker import connect

    url = args.broker or os.environ.get("THREADMILL_URL")
    if not url:
        raise _UsageError(f"threadmill {args.command}: give --broker URL or set THREADMILL_URL")
    with connect(url) as broker:
        yield broker


class _UsageError(Exception):
    """A command line that cannot be run; the message goes to stderr and the exit code is 2."""


def _out(data: object, args: argparse.Namespace) -> None:
    """Print `data`: JSON with ``--json``, else the text it already is."""
    from threadmill_core.inspector import dumps

    print(dumps(data) if args.json else data, flush=True)


#: What `stats --watch` waits with between refreshes (a test replaces it).
_sleep: Callable[[float], None] = time.sleep


def _stats(args: argparse.Namespace) -> int:
    from threadmill_core import inspector

    window = timedelta(seconds=args.window)
    with _opened(args) as broker:
        while True:
            view = inspector.overview(broker, window)
            if args.json:
                _out(inspector.overview_json(view), args)
            else:
                if args.watch and sys.stdout.isatty():
                    print("\x1b[H\x1b[2J", end="")  # clear the screen, cursor home
                if args.watch:
                    where = inspector.redact(broker.url or repr(broker))
                    stamp = inspector.format_time(view.taken_at)
                    print(f"{where}  {stamp}  (every {args.interval:g} s; Ctrl-C stops)")
                _out(inspector.format_overview(view), args)
            if not args.watch:
                return 0
            try:
                _sleep(args.interval)
            except KeyboardInterrupt:
                return 0


def _ls(args: argparse.Namespace) -> int:
    from threadmill_core import inspector

    queue, status, offset = args.queue, args.status, args.offset
    with _opened(args) as broker:
        items = inspector.list_tasks(broker, queue, status, offset=offset, limit=args.limit)
        counts = broker.counts().get(queue)
    total = counts.of(status) if counts is not None else 0
    if args.json:
        tasks = [inspector.listed_json(item) for item in items]
        data = {"queue": queue, "status": status.value, "offset": offset, "total": total}
        _out({**data, "tasks": tasks}, args)
    else:
        _out(inspector.format_list(items, queue, status, offset=offset, total=total), args)
    return 0


def _show(args: argparse.Namespace) -> int:
    from threadmill_core import inspector
    from threadmill_core.errors import PayloadError

    with _opened(args) as broker:
        try:
            record = broker.backend.get(args.task_id)
        except PayloadError as exc:
            print(
                f"threadmill show: task {args.task_id!r} exists but cannot be shown: its stored "
                f"bytes do not decode ({exc}); purging its segment removes it",
                file=sys.stderr,
            )
            return inspector.ExitCode.NOTHING_DONE
    if record is None:
        print(
            f"threadmill show: no task with id {args.task_id!r} "
            "(never enqueued, purged, or its result expired)",
            file=sys.stderr,
        )
        return inspector.ExitCode.NOTHING_DONE
    _out(inspector.record_json(record) if args.json else inspector.format_record(record), args)
    return inspector.ExitCode.DONE


def _report(
    args: argparse.Namespace, report: Report, *, each_done: bool = True, of: str = ""
) -> int:
    """Print each task done (unless not `each_done`), each refusal, and a summary ending `of`."""
    from threadmill_core import inspector

    if args.json:
        _out(inspector.report_json(report), args)
        return report.exit_code
    past = {"requeue": "requeued", "cancel": "cancelled"}[report.action]
    for outcome in report.outcomes:
        if outcome.record is not None and each_done:
            where = f"({outcome.record.queue}, now {outcome.record.status.value})"
            print(f"{past:<9}  {outcome.task_id}  {where}")
        elif not outcome.done:
            print(f"{'refused':<9}  {outcome.task_id}  {outcome.reason}")
    done, refused = len(report.done), len(report.refused)
    print(f"{past} {done} of {done + refused}{of}" + (f"; refused {refused}" if refused else ""))
    return report.exit_code


def _requeue(args: argparse.Namespace) -> int:
    from threadmill_core import inspector

    if bool(args.task_ids) == bool(args.failed):
        raise _UsageError("threadmill requeue: give task IDs, or --failed QUEUE (not both)")
    with _opened(args) as broker:
        if not args.failed:
            return _report(args, inspector.requeue(broker, args.task_ids))
        report = inspector.requeue_failed(broker, args.failed)
    if not report.outcomes and not args.json:
        print(f"no FAILED tasks in queue {args.failed!r}: nothing to requeue")
        return inspector.ExitCode.DONE
    return _report(args, report, each_done=False, of=f" FAILED in queue {args.failed!r}")


def _cancel(args: argparse.Namespace) -> int:
    from threadmill_core import inspector

    with _opened(args) as broker:
        return _report(args, inspector.cancel(broker, args.task_ids))


def _confirm(question: str) -> bool:
    """Ask on stderr (stdout may be JSON for a script); only y or yes is a yes; EOF is a no."""
    print(f"{question} [y/N] ", end="", file=sys.stderr, flush=True)
    try:
        answer = sys.stdin.readline()
    except KeyboardInterrupt:
        answer = ""
    if not answer.endswith("\n") or not sys.stdin.isatty():
        print(file=sys.stderr)  # end the prompt's line; a terminal's echo did not
    return answer.strip().lower() in {"y", "yes"}


def _purge(args: argparse.Namespace) -> int:
    from threadmill_core.inspector import ExitCode

    queue, status = args.queue, args.status
    confirmed = True
    purged = 0
    with _opened(args) as broker:
        if not args.yes:
            counts = broker.counts().get(queue)
            held = counts.of(status) if counts is not None else 0
            question = f"Delete the {held} {status.value} task(s) of queue {queue!r}? No undo."
            confirmed = held == 0 or _confirm(question)
        if confirmed:
            purged = broker.purge(queue, status)
    code = ExitCode.DONE if confirmed else ExitCode.NOTHING_DONE
    if args.json:
        data = {"action": "purge", "queue": queue, "status": status.value, "purged": purged}
        _out({**data, "confirmed": confirmed, "exit_code": int(code)}, args)
    elif confirmed:
        print(f"purged {purged} {status.value} task(s) from queue {queue!r}")
    else:
        print("not confirmed: nothing purged")
    return code


def _inspect(args: argparse.Namespace) -> int:
    try:
        from threadmill_core.tui import InspectorApp
    except ModuleNotFoundError as exc:
        # Textual, or Rich, which comes with it; any other missing module is a bug to show.
        if exc.name is None or exc.name.split(".")[0] not in {"textual", "rich"}:
            raise
        print(
            "threadmill inspect needs Textual, which the 'tui' extra installs: "
            "pip install 'threadmill[tui]'",
            file=sys.stderr,
        )
        return 2
    with _opened(args) as broker:
        app = InspectorApp(
            broker,
            refresh_interval=args.interval,
            window=timedelta(seconds=args.window),
        )
        app.run()
    return 0


def _status(text: str) -> TaskResultStatus:
    try:
        return TaskResultStatus[text.upper()]
    except KeyError:
        names = ", ".join(s.value for s in TaskResultStatus)
        raise argparse.ArgumentTypeError(f"{text!r} is not a status; one of {names}") from None


def _purgeable_status(text: str) -> TaskResultStatus:
    status = _status(text)
    if status is TaskResultStatus.RUNNING:
        raise argparse.ArgumentTypeError(
            "RUNNING cannot be purged: a running task belongs to its lease holder "
            "(stop the workers, or let the reaper fail it, then purge FAILED)"
        )
    return status


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value


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
        "--prefetch",
        type=_non_negative_int,
        default=None,
        metavar="N",
        help="tasks each process claims ahead of its free threads, so a thread that finishes "
        "starts the next without a round trip; a graceful stop gives back those not started "
        "(default: as many as --threads)",
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
        help="longest single idle wait for work, so it also bounds how long a stop takes to "
        "be noticed; an idle worker claims when woken, when a deferred task falls due, and at "
        "least every 30 waits; maintenance runs when a deferred task falls due and every third "
        "of --lease-ttl (every poll interval on a backend that cannot tell when tasks fall due) "
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
        help="exit once nothing is ready or running in the queues, and no deferred task "
        "falls due within the polling interval",
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

    _add_inspecting_commands(commands)
    return parser


def _add_inspecting_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from threadmill_core.inspector import EXIT_CODES_HELP

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--broker", "-b", metavar="URL", help="backend URL (default: $THREADMILL_URL)"
    )
    common.add_argument("--json", action="store_true", help="print JSON for scripts")

    def add(name: str, summary: str, description: str) -> argparse.ArgumentParser:
        return commands.add_parser(
            name,
            parents=[common],
            help=summary,
            description=description,
            epilog=EXIT_CODES_HELP,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )

    stats = add(
        "stats",
        "count each queue's tasks by segment, with rates",
        "A table of queues by segment (ready, deferred, running, successful, failed, "
        "cancelled) with the rates tasks entered and finished over --window. A backend that "
        "keeps no telemetry shows rates as - (null in JSON).",
    )
    stats.add_argument("--watch", "-w", action="store_true", help="refresh until Ctrl-C")
    stats.add_argument(
        "--interval",
        type=_positive_float,
        default=2.0,
        metavar="SECONDS",
        help="with --watch: seconds between refreshes (default: %(default)s); with --json, "
        "one JSON object per line per refresh",
    )
    stats.add_argument(
        "--window",
        type=_positive_float,
        default=60.0,
        metavar="SECONDS",
        help="rates over the last SECONDS (default: %(default)s; backends keep an hour)",
    )
    stats.set_defaults(handler=_stats)

    ls = add(
        "ls",
        "list the tasks of one segment of a queue",
        "List the tasks of one queue in one segment, in segment order: READY by priority then "
        "arrival, DEFERRED by due time, RUNNING by lease deadline, the finished ones by "
        "finish time.",
    )
    ls.add_argument("queue", metavar="QUEUE")
    ls.add_argument(
        "--status", "-s", type=_status, required=True, metavar="STATUS",
        help="READY, DEFERRED, RUNNING, SUCCESSFUL, FAILED or CANCELLED (any case)",
    )  # fmt: skip
    ls.add_argument(
        "--limit", "-n", type=_positive_int, default=20, metavar="N",
        help="at most N tasks (default: %(default)s)",
    )  # fmt: skip
    ls.add_argument(
        "--offset", type=_non_negative_int, default=0, metavar="K",
        help="skip the first K (default: %(default)s)",
    )  # fmt: skip
    ls.set_defaults(handler=_ls)

    show = add(
        "show",
        "show one task's whole record, errors with tracebacks",
        "Show a task's whole record: arguments, timestamps, attempts, workers, result, and "
        "every error in order with its traceback.",
    )
    show.add_argument("task_id", metavar="ID")
    show.set_defaults(handler=_show)

    requeue = add(
        "requeue",
        "send FAILED or CANCELLED tasks back to READY",
        "Send tasks back to READY, keeping their id, errors and attempts. Only FAILED and "
        "CANCELLED tasks can be requeued: a RUNNING task belongs to its lease holder and a "
        "SUCCESSFUL one never runs again, so those are refused, and every refusal is reported "
        "with its reason. Each requeue is checked and applied by the backend in one atomic "
        "step, so a task that changed since you looked is refused, never resurrected.",
    )
    requeue.add_argument("task_ids", nargs="*", metavar="ID")
    requeue.add_argument(
        "--failed", metavar="QUEUE",
        help="requeue every task that is FAILED in QUEUE when the command starts, a page at a "
        "time (tasks failing again meanwhile are left alone)",
    )  # fmt: skip
    requeue.set_defaults(handler=_requeue)

    cancel = add(
        "cancel",
        "cancel READY or DEFERRED tasks",
        "Cancel tasks that are waiting to run (READY or DEFERRED). A RUNNING task cannot be "
        "cancelled (its lease holder decides it) and a finished one is already final: both are "
        "refused and reported with the reason.",
    )
    cancel.add_argument("task_ids", nargs="+", metavar="ID")
    cancel.set_defaults(handler=_cancel)

    purge = add(
        "purge",
        "delete every task of one segment of a queue",
        "Delete every task of one segment of a queue, after asking for confirmation on the "
        "terminal (unless --yes). RUNNING cannot be purged. Poison (tasks whose stored bytes no "
        "longer decode) can always be purged.",
    )
    purge.add_argument("queue", metavar="QUEUE")
    purge.add_argument(
        "--status", "-s", type=_purgeable_status, required=True, metavar="STATUS",
        help="READY, DEFERRED, SUCCESSFUL, FAILED or CANCELLED (any case)",
    )  # fmt: skip
    purge.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    purge.set_defaults(handler=_purge)

    inspect = add(
        "inspect",
        "a live terminal UI over the queues (needs the 'tui' extra)",
        "A live view of the queues: counts and rates per segment, the tasks of a segment, a "
        "task's record with its error history, and requeue / cancel with confirmation. "
        "Needs Textual: pip install 'threadmill[tui]'.",
    )
    inspect.add_argument(
        "--interval", type=_positive_float, default=1.0, metavar="SECONDS",
        help="seconds between refreshes (default: %(default)s)",
    )  # fmt: skip
    inspect.add_argument(
        "--window", type=_positive_float, default=60.0, metavar="SECONDS",
        help="rates over the last SECONDS (default: %(default)s)",
    )  # fmt: skip
    inspect.set_defaults(handler=_inspect)


def main(argv: Sequence[str] | None = None, *, broker: Broker | None = None) -> int:
    """Run the ``threadmill`` command line; returns the exit code.

    `broker`, if given, is what the inspecting commands (``stats``, ``ls``,
    ``show``, ``requeue``, ``cancel``, ``purge``, ``inspect``) use instead of
    connecting to ``--broker``; it is left open.
    """
    args = build_parser().parse_args(argv)
    args.given_broker = broker
    try:
        return int(args.handler(args))
    except _UsageError as exc:
        print(exc, file=sys.stderr)
        return 2
    except ThreadmillError as exc:
        print(f"threadmill: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
