"""Django's ``task_finished``, sent once a task's outcome is stored.

Django's own backends send ``task_finished`` when a task ends. Here a task
ends when its lease holder's decision is stored: a worker's acknowledgement
(batched with others), or the reaper's verdict on an expired lease (in the
supervisor process). This plugin hears threadmill's
``threadmill_tasks_finished`` hook for both, and sends the signal for each
task of the batch with the stored result, so a receiver that reads the
result back sees it final; old database connections are closed once after
the batch, not once a task. As with Django's own backends, the result is
the very object ``task_started`` was sent with, updated, when the task
ends in the process that started it (an in-process worker's own reaper
included); a new one otherwise (a supervisor's reaper). A receiver that
raises is logged, and the batch's other tasks are still announced; as with
Django's ``Signal.send``, the receivers after it miss that task.

An attempt that fails and will be retried has not finished: it sends no
``task_finished`` (its error is in the next attempt's ``errors``), and its
result is not kept for the next attempt. Only tasks this process
registered as Django tasks are announced.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import timedelta

from django.db import close_old_connections
from django.tasks.signals import task_finished

from threadmill_core.hookspecs import hookimpl
from threadmill_core.models import TaskResult
from threadmill_django.results import django_result, update_result
from threadmill_django.runner import runner_for, sender, serving_alias, started_result

#: The name this module is registered under with threadmill's plugin manager.
NAME = "threadmill_django"

log = logging.getLogger("threadmill.django")


@hookimpl
def threadmill_tasks_finished(records: Sequence[TaskResult]) -> None:
    try:
        for record in records:
            try:
                _announce(record)
            except Exception:
                # As threadmill does for a failing hook: logged, and the others still sent.
                log.exception("a task_finished receiver failed for task %s", record.id)
    finally:
        close_old_connections()  # a receiver may have used the ORM from this thread


@hookimpl
def threadmill_task_retried(record: TaskResult, delay: timedelta) -> None:
    started_result(record.id)  # that attempt has ended: its result is not kept for the next


def _announce(record: TaskResult) -> None:
    result = started_result(record.id)  # kept only for Django tasks this process runs
    if result is not None:
        update_result(result, record)
    else:  # a task another process started (the reaper's verdict, mostly), or not Django's
        runner = runner_for(record.task_path)
        if runner is None:
            return
        task = runner.task_for(record, serving_alias(runner.task.backend))
        result = django_result(record, task, task.backend)
    task_finished.send(sender=sender(result.backend), task_result=result)
