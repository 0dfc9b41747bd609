"""The inspector's text: the tables and records ``threadmill stats``, ``ls`` and ``show`` print.

The TUI (`threadmill_core.cli.tui`) shows the same cells. Times are UTC to the
millisecond; an unknown rate is ``-``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta

from threadmill_core.cli.inspector.queries import (
    CANCELLED,
    DEFERRED,
    FAILED,
    READY,
    RUNNING,
    STATUSES,
    SUCCESSFUL,
    Listed,
    Overview,
    QueueStats,
    Undecodable,
)
from threadmill_core.display import SHOWN_CHARS, cut
from threadmill_core.models import Progress, TaskError, TaskResult, TaskResultStatus


def format_time(moment: datetime | None) -> str:
    """UTC to the millisecond, ``2030-01-01 00:00:05.123Z``; ``-`` for None."""
    if moment is None:
        return "-"
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def format_rate(value: float | None) -> str:
    """Tasks per second; ``-`` when unknown."""
    return "-" if value is None else f"{value:.2f}"


def table(
    headers: Sequence[str], rows: Iterable[Sequence[str]], *, right: Iterable[int] = ()
) -> str:
    """Columns padded to their widest cell; the columns in `right` are right-aligned."""
    rows = [list(row) for row in rows]
    widths = [max([len(h), *(len(row[i]) for row in rows)]) for i, h in enumerate(headers)]
    aligned = set(right)

    def line(cells: Sequence[str]) -> str:
        padded = [
            c.rjust(w) if i in aligned else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  ".join(padded).rstrip()

    return "\n".join([line(headers), *(line(row) for row in rows)])


STATS_HEADERS = ("queue", *(s.value.lower() for s in STATUSES), "in/s", "out/s")


def stats_row(stats: QueueStats) -> list[str]:
    """One `stats` table row: the queue, each segment's count, ingress and egress."""
    rates = stats.rates
    return [
        stats.queue,
        *(str(stats.counts.of(s)) for s in STATUSES),
        format_rate(rates.ingress if rates else None),
        format_rate(rates.egress if rates else None),
    ]


def format_overview(view: Overview) -> str:
    """The `stats` table, a total row when there are several queues, and what the rates mean."""
    if not view.queues:
        rows: list[list[str]] = []
    else:
        rows = [stats_row(q) for q in view.queues]
        if len(view.queues) > 1:
            rows.append(stats_row(view.total()))
    text = table(STATS_HEADERS, rows, right=range(1, len(STATS_HEADERS)))
    if not view.queues:
        text += "\n(no tasks in any queue)"
    return f"{text}\n{rates_note(view)}"


def rates_note(view: Overview) -> str:
    if not view.rates_known:
        return "rates: n/a (this backend keeps no telemetry)"
    return (
        f"in/s, out/s: tasks entering and finishing per second over the last {_span(view.window)}"
    )


def _span(delta: timedelta) -> str:
    seconds = delta.total_seconds()
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"


def last_error(record: TaskResult) -> str:
    """The latest error as ``ShortClass: message``, on one line; empty if none."""
    if not record.errors:
        return ""
    error = record.errors[-1]
    kind = error.exception_class_path.rsplit(".", 1)[-1]
    message = " ".join(error.message.split())
    return f"{kind}: {message}" if message else kind


def format_progress(progress: Progress | None) -> str:
    """``done/total (percent) message``, or ``done message`` without a total; empty if none."""
    if progress is None:
        return ""
    done = f"{progress.done:g}"
    if progress.total is not None:
        done += f"/{progress.total:g} ({progress.done / progress.total:.0%})"
    message = " ".join((progress.message or "").split())
    return f"{done} {message}" if message else done


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


#: The time each segment's list shows, and its column title.
TIME_COLUMN: Mapping[TaskResultStatus, tuple[str, Callable[[TaskResult], datetime | None]]] = {
    READY: ("enqueued", lambda r: r.enqueued_at),
    DEFERRED: ("due", lambda r: r.run_after),
    RUNNING: ("attempt started", lambda r: r.last_attempted_at),
    SUCCESSFUL: ("finished", lambda r: r.finished_at),
    FAILED: ("finished", lambda r: r.finished_at),
    CANCELLED: ("finished", lambda r: r.finished_at),
}

