"""threadmill from another checkout, measured as one more system of the same run (``--baseline``).

``python -m benchmarks --baseline ../before`` (a ``git worktree add ../before
666a0f9``, say) measures that checkout's threadmill beside this one's, each
measurement interleaved with the others as for any peer, so a change can be
judged against the commit before it in one run on one machine.

Both sides of this peer run in processes of their own, as every system's
do: the producer in `benchmarks.peers.producer_driver`, driven over a pipe
(see `benchmarks.peers.own_process`), and the worker as `ThreadmillPrefetch64Peer`
starts it. Both import threadmill from the
checkout (its ``threadmill_core``, ``threadmill_memory`` and
``threadmill_redis``, linked into a folder that comes first on the import
path; ``python -P`` keeps the working directory off it) and the benchmark's
tasks from this repository, so the same tasks run on both versions. The
peer is named ``threadmill@COMMIT``; the report compares threadmill with it
like any peer, and leaves it out of the floors.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from benchmarks.peers.own_process import InOwnProcess, ProducerProcess
from benchmarks.peers.threadmill_peer import ThreadmillPrefetch64Peer
from benchmarks.server import REPO_ROOT

#: The packages a checkout's threadmill is imported from.
PACKAGES = ("threadmill_core", "threadmill_memory", "threadmill_redis")
#: What names a baseline in the report (see `benchmarks.floors`).
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


class CheckoutPeer(InOwnProcess):
    """threadmill as the checkout at `checkout` has it, producer and worker out of process."""

    def __init__(self, redis_url: str, checkout: Path) -> None:
        self.checkout = checkout.resolve()
        missing = [p for p in PACKAGES if not (self.checkout / p / "__init__.py").is_file()]
        if missing:
            raise ImportError(
                f"{self.checkout} has no {', '.join(missing)}: not a threadmill checkout"
            )
        found = commit_of(self.checkout)
        #: The commit, marked "+changes" where the checkout has some; else the folder's name.
        self.commit = self.checkout.name if found is None else found[0] + "+changes" * found[1]
        self._links = Path(tempfile.mkdtemp(prefix="threadmill-baseline-"))
        atexit.register(shutil.rmtree, self._links, ignore_errors=True)
        for package in PACKAGES:
            (self._links / package).symlink_to(self.checkout / package, target_is_directory=True)
        name = f"{PREFIX}{self.commit}"
        producer = ProducerProcess(
            name, "threadmill", redis_url, self.worker_env(), python_options=["-P"]
        )
        # At --prefetch 64, as threadmill@prefetch64: a checkout from before the adaptive
        # default (issue 38) would run with a prefetch of one, and compare with nothing.
        super().__init__(ThreadmillPrefetch64Peer(redis_url), producer)
        self.name = name  # type: ignore[misc]  # per instance, by design

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
        where = self._producer.start()["threadmill_core"]
        if where is None or not Path(where).resolve().is_relative_to(self.checkout):
            self._producer.close()  # a process importing the wrong threadmill is no use later
            raise ImportError(f"the baseline's producer imported threadmill from {where}")

    def worker_command(self, threads: int) -> list[str]:
        command = self.peer.worker_command(threads)
        return [command[0], "-P", *command[1:]]  # python -P: the checkout's, not the cwd's

    def describe(self, threads: int) -> str:
        return f"{self.peer.describe(threads)}, from {self.checkout}"
