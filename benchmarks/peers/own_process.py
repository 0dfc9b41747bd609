"""Each system's producer in a process of its own, so every system is timed on equal terms.

The harness's own process holds every peer's library, the results so far
and, late in a run, what the depth scan left behind; a producer timed in it
pays for that in each garbage collection, and more the longer the run goes,
while one in a fresh process does not. So every system's producer runs in
`benchmarks.peers.producer_driver`, started anew for each measurement
(`Peer.setup`) and driven over a pipe; it times its own calls, so the pipe
is not in the figures. Workers were processes of their own already.
"""

from __future__ import annotations

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
    """A `producer_driver` of peer `peer_name`, started by `start` and ended by `stop`."""

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
        """Start the process and set its producer up; the setup's answer."""
        self._process = subprocess.Popen(
            self._command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=self._env,
            cwd=REPO_ROOT,
        )
        try:
            return self.ask("setup")
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Tear the producer down and end the process (nothing if not started)."""
        process, self._process = self._process, None
        if process is None:
            return
        try:
            if process.poll() is None:
                self._send(process, "teardown")
        finally:
            if process.stdin is not None:
                process.stdin.close()
            process.wait(timeout=30)

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

    def __init__(self, peer: Peer) -> None:
        super().__init__(peer.redis_url)
        self.peer = peer
        self.name = peer.name  # type: ignore[misc]  # per instance: the peer's
        self.distribution = peer.distribution  # type: ignore[misc]
        self.has_batch = peer.has_batch  # type: ignore[misc]
        self._producer = ProducerProcess(peer.name, peer.name, peer.redis_url)

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
