"""What the admin pages show of a record: cells of a list row, fields of a task page.

Times are UTC to the millisecond, as ``threadmill show`` prints them; an
argument, a return value or an error longer than `display.SHOWN_CHARS` is
cut there with a marker saying how much was cut (`threadmill_core.display`).
"""

from __future__ import annotations

import json
from typing import Any

from threadmill_core.cli.inspector import SUCCESSFUL, Listed, Undecodable, format_time, last_error
from threadmill_core.display import SHOWN_CHARS, cut
from threadmill_core.models import TaskError, TaskResult

#: Where a cut value can be read whole.
WHOLE = "; `threadmill show --json ID` shows all"


def shown(value: object) -> str:
    """`value` as JSON, cut to `SHOWN_CHARS`."""
    return cut(json.dumps(value, ensure_ascii=False), SHOWN_CHARS, WHOLE)


def listed_row(item: Listed, url: str) -> dict[str, Any]:
    """One row of a list: a record's cells and its page's `url`, or the poison's message."""
    if isinstance(item, Undecodable):
        return {"poison": f"#{item.position}: {item.message}"}
    return {
        "url": url,
        "id": item.id,
        "task": item.task_path,
        "priority": item.priority,
        "attempts": item.attempts,
        "enqueued_at": format_time(item.enqueued_at),
        "run_after": format_time(item.run_after),
        "started_at": format_time(item.started_at),
        "finished_at": format_time(item.finished_at),
        "error": cut(last_error(item), 200, "") if item.errors else "",
    }


def task_fields(record: TaskResult) -> list[tuple[str, str]]:
    """The record's fields as (label, text), arguments and return value as JSON."""
    retry = "-"
    if record.retry is not None:
        retry = record.retry.path
        if record.retry.options is not None:
            retry += " " + shown(record.retry.options)
    return [
        ("Id", record.id),
        ("Task", record.task_path),
        ("Queue", record.queue),
        ("Status", record.status.value),
        ("Priority", str(record.priority)),
        ("Attempts", str(record.attempts)),
        ("Workers", ", ".join(record.worker_ids) or "-"),
        ("Enqueued at", format_time(record.enqueued_at)),
        ("Run after", format_time(record.run_after)),
        ("Started at", format_time(record.started_at)),
        ("Last attempt at", format_time(record.last_attempted_at)),
        ("Finished at", format_time(record.finished_at)),
        ("Retry policy", retry),
        ("Arguments", shown(record.args)),
        ("Keyword arguments", shown(record.kwargs)),
        ("Return value", shown(record.return_value) if record.status is SUCCESSFUL else "-"),
    ]


def error_text(error: TaskError) -> tuple[str, str]:
    """An error's heading (class and message) and its traceback, each cut to `SHOWN_CHARS`."""
    heading = f"{error.exception_class_path}: {cut(error.message, SHOWN_CHARS, WHOLE)}"
    return heading, cut(error.traceback.rstrip(), SHOWN_CHARS * 4, WHOLE)
