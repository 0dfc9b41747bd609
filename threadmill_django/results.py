"""threadmill's records as Django's `TaskResult`s.

Statuses Django has no name for are mapped, and the mapping is the only
place they appear:

- DEFERRED (waiting for ``run_after`` or a retry's delay) reads READY: the
  task is waiting, and Django has one name for waiting.
- CANCELLED reads FAILED, with a last error of class
  `threadmill_django.exceptions.TaskCancelled` saying it was cancelled, so
  ``result.errors[-1]`` tells a cancelled task from one that raised.

Each threadmill error becomes a Django `TaskError` with the same class path
and its traceback; an error recorded without one (an expired lease, a
quarantined record) gets a one-line ``Class: message``, so every error
says what it was. A task that raised `SystemExit` or another
`BaseException` shows that exception, with its own traceback, as the core
worker records it.

Timestamps are aware UTC datetimes; with ``USE_TZ = False`` they are naive
local times, as Django gives everywhere in that mode.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.tasks import TaskResult as DjangoTaskResult
from django.tasks import TaskResultStatus as DjangoStatus
from django.tasks.base import TaskError as DjangoTaskError
from django.utils import timezone

from threadmill_core.models import TaskError, TaskResult, TaskResultStatus
from threadmill_django.exceptions import TaskCancelled

if TYPE_CHECKING:
    from threadmill_django._typing import AnyResult, AnyTask

STATUSES = {
    TaskResultStatus.READY: DjangoStatus.READY,
    TaskResultStatus.DEFERRED: DjangoStatus.READY,
    TaskResultStatus.RUNNING: DjangoStatus.RUNNING,
    TaskResultStatus.SUCCESSFUL: DjangoStatus.SUCCESSFUL,
    TaskResultStatus.FAILED: DjangoStatus.FAILED,
    TaskResultStatus.CANCELLED: DjangoStatus.FAILED,
}

#: The fields of Django's result that are times.
TIMES = ("enqueued_at", "started_at", "finished_at", "last_attempted_at")

CANCELLED_ERROR = DjangoTaskError(
    exception_class_path=f"{TaskCancelled.__module__}.{TaskCancelled.__qualname__}",
    traceback=(
        "TaskCancelled: the task was cancelled before it ran (its threadmill status is "
        "CANCELLED; `threadmill requeue` sends it back to READY)\n"
    ),
)


def django_error(error: TaskError) -> DjangoTaskError:
    """One threadmill error as Django's `TaskError`."""
    path = error.exception_class_path
    traceback = error.traceback or f"{path.rpartition('.')[2]}: {error.message}\n"
    return DjangoTaskError(exception_class_path=path, traceback=traceback)


def local(moment: datetime | None) -> datetime | None:
    """A stored (aware UTC) time as Django code expects it under the USE_TZ setting."""
    if moment is None or settings.USE_TZ:
        return moment
    return timezone.make_naive(moment)


def django_result(
    record: TaskResult,
    task: AnyTask,
    alias: str,
    *,
    status: TaskResultStatus | None = None,
    errors: tuple[TaskError, ...] | None = None,
) -> AnyResult:
    """`record` as Django's `TaskResult` of `task` on backend `alias`.

    `status` and `errors`, if given, replace the record's: a retry policy
    sees the failing attempt as FAILED with its error, before anything is
    stored.
    """
    status = record.status if status is None else status
    result: AnyResult = DjangoTaskResult(
        task=task,
        id=record.id,
        args=record.args,
        kwargs=record.kwargs,
        backend=alias,
        **_changing_fields(record, status, errors),
    )
    if status is TaskResultStatus.SUCCESSFUL:
        # The field Django's own backends set: it is not an argument of the class.
        object.__setattr__(result, "_return_value", record.return_value)
    return result


def update_result(result: AnyResult, record: TaskResult) -> None:
    """Bring `result`, made for an earlier state of `record`'s task, up to `record`, in place.

    What Django's own backends do with the result they sent ``task_started``
    with before they send ``task_finished``: the same object, its status,
    times, errors, workers and return value now the stored ones. Its task,
    id, arguments and backend stay: they are the same for every state.
    """
    fields = _changing_fields(record, record.status, None)
    if record.status is TaskResultStatus.SUCCESSFUL:
        fields["_return_value"] = record.return_value
    # The result is a frozen dataclass; Django's backends update theirs the same way.
    set_field = object.__setattr__
    for name, value in fields.items():
        set_field(result, name, value)


def _changing_fields(
    record: TaskResult,
    status: TaskResultStatus,
    errors: tuple[TaskError, ...] | None,
) -> dict[str, Any]:
    """The fields of Django's result that change as a task goes from state to state."""
    django_errors = [django_error(e) for e in (record.errors if errors is None else errors)]
    if status is TaskResultStatus.CANCELLED:
        django_errors.append(CANCELLED_ERROR)
    fields: dict[str, Any] = {
        "status": STATUSES[status],
        "enqueued_at": record.enqueued_at,
        "started_at": record.started_at,
        "finished_at": record.finished_at,
        "last_attempted_at": record.last_attempted_at,
        "errors": django_errors,
        "worker_ids": list(record.worker_ids),
    }
    if not settings.USE_TZ:
        for name in TIMES:
            fields[name] = local(fields[name])
    return fields
