"""The ``threadmill`` command line's arguments: every command, its options and their checks.

`build_parser` knows nothing of what the commands do: the parsed arguments
name the command in ``command``, and `threadmill_core.cli.commands` runs it. A bad
value is refused here, before any backend is touched, with the usage line
and exit code 2 (argparse's own).
"""

from __future__ import annotations

import argparse
import os
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from threadmill_core.cli import schedules, values, workers
from threadmill_core.cli.exit_codes import EXIT_CODES_HELP

if TYPE_CHECKING:
    from threadmill_core.worker.supervisor import WorkerSettings


class _Version(argparse.Action):
    """``--version``: the installed distribution's version, looked up only when asked."""

    def __init__(self, option_strings: list[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            installed = version("threadmill")
        except PackageNotFoundError:  # run from a source tree that was never installed
            installed = "unknown (not installed)"
        print(f"threadmill {installed}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="threadmill",
        description="A durable task queue with a pluggable broker.",
        epilog="'threadmill COMMAND --help' shows a command's options; 'threadmill demo' is a "
        "tour that needs no server.",
    )
    parser.add_argument("--version", action=_Version, help="print threadmill's version and exit")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = commands.add_parser(
        "demo",
        help="run a short tour on the in-memory backend",
        description="Enqueue a batch of tasks on the in-memory backend and run a worker on "
        "them: successes, a retry with backoff, a permanent failure, and a lease that "
        "expires when its worker dies and is recovered by the reaper.",
    )
    demo.add_argument("-v", "--verbose", action="store_true", help="also show the worker's log")

    worker = commands.add_parser(
        "worker",
        help="run worker processes and the maintenance loop",
        description="Run a supervisor with worker processes that claim, run and acknowledge "
        "tasks, plus the maintenance loop (reaper and mover). Only tasks defined with @task "
        "in the named modules (and what they import) run; a stored task naming anything else "
        "is finalized FAILED. SIGTERM or Ctrl-C stops gracefully; a second one stops at once, "
        "abandoning the running tasks (exit code 4).",
        epilog="exit codes: 0 stopped (or a burst done); 1 stopped by a second signal; 2 bad "
        "usage; 3 cannot start (a module that does not import, a URL that cannot work, a "
        "backend that did not answer within --connect-timeout); 4 running tasks abandoned",
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
        type=values.positive_int,
        default=os.cpu_count() or 1,
        metavar="N",
        help="worker processes (default: the number of CPUs, here %(default)s)",
    )
    worker.add_argument(
        "--threads",
        "-t",
        type=values.positive_int,
        default=4,
        metavar="M",
        help="task threads per process (default: %(default)s)",
    )
    worker.add_argument(
        "--prefetch",
        type=values.non_negative_int,
        default=None,
        metavar="N",
        help="tasks each process claims ahead of its free threads, so a thread that finishes "
        "starts the next without a round trip; a stop gives back those not started, and a "
        "killed process's go back uncharged (default: adaptive, from as many as --threads up "
        "to 64 while tasks are short, none when they are long)",
    )
    worker.add_argument(
        "--lease-ttl",
        type=values.positive_seconds,
        default=30.0,
        metavar="SECONDS",
        help="how long a claim lives without a heartbeat; heartbeats renew it every third of "
        "it, so it bounds how fast a dead worker is noticed, not how long a task may run "
        "(default: %(default)s)",
    )
    worker.add_argument(
        "--time-limit",
        type=values.positive_seconds,
        default=None,
        metavar="SECONDS",
        help="the longest one attempt of a task may run when its task or call sets no limit "
        "(@task(time_limit=...)): past it TimeLimitExceeded is raised in the task; one that has "
        "not stopped --time-limit-grace later is recorded FAILED (or retried) and its worker "
        "process replaced (default: no limit)",
    )
    worker.add_argument(
        "--time-limit-grace",
        type=values.positive_seconds,
        default=5.0,
        metavar="SECONDS",
        help="how long a task told to stop (its time limit passed, or a cancel was requested) "
        "may take to stop before its process is replaced (default: %(default)s)",
    )
    worker.add_argument(
        "--poll-interval",
        type=values.positive_seconds,
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
        type=values.positive_int,
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
        "--spawn",
        action="store_true",
        help="start every worker process as a fresh interpreter (a slower start) instead of "
        "forking the first ones from the supervisor once it imported the modules: for task "
        "modules that open a connection when imported, which forked processes would share",
    )
    worker.add_argument(
        "--no-schedules",
        dest="schedules",
        action="store_false",
        help="do not store the ticks of the modules' @periodic schedules (by default every "
        "worker does, but for a --burst: each tick is stored once, however many do)",
    )
    worker.add_argument(
        "--burst",
        action="store_true",
        help="exit once nothing is ready or running in the queues, and no deferred task "
        "falls due within the polling interval (one that does, a quick retry say, is waited "
        "for and run when due)",
    )
    worker.add_argument(
        "--shutdown-timeout",
        type=values.positive_seconds,
        default=30.0,
        metavar="SECONDS",
        help="on SIGTERM/Ctrl-C, how long running tasks may take to finish (default: "
        "%(default)s); tasks still running then are abandoned, their retry policies deciding "
        "once their leases expire, and the exit code is 4",
    )
    worker.add_argument(
        "--connect-timeout",
        type=values.positive_seconds,
        default=20.0,
        metavar="SECONDS",
        help="at start, how long to wait for the backend's first answer: one that never "
        "answered is most likely a wrong URL, so the worker exits (code 3) with one line "
        "naming it; an outage once it has answered is waited out however long it lasts "
        "(default: %(default)s)",
    )
    worker.add_argument(
        "--metrics-port",
        type=values.port,
        metavar="PORT",
        help="serve Prometheus /metrics (every process of this command together), /healthz "
        "and /readyz on this port (needs: pip install 'threadmill[metrics]'); a port in use "
        "stops the command at once (code 3)",
    )
    worker.add_argument(
        "--metrics-host",
        default="127.0.0.1",
        metavar="HOST",
        help="the address --metrics-port binds (default: %(default)s, this host only; in a "
        "container, 0.0.0.0 lets probes and scrapes from outside it in)",
    )
    worker.add_argument(
        "--tracing",
        action="store_true",
        help="run each attempt in an OpenTelemetry CONSUMER span, a child of the span that "
        "enqueued it (needs: pip install 'threadmill[otel]'; spans go to the tracer provider "
        "the task modules set up; see docs/operations.md)",
    )
    worker.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="(default: %(default)s)",
    )
    worker.add_argument(
        "--log-format",
        default="text",
        metavar="{text,json}",
        help="text: one line per event for people; json: one JSON object per line for log "
        "pipelines, each field named (time, level, logger, message, process, worker_id and "
        "worker_index, task_id, task_name and queue for an event about a task, exception) "
        "(default: %(default)s)",
    )

    health = commands.add_parser(
        "health",
        help="exit 0 if the backend answers, 2 if not",
        description="Ask the backend the time, for scripts and probes: exit 0 when it answers "
        "within --timeout, else 2 with one line saying why (a PostgreSQL namespace that does "
        "not exist included: it creates nothing). A worker command's own liveness is on its "
        "--metrics-port (/healthz, /readyz).",
    )
    health.add_argument("--broker", metavar="URL", help="the backend (default: $THREADMILL_URL)")
    health.add_argument(
        "--json",
        action="store_true",
        help='print {"ok": true} or {"ok": false, "problem": "..."} on stdout (same exit codes)',
    )
    health.add_argument(
        "--timeout",
        type=values.positive_seconds,
        default=5.0,
        metavar="SECONDS",
        help="how long to wait for the connection and the answer (default: %(default)s)",
    )

    backends = commands.add_parser(
        "backends",
        help="list installed backends",
        description="List the URL schemes of the installed backends and where each comes from.",
    )
    backends.add_argument("--json", action="store_true", help="print JSON for scripts")

    _add_inspecting_commands(commands)
    schedules.add_parser(commands)
    workers.add_parser(commands)
    return parser


def worker_settings(args: argparse.Namespace, broker_url: str, **more: Any) -> WorkerSettings:
    """The supervisor's settings from parsed ``threadmill worker`` options; `more` adds fields.

    One reading of the options for ``threadmill worker`` and for the
    integrations that run it under their own command (threadmill_django).
    """
    from threadmill_core.worker.supervisor import (
        WorkerSettings,  # the worker command alone needs it
    )

    return WorkerSettings(
        broker_url=broker_url,
        modules=tuple(args.modules),
        queues=tuple(q.strip() for q in args.queues.split(",") if q.strip()),
        processes=args.processes,
        threads=args.threads,
        prefetch=args.prefetch,
        lease_ttl=timedelta(seconds=args.lease_ttl),
        time_limit=None if args.time_limit is None else timedelta(seconds=args.time_limit),
        time_limit_grace=timedelta(seconds=args.time_limit_grace),
        poll_interval=timedelta(seconds=args.poll_interval),
        max_tasks=args.max_tasks,
        max_tasks_jitter=args.max_tasks_jitter,
        burst=args.burst,
        shutdown_timeout=timedelta(seconds=args.shutdown_timeout),
        connect_timeout=timedelta(seconds=args.connect_timeout),
        log_level=args.log_level,
        log_format=args.log_format,
        fork=not args.spawn,
        metrics_port=args.metrics_port,
        metrics_host=args.metrics_host,
        tracing=args.tracing,
        schedules=getattr(args, "schedules", True),
        **more,
    )


#: What the commands that take task ids say of them (see `threadmill_core.cli.inspector.lookup`).
_ID_HELP = (
    "a task id, or its start or end (4 characters or more) if that names one task; one that "
    "names several lists them and is not acted on. Looking up a piece reads every stored "
    "task: on a big store, give whole ids"
)


def _add_inspecting_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
        type=values.positive_seconds,
        default=2.0,
        metavar="SECONDS",
        help="with --watch: seconds between refreshes (default: %(default)s); with --json, "
        "one JSON object per line per refresh",
    )
    stats.add_argument(
        "--window",
        type=values.positive_seconds,
        default=60.0,
        metavar="SECONDS",
        help="rates over the last SECONDS (default: %(default)s; backends keep an hour)",
    )

    ls = add(
        "ls",
        "list the tasks of one segment of a queue",
        "List the tasks of one queue in one segment, in segment order: READY by priority then "
        "arrival, DEFERRED by due time, RUNNING by lease deadline, the finished ones by "
        "finish time.",
    )
    ls.add_argument("queue", metavar="QUEUE")
    ls.add_argument(
        "--status", "-s", type=values.status, default=None, metavar="STATUS",
        help="READY, DEFERRED, RUNNING, SUCCESSFUL, FAILED or CANCELLED (any case; default: "
        "READY, the tasks waiting to run, followed by a line counting the other segments)",
    )  # fmt: skip
    ls.add_argument(
        "--limit", "-n", type=values.limit, default=20, metavar="N",
        help="at most N tasks (default: %(default)s)",
    )  # fmt: skip
    ls.add_argument(
        "--offset", type=values.offset, default=0, metavar="K",
        help="skip the first K (default: %(default)s)",
    )  # fmt: skip

    show = add(
        "show",
        "show one task's whole record, errors with tracebacks",
        "Show a task's whole record: arguments, timestamps, attempts, workers, result, and "
        "every error in order with its traceback.",
    )
    show.add_argument("task_id", metavar="ID", help=_ID_HELP)

    requeue = add(
        "requeue",
        "send FAILED or CANCELLED tasks back to READY",
        "Send tasks back to READY, keeping their id, errors and attempts. Only FAILED and "
        "CANCELLED tasks can be requeued: a RUNNING task belongs to its lease holder and a "
        "SUCCESSFUL one never runs again, so those are refused, and every refusal is reported "
        "with its reason. Each requeue is checked and applied by the backend in one atomic "
        "step, so a task that changed since you looked is refused, never resurrected.",
    )
    requeue.add_argument("task_ids", nargs="*", metavar="ID", help=_ID_HELP)
    requeue.add_argument(
        "--failed", metavar="QUEUE",
        help="requeue every task that is FAILED in QUEUE when the command starts, a page at a "
        "time (tasks failing again meanwhile are left alone)",
    )  # fmt: skip

    cancel = add(
        "cancel",
        "cancel tasks, or request the cancel of running ones",
        "Cancel tasks that are waiting to run (READY or DEFERRED). A RUNNING task gets a cancel "
        "request (reported as 'cancel requested'): its worker hears of it at its next heartbeat, "
        "raises TaskCancelled inside the task, and the task ends CANCELLED unless it finished "
        "first. A finished task is already final: it is refused and reported with the reason.",
    )
    cancel.add_argument("task_ids", nargs="+", metavar="ID", help=_ID_HELP)

    purge = add(
        "purge",
        "delete every task of one segment of a queue",
        "Delete every task of one segment of a queue, after asking for confirmation on the "
        "terminal (unless --yes). RUNNING cannot be purged. Poison (tasks whose stored bytes no "
        "longer decode) can always be purged.",
    )
    purge.add_argument("queue", metavar="QUEUE")
    purge.add_argument(
        "--status", "-s", type=values.purgeable_status, required=True, metavar="STATUS",
        help="READY, DEFERRED, SUCCESSFUL, FAILED or CANCELLED (any case)",
    )  # fmt: skip
    purge.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")

    inspect = add(
        "inspect",
        "a live terminal UI over the queues (needs the 'tui' extra)",
        "A live view of the queues: counts and rates per segment, the tasks of a segment, a "
        "task's record with its error history, and requeue / cancel with confirmation; "
        "s shows the schedules of the MODULEs named (and every one paused in the backend), "
        "p there pauses or resumes one. Needs Textual: pip install 'threadmill[tui]'.",
    )
    inspect.add_argument(
        "modules", nargs="*", metavar="MODULE",
        help="modules whose @periodic schedules the schedules screen shows",
    )  # fmt: skip
    inspect.add_argument(
        "--interval", type=values.positive_seconds, default=1.0, metavar="SECONDS",
        help="seconds between refreshes (default: %(default)s)",
    )  # fmt: skip
    inspect.add_argument(
        "--window", type=values.positive_seconds, default=60.0, metavar="SECONDS",
        help="rates over the last SECONDS (default: %(default)s)",
    )  # fmt: skip
