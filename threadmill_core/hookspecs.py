"""The hooks plugins implement. Backends and observers are both plugins.

A plugin is a module or object registered under the ``threadmill``
entry-point group, with functions marked by `hookimpl`::

    # mypkg/plugin.py, registered as  [project.entry-points.threadmill] mypkg = "mypkg.plugin"
    from threadmill_core import hookimpl, BackendScheme

    @hookimpl
    def threadmill_backend_schemes():
        return [BackendScheme("foo", "FooDB, one table per queue")]

    @hookimpl
    def threadmill_backend_for_url(url, scheme, options):
        if scheme == "foo":
            from mypkg.backend import FooBackend
            return FooBackend.from_url(url, **options)
        return None

Lifecycle hooks are called only when some plugin implements them, so an
unobserved queue pays nothing for them on the claim/acknowledge path. They
run in the process that made the change (the producer for `enqueued`, the
worker or maintenance loop for the rest); an exception in one is logged and
never changes the task's outcome.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import attrs
import pluggy

if TYPE_CHECKING:
    from threadmill_core.backend import Backend
    from threadmill_core.models import Lease, TaskResult
    from threadmill_core.worker import Worker

PROJECT = "threadmill"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@attrs.frozen
class BackendScheme:
    """A URL scheme a plugin handles, with one line saying what it is."""

    scheme: str
    description: str


@hookspec
def threadmill_backend_schemes() -> list[BackendScheme]:  # type: ignore[empty-body]
    """The URL schemes this plugin can build backends for.

    Return only schemes that work now: a plugin whose driver is not installed
    returns none, so `connect` can say which extra to install.
    """


@hookspec(firstresult=True)
def threadmill_backend_for_url(
    url: str, scheme: str, options: Mapping[str, Any], create: bool
) -> Backend | None:
    """Build a backend for `url`, or return None if `scheme` is not this plugin's.

    `options` are the keyword arguments given to `connect`; unknown or
    malformed options (in `options` or the URL's query) must raise
    `threadmill_core.errors.InvalidOption` naming them.

    `create` is False when the caller only looks at what is stored (the
    command line's inspecting commands): a backend that makes its storage on
    first use (a schema, tables) should then make nothing, and raise an error
    saying that what the URL names does not exist (and what does). An
    implementation that makes nothing on first use need not take it.
    """


@hookspec
def threadmill_task_enqueued(record: TaskResult) -> None:
    """A task was stored (called once per task, after the backend accepted it)."""


@hookspec
def threadmill_task_started(lease: Lease) -> None:
    """A worker is about to run a claimed task."""


@hookspec
def threadmill_task_retried(record: TaskResult, delay: timedelta) -> None:
    """A failed attempt (or an expired lease) was sent back for another attempt."""


@hookspec
def threadmill_task_finished(record: TaskResult) -> None:
    """A task reached SUCCESSFUL or FAILED through its lease holder (worker or reaper), or
    CANCELLED through its worker (a cancel request stopped it, before it started or while
    it ran)."""


@hookspec
def threadmill_tasks_finished(records: Sequence[TaskResult]) -> None:
    """Tasks that reached SUCCESSFUL, FAILED or CANCELLED together, in the order they were
    decided (see `threadmill_task_finished`).

    Called once per batch (one worker acknowledgement, one reaper pass),
    after `threadmill_task_finished` was called for each of its records:
    for an observer that handles a batch at once (one network call, one
    clean-up) rather than a record at a time. Never called with no records.
    """


@hookspec
def threadmill_lease_expired(record: TaskResult) -> None:
    """The reaper took over a task whose lease expired (before it decides the retry)."""


@hookspec
def threadmill_tasks_given_back(records: Sequence[TaskResult]) -> None:
    """Claimed tasks that went back uncharged without running, as the backend stored them.

    A stopping worker's prefetch (`Backend.release`), and a task the worker
    has not loaded, given back for another worker (DEFERRED). Called once
    per call to the backend, never with no records; a give-back the backend
    refused (the lease was lost meanwhile) is not among them.
    """


@hookspec
def threadmill_worker_ticked(worker: Worker) -> None:
    """The thread that called `Worker.run` turned its loop: at least every `poll_interval`.

    For observers of the worker itself (`Worker.census`, a liveness stamp):
    a process whose loop stops turning (stopped, deadlocked, a task holding
    the interpreter's lock) stops calling it. Called in that thread; keep it
    short, since the loop waits for it.
    """
