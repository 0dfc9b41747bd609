"""What threadmill_django raises, and the errors it records on tasks."""

from __future__ import annotations

from django.tasks.exceptions import TaskException

from threadmill_core.errors import UnsupportedValue


class UnsupportedArgument(UnsupportedValue, ValueError):
    """An argument Django's normalisation refuses, named by where it sits (``args[0]``).

    Django raises `TypeError` for a type JSON lacks and `ValueError` for bytes
    that are not UTF-8; this is both, so code catching either keeps working.
    """


class UnknownTask(TaskException, LookupError):
    """A stored result names a task function this process has not loaded.

    Raised by `TaskBackend.get_result` when the task's module is neither
    imported yet nor part of an installed app (only those are imported to
    read a result).
    """


class TaskCancelled(Exception):
    """The error Django's view of a CANCELLED task carries (Django has no such status).

    Never raised: `TaskResult.errors` of a cancelled task ends with one of
    these, and its status reads FAILED.
    """
