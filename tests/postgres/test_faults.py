"""Faults on real PostgreSQL: killed workers, a restarted server, connections cut at random.

Runs and acknowledgements of `pg_tasks.work` are logged in the session's
database (see `pg_tasks`), which no test restarts; the restart test runs on
a server of its own (`servers.PostgresServer`).
"""

from __future__ import annotations

import logging
import os
import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from typing import Any, ClassVar

import psycopg
import pytest

from tests.conftest import PostgresDatabase
from tests.faults.runs import Runs, burst_settings, supervising, wait_until
from tests.postgres import pg_tasks
from tests.postgres.conftest import admin
from tests.postgres.servers import PostgresServer
from threadmill_core import Broker, TaskResultStatus, Worker, connect, task
from threadmill_core.worker.supervisor import Supervisor, WorkerSettings
from threadmill_postgres import PostgresBackend
from threadmill_postgres.testing import drop_namespace, new_namespace

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

MODULE = "tests.postgres.pg_tasks"
SUCCESSFUL = TaskResultStatus.SUCCESSFUL


@pytest.fixture
def log_url(postgres_database: PostgresDatabase) -> str:
    admin(postgres_database, pg_tasks.CREATE)
    return postgres_database.url


@pytest.fixture
def namespace(postgres_database: PostgresDatabase) -> Iterator[str]:
    made = new_namespace("faults")
    yield made
    backend = PostgresBackend.from_url(postgres_database.url, namespace=made)
    drop_namespace(backend)


def enqueue_work(broker: Broker, log_url: str, tag: str, total: int, max_ms: int) -> list[str]:
    work = pg_tasks.work.using(broker=broker)
    calls = [((log_url, tag, n, max_ms), {}) for n in range(total)]
    return [record.id for record in broker.enqueue_many(work, calls)]


def test_killed_worker_processes_lose_nothing(
    postgres_database: PostgresDatabase, log_url: str, namespace: str
) -> None:
    """500 tasks under five SIGKILLs all succeed; only tasks in flight at a kill run twice."""
    url = f"{postgres_database.url}?namespace={namespace}"
    total = 500
    with connect(url) as broker:
        ids = enqueue_work(broker, log_url, namespace, total, 20)
    settings = WorkerSettings(
        broker_url=url,
        modules=(MODULE,),
        processes=2,
        threads=2,
        prefetch=2,  # fixed, so that what a kill may rerun is bounded below
        lease_ttl=timedelta(seconds=1),
        poll_interval=timedelta(milliseconds=100),
        burst=True,
        log_level="WARNING",
    )
    supervisor = Supervisor(settings)
    runner = threading.Thread(target=supervisor.run)
    runner.start()
    killed: list[int] = []
    try:
        for round_ in range(5):
            wait_until(
                lambda r=round_: (
                    len(pg_tasks.read_events(log_url, namespace)) >= 60 * (r + 1)
                    and supervisor.pids()
                ),
                timeout=60,
                what="the workers to make progress",
            )
            victim = supervisor.pids()[0]
            os.kill(victim, signal.SIGKILL)
            killed.append(victim)
            wait_until(lambda v=victim: v not in supervisor.pids(), 10, "the kill to land")
        runner.join(timeout=240)
        assert not runner.is_alive(), "the supervisor did not finish the burst"
    finally:
        if runner.is_alive():
            supervisor.request_stop()
            runner.join(timeout=60)

    with connect(url) as broker:
        finals = [broker.get_result(task_id) for task_id in ids]
    assert Counter(f.status for f in finals) == {SUCCESSFUL: total}
    assert sorted(f.return_value for f in finals) == list(range(total))
    assert supervisor.restarts >= 5

    runs = [e.split(":") for e in pg_tasks.read_events(log_url, namespace) if e.startswith("start")]
    started = Counter(int(n) for _kind, n, _pid, _attempt in runs)
    assert set(started) == set(range(total))
    # A task runs again only if a kill caught it in flight: started in the killed
    # process and not yet acknowledged. Each process holds at most threads +
    # prefetch (2 x threads here) unacknowledged tasks, so each kill causes at most
    # that many second runs; prefetched tasks never started do not run twice.
    first_pid: dict[int, int] = {}
    for _kind, n, pid, _attempt in runs:
        first_pid.setdefault(int(n), int(pid))
    rerun = {n for n, count in started.items() if count > 1}
    assert {first_pid[n] for n in rerun} <= set(killed), (
        "a rerun task first ran in a killed process"
    )
    for pid in killed:
        caught = [n for n in rerun if first_pid[n] == pid]
        assert len(caught) <= 2 * settings.threads, f"kill of {pid} caused {len(caught)} reruns"


