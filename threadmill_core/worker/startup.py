"""How a worker starts: finding its task modules, and the log lines that say what it runs.

`threadmill worker myapp.tasks` imports its modules as Celery, RQ and
Dramatiq workers do: the directory it was started in comes first on
`sys.path` (`put_on_import_path`, given `WorkerSettings.import_path`), in
the supervisor and in every worker process. A module is named by its
dotted import name; a file path (``myapp/tasks.py``) is refused with the
dotted name to use instead (`check_module_name`). A module that does not
import is a `TaskModuleError` whose message is one line, naming the module
and the cause; the supervisor logs it without a traceback, except at DEBUG.

Once the modules are imported, `log_start` says in a few INFO lines what the
worker is: its backend (the URL, credentials hidden), queues, processes,
threads and prefetch, and every task it may run, with a warning for each
module on the command line that defines none. Once the backend is reached,
`warn_unregistered_waiting` looks at the first READY tasks of each queue
and warns about the task paths no loaded module registers: a worker gives
those back for another worker, and finalizes them FAILED ("not
registered") 10 minutes after their enqueue, so it usually means a module
was forgotten on the command line.
"""

from __future__ import annotations

import importlib
import logging
import os
import re
import sys
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from threadmill_core.errors import BackendUnavailable, InvalidOption, ThreadmillError
from threadmill_core.models import TaskResultStatus
from threadmill_core.task import registered_tasks

if TYPE_CHECKING:
    from threadmill_core.backend import Backend
    from threadmill_core.task import Task

log = logging.getLogger("threadmill.supervisor")

#: How many READY tasks of each queue `warn_unregistered_waiting` looks at.
WAITING_SAMPLE = 100

_DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


class TaskModuleError(ThreadmillError, ImportError):
    """A task module named for a worker does not import; `module` is its name.

    The message is one line: the module, the exception's class and text,
    and a hint where one fits (a module not found in the current directory
    or on `sys.path`). The original exception is the `__cause__`.
    """

    def __init__(self, module: str, message: str) -> None:
        self.module = module
        super().__init__(message, name=module)


def check_module_name(name: str) -> str:
    """`name` if it is a dotted module name; `InvalidOption` naming the dotted form if not.

    ``myapp/tasks.py`` and ``myapp\\tasks.py`` are refused with the hint
    ``myapp.tasks``: a worker imports modules by name, from the directory it
    runs in and `sys.path`, never files by path.
    """
    if _DOTTED.fullmatch(name):
        return name
    stem = name[:-3] if name.endswith(".py") else name
    dotted = ".".join(part for part in re.split(r"[/\\]+", stem) if part not in ("", "."))
    if dotted != name and _DOTTED.fullmatch(dotted):
        raise InvalidOption(
            f"task module {name!r} is a file path; give its dotted import name, {dotted!r}, "
            "run from the directory that holds its package"
        )
    raise InvalidOption(f"task module {name!r} is not a dotted module name (such as myapp.tasks)")


def put_on_import_path(directories: Sequence[str]) -> None:
    """Put `directories` first on `sys.path`, in that order, each once.

    This changes the whole process, so only the worker's own processes call
    it (`threadmill_core.worker.supervisor.prepare_process`), for the directories
    their settings name.
    """
    for directory in reversed(directories):
        if directory in sys.path:
            sys.path.remove(directory)
        sys.path.insert(0, directory)


def import_task_modules(modules: Sequence[str]) -> dict[str, list[str]]:
    """Import `modules`; the paths of the tasks each defines, by module, in the given order.

    A module defines a task if the task's path names it (``module:name``)
    or if importing it registered the task (a helper that registers tasks
    for it, as framework integrations do). Raises `TaskModuleError` for the
    first module that does not import.
    """
    defined: dict[str, list[str]] = {}
    for name in modules:
        before = set(registered_tasks())
        try:
            importlib.import_module(name)
        except Exception as exc:
            raise TaskModuleError(name, _import_failure(name, exc)) from exc
        after = registered_tasks()
        defined[name] = sorted(
            path for path in after if path.split(":", 1)[0] == name or path not in before
        )
    return defined


