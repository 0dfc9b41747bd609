"""threadmill as a backend of Django's task framework (``django.tasks``, Django 6.0+).

``"threadmill_django"`` in INSTALLED_APPS, ``"threadmill_django.TaskBackend"``
as a TASKS backend, ``manage.py threadmill worker`` to run the tasks. See
docs/django.md.
"""

from threadmill_django.backend import TaskBackend
from threadmill_django.exceptions import TaskCancelled, UnknownTask, UnsupportedArgument
from threadmill_django.periodic import periodic
from threadmill_django.task import Task, TaskContext, task

__all__ = [
    "Task",
    "TaskBackend",
    "TaskCancelled",
    "TaskContext",
    "UnknownTask",
    "UnsupportedArgument",
    "periodic",
    "task",
]
