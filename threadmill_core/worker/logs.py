"""How ``threadmill worker`` (and ``manage.py threadmill worker``) logs: one line per event.

Two formats (``--log-format``): ``text``, the default, for people
(`LOG_FORMAT`), and ``json``, for log pipelines: one JSON object per line
(`JsonFormatter`), the event's fields named. Every object has ``time``
(ISO 8601, UTC, milliseconds), ``level``, ``logger``, ``message``,
``process`` (the pid) and ``process_name``, and ``thread``; in a worker
process, ``worker_index`` and ``worker_id`` too (`identify_worker`); for an
event about a task (the worker's own lines, and whatever a task logs while
it runs), ``task_id``, ``task_name`` and ``queue`` (`task_fields`,
`running_task`); ``exception`` (the formatted traceback) when the event
carries one, or when it is a task's failed attempt (with ``error``, see
`failure_fields`); and any other field a caller put in ``extra=``.

`configure_worker_logging` is what the supervisor's process and each
spawned worker process call first: `logging.basicConfig` on stderr in the
chosen format, as before, plus one rule for the handler it adds to the root
logger: a record that a handler of its own logger (or of a parent below
the root) prints to the same terminal is not printed again. A framework
may configure such a handler: Django, with ``DEBUG = True``, prints every
``django`` record (``django.tasks``' "Task id=... state=RUNNING" among
them) to stderr, and the record then propagates to the root, where it
would be printed a second time in threadmill's format. The framework's
configuration wins, since it is what the user set up (or chose to keep);
records no other console handler prints are printed as before.

A process whose root logger has handlers already (an embedding program's)
keeps them as they are: `logging.basicConfig` adds nothing then, and
neither does this.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from threadmill_core.errors import InvalidOption
from threadmill_core.models import TaskResult

#: The log line of the supervisor and its worker processes (``--log-format text``).
LOG_FORMAT = "%(asctime)s %(levelname)-7s %(processName)s %(name)s: %(message)s"

#: The formats ``--log-format`` takes; the first is the default.
LOG_FORMATS = ("text", "json")

#: The attributes every `logging.LogRecord` has: anything else on a record came in
#: ``extra=`` and is a field of its JSON object.
_RECORD_ATTRIBUTES = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime"}

#: This process's worker, once `identify_worker` has said (nothing in the supervisor).
_worker: dict[str, object] = {}

#: The task the current thread runs, for what the task itself logs (see `running_task`).
_running = threading.local()


class _TaskTagging:
    """Whether `running_task` is worth calling: JSON lines are written in this process."""

    on = False


#: Read by the task threads before they call `running_task`, so text logging costs
#: them nothing (two calls would cost some 180 ns a task); a `JsonFormatter` turns it on.
task_tagging = _TaskTagging()


def check_log_format(log_format: str) -> str:
    """`log_format` if it is one of `LOG_FORMATS`; else `InvalidOption` naming them."""
    if log_format not in LOG_FORMATS:
        raise InvalidOption(
            f"unknown log format {log_format!r}: --log-format takes {' or '.join(LOG_FORMATS)}"
        )
    return log_format


def identify_worker(index: int, worker_id: str) -> None:
    """Name this process's worker in every JSON log line it writes from now on."""
    _worker.update(worker_index=index, worker_id=worker_id)


def task_fields(record: TaskResult) -> dict[str, object]:
    """The fields of a log event about the task `record`: pass them as ``extra=``."""
    return {"task_id": record.id, "task_name": record.task_path, "queue": record.queue}


def failure_fields(record: TaskResult) -> dict[str, object]:
    """`task_fields`, and the error of the attempt that just failed (`record`'s last):
    ``error`` (class path and message) and ``exception`` (its traceback, if it has one)."""
    fields = task_fields(record)
    if record.errors:
        error = record.errors[-1]
        fields["error"] = f"{error.exception_class_path}: {error.message}"
        if error.traceback:
            fields["exception"] = error.traceback.rstrip("\n")
    return fields


def running_task(record: TaskResult | None) -> None:
    """Say which task the current thread runs now (None: none), for the JSON lines it logs."""
    _running.record = record


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line: see the module docstring for its fields.

    Making one turns `task_tagging` on in this process (and the processes
    forked from it), so the task threads say which task they run.
    """

    def __init__(self) -> None:
        super().__init__()
        task_tagging.on = True

    def format(self, record: logging.LogRecord) -> str:
        event: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "process": record.process,
            "process_name": record.processName,
            "thread": record.threadName,
            **_worker,
        }
        running: TaskResult | None = getattr(_running, "record", None)
        if running is not None:
            event.update(task_fields(running))
        event.update(_extra(record))
        if record.exc_info:
            event["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            event["exception"] = record.exc_text
        if record.stack_info:
            event["stack"] = self.formatStack(record.stack_info)
        return json.dumps(event, default=str, ensure_ascii=False)


def _extra(record: logging.LogRecord) -> Mapping[str, Any]:
    """The fields a caller gave the record in ``extra=``."""
    return {k: v for k, v in vars(record).items() if k not in _RECORD_ATTRIBUTES}


class PrintedElsewhere(logging.Filter):
    """Refuses a record that a console handler below the root prints already.

    A console handler is a `logging.StreamHandler` writing to this process's
    stderr or stdout (a file handler writes elsewhere, so the terminal line
    is no duplicate of it); it prints a record when the record reaches its
    level and passes its filters (Django's ``require_debug_true``, say). The
    walk goes from the record's logger up to the root, stopping at a logger
    that does not propagate: a few attribute reads per record.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        logger: logging.Logger | None = logging.getLogger(record.name)
        root = logging.getLogger()
        while logger is not None and logger is not root:
            for handler in logger.handlers:
                if (
                    isinstance(handler, logging.StreamHandler)
                    and handler.stream in (sys.stderr, sys.stdout)
                    and record.levelno >= handler.level
                    and handler.filter(record)
                ):
                    return False
            if not logger.propagate:
                break
            logger = logger.parent
        return True


def configure_worker_logging(level: str | int, log_format: str = "text") -> None:
    """`logging.basicConfig` at `level` on stderr in `log_format`, printing each event once.

    Only when the root logger has no handler yet (as `logging.basicConfig`);
    the handler it adds gets a `PrintedElsewhere` filter. An unknown
    `log_format` is an `InvalidOption`, before anything is configured.
    """
    check_log_format(log_format)
    root = logging.getLogger()
    before = list(root.handlers)
    logging.basicConfig(level=level, format=LOG_FORMAT, stream=sys.stderr)
    for handler in root.handlers:
        if handler not in before:
            handler.addFilter(PrintedElsewhere())
            if log_format == "json":
                handler.setFormatter(JsonFormatter())
