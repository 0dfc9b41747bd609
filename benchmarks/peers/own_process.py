"""Each system's producer in a process of its own, so every system is timed on equal terms.

The harness's own process holds every peer's library, the results so far
and, late in a run, what the depth scan left behind; a producer timed in it
pays for that in its garbage collections, and more the longer the run goes.
So every system's producer runs in `benchmarks.peers.producer_driver`, one
process per system for the whole run, driven over a pipe; it times its own
calls, so the pipe is not in the figures. The process outlives the
measurements, as an application's would: `Peer.setup` and `Peer.teardown`
open and close the producer in it (a new broker or client each time), and
what a library does once per process (an import it puts off to the first
call, say) is paid in the first measurement only, which the medians leave
out. Workers were processes of their own already.
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.peers import Peer, Unsupported
from benchmarks.peers._common import URL_VARIABLE
from benchmarks.server import REPO_ROOT


class ProducerProcess:
    """A `producer_driver` of peer `peer_name`: its process, started on first use, and requests."""

    def __init__(
        self,
        label: str,
        peer_name: str,
        redis_url: str,
        env: Mapping[str, str] = {},
        python_options: Sequence[str] = (),
    ) -> None:
        self.label = label
        self._command = [
            sys.executable,
            *python_options,
            "-m",
            "benchmarks.peers.producer_driver",
            peer_name,
        ]
        self._env = {**os.environ, URL_VARIABLE: redis_url, **env}
        self._process: subprocess.Popen[str] | None = None

    def start(self) -> dict[str, Any]:
        """Set the producer up, in the process (started on first use); the setup's answer."""
        if self._process is None or self._process.poll() is not None:
            self._process = subprocess.Popen(
                self._command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env=self._env,
                cwd=REPO_ROOT,
            )
            atexit.register(self.close)
        try:
            return self.ask("setup")
        except BaseException:
            self.close()
            raise

    def stop(self) -> None:
        """Tear the producer down; the process stays for the next `start`."""
        if self._process is not None and self._process.poll() is None:
            self.ask("teardown")

    def close(self) -> None:
        """End the process (nothing if none runs)."""
        process, self._process = self._process, None
        if process is None:
            return
        if process.stdin is not None:
            process.stdin.close()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def ask(self, op: str, **arguments: Any) -> dict[str, Any]:
        if self._process is None:
            raise RuntimeError(f"{self.label}: set up first")
        return self._send(self._process, op, **arguments)

    def _send(self, process: subprocess.Popen[str], op: str, **arguments: Any) -> dict[str, Any]:
        assert process.stdin is not None
        assert process.stdout is not None
        process.stdin.write(json.dumps({"op": op, **arguments}) + "\n")
        process.stdin.flush()
        line = process.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.label}: the producer process ended (exit {process.poll()})")
        answer: dict[str, Any] = json.loads(line)
        if "unsupported" in answer:
            raise Unsupported(answer["unsupported"])
        if "error" in answer:
            raise RuntimeError(f"{self.label}: {answer['error']}")
        return answer


class InOwnProcess(Peer):
    """`peer`, its producer in a `ProducerProcess`; its worker as `peer` runs it."""

    def __init__(self, peer: Peer, producer: ProducerProcess | None = None) -> None:
        super().__init__(peer.redis_url)
        self.peer = peer
        self.name = peer.name  # type: ignore[misc]  # per instance: the peer's
        self.distribution = peer.distribution  # type: ignore[misc]
        self.has_batch = peer.has_batch  # type: ignore[misc]
        self._producer = producer or ProducerProcess(peer.name, peer.name, peer.redis_url)

    @property
    def version(self) -> str:
        return self.peer.version

    def setup(self) -> None:
        self._producer.start()

    def teardown(self) -> None:
        self._producer.stop()

    def enqueue(self, n: int) -> float:
        return float(self._producer.ask("enqueue", n=n)["seconds"])

    def enqueue_batch(self, n: int) -> float:
        return float(self._producer.ask("enqueue_batch", n=n)["seconds"])

    def fill(self, n: int) -> None:
        self._producer.ask("fill", n=n)

    def send_probe(self) -> None:
        self._producer.ask("send_probe")

    def worker_command(self, threads: int) -> list[str]:
        return self.peer.worker_command(threads)

    def worker_env(self) -> dict[str, str]:
        return self.peer.worker_env()

    def worker_cwd(self) -> Path:
        return self.peer.worker_cwd()

    def describe(self, threads: int) -> str:
        return self.peer.describe(threads)
