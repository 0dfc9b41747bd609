"""Django settings for the django-tasks-db peer: the task framework on the benchmark's database.

Read by the harness (to enqueue) and by ``python -m django db_worker
--settings benchmarks.postgres.django_site`` (to run). The database comes from
``BENCH_PG_URL``; the one task (`benchmarks.postgres.django_task`) INCRs the
Redis counter every system's task does.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit

_url = urlsplit(os.environ.get("BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres"))

SECRET_KEY = "benchmark-only"
USE_TZ = True
INSTALLED_APPS = ["django_tasks_db"]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _url.path.lstrip("/"),
        "USER": _url.username or "",
        "PASSWORD": _url.password or "",
        "HOST": _url.hostname or "",
        "PORT": str(_url.port or ""),
    }
}
TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
