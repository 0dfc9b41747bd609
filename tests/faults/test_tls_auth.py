"""TLS with certificates, and passwords and ACL users, against servers configured for each."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from tests.faults import fault_tasks
from tests.faults.servers import Server, TlsServer
from threadmill_core import Broker, InvalidOption, TaskResultStatus, Worker, connect
from threadmill_core.errors import BackendUnavailable

pytestmark = pytest.mark.redis


def run_one_task(broker: Broker) -> None:
    """Enqueue one task, run a burst worker, and check it succeeded through `broker`."""
    record = fault_tasks.echo.using(broker=broker).enqueue({"over": "the wire"})
    assert Worker(broker, poll_interval=0.05).run(burst=True) == 1
    final = broker.get_result(record.id)
    assert (final.status, final.return_value) == (TaskResultStatus.SUCCESSFUL, {"over": "the wire"})


@pytest.fixture(scope="module")
def auth_server() -> Iterator[Server]:
    """A server with a default-user password, a full ACL user and a least-privilege one.

    ``jobs`` may touch only the keys of namespace ``jobs`` and run only what
    the backend needs: reads, writes, scripts, connection commands and TIME
    (no CONFIG, so the eviction check is skipped).
    """
    server = Server(
        "--requirepass", "default-secret",
        "--user", "worker", "on", ">worker-secret", "~*", "&*", "+@all",
        "--user", "jobs", "on", ">jobs-secret", "resetkeys", "~{jobs}:*", "resetchannels",
        "-@all", "+@read", "+@write", "+@scripting", "+@connection", "+time",
    )  # fmt: skip
    try:
        yield server
    finally:
        server.close()


def test_rediss_with_a_client_certificate_runs_tasks(tls_server: TlsServer) -> None:
    """rediss:// with the CA and a client certificate in the URL query runs tasks over TLS."""
    with connect(f"{tls_server.tls_url()}&namespace=tls") as broker:
        client = broker.backend.client  # type: ignore[attr-defined]  # a RedisBackend, as the URL says
        assert client.connection_pool.connection_class is redis.SSLConnection
        run_one_task(broker)


def test_a_certificate_from_another_ca_is_refused_at_connect(tls_server: TlsServer) -> None:
    """A server certificate the client cannot verify is a configuration error, not an outage."""
    with pytest.raises(InvalidOption, match="certificate"):
        connect(f"rediss://127.0.0.1:{tls_server.tls_port}/0")


def test_rediss_without_a_client_certificate_is_refused(tls_server: TlsServer) -> None:
    """A server that asks for client certificates drops a client without one."""
    with (
        connect(tls_server.tls_url(client_cert=False)) as broker,
        pytest.raises(BackendUnavailable),
    ):
        fault_tasks.echo.using(broker=broker).enqueue(1)


def test_plain_redis_to_the_tls_port_is_refused(tls_server: TlsServer) -> None:
    """redis:// (no TLS) to a TLS port is dropped by the server."""
    plain = f"redis://127.0.0.1:{tls_server.tls_port}/0"
    with connect(plain) as broker, pytest.raises(BackendUnavailable):
        fault_tasks.echo.using(broker=broker).enqueue(1)


@pytest.mark.parametrize(
    "credentials",
    [":default-secret", "worker:worker-secret", "jobs:jobs-secret"],
    ids=["password", "acl-user", "least-privilege-acl-user"],
)
def test_credentials_in_the_url_run_tasks(auth_server: Server, credentials: str) -> None:
    """redis://user:password@ (or a bare password) runs tasks, with least privilege too."""
    url = f"redis://{credentials}@127.0.0.1:{auth_server.port}/0?namespace=jobs"
    with connect(url) as broker:
        run_one_task(broker)


def test_a_user_barred_from_the_namespace_fails_at_connect(auth_server: Server) -> None:
    """An ACL user whose key patterns exclude the namespace is an InvalidOption at connect."""
    url = f"redis://jobs:jobs-secret@127.0.0.1:{auth_server.port}/0?namespace=other"
    with pytest.raises(InvalidOption, match="namespace 'other'"):
        connect(url)


@pytest.mark.parametrize(
    "credentials", ["", "worker:wrong@", ":wrong@"], ids=["none", "wrong-user-password", "wrong"]
)
def test_missing_or_wrong_credentials_fail_at_connect(
    auth_server: Server, credentials: str
) -> None:
    """Refused credentials are an InvalidOption at connect, not an outage to wait out."""
    with pytest.raises(InvalidOption, match="credentials"):
        connect(f"redis://{credentials}127.0.0.1:{auth_server.port}/0")
