"""The Django benchmark's systems, each a `benchmarks.peers.Peer` driven through Django's API.

Every one enqueues ``benchmarks.django_bench.tasks.incr`` with
``incr.using(backend=ALIAS).enqueue()``, one call at a time, and runs it
with its project's own worker command, one process with one thread, with
Django's settings of `benchmarks.django_bench.settings`. The harness
flushes Redis before each measurement; a database peer empties its tables
in `setup`.
"""

from __future__ import annotations

import os
import time
from typing import Any, ClassVar

from benchmarks.peers import Peer, python_module
from benchmarks.peers.threadmill_peer import PREFETCH, ThreadmillPeer

SETTINGS = "benchmarks.django_bench.settings"


def database_env() -> dict[str, str]:
    """The BENCH_PG_* variables the harness set, for a worker process."""
    return {name: value for name, value in os.environ.items() if name.startswith("BENCH_PG_")}


class DjangoPeer(Peer):
    """A Django task backend: the alias it is configured under, and its worker command."""

    alias: ClassVar[str]
    #: The app (its module) whose tables a database peer empties before each measurement.
    app_module: ClassVar[str | None] = None

    task: Any
    probe: Any

    def setup(self) -> None:
        from benchmarks.django_bench import tasks

        self.task = tasks.incr.using(backend=self.alias)
        self.probe = tasks.started.using(backend=self.alias)
        if self.app_module is not None:
            empty_tables(self.app_module)

    def enqueue(self, n: int) -> float:
        enqueue = self.task.enqueue
        begin = time.perf_counter()
        for _ in range(n):
            enqueue()
        return time.perf_counter() - begin

    def send_probe(self) -> None:
        self.probe.enqueue(time.time())

    def worker_env(self) -> dict[str, str]:
        return {"DJANGO_SETTINGS_MODULE": SETTINGS, **database_env()}

    def manage(self, *argv: str) -> list[str]:
        return python_module("django", *argv)


def empty_tables(app_module: str) -> None:
    from django.apps import apps
    from django.db import connection

    [config] = [c for c in apps.get_app_configs() if c.name == app_module]
    tables = [model._meta.db_table for model in config.get_models()]
    if tables:
        with connection.cursor() as cursor:
            cursor.execute(f"TRUNCATE {', '.join(tables)} CASCADE")


class ThreadmillDjangoPeer(DjangoPeer):
    """threadmill_django's worker with its defaults (the adaptive prefetch)."""

    name: ClassVar[str] = "threadmill_django"
    distribution: ClassVar[str] = "threadmill"
    alias: ClassVar[str] = "default"
    #: ``--prefetch``; None: the worker's default.
    prefetch: ClassVar[int | None] = None

    def worker_command(self, threads: int) -> list[str]:
        return self.manage(
            "threadmill", "worker", "--processes", "1", "--threads", str(threads),
            *self._prefetch(), "--log-level", "WARNING",
        )  # fmt: skip

    def describe(self, threads: int) -> str:
        return " ".join(
            ["manage.py threadmill worker --processes 1 --threads", str(threads), *self._prefetch()]
        )

    def _prefetch(self) -> list[str]:
        return [] if self.prefetch is None else ["--prefetch", str(self.prefetch)]


class ThreadmillDjangoPrefetch64Peer(ThreadmillDjangoPeer):
    """The same worker with ``--prefetch 64``, which the defaults are held to (issue 38)."""

    name: ClassVar[str] = "threadmill_django@prefetch64"
    prefetch: ClassVar[int | None] = PREFETCH


class DjangoTasksRedisPeer(DjangoPeer):
    name: ClassVar[str] = "django-tasks-redis"
    distribution: ClassVar[str] = "django-tasks-redis"
    alias: ClassVar[str] = "redis"

    def worker_command(self, threads: int) -> list[str]:
        return self.manage("run_redis_tasks", "--backend", self.alias, "--continuous")

    def describe(self, threads: int) -> str:
        return "manage.py run_redis_tasks --continuous (one task at a time)"


class DjangoTasksDbPeer(DjangoPeer):
    name: ClassVar[str] = "django-tasks-db"
    distribution: ClassVar[str] = "django-tasks-db"
    alias: ClassVar[str] = "db"
    app_module: ClassVar[str | None] = "django_tasks_db"

    def worker_command(self, threads: int) -> list[str]:
        return self.manage("db_worker", "--backend", self.alias, "--no-startup-delay")

    def describe(self, threads: int) -> str:
        return "manage.py db_worker --no-startup-delay (PostgreSQL, one task at a time)"


class DjangoOxPeer(DjangoPeer):
    name: ClassVar[str] = "django-ox"
    distribution: ClassVar[str] = "django-ox"
    alias: ClassVar[str] = "ox"
    app_module: ClassVar[str | None] = "django_ox"

    def worker_command(self, threads: int) -> list[str]:
        return self.manage("ox_worker", "--backend", self.alias, "--concurrency", str(threads))

    def describe(self, threads: int) -> str:
        return f"manage.py ox_worker --concurrency {threads} (PostgreSQL)"


class ThreadmillCorePeer(ThreadmillPeer):
    """threadmill through its own API, as in the main benchmark: what the adapter costs."""

    name: ClassVar[str] = "threadmill"


#: The systems in table order: name -> (class, the module a peer needs installed).
SYSTEMS: dict[str, tuple[type[Peer], str]] = {
    "threadmill_django": (ThreadmillDjangoPeer, "threadmill_django"),
    "threadmill_django@prefetch64": (ThreadmillDjangoPrefetch64Peer, "threadmill_django"),
    "threadmill": (ThreadmillCorePeer, "threadmill_core"),
    "django-tasks-redis": (DjangoTasksRedisPeer, "django_tasks_redis"),
    "django-tasks-db": (DjangoTasksDbPeer, "django_tasks_db"),
    "django-ox": (DjangoOxPeer, "django_ox"),
}