def _import_failure(name: str, exc: Exception) -> str:
    """One line saying why module `name` did not import."""
    what = f"cannot import task module {name!r}: {type(exc).__name__}: {exc}"
    missing = getattr(exc, "name", None) if isinstance(exc, ModuleNotFoundError) else None
    if missing is not None and (name == missing or name.startswith(missing + ".")):
        # The module itself (or its package) is not there, not one of its imports.
        return f"{what} (not in the directory the worker runs in, {os.getcwd()}, nor on sys.path)"
    return what


def log_start(
    *,
    url: str,
    queues: Sequence[str],
    processes: int,
    threads: int,
    prefetch: int | None,
    defined: Mapping[str, Sequence[str]],
    tasks: Mapping[str, Task[Any, Any]] | None = None,
) -> None:
    """Log what a worker is about to run: backend, queues, capacity, tasks; warn if none.

    `defined` is what `import_task_modules` answered; `tasks` the registry
    the worker runs from (default: every task registered in this process).
    A module of `defined` that defines no task is a warning, as is a
    worker with no task at all.
    """
    from threadmill_core.urls import redact

    known = registered_tasks() if tasks is None else tasks
    ahead = "adaptive" if prefetch is None else str(prefetch)
    log.info("backend %s", redact(url))
    log.info(
        "queues %s; %d process%s x %d thread%s, prefetch %s per process",
        ", ".join(queues), processes, "" if processes == 1 else "es", threads,
        "" if threads == 1 else "s", ahead,
    )  # fmt: skip
    for module, paths in defined.items():
        if not paths:
            log.warning(
                "module %s defines no task: importing it registered no @task function",
                module,
            )
    if not known:
        log.warning("no task to run: stored tasks will be given back, then FAILED (not registered)")
        return
    log.info("%d task%s: %s", len(known), "" if len(known) == 1 else "s", ", ".join(sorted(known)))


def unregistered_waiting(
    backend: Backend, queues: Iterable[str], known: Iterable[str], *, sample: int = WAITING_SAMPLE
) -> Counter[str]:
    """Task paths among the first `sample` READY tasks of each of `queues` not in `known`.

    Counts by path, over the tasks looked at (so a lower bound). Only
    reads; a READY task that does not decode is left to the worker, which
    quarantines it.
    """
    from threadmill_core.errors import PayloadError

    known = set(known)
    found: Counter[str] = Counter()
    for queue in queues:
        try:
            waiting = backend.peek(queue, TaskResultStatus.READY, offset=0, limit=sample)
        except PayloadError:
            continue
        found.update(record.task_path for record in waiting if record.task_path not in known)
    return found


def warn_unregistered_waiting(
    backend: Backend, queues: Sequence[str], known: Iterable[str]
) -> None:
    """Warn about READY tasks in `queues` whose paths no loaded module registers.

    The worker gives them back for another worker, and finalizes them FAILED
    ("not registered") once 10 minutes passed since their enqueue: a module
    is most likely missing from its command line. A look that fails (the
    backend is unavailable) is skipped: it is a hint, not a check.
    """
    try:
        found = unregistered_waiting(backend, queues, known)
    except BackendUnavailable as exc:
        log.debug("could not look at the waiting tasks: %s", exc)
        return
    if not found:
        return
    listed = ", ".join(f"{path} ({count})" for path, count in found.most_common())
    log.warning(
        "READY tasks of %s (among the first %d of each queue) name tasks no loaded module "
        "registers: %s; they wait for a worker that has them, and end FAILED as not "
        "registered if none claims them within 10 minutes of their enqueue",
        ", ".join(queues), WAITING_SAMPLE, listed,
    )  # fmt: skip
