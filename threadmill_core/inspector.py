"""What the inspecting shell commands and the TUI share: reading queues, acting, reporting.

Reading: `overview` (counts and rates per queue), `list_tasks` (one page of a
segment), and the formatters that turn them into tables or JSON.

Acting: `requeue`, `requeue_failed` and `cancel` go through the storage
interface's fenced operations one task at a time, so an operator can never
resurrect a task that is running or finished: a task that changed between
the operator's look and the action is refused by the backend, and the
`Outcome` says why, from a fresh read of the task. Nothing here decides on
a stale read; the reads only explain.

Every function takes a `Broker` and works on any backend. Rates come from
`Backend.rates`; a backend that keeps no telemetry answers None, and rates
show as unknown ("-" in tables, null in JSON), never as zero.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import attrs

from threadmill_core.broker import Broker
from threadmill_core.errors import PayloadError
from threadmill_core.models import (
    QueueCounts,
    QueueRates,
    TaskError,
    TaskResult,
    TaskResultStatus,
)

READY = TaskResultStatus.READY
DEFERRED = TaskResultStatus.DEFERRED
RUNNING = TaskResultStatus.RUNNING
SUCCESSFUL = TaskResultStatus.SUCCESSFUL
FAILED = TaskResultStatus.FAILED
CANCELLED = TaskResultStatus.CANCELLED

#: Segments in the order tables show them.
STATUSES = tuple(TaskResultStatus)

#: How many FAILED records `requeue_failed` reads at a time.
PAGE_SIZE = 100


class ExitCode(enum.IntEnum):
    """What the inspecting commands exit with; `threadmill --help` prints this table."""

    #: Everything asked was done (an empty request, such as requeuing no failed tasks, included).
    DONE = 0
    #: Some of it was done and some refused; each refusal is reported.
    PARTLY_DONE = 1
    #: Bad usage, or the backend could not be used (unknown scheme, unreachable).
    ERROR = 2
    #: Nothing was done: everything was refused, the task is unknown or unreadable,
    #: or a purge was not confirmed.
    NOTHING_DONE = 3


EXIT_CODES_HELP = """exit codes:
  0  everything asked was done
  1  partly done: some of it was refused (each refusal is reported)
  2  bad usage, or the backend could not be used
  3  nothing was done: all refused, an unknown or unreadable task, or a purge not confirmed"""


# --- reading ---------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class QueueStats:
    """One queue's counts per segment and, when the backend keeps telemetry, its rates."""

    counts: QueueCounts
    #: None when the backend keeps no telemetry (rates unknown, not zero).
    rates: QueueRates | None

    @property
    def queue(self) -> str:
        return self.counts.queue


@attrs.frozen(kw_only=True)
class Overview:
    """Every queue's `QueueStats`, read at `taken_at` on the backend's clock."""

    queues: tuple[QueueStats, ...]
    window: timedelta
    rates_known: bool
    taken_at: datetime

    def total(self) -> QueueStats:
        """All queues added up (rates too, over the same window)."""
        fields = [s.value.lower() for s in STATUSES]
        counts = QueueCounts(
            queue="total",
            **{f: sum(getattr(q.counts, f) for q in self.queues) for f in fields},
        )
        rates = None
        if self.rates_known:
            known = [q.rates for q in self.queues if q.rates is not None]
            rates = QueueRates(
                queue="total",
                window=max((r.window for r in known), default=self.window),
                entered=sum(r.entered for r in known),
                finished=sum(r.finished for r in known),
            )
        return QueueStats(counts=counts, rates=rates)


def overview(broker: Broker, window: timedelta) -> Overview:
    """Counts and rates of every queue that holds a task or saw one enter or finish lately.

    A queue the backend has rates for but no task in (all purged or expired)
    is listed with zero counts; with telemetry, a queue with no rate entry
    had nothing enter or finish in the window (zero, not unknown).
    """
    taken_at = broker.backend.now()
    counts = broker.counts()
    rates = broker.backend.rates(window)
    names = sorted(set(counts) | set(rates or {}))
    queues = []
    for name in names:
        queue_rates = None
        if rates is not None:
            queue_rates = rates.get(name) or QueueRates(queue=name, window=window)
        queues.append(
            QueueStats(counts=counts.get(name) or QueueCounts(queue=name), rates=queue_rates)
        )
    return Overview(
        queues=tuple(queues), window=window, rates_known=rates is not None, taken_at=taken_at
    )


@attrs.frozen(kw_only=True)
class Undecodable:
    """A place in a segment whose stored bytes do not decode (poison); `message` names the task."""

    position: int
    message: str


Listed = TaskResult | Undecodable


