"""Names for Django's generic task types as this package uses them (any call, any result).

For annotations only: import them under ``TYPE_CHECKING``, since Django's
classes are generic only in django-stubs, not at run time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias

if TYPE_CHECKING:
    from django.tasks import Task, TaskContext, TaskResult

    AnyTask: TypeAlias = Task[..., Any]
    AnyResult: TypeAlias = TaskResult[..., Any]
    AnyContext: TypeAlias = TaskContext[..., Any]
