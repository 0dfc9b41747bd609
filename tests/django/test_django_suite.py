"""Django's own task tests, run against threadmill_django.TaskBackend on memory:// and real Redis.

The tests are those of ``tests/tasks/test_tasks.py`` in the Django source
distribution of the installed version (never copied here): its
backend-agnostic ``TaskTestCase``, subclassed with our backend as the
default alias. Get the source with::

    pip download --no-binary :all: --no-deps 'django==6.1.*' -d /tmp/django-src
    tar xzf /tmp/django-src/django-6.1.*.tar.gz -C /tmp/django-src
    export THREADMILL_DJANGO_SOURCE=/tmp/django-src/django-6.1.3

Without it these tests skip saying so; under ``CI=true`` they fail. The
tests that are about Django's dummy backend itself are skipped, each
with its reason (`DUMMY_ONLY`).
"""

from __future__ import annotations

import importlib
import os
import re
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

import django
import pytest

from tests.conftest import IN_CI, PostgresDatabase, RedisServer
from tests.django.databases import add_connection, drop_connection

#: Tests of TaskTestCase that are about Django's dummy backend, with why each is skipped.
DUMMY_ONLY = {
    "test_using_correct_backend": "asserts the default alias is Django's DummyBackend",
    "test_get_backend": "asserts the default alias is Django's DummyBackend",
    "test_enqueue_task": (
        "reads DummyBackend.results, the dummy backend's in-process list; "
        "test_backend.py checks the same enqueue against the stored result"
    ),
    "test_enqueue_task_async": (
        "reads DummyBackend.results, the dummy backend's in-process list; "
        "test_backend.py checks the same aenqueue against the stored result"
    ),
}


def _source() -> Path:
    """The Django source distribution's root, of the installed version; skip (or fail) if none."""
    where = os.environ.get("THREADMILL_DJANGO_SOURCE")
    problem = None
    root = Path(where) if where else None
    if root is None:
        problem = "THREADMILL_DJANGO_SOURCE is not set (see this module's docstring)"
    elif not (root / "tests" / "tasks" / "test_tasks.py").is_file():
        problem = f"THREADMILL_DJANGO_SOURCE={where} holds no tests/tasks/test_tasks.py"
    else:
        text = (root / "django" / "__init__.py").read_text()
        found = re.search(r"^VERSION = \((\d+), (\d+)", text, re.MULTILINE)
        if found is None or tuple(map(int, found.groups())) != django.VERSION[:2]:
            problem = (
                f"THREADMILL_DJANGO_SOURCE={where} is not Django "
                f"{django.VERSION[0]}.{django.VERSION[1]}, the installed version"
            )
    if problem is not None:
        if IN_CI:
            pytest.fail(f"{problem}; CI must run Django's task tests", pytrace=False)
        pytest.skip(problem, allow_module_level=True)
    assert root is not None
    return root


def _django_tests() -> ModuleType:
    tests = str(_source() / "tests")
    if tests not in sys.path:
        sys.path.append(tests)
    return importlib.import_module("tasks.test_tasks")


django_tests = _django_tests()


def tasks_setting(url: str, **options: Any) -> dict[str, Any]:
    """Django's TASKS of TaskTestCase, with threadmill_django as the default alias."""
    return {
        "default": {
            "BACKEND": "threadmill_django.TaskBackend",
            "QUEUES": ["default", "queue_1"],
            "OPTIONS": {"url": url, **options},
        },
        "immediate": {
            "BACKEND": "django.tasks.backends.immediate.ImmediateBackend",
            "QUEUES": [],
        },
        "missing": {"BACKEND": "does.not.exist"},
    }


class ThreadmillTaskTests(django_tests.TaskTestCase):  # type: ignore[misc]
    """TaskTestCase with threadmill_django; subclasses say where its broker is."""

    #: The backend URL of the default alias; set by each subclass.
    url = ""
    #: More OPTIONS of the default alias.
    options: ClassVar[dict[str, Any]] = {}

    @classmethod
    def setUpClass(cls) -> None:
        cls._overridden_settings = {
            **cls._overridden_settings,
            "TASKS": tasks_setting(cls.url or cls.backend_url(), **cls.options),
        }
        super().setUpClass()

    @classmethod
    def backend_url(cls) -> str:
        raise NotImplementedError

    def setUp(self) -> None:
        # TaskTestCase.setUp empties the dummy backend (DummyBackend.clear); none of
        # the tests run here depends on an empty store, and threadmill has no clear().
        pass


def _skipped(why: str) -> Any:
    def test(self: Any) -> None:
        self.skipTest(f"dummy backend only: {why}")

    return test


for _name, _why in DUMMY_ONLY.items():
    assert hasattr(django_tests.TaskTestCase, _name), _name  # a renamed test fails here
    setattr(ThreadmillTaskTests, _name, _skipped(_why))


class MemoryTaskTests(ThreadmillTaskTests):
    """Django's TaskTestCase on threadmill's memory backend."""

    url = "memory://"


#: The Redis the Redis class uses, started by `suite_redis` (a session fixture runs first).
_redis: dict[str, str] = {}


@pytest.fixture(scope="session")
def suite_redis(redis_server: RedisServer) -> Iterator[None]:
    _redis["url"] = f"{redis_server.url}?namespace=django-suite-{uuid.uuid4().hex[:8]}"
    yield
    _redis.clear()


@pytest.mark.redis
@pytest.mark.usefixtures("suite_redis")
class RedisTaskTests(ThreadmillTaskTests):
    """Django's TaskTestCase on a real Redis, started for the test session."""

    @classmethod
    def backend_url(cls) -> str:
        return _redis["url"]


#: The PostgreSQL URL the PostgreSQL class uses, set by `suite_postgres`.
_postgres: dict[str, str] = {}

#: The Django connection on that database, named by the alias's "database" option.
SUITE_DATABASE = "threadmill_suite_pg"


@pytest.fixture(scope="session")
def suite_postgres(postgres_database: PostgresDatabase) -> Iterator[None]:
    from threadmill_postgres import PostgresBackend
    from threadmill_postgres.testing import drop_namespace, new_namespace

    separator = "&" if "?" in postgres_database.url else "?"
    url = f"{postgres_database.url}{separator}namespace={new_namespace('django_suite')}"
    add_connection(SUITE_DATABASE, postgres_database.url)
    _postgres["url"] = url
    yield
    _postgres.clear()
    drop_connection(SUITE_DATABASE)
    drop_namespace(PostgresBackend.from_url(url))


@pytest.mark.postgres
@pytest.mark.usefixtures("suite_postgres")
class PostgresTaskTests(ThreadmillTaskTests):
    """Django's TaskTestCase on PostgreSQL, in transactional mode (the "database" option naming
    a Django connection on the same database; the system check passes on it)."""

    options: ClassVar[dict[str, Any]] = {"database": SUITE_DATABASE}

    @classmethod
    def backend_url(cls) -> str:
        return _postgres["url"]

    def test_the_transactional_mode_passes_the_system_check(self) -> None:
        from django.tasks import task_backends

        backend = task_backends["default"]
        assert backend.options_checked.database == SUITE_DATABASE
        assert [m.id for m in backend.check() if m.level >= 40] == []


del ThreadmillTaskTests  # the base is not a test case of its own