def list_tasks(
    broker: Broker, queue: str, status: TaskResultStatus, *, offset: int = 0, limit: int = 20
) -> list[Listed]:
    """One page of a segment, in segment order.

    A backend's `peek` raises `PayloadError` for a whole page when one record
    in it is poison; then the page is read again one record at a time, so
    every other record still shows, and the poison shows as `Undecodable`.
    """
    try:
        return list(broker.peek(queue, status, offset=offset, limit=limit))
    except PayloadError:
        pass
    listed: list[Listed] = []
    for position in range(offset, offset + limit):
        try:
            one = broker.peek(queue, status, offset=position, limit=1)
        except PayloadError as exc:
            listed.append(Undecodable(position=position, message=str(exc)))
            continue
        if not one:
            break
        listed.extend(one)
    return listed


# --- acting ----------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class Outcome:
    """What one action did to one task."""

    task_id: str
    done: bool
    #: The stored record after the action, when done.
    record: TaskResult | None = None
    #: The task's status when refused, as read just after the refusal (None: unknown or poison).
    status: TaskResultStatus | None = None
    #: Why it was refused; empty when done.
    reason: str = ""


@attrs.frozen(kw_only=True)
class Report:
    """The outcomes of one command's action, in the order the tasks were asked for."""

    action: str
    outcomes: tuple[Outcome, ...]

    @property
    def done(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.done]

    @property
    def refused(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.done]

    @property
    def exit_code(self) -> ExitCode:
        if not self.refused:
            return ExitCode.DONE
        return ExitCode.PARTLY_DONE if self.done else ExitCode.NOTHING_DONE


_UNKNOWN = "no such task (never enqueued, purged, or its result expired)"


def _poison(exc: PayloadError) -> str:
    return f"its stored bytes do not decode ({exc}); purge its segment to remove it"


def _why_not_requeued(status: TaskResultStatus) -> str:
    if status is RUNNING:
        return (
            "it is RUNNING: its lease holder (a worker or the reaper) decides it, not an operator"
        )
    if status is SUCCESSFUL:
        return "it finished SUCCESSFUL: a successful task is never run again"
    if status in (READY, DEFERRED):
        return f"it is {status.value}: already waiting to run"
    return f"it changed meanwhile and is {status.value} now: look again and retry"


def _why_not_cancelled(status: TaskResultStatus) -> str:
    if status is RUNNING:
        return "it is RUNNING: a running task cannot be cancelled; its lease holder decides it"
    if status.is_terminal:
        return f"it already finished ({status.value}): a finished task cannot be cancelled"
    return f"it changed meanwhile and is {status.value} now: look again and retry"


def _act(
    broker: Broker,
    task_id: str,
    action: Callable[[str], TaskResult | None],
    explain: Callable[[TaskResultStatus], str],
) -> Outcome:
    try:
        record = action(task_id)
    except PayloadError as exc:
        return Outcome(task_id=task_id, done=False, reason=_poison(exc))
    if record is not None:
        return Outcome(task_id=task_id, done=True, record=record)
    # Refused by the backend, atomically. Read the task only to say why.
    try:
        current = broker.backend.get(task_id)
    except PayloadError as exc:
        return Outcome(task_id=task_id, done=False, reason=_poison(exc))
    if current is None:
        return Outcome(task_id=task_id, done=False, reason=_UNKNOWN)
    return Outcome(
        task_id=task_id, done=False, status=current.status, reason=explain(current.status)
    )


def requeue(broker: Broker, task_ids: Iterable[str]) -> Report:
    """Requeue each task (FAILED or CANCELLED back to READY); refusals say why."""
    outcomes = tuple(_act(broker, i, broker.requeue, _why_not_requeued) for i in task_ids)
    return Report(action="requeue", outcomes=outcomes)


def cancel(broker: Broker, task_ids: Iterable[str]) -> Report:
    """Cancel each task (READY or DEFERRED to CANCELLED); refusals say why."""
    outcomes = tuple(_act(broker, i, broker.cancel, _why_not_cancelled) for i in task_ids)
    return Report(action="cancel", outcomes=outcomes)


