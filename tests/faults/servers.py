"""Real servers for the fault tests: killable ones, TLS and password ones, and a cluster.

Everything here starts processes on loopback ports and owns them; the
fixtures in conftest.py stop them. Missing binaries skip locally and fail
under ``CI=true``, as for the session's server (see tests/conftest.py).
"""

from __future__ import annotations

import datetime
import ipaddress
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import attrs
import pytest
import redis

from tests.conftest import IN_CI, RedisServer, free_port


def require(binary: str) -> str:
    """The path of `binary`; skip the test without it (fail in CI)."""
    path = shutil.which(binary)
    if path is None:
        message = f"{binary} is not installed (Debian: apt-get install redis-server)"
        if IN_CI:
            pytest.fail(f"{message}; CI must run the fault tests")
        pytest.skip(message)
    return path


class Server(RedisServer):
    """A `RedisServer` that can be SIGKILLed and restarted on its port, keeping its data dir.

    Ready means the plain port answers PING, or answers that it wants a
    password (a server started with ``--requirepass`` is ready too).
    """

    def start(self) -> None:
        self.process = subprocess.Popen(
            self.args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(64).startswith((b"+PONG", b"-NOAUTH")):
                        return
            except OSError:
                pass
            if self.process.poll() is not None:
                break
            time.sleep(0.02)
        self.stop()
        pytest.fail(f"redis-server did not start on port {self.port}")

    def kill(self) -> None:
        """SIGKILL the server and wait until it is gone (nothing flushed, nothing said)."""
        if self.process is not None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)
            self.process = None


def durable_server() -> Server:
    """A server that keeps the at-least-once promise across SIGKILL: every write fsynced."""
    return Server("--appendonly", "yes", "--appendfsync", "always")


# --- TLS -----------------------------------------------------------------------------


KEY_USAGES = (
    "digital_signature", "content_commitment", "key_encipherment", "data_encipherment",
    "key_agreement", "key_cert_sign", "crl_sign", "encipher_only", "decipher_only",
)  # fmt: skip


@attrs.frozen
class TlsFiles:
    """A throwaway CA, a server certificate for 127.0.0.1 and a client certificate."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def make_tls_files(directory: Path) -> TlsFiles:
    """Write a fresh CA and certificates signed by it into `directory` (valid for a day)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)

    def name(text: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, text)])

    def write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> Path:
        path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        return path

    def write_cert(cert: x509.Certificate, path: Path) -> Path:
        path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return path

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_usage = dict.fromkeys(KEY_USAGES, False)
    ca_usage.update(digital_signature=True, key_cert_sign=True, crl_sign=True)
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(name("threadmill test CA"))
        .issuer_name(name("threadmill test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(**ca_usage), critical=True)
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )

    def issue(
        common_name: str, usage: x509.ObjectIdentifier, san: bool
    ) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder()
            .subject_name(name(common_name))
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                critical=False,
            )
        )
        if san:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
                ),
                critical=False,
            )
        return builder.sign(ca_key, hashes.SHA256()), key

    server_cert, server_key = issue("127.0.0.1", ExtendedKeyUsageOID.SERVER_AUTH, san=True)
    client_cert, client_key = issue("threadmill worker", ExtendedKeyUsageOID.CLIENT_AUTH, False)
    return TlsFiles(
        ca=write_cert(ca_cert, directory / "ca.crt"),
        server_cert=write_cert(server_cert, directory / "server.crt"),
        server_key=write_key(server_key, directory / "server.key"),
        client_cert=write_cert(client_cert, directory / "client.crt"),
        client_key=write_key(client_key, directory / "client.key"),
    )


