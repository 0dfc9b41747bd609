"""threadmill from another checkout, measured as one more system of the same run (``--baseline``).

``python -m benchmarks --baseline ../before`` (a ``git worktree add ../before
666a0f9``, say) measures that checkout's threadmill beside this one's, each
measurement interleaved with the others as for any peer, so a change can be
judged against the commit before it in one run on one machine.

Two versions of one package cannot share a process, so both sides of this
peer run in processes of their own: the producer in
`benchmarks.peers.checkout_driver`, driven over a pipe (it times its own
calls, as `ThreadmillPeer` does, so the pipe is not in the figures), and the
worker as `ThreadmillPeer` starts it. Both import threadmill from the
checkout (its ``threadmill_core``, ``threadmill_memory`` and
``threadmill_redis``, linked into a folder that comes first on the import
path; ``python -P`` keeps the working directory off it) and the benchmark's
tasks from this repository, so the same tasks run on both versions. The
peer is named ``threadmill@COMMIT``; the report compares threadmill with it
like any peer, and leaves it out of the floors.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, ClassVar

from benchmarks.peers import Peer
from benchmarks.peers._common import URL_VARIABLE
from benchmarks.peers.threadmill_peer import ThreadmillPeer
from benchmarks.server import REPO_ROOT

#: The packages a checkout's threadmill is imported from.
PACKAGES = ("threadmill_core", "threadmill_memory", "threadmill_redis")
#: What names a baseline in the report (see `benchmarks.report.floors`).
PREFIX = "threadmill@"


def commit_of(checkout: Path) -> tuple[str, bool] | None:
    """The short commit a git checkout is at, and whether it has uncommitted changes; or None."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=checkout, capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=checkout, capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return None
    return commit, bool(dirty)


class CheckoutPeer(Peer):
    """threadmill as the checkout at `checkout` has it, producer and worker out of process."""

    name: ClassVar[str] = "threadmill@checkout"  # each instance names its commit
    distribution: ClassVar[str] = "threadmill"
    has_batch: ClassVar[bool] = True

    def __init__(self, redis_url: str, checkout: Path) -> None:
        super().__init__(redis_url)
        self.checkout = checkout.resolve()
        missing = [p for p in PACKAGES if not (self.checkout / p / "__init__.py").is_file()]
        if missing:
            raise ImportError(
                f"{self.checkout} has no {', '.join(missing)}: not a threadmill checkout"
            )
        found = commit_of(self.checkout)
        #: The commit, marked "+changes" where the checkout has some; else the folder's name.
        self.commit = self.checkout.name if found is None else found[0] + "+changes" * found[1]
        self.name = f"{PREFIX}{self.commit}"  # type: ignore[misc]  # per instance, by design
        self._links = Path(tempfile.mkdtemp(prefix="threadmill-baseline-"))
        atexit.register(shutil.rmtree, self._links, ignore_errors=True)
        for package in PACKAGES:
            (self._links / package).symlink_to(self.checkout / package, target_is_directory=True)
        self._driver: subprocess.Popen[str] | None = None

    @property
    def version(self) -> str:
        return self.commit

    def worker_env(self) -> dict[str, str]:
        """The checkout's packages first on the import path, then this repository's benchmarks."""
        return {"PYTHONPATH": f"{self._links}{os.pathsep}{REPO_ROOT}"}

    def worker_cwd(self) -> Path:
        """The folder of the checkout's packages: a worker that puts the directory it runs in
        first on `sys.path` (``threadmill worker`` does) must find them there, not this
        repository's (the benchmark's tasks are on PYTHONPATH, after them)."""
        return self._links

    def setup(self) -> None:
        env = {**os.environ, URL_VARIABLE: self.redis_url, **self.worker_env()}
        self._driver = subprocess.Popen(
            [sys.executable, "-P", "-m", "benchmarks.peers.checkout_driver"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=REPO_ROOT,
        )
        where = self._ask("setup")["threadmill_core"]
        if not Path(where).resolve().is_relative_to(self.checkout):
            self.teardown()
            raise ImportError(f"the baseline's producer imported threadmill from {where}")

    def teardown(self) -> None:
        driver, self._driver = self._driver, None
        if driver is None:
            return
        try:
            self._send(driver, "teardown")
        finally:
            if driver.stdin is not None:
                driver.stdin.close()
            driver.wait(timeout=30)

    def enqueue(self, n: int) -> float:
        return float(self._ask("enqueue", n=n)["seconds"])

    def enqueue_batch(self, n: int) -> float:
        return float(self._ask("enqueue_batch", n=n)["seconds"])

    def send_probe(self) -> None:
        self._ask("send_probe")

    def worker_command(self, threads: int) -> list[str]:
        command = ThreadmillPeer(self.redis_url).worker_command(threads)
        return [command[0], "-P", *command[1:]]  # python -P: the checkout's, not the cwd's

    def describe(self, threads: int) -> str:
        return f"{ThreadmillPeer(self.redis_url).describe(threads)}, from {self.checkout}"

    def _ask(self, op: str, **arguments: Any) -> dict[str, Any]:
        if self._driver is None:
            raise RuntimeError(f"{self.name}: set up first")
        return self._send(self._driver, op, **arguments)

    def _send(self, driver: subprocess.Popen[str], op: str, **arguments: Any) -> dict[str, Any]:
        assert driver.stdin is not None
        assert driver.stdout is not None
        driver.stdin.write(json.dumps({"op": op, **arguments}) + "\n")
        driver.stdin.flush()
        line = driver.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.name}: the producer process ended (exit {driver.poll()})")
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"{self.name}: {answer['error']}")
        return answer
