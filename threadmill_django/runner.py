"""What a threadmill worker runs for a Django task, registered through the core's public API.

`register` (called by `TaskBackend.validate_task`, so by every decoration,
``using`` and enqueue) registers a threadmill task under the Django
function's path ``module:qualname``. Its callable is a `AnyTaskRunner`,
which, around each attempt, does what Django's request cycle does for a
view (old database connections closed before and after, queries reset),
builds Django's `TaskResult` and `TaskContext` from threadmill's, sends
``task_started`` as Django's own backends do, and calls the task as
Django's `Task.call` does (coroutines under ``async_to_sync``), having
asked once, not at every call, whether its function is a coroutine
function. Its return value goes through Django's normalisation, then
threadmill's codec.

A Django task's retry policy is stored as a `DjangoContextPolicy` naming
it: the worker (for a raised exception) and the reaper (for an expired
lease) call it, and it calls the policy with Django's context.

The core worker knows nothing of Django; only processes that imported a
module of Django tasks (a worker loads every installed app's ``tasks``)
can run them, and only those.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
from collections.abc import Callable
from datetime import timedelta
from inspect import iscoroutinefunction
from typing import TYPE_CHECKING, Any

import attrs
from asgiref.sync import async_to_sync
from django.core.signals import setting_changed
from django.db import close_old_connections, reset_queries
from django.tasks import Task as DjangoTask
from django.tasks import task_backends
from django.tasks.signals import task_started
from django.utils.json import normalize_json

from threadmill_core.context import TaskContext as CoreTaskContext
from threadmill_core.models import RetryPolicySpec, TaskResult, TaskResultStatus
from threadmill_core.retry import policy_spec, resolve_policy
from threadmill_core.task import call_signature, register_task, registered_task
from threadmill_django.exceptions import UnknownTask
from threadmill_django.results import django_result, local
from threadmill_django.task import TaskContext

if TYPE_CHECKING:
    from threadmill_django._typing import AnyResult, AnyTask

#: A task's fields that each call may set; the others make the task what it is.
PER_CALL = frozenset({"priority", "queue_name", "run_after", "backend"})
#: How many (queue, priority, run_after, alias) variants of a task a runner keeps made.
VARIANTS = 256

#: How many started tasks' Django results `started_result` keeps at most (the latest).
STARTED = 1024

#: The alias this process works for: set by the worker's process setup.
_serving: dict[str, str] = {}
#: The backend class of each alias, the sender of its signals (forgotten when TASKS changes).
_senders: dict[str, type[Any]] = {}
#: The Django result each task started here was announced with, by task id, oldest first.
_started: collections.OrderedDict[str, AnyResult] = collections.OrderedDict()


def serve(alias: str) -> None:
    """Record that this process works for backend `alias` (its results carry that name)."""
    _serving["alias"] = alias


def serving_alias(default: str) -> str:
    """The alias this process works for, or `default` (in-process workers, tests)."""
    return _serving.get("alias", default)


def sender(alias: str) -> type[Any]:
    """The class of backend `alias`: what Django's backends send their signals as."""
    found = _senders.get(alias)
    if found is None:
        found = _senders[alias] = type(task_backends[alias])
    return found


def started_result(task_id: str) -> AnyResult | None:
    """The Django result ``task_started`` was sent with for `task_id` here, if any; forgets it.

    Django's own backends send ``task_finished`` with the same object they
    sent ``task_started`` with, updated; so does this backend when the task
    ends in the process that started it. A result is forgotten when its
    attempt finishes or is retried; one whose lease was lost (and that no
    retry here announced) is forgotten once `STARTED` later ones are kept.
    """
    return _started.pop(task_id, None)


def _keep_started(task_id: str, result: AnyResult) -> None:
    _started.pop(task_id, None)  # a new attempt goes last
    _started[task_id] = result
    while len(_started) > STARTED:
        with contextlib.suppress(KeyError):  # another thread took the oldest first
            _started.popitem(last=False)


def _on_setting_changed(*, setting: str, **_kwargs: Any) -> None:
    if setting == "TASKS":
        _senders.clear()
        _started.clear()


setting_changed.connect(_on_setting_changed, dispatch_uid="threadmill_django.runner")


def task_path(task: AnyTask) -> str:
    """The threadmill path of a Django task: its function's ``module:qualname``."""
    return f"{task.func.__module__}:{task.func.__qualname__}"


def _identity(task: AnyTask) -> tuple[Any, ...]:
    return (
        type(task),
        *(getattr(task, f.name) for f in dataclasses.fields(task) if f.name not in PER_CALL),
    )


