"""``enqueue_on_commit``: an enqueue inside a transaction is stored when it commits.

With ``"OPTIONS": {"enqueue_on_commit": True}``, `TaskBackend.enqueue` called
inside ``transaction.atomic()`` (on the default database) checks the call at
once, as always (a refused call raises there, and nothing is kept), names the
task, and returns its result, READY; the task is stored by a
``transaction.on_commit`` callback. So a worker never runs it before the
application's rows it needs are committed, and never for rows that were
rolled back: a block (or savepoint) that rolls back drops the tasks enqueued
in it, unseen by any worker or by ``get_result``. Django's ``task_enqueued``
is sent when the task is stored. Outside an atomic block, enqueue stores at
once, as without the option.

What it cannot promise, as every queue outside the database: between the
commit and the callback the task lives only in this process's memory. If
the process dies there, or the backend cannot be reached then, the
application's writes are committed and the task is lost; in the second
case the backend's error propagates from the block's exit (and Django skips
the later on_commit callbacks of that transaction). Until it
commits, ``get_result`` of the returned id raises ``TaskResultDoesNotExist``.
In a test inside Django's ``TestCase`` (one transaction that never
commits) use ``captureOnCommitCallbacks(execute=True)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.tasks.signals import task_enqueued

from threadmill_core import payload_limit
from threadmill_core.backend import call_record
from threadmill_core.checks import check_calls
from threadmill_core.ids import new_task_id
from threadmill_core.task import Task as CoreTask
from threadmill_django.results import django_result

if TYPE_CHECKING:
    from threadmill_core.broker import Broker
    from threadmill_django._typing import AnyResult, AnyTask


def deferring(enabled: bool) -> bool:
    """Whether an enqueue now is deferred: the option is on and a transaction is open."""
    return enabled and transaction.get_connection().in_atomic_block


def enqueue_on_commit(
    broker: Broker,
    prepared: CoreTask[Any, Any],
    task: AnyTask,
    alias: str,
    sender: type[Any],
    args: list[Any],
    kwargs: dict[str, Any],
) -> AnyResult:
    """Check the call now, store it at commit; the result as it will be stored, READY.

    The call goes through the same checks as `Broker.enqueue` (its signature,
    `max_payload_bytes`, and what the backend refuses of a record: values the
    codec cannot carry) before anything is kept, then through
    `Broker.enqueue_many` with the id named now. So a call the backend would
    refuse raises here, in the block, not from the commit's callback, where
    the application's rows would be committed without it and Django would
    skip the transaction's later callbacks.
    """
    path = prepared.template.task_path
    if prepared.call_check is not None:
        prepared.call_check.check(path, args, kwargs)
    payload_limit.check_call(path, args, kwargs, broker.max_payload_bytes)
    task_id = new_task_id()
    check_calls(prepared.template, [(task_id, args, kwargs)])
    transaction.on_commit(_storer(broker, prepared, task, alias, sender, task_id, args, kwargs))
    return django_result(call_record(prepared.template, (task_id, args, kwargs)), task, alias)


def _storer(
    broker: Broker,
    prepared: CoreTask[Any, Any],
    task: AnyTask,
    alias: str,
    sender: type[Any],
    task_id: str,
    args: list[Any],
    kwargs: dict[str, Any],
) -> Callable[[], None]:
    def store() -> None:
        [stored] = broker.enqueue_many(prepared, [(args, kwargs)], ids=[task_id])
        task_enqueued.send(sender, task_result=django_result(stored, task, alias))

    return store
