"""Settings of the example project: PostgreSQL for the ORM, threadmill on Redis for tasks.

Every place can be changed from the environment, so the tests can point the
project at a database and a Redis of their own:

- ``EXAMPLE_DB_NAME``, ``EXAMPLE_DB_HOST``, ``EXAMPLE_DB_PORT``, ``EXAMPLE_DB_USER``
  (default: database ``threadmill_example`` on 127.0.0.1:5432 as ``postgres``)
- ``THREADMILL_URL`` (default: ``redis://127.0.0.1:6379/0?namespace=example``)
"""

import os

SECRET_KEY = "example-only-not-secret"  # an example project, never deployed
DEBUG = False
ALLOWED_HOSTS: list[str] = []
USE_TZ = True
TIME_ZONE = "UTC"

INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "threadmill_django",
    "orders",
]

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": os.environ.get("EXAMPLE_DB_NAME", "threadmill_example"),
        "HOST": os.environ.get("EXAMPLE_DB_HOST", "127.0.0.1"),
        "PORT": os.environ.get("EXAMPLE_DB_PORT", "5432"),
        "USER": os.environ.get("EXAMPLE_DB_USER", "postgres"),
        # A worker keeps its connections between tasks, and checks one before
        # its first use in each task, so a database restart costs no task.
        "CONN_MAX_AGE": 600,
        "CONN_HEALTH_CHECKS": True,
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

TASKS = {
    "default": {
        "BACKEND": "threadmill_django.TaskBackend",
        "QUEUES": ["default"],
        "OPTIONS": {
            "url": os.environ.get("THREADMILL_URL", "redis://127.0.0.1:6379/0?namespace=example"),
            "result_ttl": 86400,
            "lease_ttl": 10,
            "processes": 2,
            "threads": 2,
        },
    }
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    # Django logs each task's start and end at INFO; threadmill's worker logs failures.
    "loggers": {"django.tasks": {"level": "WARNING"}},
}
