"""The Django app: ``"threadmill_django"`` in INSTALLED_APPS brings ``manage.py threadmill``,
and, with ``django.contrib.admin``, the task queues' admin pages (`threadmill_django.admin`)."""

from __future__ import annotations

from django.apps import AppConfig


class ThreadmillConfig(AppConfig):
    name = "threadmill_django"
    label = "threadmill_django"
    verbose_name = "threadmill"
    # Its one model, TaskQueue, has no table; said here so no project setting is needed.
    default_auto_field = "django.db.models.AutoField"
