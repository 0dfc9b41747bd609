"""Redis Cluster: three masters on loopback ports, namespaces spread over their shards.

The cluster is made as an operator makes one (``redis-server
--cluster-enabled yes`` three times, then ``redis-cli --cluster create``),
and reached through ``redis+cluster://`` URLs. A namespace's keys share one
hash tag, so a namespace lives on one shard: namespaces are how a cluster
spreads the load.
"""

from __future__ import annotations

import itertools
import os
import signal
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import timedelta

import hypothesis
import pytest
import redis

from tests.conftest import IN_CI, RESULT_TTL, RedisServer, free_port
from tests.faults import fault_tasks
from tests.faults.runs import burst_settings, supervising, wait_until
from tests.faults.servers import Cluster
from threadmill_core import InvalidOption, TaskResultStatus, Worker, connect
from threadmill_core.errors import BackendUnavailable
from threadmill_core.plugins import installed_backends
from threadmill_core.testing import Harness, run_machine
from threadmill_redis import RedisBackend
from threadmill_redis.testing import delete_namespace, make_harness

pytestmark = pytest.mark.redis


@pytest.fixture(scope="module")
def cluster_client(cluster: Cluster) -> Iterator[redis.RedisCluster]:
    client = redis.RedisCluster(host="127.0.0.1", port=cluster.nodes[0].port)
    try:
        yield client
    finally:
        client.close()


def node_port(client: redis.RedisCluster, namespace: str) -> int:
    """The port of the master holding `namespace` (all its keys share the hash tag)."""
    return int(client.get_node_from_key(f"{{{namespace}}}:state").port)


def namespaces_on_every_shard(client: redis.RedisCluster, cluster: Cluster) -> list[str]:
    """One fresh namespace per master, in the order of `cluster.nodes`."""
    wanted = {node.port: "" for node in cluster.nodes}
    for i in itertools.count():
        namespace = f"shard-{uuid.uuid4().hex[:6]}-{i}"
        port = node_port(client, namespace)
        if not wanted[port]:
            wanted[port] = namespace
        if all(wanted.values()):
            return [wanted[node.port] for node in cluster.nodes]
    raise AssertionError("unreachable")


def test_the_conformance_machine_passes_on_a_cluster(cluster_client: redis.RedisCluster) -> None:
    """The protocol state machine finds nothing wrong on a cluster, namespaces on several shards."""
    ports: set[int] = set()

    def factory() -> Harness:
        harness = make_harness(cluster_client, result_ttl=RESULT_TTL)
        ports.add(node_port(cluster_client, harness.backend.keys.namespace))  # type: ignore[attr-defined]  # a RedisBackend, as the harness says
        return harness

    # The full-depth run is the standalone server's (the same scripts); here the
    # point is routing, so fewer and shorter examples.
    run_machine(
        factory,
        settings=hypothesis.settings(
            max_examples=40 if IN_CI else 15, stateful_step_count=30, deadline=None
        ),
    )
    assert len(ports) > 1, "the examples' namespaces landed on more than one shard"


def test_namespaces_on_different_shards_each_run_their_tasks_there(
    cluster: Cluster, cluster_client: redis.RedisCluster
) -> None:
    """A namespace per master: each one's tasks run, and its keys sit on its master alone."""
    namespaces = namespaces_on_every_shard(cluster_client, cluster)
    for namespace, node in zip(namespaces, cluster.nodes, strict=True):
        with connect(cluster.url(namespace)) as broker:
            backend = broker.backend
            assert isinstance(backend, RedisBackend)
            work = fault_tasks.echo.using(broker=broker)
            records = broker.enqueue_many(work, [((n,), {}) for n in range(20)])
            assert Worker(broker, threads=2, poll_interval=0.05).run(burst=True) == 20
            finals = [broker.get_result(r.id) for r in records]
            assert [f.return_value for f in finals] == list(range(20))
            with redis.Redis(host="127.0.0.1", port=node.port) as direct:
                assert direct.exists(backend.keys.store("state"))
            for other in cluster.nodes:
                if other is not node:
                    with redis.Redis(host="127.0.0.1", port=other.port) as direct:
                        keys = direct.keys(backend.keys.pattern())
                        assert keys == [], f"{namespace} has keys on {other.port}"
            delete_namespace(backend)


def test_the_cluster_scheme_is_installed_with_the_redis_backend() -> None:
    """redis+cluster:// is listed among the installed schemes, served by the Redis plugin."""
    installed = {b.scheme: b.plugin for b in installed_backends()}
    assert installed["redis+cluster"] == installed["redis"]


