"""The Django app: ``"threadmill_django"`` in INSTALLED_APPS brings ``manage.py threadmill``."""

from __future__ import annotations

from django.apps import AppConfig


class ThreadmillConfig(AppConfig):
    name = "threadmill_django"
    label = "threadmill_django"
    verbose_name = "threadmill"