def requeue_failed(broker: Broker, queue: str, *, page_size: int = PAGE_SIZE) -> Report:
    """Requeue every task of `queue` that was FAILED when this call began.

    FAILED is read a page at a time from its head, and each task is requeued
    on its own (fenced): one that changed since it was read is refused and
    reported. Requeued tasks leave the segment, so the next page is read from
    the head again, past the ones this call could not move (poison). Tasks
    that fail again while this runs (`finished_at` after the start, on the
    backend's clock) are left alone, so a task that fails at once cannot keep
    this running.
    """
    started = broker.backend.now()
    outcomes: list[Outcome] = []
    seen: set[str] = set()  # ids handled, and messages of poison met, so none is reported twice
    stuck = 0  # how many of those are still in FAILED at the head
    while True:
        limit = stuck + page_size
        page = list_tasks(broker, queue, FAILED, offset=0, limit=limit)
        fresh = [item for item in page if _key(item) not in seen]
        if not fresh:
            break
        for item in fresh:
            seen.add(_key(item))
            if isinstance(item, Undecodable):
                outcomes.append(Outcome(task_id="?", done=False, reason=_poison_text(item)))
                stuck += 1
                continue
            if item.finished_at is not None and item.finished_at > started:
                return Report(action="requeue", outcomes=tuple(outcomes))
            outcome = _act(broker, item.id, broker.requeue, _why_not_requeued)
            outcomes.append(outcome)
            if not outcome.done and outcome.status is None and outcome.reason != _UNKNOWN:
                stuck += 1  # poison that peek could read but requeue could not: still there
        if len(page) < limit:
            break
    return Report(action="requeue", outcomes=tuple(outcomes))


def _key(item: Listed) -> str:
    return item.id if isinstance(item, TaskResult) else item.message


def _poison_text(item: Undecodable) -> str:
    return f"{item.message}; purge its segment to remove it"


# --- formatting: text ------------------------------------------------------------------


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

LIST_HEADERS = ("id", "task", "prio", "tries", "{time}", "last error")


def list_headers(status: TaskResultStatus) -> list[str]:
    return [h.format(time=TIME_COLUMN[status][0]) for h in LIST_HEADERS]


def list_row(item: Listed, status: TaskResultStatus) -> list[str]:
    """One `ls` row (the TUI's task list shows the same cells)."""
    if isinstance(item, Undecodable):
        return ["?", _clip(f"(does not decode: {item.message})", 60), "", "", "", ""]
    return [
        item.id,
        _clip(item.task_path, 48),
        str(item.priority),
        str(item.attempts),
        format_time(TIME_COLUMN[status][1](item)),
        _clip(last_error(item), 60),
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
    """The whole record for `show`: fields, arguments, result, then every error in full."""
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
        lines.append(f"  #{number} {error.exception_class_path}: {error.message}")
        lines.extend(f"     {line}" for line in error.traceback.rstrip().splitlines())
    return lines


def _json_text(value: object) -> str:
    return json.dumps(value, ensure_ascii=False)


# --- formatting: JSON ------------------------------------------------------------------


def _iso(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _plain(_instance: object, _attribute: object, value: Any) -> Any:
    if isinstance(value, datetime):
        return _iso(value)
    if isinstance(value, enum.Enum):
        return value.value
    return value


def record_json(record: TaskResult) -> dict[str, Any]:
    """The record as JSON-ready data: timestamps ISO 8601 in UTC, the status by name."""
    data: dict[str, Any] = attrs.asdict(record, value_serializer=_plain)
    return data


def listed_json(item: Listed) -> dict[str, Any]:
    if isinstance(item, Undecodable):
        return {"undecodable": True, "position": item.position, "message": item.message}
    return record_json(item)


def stats_json(stats: QueueStats) -> dict[str, Any]:
    rates = stats.rates
    return {
        "queue": stats.queue,
        **{s.value.lower(): stats.counts.of(s) for s in STATUSES},
        "entered": rates.entered if rates else None,
        "finished": rates.finished if rates else None,
        "ingress_per_second": rates.ingress if rates else None,
        "egress_per_second": rates.egress if rates else None,
    }


def overview_json(view: Overview) -> dict[str, Any]:
    """`stats --json`: rates are null when the backend keeps no telemetry."""
    return {
        "taken_at": _iso(view.taken_at),
        "window_seconds": view.window.total_seconds(),
        "rates_known": view.rates_known,
        "queues": [stats_json(q) for q in view.queues],
        "total": stats_json(view.total()),
    }


def outcome_json(outcome: Outcome) -> dict[str, Any]:
    if outcome.done and outcome.record is not None:
        return {"id": outcome.task_id, "status": outcome.record.status.value}
    return {
        "id": outcome.task_id,
        "status": outcome.status.value if outcome.status else None,
        "reason": outcome.reason,
    }


def report_json(report: Report) -> dict[str, Any]:
    return {
        "action": report.action,
        "done": [outcome_json(o) for o in report.done],
        "refused": [outcome_json(o) for o in report.refused],
        "exit_code": int(report.exit_code),
    }


def dumps(data: object) -> str:
    """JSON for scripts: not ASCII-escaped; ints of any size kept exact."""
    return json.dumps(data, ensure_ascii=False)


def redact(url: str) -> str:
    """`url` with any password replaced by ``***``, for showing on screen."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))
