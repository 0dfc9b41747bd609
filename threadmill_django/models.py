"""`TaskQueue`: no table, only what the admin pages need from a model: their permissions.

The admin pages (`threadmill_django.admin`) show threadmill's queues, which
live in the threadmill backend, not in Django's database. Django's admin
and permissions are built around models, so this unmanaged model (no
table; its migration creates none) stands for "the task queues" and
carries the two permissions the pages check, created by Django's
``migrate`` as for any model:

- ``threadmill_django.view_taskqueue``: see the overview, the lists and the
  tasks (with ``is_staff``);
- ``threadmill_django.change_taskqueue``: also requeue, cancel and purge
  (it implies viewing, as Django's change permission does).

Nothing ever reads or writes a row of it.
"""

from __future__ import annotations

from django.db import models


class TaskQueue(models.Model):
    """The task queues of every threadmill alias, as the admin and its permissions name them."""

    class Meta:
        managed = False
        default_permissions = ("view", "change")
        verbose_name = "task queue"
        verbose_name_plural = "task queues"

    def __str__(self) -> str:
        return "task queues"
