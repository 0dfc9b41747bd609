"""The ``threadmill`` command: what each of its commands does.

``demo``, ``worker`` and ``backends`` run and list things; ``health`` says whether
the backend answers (exit 0 or 2); ``workers`` lists the live worker
processes; ``stats``, ``ls``,
``show``, ``requeue``, ``cancel``, ``purge`` and ``inspect`` look at queues
and steer them (their logic is `threadmill_core.cli.inspector`, shared with the
TUI in `threadmill_core.cli.tui`). The commands' arguments are parsed by
`threadmill_core.cli.arguments`. `main` takes an optional `Broker` so tests and
embedding programs can run the inspecting commands on a backend they hold,
such as a memory backend on a fake clock, which no URL could reach from
another process, and optionally the schedules that ``schedules`` and
``inspect`` know, for an embedding program whose process declares the
schedules of several brokers (threadmill_django's aliases).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING

from threadmill_core.cli.arguments import build_parser, worker_settings
from threadmill_core.errors import ThreadmillError
from threadmill_core.models import TaskResultStatus

if TYPE_CHECKING:
    from threadmill_core.broker import Broker
    from threadmill_core.cli.inspector import Report
    from threadmill_core.periodic import Schedule


def _demo(args: argparse.Namespace) -> int:
    from threadmill_core.cli.demo import run_demo

    logging.basicConfig(level=logging.ERROR if not args.verbose else logging.INFO)
    final = run_demo()
    expected = {TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED}
    return 0 if all(r.status in expected for r in final) else 1


def _backends(args: argparse.Namespace) -> int:
    from threadmill_core.plugins import KNOWN_EXTRAS, installed_backends

    rows = installed_backends()
    installed = {r.scheme for r in rows}
    missing = sorted({extra for scheme, extra in KNOWN_EXTRAS.items() if scheme not in installed})
    if args.json:
        schemes = [
            {"scheme": r.scheme, "source": r.source, "description": r.description} for r in rows
        ]
        _out({"backends": schemes, "extras_not_installed": missing}, args)
        return 0
    width = max([len(r.scheme) for r in rows] + [6]) + 3
    print(f"{'scheme':<{width}} {'from':<28} description")
    for row in rows:
        print(f"{row.scheme + '://':<{width}} {row.source:<28} {row.description}")
    for extra in missing:
        print(f"(more with: pip install 'threadmill[{extra}]')")
    return 0


def _worker(args: argparse.Namespace) -> int:
    from threadmill_core.worker.logs import configure_worker_logging
    from threadmill_core.worker.supervisor import Supervisor

    configure_worker_logging(args.log_level, args.log_format)
    url = args.broker or os.environ.get("THREADMILL_URL")
    if not url:
        print("threadmill worker: give --broker URL or set THREADMILL_URL", file=sys.stderr)
        return 2
    # As Celery, RQ and Dramatiq workers do: `threadmill worker myapp.tasks`,
    # run next to myapp/, imports it.
    settings = worker_settings(args, url, import_path=(os.getcwd(),))
    return Supervisor(settings).run()


def _health(args: argparse.Namespace) -> int:
    from threadmill_core.worker.health import check

    url = args.broker or os.environ.get("THREADMILL_URL")
    if not url:
        raise _UsageError("threadmill health: give --broker URL or set THREADMILL_URL")
    problem = check(url, args.timeout)
    if args.json:
        _out({"ok": problem is None, "problem": problem}, args)
    elif problem is not None:
        print(f"threadmill health: {problem}", file=sys.stderr)
    else:
        print("ok")
    return 0 if problem is None else 2


# --- inspecting and steering ---------------------------------------------------------


def _schedules(args: argparse.Namespace) -> int:
    from threadmill_core.cli import schedules

    return schedules.run(args, lambda: _opened(args))


def _workers(args: argparse.Namespace) -> int:
    from threadmill_core.cli import workers

    return workers.run(args, lambda: _opened(args))


@contextlib.contextmanager
def _opened(args: argparse.Namespace) -> Iterator[Broker]:
    """The broker given to `main`, else one connected to ``--broker`` and closed afterwards.

    A backend reached through ``--broker`` makes no storage that is missing (a
    PostgreSQL namespace's schema, say): it says what is missing instead.
    """
    given: Broker | None = args.given_broker
    if given is not None:
        yield given
        return
    from threadmill_core.broker import Broker
    from threadmill_core.plugins import backend_for_url

    url = args.broker or os.environ.get("THREADMILL_URL")
    if not url:
        raise _UsageError(f"threadmill {args.command}: give --broker URL or set THREADMILL_URL")
    # Looking creates nothing: a namespace that does not exist is an error, not an empty queue.
    with Broker(backend_for_url(url, {}, create=False), url=url) as broker:
        yield broker


class _UsageError(Exception):
    """A command line that cannot be run; the message goes to stderr and the exit code is 2."""


def _out(data: object, args: argparse.Namespace) -> None:
    """Print `data`: JSON with ``--json``, else the text it already is."""
    from threadmill_core.cli.inspector import dumps

    print(dumps(data) if args.json else data, flush=True)


#: What `stats --watch` waits with between refreshes (a test replaces it).
_sleep: Callable[[float], None] = time.sleep


def _stats(args: argparse.Namespace) -> int:
    from threadmill_core.cli import inspector

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
    from threadmill_core.cli import inspector

    queue, offset = args.queue, args.offset
    status = args.status or TaskResultStatus.READY  # the tasks waiting to run
    with _opened(args) as broker:
        items = inspector.list_tasks(broker, queue, status, offset=offset, limit=args.limit)
        every = broker.counts()
    counts = every.get(queue)
    total = counts.of(status) if counts is not None else 0
    # A queue with no task in any segment is most likely misspelt: say so, exit 3.
    unknown = counts is None or not any(counts.of(s) for s in TaskResultStatus)
    if args.json:
        tasks = [inspector.listed_json(item) for item in items]
        data = {"queue": queue, "status": status.value, "offset": offset, "total": total}
        _out({**data, "tasks": tasks}, args)
    elif not unknown:
        text = inspector.format_list(items, queue, status, offset=offset, total=total)
        if args.status is None and counts is not None:  # say what else there is, and how
            others = ", ".join(
                f"{counts.of(s)} {s.value}" for s in TaskResultStatus if s is not status
            )
            text += (
                f"\nother segments: {others} "
                "(--status STATUS lists one; threadmill stats counts every queue)"
            )
        _out(text, args)
    if not unknown:
        return inspector.ExitCode.DONE
    held = sorted(name for name, c in every.items() if any(c.of(s) for s in TaskResultStatus))
    others = f"queues holding tasks: {', '.join(held)}" if held else "no queue holds any task"
    print(
        f"threadmill ls: queue {queue!r} holds no tasks at all, in any segment "
        f"(misspelt, or never used?); {others}",
        file=sys.stderr,
    )
    return inspector.ExitCode.NOTHING_DONE


def _show(args: argparse.Namespace) -> int:
    from threadmill_core.cli import inspector
    from threadmill_core.cli.inspector.lookup import find_task
    from threadmill_core.errors import PayloadError

    with _opened(args) as broker:
        try:
            found = find_task(broker, args.task_id)
        except PayloadError as exc:
            print(
                f"threadmill show: task {args.task_id!r} exists but cannot be shown: its stored "
                f"bytes do not decode ({exc}); purging its segment removes it",
                file=sys.stderr,
            )
            return inspector.ExitCode.NOTHING_DONE
    if found.task_id is None and found.matches:
        print(f"threadmill show: {found.ambiguity()}", file=sys.stderr)
        return inspector.ExitCode.NOTHING_DONE
    if found.task_id is None:
        print(
            f"threadmill show: no task with id {args.task_id!r} "
            "(never enqueued, purged, or its result expired), nor one whose id starts or "
            "ends so",
            file=sys.stderr,
        )
        return inspector.ExitCode.NOTHING_DONE
    [record] = found.matches
    _out(inspector.record_json(record) if args.json else inspector.format_record(record), args)
    return inspector.ExitCode.DONE


def _report(
    args: argparse.Namespace, report: Report, *, each_done: bool = True, of: str = ""
) -> int:
    """Print each task done (unless not `each_done`), each refusal, and a summary ending `of`."""
    from threadmill_core.cli import inspector

    if args.json:
        _out(inspector.report_json(report), args)
        return report.exit_code
    past = {"requeue": "requeued", "cancel": "cancelled"}[report.action]
    for outcome in report.outcomes:
        if outcome.record is not None and each_done:
            where = f"({outcome.record.queue}, now {outcome.record.status.value})"
            if report.action == "cancel" and outcome.record.status is TaskResultStatus.RUNNING:
                print(f"{'requested':<9}  {outcome.task_id}  cancel requested {where}")
                continue
            print(f"{past:<9}  {outcome.task_id}  {where}")
        elif not outcome.done:
            print(f"{'refused':<9}  {outcome.task_id}  {outcome.reason}")
    done, refused = len(report.done), len(report.refused)
    print(f"{past} {done} of {done + refused}{of}" + (f"; refused {refused}" if refused else ""))
    return report.exit_code


def _requeue(args: argparse.Namespace) -> int:
    from threadmill_core.cli import inspector

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
    from threadmill_core.cli import inspector

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
    from threadmill_core.cli.inspector import ExitCode

    queue, status = args.queue, args.status
    if args.json and not args.yes:
        # JSON is for scripts, and a script cannot answer a prompt: refuse before asking.
        raise _UsageError(
            "threadmill purge: --json asks for no prompt, so it needs --yes to purge "
            "(nothing was purged)"
        )
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
        from threadmill_core.cli.tui import InspectorApp
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
    if args.modules:  # for the schedules screen
        from threadmill_core.worker.startup import import_task_modules, put_on_import_path

        put_on_import_path([os.getcwd()])
        import_task_modules(args.modules)
    with _opened(args) as broker:
        app = InspectorApp(
            broker,
            refresh_interval=args.interval,
            window=timedelta(seconds=args.window),
            schedules=args.given_schedules,
        )
        app.run()
    return 0


#: What runs each command of `build_parser`, by name.
COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "demo": _demo,
    "worker": _worker,
    "backends": _backends,
    "health": _health,
    "stats": _stats,
    "ls": _ls,
    "show": _show,
    "requeue": _requeue,
    "cancel": _cancel,
    "purge": _purge,
    "inspect": _inspect,
    "schedules": lambda args: _schedules(args),
    "workers": lambda args: _workers(args),
}


def main(
    argv: Sequence[str] | None = None,
    *,
    broker: Broker | None = None,
    schedules: Callable[[], Mapping[str, Schedule]] | None = None,
) -> int:
    """Run the ``threadmill`` command line; returns the exit code.

    `broker`, if given, is what the inspecting commands (``stats``, ``ls``,
    ``show``, ``requeue``, ``cancel``, ``purge``, ``inspect``, ``workers``) use instead of
    connecting to ``--broker``; it is left open. `schedules`, if given, says which
    schedules ``schedules`` and ``inspect`` list and run (called once the modules named
    are imported, it returns them by name) instead of every schedule declared in the
    process (`threadmill_core.periodic.registered_schedules`).
    """
    parser = build_parser()
    given = sys.argv[1:] if argv is None else list(argv)
    try:
        if not given:  # a usage error, as argparse counts them: the help, on stderr, and 2
            parser.print_help(sys.stderr)
            return 2
        args = parser.parse_args(given)
        args.given_broker = broker
        args.given_schedules = schedules
        return int(COMMANDS[args.command](args))
    except _UsageError as exc:
        print(exc, file=sys.stderr)
        return 2
    except ThreadmillError as exc:
        print(f"threadmill: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # `threadmill ls --json | head -1`: the reader has gone, and wants no more.
        _discard_stdout()
        return 1


def _discard_stdout() -> None:
    """Point stdout at the null device, so the interpreter's last flush of a stdout whose
    reader has gone raises nothing more (the recipe of Python's `signal` docs)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)
