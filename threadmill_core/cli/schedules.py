"""``threadmill schedules``: see and steer the `@periodic` schedules.

::

    threadmill schedules [--json] MODULE...       # list the schedules MODULE... declare
    threadmill schedules pause NAME               # no scheduler stores its ticks
    threadmill schedules resume NAME              # ticks from now on (none caught up)
    threadmill schedules run NAME MODULE...       # one run now, under an id of its own

Schedules live in code, so listing and running import the modules that
declare them (the worker's modules, from the current directory, as
``threadmill worker`` does); pausing needs only the name, and is stored in
the backend, for every scheduler. The listing shows each schedule's name,
task, expression, time zone, next tick, the last tick stored and what
became of it, and whether it is paused; a name paused in the backend that
the modules do not declare is listed too.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from threadmill_core.cli.exit_codes import EXIT_CODES_HELP, ExitCode

if TYPE_CHECKING:
    from threadmill_core.broker import Broker
    from threadmill_core.periodic import Schedule

ACTIONS = ("pause", "resume", "run")

USAGE = """\
  threadmill schedules [--json] MODULE...     list the schedules MODULE... declare
  threadmill schedules pause NAME             no scheduler stores its ticks
  threadmill schedules resume NAME            ticks from now on (none caught up)
  threadmill schedules run NAME MODULE...     one run now, under an id of its own

Listing and running import the modules (from the current directory, as
'threadmill worker' does); pausing is stored in the backend, for every worker."""


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``schedules`` command, added to `commands`."""
    parser = commands.add_parser(
        "schedules",
        help="list, pause, resume or run the @periodic schedules",
        description=USAGE,
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "words",
        nargs="*",
        metavar="[ACTION NAME] MODULE",
        help="MODULE...: list the schedules they declare; pause NAME, resume NAME, or "
        "run NAME MODULE...",
    )
    parser.add_argument(
        "--broker", "-b", metavar="URL", help="backend URL (default: $THREADMILL_URL)"
    )
    parser.add_argument("--json", action="store_true", help="print JSON for scripts")


def run(args: argparse.Namespace, opened: Callable[[], AbstractContextManager[Broker]]) -> int:
    """Do what ``threadmill schedules`` was asked; the exit code. `opened` gives the broker."""
    words: list[str] = list(args.words)
    action = words.pop(0) if words and words[0] in ACTIONS else "list"
    if action != "list" and not words:
        print(f"threadmill schedules {action}: give the schedule's NAME", file=sys.stderr)
        return ExitCode.ERROR
    name = words.pop(0) if action != "list" else ""
    if action != "list":
        from threadmill_core.pauses import check_schedule_name

        try:
            check_schedule_name(name)
        except ValueError as exc:
            print(f"threadmill schedules {action}: {exc}", file=sys.stderr)
            return ExitCode.ERROR
    declared = _declared(words, args.given_schedules)
    from threadmill_core.cli.inspector.schedules import run_now, set_paused

    with opened() as broker:
        if action in ("pause", "resume"):
            state = set_paused(broker, name, action == "pause")
            known = "" if name in declared or not words else " (not declared by the modules named)"
            _say(args, {"name": name, "paused": state.paused, "since": state.since.isoformat()},
                 f"{name}: {'paused' if state.paused else 'resumed'} since "
                 f"{state.since.isoformat()}{known}")  # fmt: skip
            return ExitCode.DONE
        if action == "run":
            schedule = declared.get(name)
            if schedule is None:
                known = ", ".join(sorted(declared)) or "none declared"
                print(
                    f"threadmill schedules run: no schedule {name!r} in the modules named "
                    f"({known})",
                    file=sys.stderr,
                )
                return ExitCode.NOTHING_DONE
            record = run_now(broker, schedule)
            _say(args, {"name": name, "id": record.id},
                 f"{name}: run {record.id} enqueued")  # fmt: skip
            return ExitCode.DONE
        listed = list(rows(broker, declared))
    if args.json:
        _say(args, listed, "")
    else:
        print(_table(listed), flush=True)
    return ExitCode.DONE


def _declared(
    modules: list[str], given: Callable[[], Mapping[str, Schedule]] | None
) -> dict[str, Schedule]:
    """The schedules known once `modules` are imported: `given`'s (see `main`), else all."""
    from threadmill_core.periodic import registered_schedules
    from threadmill_core.worker.startup import import_task_modules, put_on_import_path

    if modules:
        put_on_import_path([os.getcwd()])
        import_task_modules(modules)
    return dict((given or registered_schedules)())


def _say(args: argparse.Namespace, data: object, text: str) -> None:
    from threadmill_core.cli.inspector import dumps

    print(dumps(data) if args.json else text, flush=True)


def rows(broker: Broker, declared: dict[str, Schedule]) -> Iterator[dict[str, Any]]:
    """One listing row per schedule (`threadmill_core.cli.inspector.schedules.schedule_rows`), as
    ``--json`` prints it."""
    from threadmill_core.cli.inspector.schedules import schedule_rows

    for row in schedule_rows(broker, declared):
        yield {
            "name": row.name,
            "task": row.task,
            "expression": row.expression,
            "tz": row.tz,
            "next_tick": None if row.next_tick is None else row.next_tick.isoformat(),
            "last_tick": None if row.last_tick is None else row.last_tick.isoformat(),
            "last_status": None if row.last_status is None else row.last_status.value,
            "paused": row.paused,
        }


def _table(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "no schedules (name the modules that declare them: threadmill schedules MODULE...)"
    heads = ("NAME", "TASK", "EXPRESSION", "TZ", "NEXT TICK", "LAST TICK", "OUTCOME", "PAUSED")
    keys = ("name", "task", "expression", "tz", "next_tick", "last_tick", "last_status")
    cells = [
        [
            *("-" if row[key] is None else str(row[key]) for key in keys),
            "yes" if row["paused"] else "no",
        ]
        for row in rows
    ]
    widths = [max(len(head), *(len(line[i]) for line in cells)) for i, head in enumerate(heads)]
    lines = [heads, *cells]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in lines
    )