class TlsServer(Server):
    """A server whose `tls_port` speaks only TLS and asks clients for a certificate.

    The plain `port` stays open on loopback for the readiness check only.
    """

    def __init__(self, files: TlsFiles) -> None:
        self.tls_port = free_port()
        self.files = files
        super().__init__(
            "--tls-port", str(self.tls_port),
            "--tls-cert-file", str(files.server_cert),
            "--tls-key-file", str(files.server_key),
            "--tls-ca-cert-file", str(files.ca),
            "--tls-auth-clients", "yes",
        )  # fmt: skip

    def tls_url(self, *, client_cert: bool = True) -> str:
        query = f"ssl_ca_certs={self.files.ca}"
        if client_cert:
            query += f"&ssl_certfile={self.files.client_cert}&ssl_keyfile={self.files.client_key}"
        return f"rediss://127.0.0.1:{self.tls_port}/0?{query}"


# --- a cluster -----------------------------------------------------------------------


class Cluster:
    """Three masters on loopback ports, no replicas, every slot covered."""

    def __init__(self) -> None:
        cli = require("redis-cli")
        self.nodes: list[Server] = []
        try:
            for _ in range(3):
                # The bus port defaults to port + 10000, past 65535 for many free ports.
                options = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
                self.nodes.append(Server(*options, "--cluster-port", str(free_port())))
            subprocess.run(
                [cli, "--cluster", "create",
                 *(f"127.0.0.1:{node.port}" for node in self.nodes),
                 "--cluster-replicas", "0", "--cluster-yes"],
                check=True, capture_output=True, timeout=60,
            )  # fmt: skip
            self._wait_until_ok(cli)
        except BaseException:
            self.close()
            raise

    def _wait_until_ok(self, cli: str) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            states = [self._info(cli, node) for node in self.nodes]
            if all("cluster_state:ok" in state for state in states):
                return
            time.sleep(0.1)
        pytest.fail("the cluster did not reach cluster_state:ok within 30 s")

    @staticmethod
    def _info(cli: str, node: Server) -> str:
        command = [cli, "-p", str(node.port), "cluster", "info"]
        return subprocess.run(command, capture_output=True, text=True, timeout=10).stdout

    def url(self, namespace: str) -> str:
        """A cluster URL through the first node; the client finds the others."""
        return f"redis+cluster://127.0.0.1:{self.nodes[0].port}?namespace={namespace}"

    def close(self) -> None:
        for node in self.nodes:
            node.close()


# --- Sentinel ------------------------------------------------------------------------


class SentinelServer(Server):
    """The redis-server binary running as a sentinel (``--sentinel``) that monitors `master`.

    A sentinel rewrites its configuration file as it learns, so each has a
    file of its own in its data dir. A master is judged down after a second
    without an answer, and a failover gives up after five.
    """

    def __init__(
        self,
        name: str,
        master_port: int,
        quorum: int,
        passwords: tuple[str, str] | None = None,
        extra: Sequence[str] = (),
    ) -> None:
        executable = require("redis-server")
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="threadmill-sentinel-"))
        config = self.dir / "sentinel.conf"
        config.write_text(
            f"sentinel monitor {name} 127.0.0.1 {master_port} {quorum}\n"
            f"sentinel down-after-milliseconds {name} 1000\n"
            f"sentinel failover-timeout {name} 5000\n"
            f"sentinel parallel-syncs {name} 1\n"
        )
        if passwords is not None:  # (the master's, the sentinels' own)
            master_password, own = passwords
            with config.open("a") as out:
                out.write(f"sentinel auth-pass {name} {master_password}\nrequirepass {own}\n")
        self.args = [
            executable, str(config), "--sentinel",
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", str(self.dir),
            "--daemonize", "no",
            *extra,
        ]  # fmt: skip
        self.process = None
        self.start()