def function_caller(task: AnyTask) -> Callable[..., Any] | None:
    """What Django's `Task.call` calls for `task`; None if its class overrides ``call``.

    `Task.call` asks at every call whether the function is a coroutine
    function, and calls a coroutine function under ``async_to_sync``; the
    answer is the function's, so a runner asks once. A task class with a
    ``call`` of its own has that called, each time.
    """
    if type(task).call is not DjangoTask.call:
        return None
    if iscoroutinefunction(task.func):
        return async_to_sync(task.func)
    return task.func


class AnyTaskRunner:
    """The callable registered for a Django task; a worker calls it with threadmill's context."""

    def __init__(self, task: AnyTask) -> None:
        self.task = task
        self.identity = _identity(task)
        self._variants: dict[tuple[Any, ...], AnyTask] = {}
        #: What calling the task calls, decided once (see `function_caller`).
        self._function = function_caller(task)

    def __repr__(self) -> str:
        return f"AnyTaskRunner({self.task.module_path})"

    def task_for(self, record: TaskResult, alias: str) -> AnyTask:
        """The Django task that enqueued `record` as backend `alias` saw it."""
        key = (record.queue, record.priority, record.run_after, alias)
        made = self._variants.get(key)
        if made is None:
            if len(self._variants) >= VARIANTS:
                self._variants.clear()
            made = dataclasses.replace(
                self.task,
                queue_name=record.queue,
                priority=record.priority,
                run_after=local(record.run_after),
                backend=alias,
            )
            self._variants[key] = made
        return made

    def __call__(self, context: CoreTaskContext, *args: Any, **kwargs: Any) -> Any:
        reset_queries()
        close_old_connections()
        try:
            record = context.record
            task = self.task_for(record, serving_alias(self.task.backend))
            result = django_result(record, task, task.backend)
            _keep_started(record.id, result)
            task_started.send(sender=sender(task.backend), task_result=result)
            call = task.call if self._function is None else self._function
            if task.takes_context:
                value = call(TaskContext(task_result=result, core=context), *args, **kwargs)
            else:
                value = call(*args, **kwargs)
            # Whatever the task raises (SystemExit and kin included) is its failure:
            # the core worker records it and goes on, as Django's own backends do.
            # None, what most tasks return, is JSON as it is.
            return value if value is None else normalize_json(value)
        finally:
            close_old_connections()


def runner_for(path: str) -> AnyTaskRunner | None:
    """The runner registered under `path` in this process, if that is a Django task."""
    registered = registered_task(path)
    runner = registered.func if registered is not None else None
    return runner if isinstance(runner, AnyTaskRunner) else None


def register(task: AnyTask) -> None:
    """Register `task` with threadmill in this process, unless an equal one is registered.

    Copies made by ``using`` differ only in what each call sets (queue,
    priority, run_after, alias), so they share one registration. Bad
    threadmill options raise `threadmill_core.InvalidOption` naming them.

    Calls are bound at enqueue to the Django function's signature (without
    its ``context`` when the task takes one), not the runner's ``*args,
    **kwargs``: a call that function would refuse raises
    `threadmill_core.InvalidCall` (a `TypeError`) and nothing is stored.
    """
    path = task_path(task)
    current = runner_for(path)
    if current is not None and current.identity == _identity(task):
        return
    retry = getattr(task, "retry", None)
    policy = None
    if retry is not None:
        spec = policy_spec(retry)
        assert spec is not None
        policy = DjangoContextPolicy(path=spec.path, options=spec.options)
    register_task(
        AnyTaskRunner(task),
        path=path,
        retry=policy,
        lease_ttl=getattr(task, "lease_ttl", None),
        time_limit=getattr(task, "time_limit", None),
        takes_context=True,
        signature=call_signature(task.func, task.takes_context),
    )


@attrs.frozen(kw_only=True)
class DjangoContextPolicy:
    """A Django task's retry policy, as stored: called with Django's `TaskContext`.

    `path` and `options` are the stored form of the policy the task named
    (see `threadmill_core.retry.policy_spec`). The policy is found only
    among those the tasks of this process named, never imported on the
    record's say-so, and it sees the attempt as FAILED with the error being
    decided last in ``context.task_result.errors``.
    """

    path: str
    options: dict[str, Any] | None = None

    def __call__(self, context: CoreTaskContext) -> timedelta | None:
        policy = resolve_policy(RetryPolicySpec(path=self.path, options=self.options))
        record = context.record
        runner = runner_for(record.task_path)
        if runner is None:
            raise UnknownTask(f"task {record.task_path} is not registered in this process")
        task = runner.task_for(record, serving_alias(runner.task.backend))
        failed = record.errors
        if context.last_error is not None:
            failed = (*failed, context.last_error)
        result = django_result(
            record, task, task.backend, status=TaskResultStatus.FAILED, errors=failed
        )
        last = result.errors[-1] if result.errors else None
        delay: timedelta | None = policy(
            TaskContext(task_result=result, core=context, last_error=last)  # type: ignore[arg-type]  # a Django context, by design
        )
        return delay
