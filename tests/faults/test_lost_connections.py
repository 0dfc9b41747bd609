"""CLIENT KILL of a worker's connections in the middle of claims, acknowledgements and heartbeats.

A worker runs on a real server through connections that know their own
client id. As a claim, an acknowledgement or a heartbeat is sent, the
connection may have the server kill it (CLIENT KILL ID): before the command
is sent (never applied), or just after, where the kill lands before the
command (not applied), after it (the reply lost) or after the reply (the
next command finds the connection dead). A
second thread meanwhile kills every client connection at random moments.
Nothing may be lost, nothing applied twice, and the worker may not die.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from tests.faults.servers import Server
from threadmill_core import Broker, TaskResultStatus, Worker, task
from threadmill_redis import RedisBackend, scripts
from threadmill_redis.testing import delete_namespace

pytestmark = pytest.mark.redis

#: The scripts whose commands are killed mid-flight, and the chance of a kill
#: (heartbeats are few, so each is more likely to be hit).
TARGETS = {"claim": 0.3, "decide_many": 0.3, "extend_many": 0.9}

runs: Counter[int] = Counter()
runs_lock = threading.Lock()


@task
def counted(n: int, ms: int) -> int:
    """Count this run of task `n`, then take `ms` milliseconds."""
    with runs_lock:
        runs[n] += 1
    time.sleep(ms / 1000)
    return n


class KillingConnection(redis.Connection):
    """A connection that may have the server kill it as it sends a target script.

    Half the kills are made just before the command is sent, so it never
    reaches the server and the call is always repeated; the others just
    after, where the server may have run it (its reply lost, or read before
    the kill lands) or not. Each distinct command is killed at most once,
    so the backend's repeat of a killed call goes through, as a reconnect
    after a blip would.
    """

    admin: ClassVar[redis.Redis | None] = None
    rng: ClassVar[random.Random] = random.Random()
    killed: ClassVar[Counter[str]] = Counter()
    _seen: ClassVar[set[bytes]] = set()
    _lock: ClassVar[threading.Lock] = threading.Lock()

    client_id: int | None = None

    def on_connect_check_health(self, check_health: bool = True) -> None:
        super().on_connect_check_health(check_health)
        self.send_command("CLIENT", "ID")
        self.client_id = int(self.read_response())

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        chunks = command if isinstance(command, list) else [command]
        sent = b"".join(bytes(chunk) for chunk in chunks)
        target = next((name for name in TARGETS if scripts.load(name).sha.encode() in sent), None)
        kill = before = False
        if target is not None and self.admin is not None:
            with self._lock:
                if sent not in self._seen and self.rng.random() < TARGETS[target]:
                    self._seen.add(sent)
                    self.killed[target] += 1
                    kill, before = True, self.rng.random() < 0.5
        if kill and before:
            self._kill()
        super().send_packed_command(command, check_health)
        if kill and not before:
            self._kill()

    def _kill(self) -> None:
        admin = self.admin
        if admin is not None:
            admin.client_kill_filter(_id=str(self.client_id))


@pytest.fixture
def server() -> Iterator[Server]:
    made = Server()
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
def broker(server: Server) -> Iterator[Broker]:
    admin = redis.Redis(host="127.0.0.1", port=server.port)
    KillingConnection.admin = admin
    KillingConnection.killed.clear()
    KillingConnection._seen.clear()
    pool = redis.ConnectionPool(
        connection_class=KillingConnection,
        host="127.0.0.1",
        port=server.port,
        retry=Retry(NoBackoff(), 0),
    )
    backend = RedisBackend(redis.Redis(connection_pool=pool), namespace="lost-connections")
    try:
        yield Broker(backend)
    finally:
        KillingConnection.admin = None
        delete_namespace(backend)
        pool.disconnect()
        admin.close()


@pytest.mark.slow
def test_connections_killed_mid_command_lose_nothing_and_apply_nothing_twice(
    broker: Broker, server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    """Under CLIENT KILLs each task runs once, on one attempt, without errors; the worker lives."""
    caplog.set_level(logging.DEBUG, logger="threadmill_redis")
    seed = random.randrange(2**32)
    KillingConnection.rng.seed(seed)
    with runs_lock:
        runs.clear()
    total = 240
    # Most tasks are short; every twentieth outlives a heartbeat interval (lease / 3).
    calls = [((n, 1200 if n % 20 == 0 else random.randint(0, 15)), {}) for n in range(total)]
    records = broker.enqueue_many(counted, calls)

    stop = threading.Event()
    random_kills: list[int] = []

    def kill_everyone_now_and_then() -> None:
        with redis.Redis(host="127.0.0.1", port=server.port) as admin:
            rng = random.Random(seed + 1)
            while not stop.wait(rng.uniform(0.1, 0.4)):
                random_kills.append(admin.client_kill_filter(_type="normal", skipme=True))

    killer = threading.Thread(target=kill_everyone_now_and_then, name="killer")
    killer.start()
    try:
        worker = Worker(
            broker, threads=4, lease_ttl=3.0, poll_interval=0.05, worker_id="under-fire"
        )
        processed = worker.run(burst=True)  # returns: the worker did not die
    finally:
        stop.set()
        killer.join(timeout=10)
        KillingConnection.admin = None  # no more kills while the test reads the results

    context = f"(seed {seed}; kills {dict(KillingConnection.killed)}, random {random_kills})"
    assert processed == total, context
    finals = [broker.get_result(r.id) for r in records]
    assert Counter(f.status for f in finals) == {TaskResultStatus.SUCCESSFUL: total}, context
    assert all(f.attempts == 1 and f.errors == () for f in finals), f"no claim lost {context}"
    assert runs == Counter(range(total)), f"each task ran exactly once {context}"
    assert set(KillingConnection.killed) == set(TARGETS), f"every kind was hit {context}"
    assert sum(random_kills) > 0, context
    repeated = [r.getMessage() for r in caplog.records if "repeating the call" in r.getMessage()]
    assert repeated, f"some call was cut off mid-flight and repeated {context}"
