"""Django's `Task` with threadmill's per-task options, the decorator, and the context.

``TaskBackend.task_class`` is `Task`, so on Django 6.1, whose decorator
passes extra keywords to the backend's task class, this works as is::

    from django.tasks import task
    from threadmill_core import ExponentialBackoff

    @task(retry=ExponentialBackoff(base_delay=1, max_retries=5), lease_ttl=60, time_limit=30)
    def send_welcome(user_id): ...

Django 6.0's decorator takes no extra keywords; `threadmill_django.task`
takes them on both versions (and is Django's decorator otherwise).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, cast, overload

from django.tasks import DEFAULT_TASK_BACKEND_ALIAS, DEFAULT_TASK_QUEUE_NAME, task_backends
from django.tasks import Task as DjangoTask
from django.tasks import TaskContext as DjangoTaskContext
from django.tasks.base import DEFAULT_TASK_PRIORITY
from django.tasks.base import TaskError as DjangoTaskError

from threadmill_core.context import TaskContext as CoreTaskContext
from threadmill_core.retry import RetryPolicy


@dataclass(frozen=True, slots=True, kw_only=True)
class Task(DjangoTask):  # type: ignore[type-arg]  # generic in django-stubs only, not at run time
    """A Django task with threadmill's options.

    `retry` is a retry policy (an `ExponentialBackoff`, or a module-level
    function) called with Django's `TaskContext` (this module's) after a
    failed attempt or an expired lease; it returns the delay before the next
    attempt, or None to give up. `lease_ttl` overrides the worker's for
    this task: how long its claim lives without a heartbeat. `time_limit`
    is the longest one attempt may run (a timedelta or seconds): past it
    `threadmill_core.TimeLimitExceeded` is raised in the task (see
    `threadmill_core.worker.interrupts`).
    """

    retry: RetryPolicy | None = None
    lease_ttl: timedelta | float | None = None
    time_limit: timedelta | float | None = None


# django-stubs declares TaskContext neither generic at run time nor frozen, which Django's is.
@dataclass(frozen=True, slots=True, kw_only=True)
class TaskContext(DjangoTaskContext):  # type: ignore[type-arg, misc]
    """Django's `TaskContext`, with what threadmill knows about the attempt.

    A task that takes its context gets one; so does a retry policy, with
    ``task_result`` as the failed attempt would be stored (status FAILED,
    the error being decided last in ``task_result.errors``, also in
    `last_error`). ``attempt`` counts the attempts so far, this one included.
    """

    #: threadmill's context of the attempt (record, token, lease state).
    core: CoreTaskContext = field(repr=False, compare=False)
    #: For a retry policy: the failure being decided; None while a task runs.
    last_error: DjangoTaskError | None = None

    @property
    def token(self) -> str | None:
        """The attempt's fencing token: tag downstream writes with it to fence them."""
        return self.core.token

    @property
    def lease_lost(self) -> bool:
        """True once the worker learned this attempt's lease was taken away.

        Its outcome will not be written; a long task may check this and stop.
        """
        return self.core.lease_lost

    @property
    def cancel_requested(self) -> bool:
        """True once the worker heard that a cancel of this running task was requested.

        `threadmill_core.TaskCancelled` is raised in the task then too.
        """
        return self.core.cancel_requested

    def progress(
        self, done: int | float, total: int | float | None = None, message: str | None = None
    ) -> None:
        """Report how far the task got; see `threadmill_core.TaskContext.progress`."""
        self.core.progress(done, total, message)


@overload
def task(function: Callable[..., Any], /) -> Task: ...
@overload
def task(
    *,
    priority: int = ...,
    queue_name: str = ...,
    backend: str = ...,
    takes_context: bool = ...,
    retry: RetryPolicy | None = ...,
    lease_ttl: timedelta | float | None = ...,
    time_limit: timedelta | float | None = ...,
) -> Callable[[Callable[..., Any]], Task]: ...


def task(
    function: Callable[..., Any] | None = None,
    /,
    *,
    priority: int = DEFAULT_TASK_PRIORITY,
    queue_name: str = DEFAULT_TASK_QUEUE_NAME,
    backend: str = DEFAULT_TASK_BACKEND_ALIAS,
    takes_context: bool = False,
    retry: RetryPolicy | None = None,
    lease_ttl: timedelta | float | None = None,
    time_limit: timedelta | float | None = None,
) -> Any:
    """Django's ``@task`` with threadmill's `retry`, `lease_ttl` and `time_limit`, on Django
    6.0 and 6.1.

    The alias `backend` must be a `threadmill_django.TaskBackend` when
    either is given (another backend's task class has no such fields).
    """

    def wrap(func: Callable[..., Any]) -> Task:
        task_class = task_backends[backend].task_class
        options: dict[str, Any] = {}
        if retry is not None or lease_ttl is not None or time_limit is not None:
            if not issubclass(task_class, Task):
                raise TypeError(
                    f"retry, lease_ttl and time_limit are threadmill's task options; "
                    f"TASKS[{backend!r}] makes {task_class.__module__}."
                    f"{task_class.__qualname__} tasks, which have none of them (use a "
                    "threadmill_django.TaskBackend alias)"
                )
            options = {"retry": retry, "lease_ttl": lease_ttl, "time_limit": time_limit}
        made = task_class(
            func=func,
            priority=priority,
            queue_name=queue_name,
            backend=backend,
            takes_context=takes_context,
            run_after=None,
            **options,
        )
        return cast("Task", made)

    return wrap(function) if function is not None else wrap
