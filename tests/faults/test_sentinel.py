"""Redis Sentinel: a worker follows a failover by itself, and malformed Sentinel URLs are refused.

The deployment is real: a master, one replica and three sentinels, each a
redis-server process on a loopback port (see `tests.faults.servers`).
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from datetime import timedelta

import pytest
import redis

from tests.faults import sentinel_tasks
from tests.faults.runs import wait_until
from tests.faults.servers import SentinelDeployment, Server, TlsFiles
from tests.redis.conftest import tasks
from threadmill_core import BackendUnavailable, InvalidOption, TaskResultStatus, connect
from threadmill_core.errors import UnknownBackend
from threadmill_core.urls import redact
from threadmill_redis import RedisBackend

pytestmark = pytest.mark.redis

TOTAL = 2000


@pytest.fixture
def deployment() -> Iterator[SentinelDeployment]:
    made = SentinelDeployment()
    try:
        yield made
    finally:
        made.close()


def test_a_worker_follows_a_failover_mid_run_and_every_task_succeeds(
    deployment: SentinelDeployment, namespace: str
) -> None:
    """The master SIGKILLed in the middle of a 2,000-task run: the sentinels promote the replica,
    the worker reconnects to it by itself, and every task ends SUCCESSFUL."""
    url = deployment.url(namespace)
    with connect(url) as broker:
        square = sentinel_tasks.square.using(broker=broker)
        records = broker.enqueue_many(square, [((n,), {}) for n in range(TOTAL)])
        with redis.Redis(port=deployment.master.port) as master:
            assert master.wait(1, 5000) == 1  # the replica has every task before the run
        worker = subprocess.Popen(
            [sys.executable, "-m", "threadmill_core.cli", "worker", sentinel_tasks.__name__,
             "--broker", url, "--burst", "--processes", "2", "--threads", "4",
             "--lease-ttl", "2", "--poll-interval", "0.1"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        try:
            wait_until(
                lambda: broker.counts()["default"].successful >= TOTAL // 4,
                timeout=30,
                what="a quarter of the tasks to succeed",
            )
            old = deployment.master_port()
            deployment.master.kill()
            wait_until(lambda: deployment.master_port() != old, 20, "the sentinels' failover")
            output, _ = worker.communicate(timeout=60)
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.communicate()
        assert worker.returncode == 0, output
        assert deployment.master_port() == deployment.replica_at
        counts = broker.counts()["default"]
        assert (counts.successful, counts.ready, counts.running) == (TOTAL, 0, 0), counts
        results = [broker.get_result(record.id) for record in records]
        assert {result.status for result in results} == {TaskResultStatus.SUCCESSFUL}
        assert [result.return_value for result in results] == [n * n for n in range(TOTAL)]
    # Each worker process met the outage and came back by itself: no restart, no operator.
    assert output.count("backend reachable again") >= output.count("backend unavailable") > 0
    assert "died" not in output, output


def test_an_idle_wait_follows_a_coordinated_failover_and_is_woken_on_the_new_master(
    deployment: SentinelDeployment, namespace: str
) -> None:
    """A worker's wait for tasks, blocked on the master when SENTINEL FAILOVER demotes it, goes
    on on the promoted replica and is woken there by a task a producer enqueues."""
    url = deployment.url(namespace)
    waiter, producer = RedisBackend.from_url(url), RedisBackend.from_url(url)
    outcome: list[object] = []

    def wait() -> None:
        try:
            outcome.append(waiter.wait_for_tasks(["default"], timedelta(seconds=30)))
        except Exception as exc:  # reported by the assertion below
            outcome.append(exc)

    blocked = threading.Thread(target=wait)
    try:
        blocked.start()
        with redis.Redis(port=deployment.master.port) as master:
            wait_until(
                lambda: master.info("clients")["blocked_clients"] == 1, 10, "the wait to block"
            )
        with redis.Redis(port=deployment.sentinels[0].port) as sentinel:
            sentinel.execute_command("SENTINEL", "FAILOVER", deployment.name)
        wait_until(lambda: deployment.master_port() == deployment.replica_at, 20, "the failover")
        with redis.Redis(port=deployment.replica.port) as promoted:
            wait_until(
                lambda: promoted.info("clients")["blocked_clients"] == 1,
                20,
                "the wait to block on the promoted replica",
            )
        assert outcome == [], "the wait ended before any task was enqueued"
        producer.enqueue(tasks(1))
        blocked.join(timeout=10)
        assert outcome == [True]
        assert producer.counts()["default"].ready == 1
    finally:
        blocked.join(timeout=30)
        waiter.close()
        producer.close()


def test_over_tls_a_producer_follows_a_failover(tls_files: TlsFiles, namespace: str) -> None:
    """rediss+sentinel:// speaks TLS to the sentinels and to each master (the sentinels name
    TLS ports only): once the master is SIGKILLed and the replica promoted, the same producer
    reaches the new master by itself, and finds every task it had enqueued."""
    deployment = SentinelDeployment(tls=tls_files)
    try:
        backend = RedisBackend.from_url(deployment.url(namespace))
        assert backend.where.startswith("rediss+sentinel://")
        backend.enqueue(tasks(10))
        with redis.Redis(port=deployment.master.port) as master:
            assert master.wait(1, 5000) == 1
        deployment.master.kill()
        wait_until(lambda: deployment.master_port() == deployment.replica_at, 20, "the failover")

        def enqueued() -> bool:
            try:
                backend.enqueue(tasks(1))
            except BackendUnavailable:  # the client learns of the failover by failing
                return False
            return True

        wait_until(enqueued, 20, "an enqueue on the promoted replica")
        assert backend.counts()["default"].ready == 11
        backend.close()
    finally:
        deployment.close()


@pytest.fixture(scope="module")
def guarded() -> Iterator[SentinelDeployment]:
    """A deployment whose master and replica want one password, and its sentinels another."""
    made = SentinelDeployment(passwords=("m-secret", "s-secret"))
    try:
        yield made
    finally:
        made.close()


def guarded_url(deployment: SentinelDeployment, master: str, sentinel: str | None) -> str:
    url = deployment.url(f"guarded-{uuid.uuid4().hex[:8]}")
    url = url.replace("://", f"://:{master}@", 1)
    return url if sentinel is None else f"{url}&sentinel_password={sentinel}"


def test_the_masters_password_is_in_the_url_and_the_sentinels_in_the_query(
    guarded: SentinelDeployment,
) -> None:
    """user:password@ authenticates to the master, sentinel_password to the sentinels; neither
    is shown in the backend's repr."""
    url = guarded_url(guarded, "m-secret", "s-secret")
    with connect(url) as broker:
        broker.backend.enqueue(tasks(2))
        assert broker.counts()["default"].ready == 2
        assert "secret" not in repr(broker) + repr(broker.backend)
    assert "secret" not in redact(url).replace("sentinel_password", "")