def test_a_cluster_url_to_a_server_without_cluster_mode_fails_at_connect(
    redis_server: RedisServer,
) -> None:
    """A cluster URL naming a plain server is a configuration error, not an outage to wait out."""
    with pytest.raises(InvalidOption, match="Cluster mode is not enabled"):
        connect(f"redis+cluster://127.0.0.1:{redis_server.port}?namespace=x")


def test_a_cluster_url_with_a_database_number_fails_at_connect() -> None:
    """A cluster has database 0 only; naming another is an InvalidOption."""
    with pytest.raises(InvalidOption, match="database 0 only"):
        connect("redis+cluster://127.0.0.1:7000/3?namespace=x")


def test_a_cluster_no_node_of_which_answers_is_unavailable() -> None:
    """When no node answers, connect raises BackendUnavailable, which supervisors wait out."""
    with pytest.raises(BackendUnavailable):
        connect(f"redis+cluster://127.0.0.1:{free_port()}?namespace=x")


@pytest.mark.slow
def test_killed_workers_of_three_namespaces_on_three_shards_lose_nothing(
    cluster: Cluster,
    cluster_client: redis.RedisCluster,
    log_url: str,
    read_events: Callable[[str], list[str]],
) -> None:
    """A supervisor per shard's namespace, its workers SIGKILLed twice: every task succeeds once."""
    namespaces = namespaces_on_every_shard(cluster_client, cluster)
    total, kills, threads = 100, 2, 2
    records = {}
    for namespace in namespaces:
        with connect(cluster.url(namespace)) as broker:
            work = fault_tasks.work.using(broker=broker)
            calls = [((log_url, namespace, n, 20), {}) for n in range(total)]
            records[namespace] = broker.enqueue_many(work, calls)

    killed: dict[str, list[int]] = {namespace: [] for namespace in namespaces}
    settings = [
        # A fixed prefetch of one per thread, so that what a kill may rerun is bounded below.
        burst_settings(
            cluster.url(ns),
            processes=1,
            threads=threads,
            prefetch=threads,
            lease_ttl=timedelta(seconds=1),
        )
        for ns in namespaces
    ]
    with (
        supervising(settings[0]) as (first, first_runner),
        supervising(settings[1]) as (second, second_runner),
        supervising(settings[2]) as (third, third_runner),
    ):
        supervisors = dict(zip(namespaces, (first, second, third), strict=True))
        for round_ in range(kills):
            for namespace, supervisor in supervisors.items():
                wait_until(
                    lambda ns=namespace, s=supervisor, r=round_: (
                        len(read_events(ns)) >= 60 * (r + 1) and s.pids()
                    ),
                    timeout=60,
                    what=f"the workers of {namespace} to make progress",
                )
                victim = supervisor.pids()[0]
                os.kill(victim, signal.SIGKILL)
                killed[namespace].append(victim)
        for runner in (first_runner, second_runner, third_runner):
            runner.join(timeout=120)
            assert not runner.is_alive(), "a supervisor did not finish its burst"

    for namespace in namespaces:
        with connect(cluster.url(namespace)) as broker:
            finals = [broker.get_result(r.id) for r in records[namespace]]
            delete_namespace(broker.backend)  # type: ignore[arg-type]  # a RedisBackend, as the URL says
        assert Counter(f.status for f in finals) == {TaskResultStatus.SUCCESSFUL: total}
        assert sorted(f.return_value for f in finals) == list(range(total))
        check_crash_runs(read_events(namespace), total, killed[namespace], threads)


def check_crash_runs(events: list[str], total: int, killed: list[int], threads: int) -> None:
    """Every task ran; only tasks in flight in a killed process ran twice; no task acked twice."""
    starts = [e.split(":") for e in events if e.startswith("start:")]
    started = Counter(int(n) for _kind, n, _pid, _attempt in starts)
    assert set(started) == set(range(total))
    acked = Counter(int(e.split(":")[1]) for e in events if e.startswith("acked:"))
    assert max(acked.values()) == 1, "no task acknowledged twice"
    first_pid: dict[int, int] = {}
    for _kind, n, pid, _attempt in starts:
        first_pid.setdefault(int(n), int(pid))
    rerun = {n for n, count in started.items() if count > 1}
    assert {first_pid[n] for n in rerun} <= set(killed), "a rerun task first ran in a live process"
    for pid in killed:
        caught = [n for n in rerun if first_pid[n] == pid]
        # At most threads + prefetch (2 x threads here) unacknowledged per process.
        assert len(caught) <= 2 * threads, f"the kill of {pid} caused {len(caught)} reruns"
