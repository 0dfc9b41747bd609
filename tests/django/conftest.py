"""Django configured for the in-process tests, or nothing collected but the reason it cannot be.

Settings: threadmill_django on memory:// as the default alias (each test
that needs a clock of its own puts a broker in place with `use_broker`), a
SQLite database in a temporary directory, the test app `djapp`, and the
admin (with what it needs: auth, sessions, messages, static files) for the
admin pages' tests.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from tests.django import django_missing

MISSING = django_missing()

if MISSING is not None:
    # Only test_requirements.py is collected: it skips with the reason.
    collect_ignore_glob = [
        path.name for path in Path(__file__).parent.glob("test_*.py")
        if path.name != "test_requirements.py"
    ]  # fmt: skip
else:
    import django
    from django.conf import settings

    DATABASE_DIR = tempfile.mkdtemp(prefix="threadmill-django-tests-")
    settings.configure(
        SECRET_KEY="threadmill-tests",
        USE_TZ=True,
        INSTALLED_APPS=[
            # The admin, for threadmill_django's admin pages (tests/django/test_admin*.py).
            "django.contrib.admin",
            "django.contrib.auth",
            "django.contrib.contenttypes",
            "django.contrib.sessions",
            "django.contrib.messages",
            "django.contrib.staticfiles",
            "threadmill_django",
            "tests.django.djapp",
        ],
        MIDDLEWARE=[
            "django.contrib.sessions.middleware.SessionMiddleware",
            "django.middleware.common.CommonMiddleware",
            "django.middleware.csrf.CsrfViewMiddleware",
            "django.contrib.auth.middleware.AuthenticationMiddleware",
            "django.contrib.messages.middleware.MessageMiddleware",
        ],
        ROOT_URLCONF="tests.django.urls",
        TEMPLATES=[
            {
                "BACKEND": "django.template.backends.django.DjangoTemplates",
                "APP_DIRS": True,
                "OPTIONS": {
                    "context_processors": [
                        "django.template.context_processors.request",
                        "django.contrib.auth.context_processors.auth",
                        "django.contrib.messages.context_processors.messages",
                    ]
                },
            }
        ],
        STATIC_URL="static/",
        ALLOWED_HOSTS=["localhost", "127.0.0.1", "testserver"],
        DATABASES={
            "default": {
                "ENGINE": "django.db.backends.sqlite3",
                "NAME": str(Path(DATABASE_DIR) / "db.sqlite3"),
            }
        },
        TASKS={
            "default": {
                "BACKEND": "threadmill_django.TaskBackend",
                "QUEUES": ["default", "high", "low"],
                "OPTIONS": {"url": "memory://"},
            }
        },
    )
    django.setup()

    from collections.abc import Iterator
    from typing import Any

    import pytest

    from tests.django import bench as _bench

    @pytest.fixture
    def bench() -> Iterator[_bench.Bench]:
        """The default alias on a fresh memory backend with a fake clock."""
        yield from _bench.bench()

    @pytest.fixture
    def signals_seen() -> Iterator[_bench.Signals]:
        """Django's task signals, recorded while the test runs."""
        yield from _bench.recorded_signals()

    @pytest.fixture
    def runs() -> Iterator[list[Any]]:
        """What djapp's tasks recorded, emptied before and after the test."""
        from tests.django.djapp import tasks

        tasks.RUNS.clear()
        yield tasks.RUNS
        tasks.RUNS.clear()