LIST_HEADERS = ("id", "task", "prio", "tries", "{time}", "last error", "progress")


def list_headers(status: TaskResultStatus) -> list[str]:
    return [h.format(time=TIME_COLUMN[status][0]) for h in LIST_HEADERS]


def list_row(item: Listed, status: TaskResultStatus) -> list[str]:
    """One `ls` row (the TUI's task list shows the same cells)."""
    if isinstance(item, Undecodable):
        return ["?", _clip(f"(does not decode: {item.message})", 60), "", "", "", "", ""]
    return [
        item.id,
        _clip(item.task_path, 48),
        str(item.priority),
        str(item.attempts),
        format_time(TIME_COLUMN[status][1](item)),
        _clip(last_error(item), 60),
        _clip(format_progress(item.progress), 30),
    ]


def format_list(
    items: Sequence[Listed], queue: str, status: TaskResultStatus, *, offset: int, total: int
) -> str:
    """The `ls` table and a line saying which slice of the segment it is."""
    if not items:
        where = f"no {status.value} tasks in queue {queue!r}"
        return where if offset == 0 else f"{where} from offset {offset} (it holds {total})"
    text = table(list_headers(status), (list_row(i, status) for i in items), right=(2, 3))
    last = offset + len(items)
    footer = f"{offset + 1}-{last} of {total} {status.value} in queue {queue!r}"
    if last < total:
        footer += f"; --offset {last} for more"
    return f"{text}\n{footer}"


def format_record(record: TaskResult) -> str:
    """The whole record for `show`: fields, arguments, result, then every error in full.

    A value, an error message or a traceback line longer than `SHOWN_CHARS`
    is cut there, with a marker saying how much was cut (`display.cut`).
    """
    retry = "-"
    if record.retry is not None:
        retry = record.retry.path
        if record.retry.options is not None:
            retry += " " + _json_text(record.retry.options)
    fields = [
        ("id", record.id),
        ("task", record.task_path),
        ("queue", record.queue),
        ("status", record.status.value),
        ("priority", str(record.priority)),
        ("attempts", str(record.attempts)),
        ("enqueued at", format_time(record.enqueued_at)),
        ("run after", format_time(record.run_after)),
        ("started at", format_time(record.started_at)),
        ("last attempt at", format_time(record.last_attempted_at)),
        ("finished at", format_time(record.finished_at)),
        ("workers", ", ".join(record.worker_ids) or "-"),
        ("retry policy", retry),
        ("args", _json_text(record.args)),
        ("kwargs", _json_text(record.kwargs)),
    ]
    if record.headers:  # a traced task's W3C trace context (threadmill_core.tracing)
        fields.append(("headers", _json_text(record.headers)))
    if record.time_limit is not None:
        fields.append(("time limit", _span(record.time_limit)))
    if record.progress is not None:
        progress = format_progress(record.progress)
        fields.append(("progress", f"{progress}, at {format_time(record.progress.updated_at)}"))
    if record.cancel_requested_at is not None:
        fields.append(("cancel requested", format_time(record.cancel_requested_at)))
    if record.status is SUCCESSFUL:
        fields.append(("return value", _json_text(record.return_value)))
    width = max(len(name) for name, _ in fields)
    lines = [f"{name:<{width}}  {value}" for name, value in fields]
    lines.append("")
    lines.extend(format_errors(record.errors))
    return "\n".join(lines)


def format_errors(errors: Sequence[TaskError]) -> list[str]:
    """Every error, oldest first, each with its traceback indented under it."""
    if not errors:
        return ["errors: none"]
    lines = [f"errors ({len(errors)}, oldest first):"]
    for number, error in enumerate(errors, 1):
        if number > 1:
            lines.append("")
        message = cut(error.message, SHOWN_CHARS, _WHOLE)
        lines.append(f"  #{number} {error.exception_class_path}: {message}")
        lines.extend(
            f"     {cut(line, SHOWN_CHARS, _WHOLE)}"
            for line in error.traceback.rstrip().splitlines()
        )
    return lines


#: What a cut value's marker adds: where the whole of it is.
_WHOLE = "; --json shows all"


def _json_text(value: object) -> str:
    """`value` as JSON, cut to `SHOWN_CHARS` (a stored argument may be a megabyte)."""
    return cut(json.dumps(value, ensure_ascii=False), SHOWN_CHARS, _WHOLE)