class SentinelDeployment:
    """A master, one replica of it and three sentinels (quorum 2), on loopback ports.

    With `passwords` (the master's, the sentinels'), the master and the
    replica want the first (``requirepass``, ``masterauth``), the sentinels
    the second. With `tls`, every one of them also listens for TLS on a port
    of its own, and they speak TLS to each other: the sentinels name
    those ports, and `url` is a ``rediss+sentinel://`` one. `master_at` and
    `replica_at` are the ports the sentinels name for the two servers.
    """

    def __init__(
        self,
        name: str = "threadmill-master",
        passwords: tuple[str, str] | None = None,
        tls: TlsFiles | None = None,
    ) -> None:
        self.name = name
        self.passwords = passwords
        self.tls = tls
        # No wait before a full sync (Redis 7 waits 5 s for more replicas by default).
        data = ["--repl-diskless-sync-delay", "0"]
        if passwords is not None:
            data += ["--requirepass", passwords[0], "--masterauth", passwords[0]]
        self.servers: list[Server] = []
        self.sentinels: list[SentinelServer] = []
        self.sentinel_ports: list[int] = []
        try:
            master_tls, self.master_at = self._tls()
            self.master = Server(*data, *master_tls)
            self.servers.append(self.master)
            self.master_at = self.master_at or self.master.port
            replica_tls, self.replica_at = self._tls()
            replicating = ["--replicaof", "127.0.0.1", str(self.master_at)]
            self.replica = Server(*data, *replica_tls, *replicating)
            self.servers.append(self.replica)
            self.replica_at = self.replica_at or self.replica.port
            for _ in range(3):
                sentinel_tls, port = self._tls()
                self.sentinels.append(
                    SentinelServer(name, self.master_at, 2, passwords, sentinel_tls)
                )
                self.sentinel_ports.append(port or self.sentinels[-1].port)
            self._wait_until_watched()
        except BaseException:
            self.close()
            raise

    def _tls(self) -> tuple[list[str], int]:
        """Options for one more server with TLS on a port of its own, and that port (0: no TLS)."""
        if self.tls is None:
            return [], 0
        port = free_port()
        files = self.tls
        return [
            "--tls-port", str(port),
            "--tls-cert-file", str(files.server_cert),
            "--tls-key-file", str(files.server_key),
            "--tls-ca-cert-file", str(files.ca),
            "--tls-auth-clients", "no",
            "--tls-replication", "yes",
        ], port  # fmt: skip

    def url(self, namespace: str, db: int = 0) -> str:
        hosts = ",".join(f"127.0.0.1:{port}" for port in self.sentinel_ports)
        if self.tls is not None:
            return (
                f"rediss+sentinel://{hosts}/{self.name}/{db}?namespace={namespace}"
                f"&ssl_ca_certs={self.tls.ca}"
            )
        return f"redis+sentinel://{hosts}/{self.name}/{db}?namespace={namespace}"

    def master_port(self) -> int:
        """The port of the master the sentinels name now."""
        with self._sentinel(0) as sentinel:
            _host, port = sentinel.sentinel_get_master_addr_by_name(self.name)
        return int(port)

    def _wait_until_watched(self) -> None:
        """Until the replica is in sync and every sentinel knows the replica and the others."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self._watched():
                return
            time.sleep(0.1)
        pytest.fail("the sentinels did not find the replica and each other within 30 s")

    def _sentinel(self, index: int, **options: object) -> redis.Redis:
        password = self.passwords[1] if self.passwords else None
        return redis.Redis(port=self.sentinels[index].port, password=password, **options)  # type: ignore[arg-type]  # redis-py's keywords

    def _watched(self) -> bool:
        password = self.passwords[0] if self.passwords else None
        with redis.Redis(port=self.replica.port, password=password) as replica:
            if replica.info("replication").get("master_link_status") != "up":
                return False
        for index in range(len(self.sentinels)):
            with self._sentinel(index, decode_responses=True) as sentinel:
                state = sentinel.sentinel_master(self.name)
                if int(state["num-slaves"]) < 1 or int(state["num-other-sentinels"]) < 2:
                    return False
        return True

    def close(self) -> None:
        for server in [*self.sentinels, *self.servers]:
            server.close()
