"""threadmill's queues in the Django admin: registered when ``django.contrib.admin`` finds it.

With ``"threadmill_django"`` and ``"django.contrib.admin"`` in INSTALLED_APPS,
the admin's autodiscovery imports this module, which registers `TaskQueue`
(a model with no table) with `TaskQueueAdmin`: the admin index then lists
"Task queues" under threadmill, for users who may view them. The pages show
every ``TASKS`` alias served by threadmill_django; see
`threadmill_django.admin.pages` for the pages, and docs/django.md for the
permissions.
"""

from __future__ import annotations

from django.contrib import admin

from threadmill_django.admin.pages import TaskQueueAdmin
from threadmill_django.models import TaskQueue

admin.site.register(TaskQueue, TaskQueueAdmin)

__all__ = ["TaskQueueAdmin"]
