"""The systems of the PostgreSQL benchmark, each behind `benchmarks.peers.Peer`.

threadmill on PostgreSQL and on Redis, django-tasks-db and Procrastinate:
each one's ``incr`` task INCRs the same Redis counter (`benchmarks.peers._common`),
and each worker is that project's own command. Every PostgreSQL peer keeps
its tables in the benchmark's database (``BENCH_PG_URL``); `reset` empties
them between measurements, as `Bench.flush` empties Redis.
"""

from __future__ import annotations

import os
import time
from typing import Any, ClassVar

import psycopg

from benchmarks.peers import Peer, python_module
from benchmarks.peers.threadmill_peer import PREFETCH, ThreadmillPeer, incr

PG_VARIABLE = "BENCH_PG_URL"
NAMESPACE = "bench"


def pg_url() -> str:
    return os.environ[PG_VARIABLE]


def execute(statement: str) -> None:
    with psycopg.connect(pg_url(), autocommit=True) as conn:
        conn.execute(statement)


class PostgresPeer(Peer):
    """A peer whose store is the benchmark's PostgreSQL database."""

    #: Where its tables are, for the footprint (`benchmarks.postgres.footprint`):
    #: every ordinary table of `schema` whose name is LIKE `tables`.
    schema: ClassVar[str] = "public"
    tables: ClassVar[str] = "%"

    def reset(self) -> None:
        """Empty the peer's tables (not timed)."""

    def worker_env(self) -> dict[str, str]:
        return {PG_VARIABLE: pg_url()}


class ThreadmillPostgresPeer(PostgresPeer, ThreadmillPeer):
    """threadmill's PostgreSQL backend: the Redis peer's tasks and worker, another broker URL."""

    name: ClassVar[str] = "threadmill-pg"
    #: Every table of the namespace's schema (threadmill_postgres/sql/v1.sql..v4.sql:
    #: tasks, claims, rates, meta, schedules, live_workers).
    schema: ClassVar[str] = NAMESPACE

    def broker_url(self) -> str:
        return f"{pg_url()}?namespace={NAMESPACE}"

    def setup(self) -> None:
        from threadmill_core import connect

        self.broker = connect(self.broker_url())

    def reset(self) -> None:
        execute(f'DROP SCHEMA IF EXISTS "{NAMESPACE}" CASCADE')

    def worker_command(self, threads: int) -> list[str]:
        return python_module(
            "threadmill_core.cli", "worker", incr.path.split(":")[0], "--broker",
            self.broker_url(), "--processes", "1", "--threads", str(threads),
            "--prefetch", str(PREFETCH),
        )  # fmt: skip

    def describe(self, threads: int) -> str:
        return f"threadmill worker (PostgreSQL) -p 1 -t {threads} --prefetch {PREFETCH}"


class ThreadmillRedisPeer(ThreadmillPeer):
    """threadmill on Redis, as in `python -m benchmarks`: the scale the others are seen against."""

    name: ClassVar[str] = "threadmill-redis"


class DjangoTasksDbPeer(PostgresPeer):
    """django-tasks-db: Django's task framework on the ORM, its ``db_worker``."""

    name: ClassVar[str] = "django-tasks-db"
    distribution: ClassVar[str] = "django-tasks-db"
    #: Its one model's table, DBTaskResult's (django_tasks_db/models.py; the app's label
    #: is django_tasks_database, apps.py); Django's own django_migrations is not counted.
    tables: ClassVar[str] = r"django\_tasks\_database\_%"
    settings = "benchmarks.postgres.django_site"

    def setup(self) -> None:
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", self.settings)
        import django
        from django.core.management import call_command

        django.setup()
        call_command("migrate", verbosity=0)
        from benchmarks.postgres.django_task import incr as django_incr

        self.task = django_incr

    def teardown(self) -> None:
        from django.db import connections

        connections.close_all()

    def reset(self) -> None:
        execute("DROP SCHEMA public CASCADE; CREATE SCHEMA public")  # migrated again by setup

    def enqueue(self, n: int) -> float:
        enqueue = self.task.enqueue
        begin = time.perf_counter()
        for _ in range(n):
            enqueue()
        return time.perf_counter() - begin

    def fill(self, n: int) -> None:
        """Single enqueues (it has no batch API), all in one transaction: one commit, not `n`."""
        from django.db import transaction

        with transaction.atomic():
            self.enqueue(n)

    def send_probe(self) -> None:
        raise NotImplementedError("the PostgreSQL benchmark sends no probes")

    def worker_command(self, threads: int) -> list[str]:
        return python_module("django", "db_worker", "--settings", self.settings)

    def describe(self, threads: int) -> str:
        return "python -m django db_worker (one task at a time)"


class ProcrastinatePeer(PostgresPeer):
    """Procrastinate: asyncio workers on PostgreSQL, LISTEN/NOTIFY, its own CLI."""

    name: ClassVar[str] = "procrastinate"
    distribution: ClassVar[str] = "procrastinate"
    has_batch: ClassVar[bool] = True
    #: procrastinate/sql/schema.sql's tables: procrastinate_jobs, _events (a row per
    #: job's deferral, by trigger), _periodic_defers and _workers.
    tables: ClassVar[str] = r"procrastinate\_%"
    app_path = "benchmarks.postgres.procrastinate_app.app"

    def setup(self) -> None:
        from benchmarks.postgres import procrastinate_app

        self.app = procrastinate_app.app
        self.app.open()
        self.task = procrastinate_app.incr
        with psycopg.connect(pg_url(), autocommit=True) as conn:
            exists = conn.execute("SELECT to_regclass('procrastinate_jobs') IS NOT NULL").fetchone()
        if not (exists and exists[0]):
            self.app.schema_manager.apply_schema()

    def teardown(self) -> None:
        self.app.close()

    def reset(self) -> None:
        execute("DROP SCHEMA public CASCADE; CREATE SCHEMA public")

    def enqueue(self, n: int) -> float:
        defer = self.task.defer
        begin = time.perf_counter()
        for _ in range(n):
            defer()
        return time.perf_counter() - begin

    def enqueue_batch(self, n: int) -> float:
        calls: list[dict[str, Any]] = [{}] * n
        begin = time.perf_counter()
        self.task.batch_defer(*calls)
        return time.perf_counter() - begin

    def send_probe(self) -> None:
        raise NotImplementedError("the PostgreSQL benchmark sends no probes")

    def worker_command(self, threads: int) -> list[str]:
        return python_module(
            "procrastinate", "--app", self.app_path, "worker", "--concurrency", str(threads)
        )

    def describe(self, threads: int) -> str:
        return f"procrastinate worker --concurrency {threads}"