@pytest.mark.parametrize(
    ("master", "sentinel", "problem"),
    [
        ("m-secret", "wrong", "the sentinels refused the credentials"),
        ("m-secret", None, "the sentinels refused the credentials"),
        ("wrong", "s-secret", "Redis refused the credentials"),
    ],
)
def test_refused_credentials_fail_at_connect(
    guarded: SentinelDeployment, master: str, sentinel: str | None, problem: str
) -> None:
    """Credentials the sentinels or the master refuse are an InvalidOption at connect(), not an
    outage to wait out."""
    with pytest.raises(InvalidOption, match=problem):
        connect(guarded_url(guarded, master, sentinel))


def test_a_master_name_no_sentinel_knows_fails_at_connect(guarded: SentinelDeployment) -> None:
    """The sentinels answer, and know no master by the URL's name: an InvalidOption naming it."""
    url = guarded_url(guarded, "m-secret", "s-secret").replace(f"/{guarded.name}/", "/typo/")
    with pytest.raises(InvalidOption, match="monitor no master named 'typo'"):
        connect(url)


def test_an_unknown_scheme_error_lists_the_sentinel_schemes() -> None:
    """connect() with a scheme nobody serves lists the Sentinel schemes among the installed."""
    with pytest.raises(UnknownBackend, match=r"redis\+sentinel://, rediss://, rediss\+sentinel://"):
        connect("redis+sentinal://127.0.0.1:26379/m")


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("redis+sentinel:///threadmill-master/0", "at least one sentinel"),
        ("redis+sentinel://127.0.0.1:26379", "names the master"),
        ("redis+sentinel://127.0.0.1:26379//0", "names the master"),
        ("redis+sentinel://127.0.0.1:99999/threadmill-master", "port from 0 to 65535"),
        ("redis+sentinel://127.0.0.1:abc/threadmill-master", "port from 0 to 65535"),
        ("redis+sentinel://127.0.0.1:26379,/threadmill-master", "found an empty one"),
        ("redis+sentinel://127.0.0.1:26379/threadmill-master/x", "whole number"),
        (
            "redis+sentinel://127.0.0.1:26379/threadmill-master/0?sentinel_pasword=x",
            "sentinel_pasword",
        ),
    ],
)
def test_a_malformed_sentinel_url_is_refused_by_connect_and_the_command_line(
    url: str, problem: str
) -> None:
    """A Sentinel URL without sentinels or a master, with a bad port or database or an unknown
    option is an InvalidOption naming the problem from connect(), one line and exit code 2 from
    `threadmill stats`, and one error line and exit code 3 from `threadmill worker`."""
    with pytest.raises(InvalidOption, match=re.escape(problem)):
        connect(url)
    stats = cli("stats", "--broker", url)
    assert stats.returncode == 2, stats.stderr
    assert stats.stderr.strip().splitlines() == [f"threadmill: {stats.stderr.strip()[12:]}"]
    assert problem in stats.stderr
    worker = cli("worker", sentinel_tasks.__name__, "--broker", url, "--burst")
    assert worker.returncode == 3, worker.stderr
    errors = [line for line in worker.stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 1, worker.stderr
    assert problem in errors[0]


def cli(*arguments: str) -> subprocess.CompletedProcess[str]:
    """`threadmill` run with `arguments`, to the end."""
    command = [sys.executable, "-m", "threadmill_core.cli", *arguments]
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


def test_a_master_without_replicas_in_sync_is_an_outage_that_stores_nothing() -> None:
    """A master with min-replicas-to-write and no replica in sync refuses writes; threadmill
    sees an outage (BackendUnavailable, ridden out by workers), not a failed call."""
    server = Server("--min-replicas-to-write", "1")
    try:
        backend = RedisBackend.from_url(server.url)
        with pytest.raises(BackendUnavailable, match="NOREPLICAS"):
            backend.enqueue(tasks(1))
        assert backend.counts() == {}
        backend.close()
    finally:
        server.close()
