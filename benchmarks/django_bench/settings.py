"""Django settings of the Django benchmark: one alias per system, on the run's servers.

The harness sets ``BENCH_REDIS_URL`` (its redis-server) and ``BENCH_PG_NAME``,
``BENCH_PG_HOST``, ``BENCH_PG_PORT``, ``BENCH_PG_USER`` (a database it created)
before Django starts, in its own process and in every worker's. Peers that
are not installed are left out.
"""

import importlib.util
import os

REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
SECRET_KEY = "benchmark-only"  # a benchmark harness, never deployed
DEBUG = False
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"


def installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


#: Each peer's app and TASKS alias, if it is installed.
PEER_APPS = {
    "redis": ("django_tasks_redis", {"BACKEND": "django_tasks_redis.backends.RedisTaskBackend",
                                     "OPTIONS": {"REDIS_URL": REDIS_URL}}),
    "db": ("django_tasks_db", {"BACKEND": "django_tasks_db.DatabaseBackend"}),
    "ox": ("django_ox", {"BACKEND": "django_ox.backend.OxBackend"}),
}  # fmt: skip

INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "threadmill_django",
    *(app for app, _ in PEER_APPS.values() if installed(app)),
    "benchmarks.django_bench",
]

TASKS = {
    "default": {
        "BACKEND": "threadmill_django.TaskBackend",
        "OPTIONS": {"url": f"{REDIS_URL}?namespace=benchdjango"},
    },
    **{alias: params for alias, (app, params) in PEER_APPS.items() if installed(app)},
}

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": os.environ.get("BENCH_PG_NAME", "threadmill_bench"),
        "HOST": os.environ.get("BENCH_PG_HOST", "127.0.0.1"),
        "PORT": os.environ.get("BENCH_PG_PORT", "5432"),
        "USER": os.environ.get("BENCH_PG_USER", "postgres"),
    }
}

# Django logs every task's start and end at INFO; the same for every system, off.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "loggers": {"django.tasks": {"level": "WARNING"}},
}
