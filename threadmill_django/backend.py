"""`TaskBackend`: threadmill as a backend of Django's task framework.

::

    TASKS = {
        "default": {
            "BACKEND": "threadmill_django.TaskBackend",
            "QUEUES": ["default", "emails"],
            "OPTIONS": {"url": "redis://localhost:6379/0", "result_ttl": 86400},
        }
    }

Django makes one backend instance per thread; they share one broker per
alias and process (`threadmill_django.brokers`), connected on first use.
Settings are checked without connecting (`check` reports every problem as
a system check); using an alias whose settings are wrong raises
`InvalidTaskBackend` naming them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from django.apps import apps
from django.core import checks
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.exceptions import InvalidTask, InvalidTaskBackend, TaskResultDoesNotExist
from django.tasks.signals import task_enqueued
from django.utils import timezone
from django.utils.json import normalize_json
from django.utils.module_loading import import_string

from threadmill_core.broker import Broker
from threadmill_core.errors import InvalidOption, InvalidTaskDefinition, TaskNotFound
from threadmill_core.models import TaskResult
from threadmill_core.plugins import register_plugin
from threadmill_core.task import Task as CoreTask
from threadmill_core.task import registered_task, validate_queue
from threadmill_django import brokers, observer, on_commit, runner, transactional
from threadmill_django.exceptions import UnknownTask, UnsupportedArgument
from threadmill_django.options import BackendOptions, parse, scheme_problem, where
from threadmill_django.results import django_result
from threadmill_django.task import Task

if TYPE_CHECKING:
    from typing import ParamSpec, TypeVar

    from django.tasks import Task as DjangoTask
    from django.tasks import TaskResult as DjangoTaskResult

    from threadmill_django._typing import AnyResult, AnyTask

    P = ParamSpec("P")
    R = TypeVar("R")

#: Enqueue keeps the checked threadmill form of this many Django tasks per instance.
PREPARED = 1024


class TaskBackend(BaseTaskBackend):
    """A Django task backend on any threadmill backend (memory, Redis, ...).

    Statuses Django lacks are mapped (see `threadmill_django.results`):
    DEFERRED reads READY, CANCELLED reads FAILED with a `TaskCancelled`
    error. Arguments go through Django's normalisation, then threadmill's
    codec; what either refuses raises at `enqueue`, naming the argument,
    and nothing is stored. So does a call that does not fit the task
    function's signature: `threadmill_core.InvalidCall`, a `TypeError`, as
    calling the function itself would raise.
    """

    task_class = Task
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.settings, self.problems = parse(alias, params)
        #: Each Django task enqueued here, checked, as the threadmill task to store.
        self._prepared: dict[AnyTask, CoreTask[Any, Any]] = {}
        # Sends Django's task_finished from this process's workers and reapers.
        register_plugin(observer, observer.NAME)

    # --- settings --------------------------------------------------------------------

    @property
    def options_checked(self) -> BackendOptions:
        """The alias's settings; `InvalidTaskBackend` naming every problem if any."""
        if self.settings is None:
            raise InvalidTaskBackend("; ".join(self.problems))
        return self.settings

    @property
    def broker(self) -> Broker:
        """This alias's broker in this process (connected on first use)."""
        return brokers.broker_for(self.options_checked)

    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        """Django system checks: wrong settings are errors, memory:// a warning."""
        messages: list[checks.CheckMessage] = list(super().check(**kwargs))
        for problem in self.problems:
            messages.append(checks.Error(problem, id="threadmill_django.E001"))
        if self.settings is not None:
            unserved = scheme_problem(self.settings)
            if unserved is not None:
                messages.append(checks.Error(unserved, id="threadmill_django.E002"))
            elif (wrong := transactional.problem(self.settings)) is not None:
                messages.append(checks.Error(wrong, id="threadmill_django.E004"))
            elif self.settings.scheme == "memory":
                messages.append(
                    checks.Warning(
                        f"{where(self.alias, 'url')} is memory://, which lives inside one "
                        "process: tasks enqueued here are invisible to any other, and "
                        "`manage.py threadmill worker` refuses it. It suits tests, with "
                        "threadmill_core.Worker run in-process; elsewhere use a shared "
                        "backend such as redis://.",
                        id="threadmill_django.W001",
                    )
                )
        if not apps.is_installed("threadmill_django"):
            messages.append(
                checks.Error(
                    f"{where(self.alias)} uses threadmill_django.TaskBackend, but "
                    "'threadmill_django' is not in INSTALLED_APPS: add it, for "
                    "`manage.py threadmill worker` and its other commands",
                    id="threadmill_django.E003",
                )
            )
        return messages

    # --- tasks -----------------------------------------------------------------------

    def validate_task(self, task: AnyTask) -> None:
        """Django's rules, then threadmill's; registers the task with threadmill in this process.

        Registering here (every decoration and ``using`` validates) is what
        lets a worker that imported a module of tasks run them, and only them.
        """
        super().validate_task(task)
        try:
            validate_queue(task.queue_name)
            runner.register(task)
        except (InvalidOption, InvalidTaskDefinition) as exc:
            raise InvalidTask(f"{task.module_path}: {exc}") from exc

    def _prepared_for(self, task: AnyTask) -> CoreTask[Any, Any]:
        """`task` checked and in threadmill's form, made once per task (and instance)."""
        try:
            return self._prepared[task]
        except KeyError:
            pass
        except TypeError:  # an unhashable option (a mutable retry policy): made each time
            return self._prepare(task)
        prepared = self._prepare(task)
        if len(self._prepared) >= PREPARED:
            self._prepared.clear()
        self._prepared[task] = prepared
        return prepared

    def _prepare(self, task: AnyTask) -> CoreTask[Any, Any]:
        self.validate_task(task)
        registered = registered_task(runner.task_path(task))
        assert registered is not None  # validate_task registered it
        run_after = task.run_after
        if run_after is not None and timezone.is_naive(run_after):
            run_after = timezone.make_aware(run_after)  # USE_TZ = False: local time
        return registered.using(
            queue=task.queue_name, priority=int(task.priority), run_after=run_after
        )

    def enqueue(
        self, task: DjangoTask[P, R], args: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> DjangoTaskResult[P, R]:
        """Store one call of `task`; returns its result, READY (DEFERRED reads READY).

        With ``enqueue_on_commit``, inside a transaction: checked now, stored
        at commit (`threadmill_django.on_commit`). With ``database``, inside a
        transaction on it: written in that transaction
        (`threadmill_django.transactional`).
        """
        prepared = self._prepared_for(task)
        call_args, call_kwargs = normalized(args, kwargs)
        options = self.options_checked
        if transactional.writing(options):
            written = transactional.enqueue_in_transaction(
                self.broker, prepared, task, options, type(self), call_args, call_kwargs
            )
            return cast("DjangoTaskResult[P, R]", written)
        if on_commit.deferring(options.enqueue_on_commit):
            deferred = on_commit.enqueue_on_commit(
                self.broker, prepared, task, self.alias, type(self), call_args, call_kwargs
            )
            return cast("DjangoTaskResult[P, R]", deferred)
        record = self.broker.enqueue(prepared, *call_args, **call_kwargs)
        result = django_result(record, task, self.alias)
        task_enqueued.send(type(self), task_result=result)
        return cast("DjangoTaskResult[P, R]", result)

    def get_result(self, result_id: str) -> AnyResult:
        """The stored result; `TaskResultDoesNotExist` if unknown, purged or expired."""
        try:
            record = self.broker.get_result(result_id)
        except TaskNotFound:
            raise TaskResultDoesNotExist(result_id) from None
        return django_result(record, self._task_of(record), self.alias)

    def _task_of(self, record: TaskResult) -> AnyTask:
        """The Django task a record names: registered, or found in its installed app.

        A module is imported to read a result only if it belongs to an
        installed app (its importing registers the task); a record naming
        anything else raises `UnknownTask`.
        """
        found = runner.runner_for(record.task_path)
        module, _, qualname = record.task_path.partition(":")
        if found is None and _in_installed_app(module):
            try:
                import_string(f"{module}.{qualname}")
            except ImportError as exc:
                raise UnknownTask(f"task {record.task_path} does not import: {exc}") from exc
            found = runner.runner_for(record.task_path)
        if found is None:
            raise UnknownTask(
                f"result {record.id} is of task {record.task_path}, which is not a Django task "
                "of this process (only modules of installed apps are imported to read results)"
            )
        return found.task_for(record, self.alias)


def _in_installed_app(module: str) -> bool:
    return any(
        module == config.name or module.startswith(config.name + ".")
        for config in apps.get_app_configs()
    )


def normalized(args: Sequence[Any], kwargs: Mapping[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """The arguments as Django normalises them; what it refuses raises naming the argument."""
    try:
        call_args, call_kwargs = normalize_json(args), normalize_json(kwargs)
    except (TypeError, ValueError):
        pass
    else:  # a sequence normalises to a list, a mapping to a dict
        return cast("list[Any]", call_args), cast("dict[str, Any]", call_kwargs)
    for where_, value in [*((f"args[{i}]", a) for i, a in enumerate(args)),
                          *((f"kwargs[{k!r}]", v) for k, v in kwargs.items())]:  # fmt: skip
        try:
            normalize_json(value)
        except (TypeError, ValueError) as exc:
            raise UnsupportedArgument(
                where_, value, f"cannot be carried: Django's normalisation refused it ({exc})"
            ) from exc
    raise UnsupportedArgument("kwargs", kwargs, "has a key Django's normalisation refused")