@pytest.fixture
def own_server() -> Iterator[PostgresServer]:
    """A PostgreSQL server for this test alone: it is stopped and started mid-run."""
    server = PostgresServer()
    try:
        yield server
    finally:
        server.close()


#: (how the server stops, seconds it stays down): a crash whose outage outlasts
#: the leases (1 s), so the reaper may take tasks over from workers whose
#: acknowledgements wait; a clean shutdown; another crash.
OUTAGES = (("immediate", 1.5), ("fast", 0.3), ("immediate", 0.5))


@pytest.mark.parametrize("prefetch", [2, None], ids=["prefetch-2", "adaptive"])
def test_a_restarted_server_loses_nothing_and_doubles_no_acknowledgement(
    prefetch: int | None,
    own_server: PostgresServer,
    log_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Three restarts of a durable server mid-run: all SUCCESSFUL, each acknowledged once,
    and only tasks in flight at a restart run twice. With a fixed prefetch of one per
    thread, and with the default adaptive one, which sizes itself from the run."""
    caplog.set_level(logging.INFO, logger="threadmill")
    tag = new_namespace("restart")
    url = f"{own_server.url}?namespace={tag}&pool_timeout=2"
    total = 240
    with connect(url) as broker:
        ids = enqueue_work(broker, log_url, tag, total, 20)

    settings = burst_settings(
        url, modules=(MODULE,), prefetch=prefetch, lease_ttl=timedelta(seconds=1)
    )
    with supervising(settings) as (supervisor, runner):
        for at, (mode, down) in enumerate(OUTAGES):
            wait_until(
                lambda k=at: len(pg_tasks.read_events(log_url, tag)) >= 120 * (k + 1),
                timeout=90,
                what="the workers to make progress",
            )
            own_server.stop(mode)
            # The marker goes in after the stop has landed: a task in flight at the
            # stop started before it, and was acknowledged after it.
            pg_tasks.log_event(log_url, tag, f"kill:{at}")
            time.sleep(down)
            own_server.start()
            pg_tasks.log_event(log_url, tag, f"restart:{at}")
        runner.join(timeout=180)
        assert not runner.is_alive(), "the supervisor did not finish the burst"
    assert supervisor.restarts == 0, "no worker process died"

    with connect(url) as broker:
        finals = [broker.get_result(task_id) for task_id in ids]
    assert Counter(f.status for f in finals) == {SUCCESSFUL: total}
    assert sorted(f.return_value for f in finals) == list(range(total))
    runs = Runs(pg_tasks.read_events(log_url, tag))
    outages = list(zip(runs.markers("kill"), runs.markers("restart"), strict=True))
    rerun = runs.check(total, outages)
    if prefetch is not None:  # what each process holds: its threads' tasks and as many more
        assert len(rerun) <= settings.processes * settings.threads * 2 * len(OUTAGES)
    # The adaptive window's bound (threads + `prefetch_window.CEILING` a process) is more
    # than the run holds: `runs.check` has held each rerun to a task in flight at a restart.


# --- connections cut at random moments -------------------------------------------------

ran: Counter[int] = Counter()
ran_lock = threading.Lock()


@task
def counted(n: int, ms: int) -> int:
    """Count this run of task `n`, then take `ms` milliseconds."""
    with ran_lock:
        ran[n] += 1
    time.sleep(ms / 1000)
    return n


class TerminatingConnection(psycopg.Connection[tuple[Any, ...]]):
    """A pool connection that may have the server terminate it as it runs a target statement.

    For a target, with its chance: ``pg_terminate_backend`` of this
    connection's server process just before the statement is sent (never
    applied), or from another thread a moment after it was sent, landing
    before, during or after the statement and its commit (applied or not, the
    reply lost or read). Each statement text is targeted until it was hit
    once per kind of moment, so the backend's repeats go through.
    """

    admin_url: ClassVar[str | None] = None
    targets: ClassVar[dict[str, tuple[str, float]]] = {}
    rng: ClassVar[random.Random] = random.Random()
    hits: ClassVar[Counter[str]] = Counter()
    _lock: ClassVar[threading.Lock] = threading.Lock()

    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
        target = self.targets.get(str(query))
        moment = None
        if target is not None and self.admin_url is not None:
            name, chance = target
            with self._lock:
                if self.rng.random() < chance:
                    moment = self.rng.choice(("before", "after"))
                    self.hits[f"{name}:{moment}"] += 1
                    delay = self.rng.uniform(0, 0.004)
        if moment is not None:
            pid = self.info.backend_pid
            if moment == "before":
                self._terminate(pid)
            else:
                threading.Timer(delay, self._terminate, (pid,)).start()
        return super().execute(query, params, **kwargs)

    @classmethod
    def _terminate(cls, pid: int) -> None:
        url = cls.admin_url
        if url is None:
            return
        with psycopg.connect(url, autocommit=True) as admin_conn:
            admin_conn.execute("SELECT pg_terminate_backend(%s)", (pid,))


def test_connections_terminated_at_random_moments_lose_nothing_and_apply_nothing_twice(
    postgres_database: PostgresDatabase, caplog: pytest.LogCaptureFixture
) -> None:
    """Under pg_terminate_backend, at statements and at random, each task runs once, on one
    attempt, without errors, and the worker lives."""
    caplog.set_level(logging.DEBUG, logger="threadmill_postgres")
    seed = random.randrange(2**32)
    TerminatingConnection.rng.seed(seed)
    TerminatingConnection.hits.clear()
    name = f"threadmill-cut-{seed}"
    namespace = new_namespace("cut")
    backend = PostgresBackend.from_url(
        f"{postgres_database.url}?application_name={name}",
        namespace=namespace,
        connection_class=TerminatingConnection,
    )
    sql = backend.sql
    TerminatingConnection.targets = {
        sql.claim: ("claim", 0.25),
        sql.decide_many: ("decide_many", 0.25),
        sql.extend_many: ("extend_many", 0.8),
    }
    TerminatingConnection.admin_url = postgres_database.url
    with ran_lock:
        ran.clear()
    total = 240
    broker = Broker(backend)
    # Most tasks are short; every twentieth outlives a heartbeat interval (lease / 3).
    calls = [((n, 1200 if n % 20 == 0 else random.randint(0, 15)), {}) for n in range(total)]
    records = broker.enqueue_many(counted, calls)

    stop = threading.Event()
    random_kills: list[int] = []

    def terminate_everyone_now_and_then() -> None:
        rng = random.Random(seed + 1)
        with psycopg.connect(postgres_database.url, autocommit=True) as killer:
            while not stop.wait(rng.uniform(0.1, 0.4)):
                ((count,),) = killer.execute(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE application_name = %s",
                    (name,),
                ).fetchall()
                random_kills.append(int(count))

    killer = threading.Thread(target=terminate_everyone_now_and_then, name="killer")
    killer.start()
    try:
        worker = Worker(
            broker, threads=4, lease_ttl=3.0, poll_interval=0.05, worker_id="under-fire"
        )
        processed = worker.run(burst=True)  # returns: the worker did not die
    finally:
        stop.set()
        killer.join(timeout=10)
        TerminatingConnection.admin_url = None  # no more kills while the test reads results
    try:
        context = f"(seed {seed}; hits {dict(TerminatingConnection.hits)}, random {random_kills})"
        assert processed == total, context
        finals = [broker.get_result(r.id) for r in records]
        assert Counter(f.status for f in finals) == {SUCCESSFUL: total}, context
        assert all(f.attempts == 1 and f.errors == () for f in finals), f"no claim lost {context}"
        assert ran == Counter(range(total)), f"each task ran exactly once {context}"
        kinds = {hit.split(":")[0] for hit in TerminatingConnection.hits}
        assert kinds == {"claim", "decide_many", "extend_many"}, context
        assert sum(random_kills) > 0, context
        repeated = [r.getMessage() for r in caplog.records if "repeating" in r.getMessage()]
        assert repeated, f"some call was cut off and repeated {context}"
    finally:
        drop_namespace(backend)
