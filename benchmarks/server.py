"""The benchmark's own redis-server, and the worker processes it measures.

The server runs on a free loopback port with persistence off, so no disk
write lands in a measurement. Each worker runs in a process group of its
own, so stopping it stops the processes it spawned too.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import redis

REPO_ROOT = Path(__file__).resolve().parent.parent


class WorkerDied(RuntimeError):
    """A worker process exited while the harness waited on it; the message has its log's tail."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """A redis-server on a free loopback port, owned by this run."""

    def __init__(
        self,
        executable: str = "redis-server",
        *,
        wrapper: Sequence[str] = (),
        stderr: Path | None = None,
        start_timeout: float = 10.0,
    ) -> None:
        """`wrapper` goes before the command (a profiler, say), and `stderr` takes its output."""
        found = shutil.which(executable)
        if found is None:
            raise FileNotFoundError(
                f"{executable} not found; install it (Debian: apt-get install redis-server) "
                "or pass --redis-server PATH"
            )
        self.executable = found
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="threadmill-bench-redis-"))
        self.process: subprocess.Popen[bytes] | None = None
        self.wrapper = list(wrapper)
        self.stderr = stderr
        self.start_timeout = start_timeout

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        args = [
            *self.wrapper,
            self.executable,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--dir", str(self.dir),
            "--daemonize", "no",
            "--maxmemory-policy", "noeviction",
        ]  # fmt: skip
        with contextlib.ExitStack() as files:
            stderr: Any = subprocess.DEVNULL
            if self.stderr is not None:
                stderr = files.enter_context(self.stderr.open("wb"))
            self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=stderr)
        deadline = time.monotonic() + self.start_timeout
        client = redis.Redis(port=self.port)
        try:
            while time.monotonic() < deadline:
                with contextlib.suppress(redis.ConnectionError):
                    if client.ping():
                        return
                if self.process.poll() is not None:
                    break
                time.sleep(0.02)
        finally:
            client.close()
        self.stop()
        raise RuntimeError(f"redis-server did not start on port {self.port}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class WorkerProcess:
    """One worker command in its own process group, its output in `log_path`."""

    def __init__(
        self, command: Sequence[str], env: Mapping[str, str], log_path: Path, cwd: Path = REPO_ROOT
    ) -> None:
        self.command = list(command)
        self.log_path = log_path
        full_env = dict(os.environ)
        full_env.update(env)
        # The peer's own import path first (a baseline's checkout), then this
        # repository, then the caller's.
        paths = [env.get("PYTHONPATH"), str(REPO_ROOT), os.environ.get("PYTHONPATH")]
        full_env["PYTHONPATH"] = os.pathsep.join(path for path in paths if path)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = log_path.open("wb")
        self.process = subprocess.Popen(
            self.command,
            env=full_env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def check(self) -> None:
        """Raise `WorkerDied` if the worker has exited."""
        code = self.process.poll()
        if code is not None:
            raise WorkerDied(f"worker exited with {code}: {self.tail()}")

    def tail(self, lines: int = 8) -> str:
        self._log.flush()
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return " | ".join(text.strip().splitlines()[-lines:])

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM the group, SIGKILL it after `timeout`, and reap the leader."""
        pgid = self.process.pid  # the leader of its own session and group
        if self.process.poll() is None:
            self._signal(pgid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=timeout)
        # Children can outlive a leader that exited: end the whole group.
        self._signal(pgid, signal.SIGKILL)
        self.process.wait()
        self._log.close()

    @staticmethod
    def _signal(pgid: int, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)


@contextlib.contextmanager
def running(
    command: Sequence[str], env: Mapping[str, str], log_path: Path, cwd: Path = REPO_ROOT
) -> Iterator[WorkerProcess]:
    worker = WorkerProcess(command, env, log_path, cwd)
    try:
        yield worker
    finally:
        worker.stop()
