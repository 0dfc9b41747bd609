"""The measurements: each one runs for one system and returns named figures.

Every measurement starts from an empty server (FLUSHALL) and leaves no
worker behind. How each figure is taken:

- **enqueue** (µs/task): a loop of `n` single enqueue calls, timed inside
  the peer module around the loop only; **enqueue_many** the same through
  the peer's batch API, where it has one.
- **drain** (tasks/s): the backlog is fully enqueued before the worker
  starts. The harness polls the counter every `POLL_S` and takes the rate
  between the first look that sees a task done and the look that sees the
  last one, so worker start-up is not counted and polling jitter only moves
  both ends by a few milliseconds.
- **latency** (ms): one idle worker; every few tens of milliseconds (random
  spacing) one ``started(time.time())`` is enqueued and its start awaited.
- **idle commands/s**: the same worker after the latency samples, producer
  closed, settled; ``INFO commandstats`` before and after a quiet window
  counts every command the server ran, those inside Lua scripts included;
  ``MONITOR`` over the same window tells which the clients sent (requests,
  i.e. round trips) from those the scripts ran.
- **memory** (bytes/task): ``used_memory`` after a backlog of `n` tasks
  minus before, less any change in the Lua script cache, over `n`.
- **depth** (tasks/s): the drain rate over the first `window` tasks of a
  backlog of `depth` tasks, the median of `drains` drains, each from a
  backlog of its own.
- **cold start** (ms): one ``incr()`` is enqueued with no worker running;
  then the worker command is launched as a user would (a subprocess), and
  the figure is the time from just before the launch to the first look at
  the counter that sees the task done (looks every `POLL_S`).
"""

from __future__ import annotations

import collections
import contextlib
import random
import re
import socket
import statistics
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

import redis

from benchmarks.peers import Peer, Unsupported
from benchmarks.peers._common import COUNT_KEY, STARTED_KEY, URL_VARIABLE
from benchmarks.server import WorkerProcess, running

#: How often the harness reads the counter during a drain.
POLL_S = 0.002
#: How long a worker may take to run its first task (Celery's start-up is the slowest).
START_TIMEOUT_S = 60.0

Figures = dict[str, Any]


class MeasurementFailed(RuntimeError):
    """A measurement could not produce its figure; the message says why."""


class Bench:
    """The server, an admin client on it, and where worker logs go."""

    def __init__(self, redis_url: str, log_dir: Path | None = None) -> None:
        self.redis_url = redis_url
        self.log_dir = log_dir or Path(".")
        self.admin = redis.Redis.from_url(redis_url)
        self.rng = random.Random(7)

    def close(self) -> None:
        self.admin.close()

    def flush(self) -> None:
        self.admin.flushall()

    def worker(
        self, peer: Peer, threads: int, label: str
    ) -> contextlib.AbstractContextManager[WorkerProcess]:
        env = {URL_VARIABLE: self.redis_url, **peer.worker_env()}
        log_path = self.log_dir / f"{label}-{peer.name}-{threads}t.log"
        return running(peer.worker_command(threads), env, log_path, peer.worker_cwd())

    # --- waiting on the workers ----------------------------------------------------------

    def wait_count(
        self, target: int, worker: WorkerProcess, timeout: float
    ) -> list[tuple[float, int]]:
        """Poll the counter until it reaches `target`; every (time, count) where it changed."""
        get = self.admin.get
        samples: list[tuple[float, int]] = []
        last = -1
        first_deadline = time.monotonic() + START_TIMEOUT_S
        deadline = first_deadline + timeout
        while True:
            value = cast("bytes | None", get(COUNT_KEY))
            now = time.perf_counter()
            count = int(value) if value else 0
            if count != last:
                samples.append((now, count))
                last = count
            if count >= target:
                return samples
            clock = time.monotonic()
            if (count == 0 and clock > first_deadline) or clock > deadline:
                worker.check()
                raise MeasurementFailed(
                    f"the counter reached {count} of {target}; worker log: {worker.tail()}"
                )
            if count == 0:
                worker.check()
            time.sleep(POLL_S)

    def drain_rate(self, target: int, worker: WorkerProcess) -> float:
        samples = self.wait_count(target, worker, timeout=60 + target / 50)
        started = [(t, c) for t, c in samples if c > 0]
        (t1, c1), (t2, c2) = started[0], started[-1]
        if c2 <= c1 or t2 <= t1:
            raise MeasurementFailed("the drain finished between two looks at the counter")
        return (c2 - c1) / (t2 - t1)

    def wait_started(self, worker: WorkerProcess, timeout: float) -> float:
        """The next enqueue-to-start latency a ``started`` task reports, in seconds."""
        deadline = time.monotonic() + timeout
        while True:
            reply = cast("list[bytes] | None", self.admin.blpop([STARTED_KEY], timeout=0.5))
            if reply is not None:
                return float(reply[1])
            worker.check()
            if time.monotonic() > deadline:
                raise MeasurementFailed(f"a probe did not start in {timeout:.0f} s")

    # --- server statistics ----------------------------------------------------------------

    def command_calls(self) -> dict[str, int]:
        stats = cast("dict[str, Any]", self.admin.info("commandstats"))
        return {
            name.removeprefix("cmdstat_"): int(value["calls"])
            for name, value in stats.items()
            if isinstance(value, dict)
        }

    def monitor(
        self, seconds: float, stop: threading.Event | None = None
    ) -> collections.Counter[tuple[str, str]]:
        """``MONITOR`` for `seconds` (or until `stop` is set): how often each (source, command) ran.

        The source is ``lua`` for a command a script ran, else ``client``.
        MONITOR leaves out administrative commands (CONFIG, ...), which
        ``INFO commandstats`` still counts.
        """
        parts = urlsplit(self.redis_url)
        counts: collections.Counter[tuple[str, str]] = collections.Counter()
        line = re.compile(rb'^\+[0-9.]+ \[\d+ ([^\]]+)\] "([^"]+)"')
        deadline = time.monotonic() + seconds
        with socket.create_connection((parts.hostname, parts.port or 6379)) as sock:
            sock.sendall(b"MONITOR\r\n")
            buffer = b""
            ok = False
            while (left := deadline - time.monotonic()) > 0:
                if stop is not None and stop.is_set():
                    break
                sock.settimeout(min(left, 0.1))
                try:
                    chunk = sock.recv(65536)
                except TimeoutError:
                    continue
                if not chunk:
                    break
                buffer += chunk
                *complete, buffer = buffer.split(b"\r\n")
                for text in complete:
                    if not ok:  # the +OK that answers MONITOR itself
                        ok = True
                        continue
                    match = line.match(text)
                    if match:
                        source = "lua" if match.group(1) == b"lua" else "client"
                        counts[source, match.group(2).decode().lower()] += 1
        return counts

    def memory(self) -> tuple[int, int]:
        """``used_memory`` and the Lua script cache's part of it, in bytes."""
        info = cast("dict[str, Any]", self.admin.info("memory"))
        return int(info["used_memory"]), int(info.get("used_memory_scripts", 0))


@contextlib.contextmanager
def producing(peer: Peer) -> Iterator[Peer]:
    peer.setup()
    try:
        yield peer
    finally:
        peer.teardown()


def enqueue_and_drain(bench: Bench, peer: Peer, n: int, label: str) -> Figures:
    """Single enqueues of `n` tasks, then a one-thread worker drains them."""
    bench.flush()
    with producing(peer):
        seconds = peer.enqueue(n)
    figures: Figures = {"enqueue_us": seconds / n * 1e6}
    with bench.worker(peer, 1, label) as worker:
        figures["drain_1x1"] = bench.drain_rate(n, worker)
    return figures


def batch_and_drain(
    bench: Bench, peer: Peer, n: int, threads: int, label: str, *, batches: int = 1
) -> Figures:
    """Batch enqueue of `n` tasks where the peer has one, then a `threads`-thread worker drains.

    The batch figure is the median of `batches` batches, each by a producer
    of its own into an empty store; the worker drains the last.
    """
    figures: Figures = {}
    if peer.has_batch:
        times = []
        for _ in range(batches):
            bench.flush()
            with producing(peer):
                times.append(peer.enqueue_batch(n) / n * 1e6)
        figures["enqueue_batch_us"] = statistics.median(times)
    else:
        bench.flush()
        with producing(peer):
            peer.fill(n)
    try:
        worker_context = bench.worker(peer, threads, label)
    except Unsupported as exc:
        figures["drain_1xN"] = None
        figures["notes"] = str(exc)
        return figures
    with worker_context as worker:
        figures["drain_1xN"] = bench.drain_rate(n, worker)
    return figures


def latency_and_idle(
    bench: Bench, peer: Peer, samples: int, idle_seconds: float, settle: float, label: str
) -> Figures:
    """Enqueue-to-start latency against an idle one-thread worker, then its idle command rate."""
    bench.flush()
    latencies: list[float] = []
    with bench.worker(peer, 1, label) as worker:
        with producing(peer):
            peer.send_probe()  # the worker is up once this one has run
            bench.wait_started(worker, START_TIMEOUT_S)
            time.sleep(min(settle, 1.0))
            for _ in range(samples):
                time.sleep(bench.rng.uniform(0.005, 0.045))
                peer.send_probe()
                latencies.append(bench.wait_started(worker, 15.0) * 1000)
        # Only the worker talks to the server now (and our two INFO calls).
        time.sleep(settle)
        before = bench.command_calls()
        begin = time.perf_counter()
        monitored = bench.monitor(idle_seconds)
        after = bench.command_calls()
        elapsed = time.perf_counter() - begin
        worker.check()
    # Ours: the first INFO counts itself in `after`, and the MONITOR call.
    before["info"] = before.get("info", 0) + 1
    before["monitor"] = before.get("monitor", 0) + 1
    per_command = {
        name: (calls - before.get(name, 0)) / elapsed
        for name, calls in sorted(after.items())
        if calls - before.get(name, 0) > 0
    }
    requests = sum(n for (source, _), n in monitored.items() if source == "client")
    quantiles = statistics.quantiles(latencies, n=100, method="inclusive")
    return {
        "latency_p50_ms": statistics.median(latencies),
        "latency_p99_ms": quantiles[98],
        "latency_samples_ms": [round(x, 3) for x in latencies],
        "idle_cmds_per_s": sum(per_command.values()),
        "idle_requests_per_s": requests / idle_seconds,
        "idle_commands": {name: round(rate, 3) for name, rate in per_command.items()},
        "idle_monitor": {
            f"{source}:{name}": round(n / idle_seconds, 3)
            for (source, name), n in sorted(monitored.items())
        },
    }


def memory_per_task(bench: Bench, peer: Peer, n: int) -> Figures:
    """Redis memory per queued task, for a backlog of `n` with no worker running."""
    bench.flush()
    # Both looks with no producer connected: a producer that connects when it is set
    # up (threadmill's) would otherwise have its client buffers in the first look only
    # (about 27 KB, 3 B/task of 10,000; `benchmarks.redis_footprint`).
    used_before, scripts_before = bench.memory()
    with producing(peer):
        peer.fill(n)
    # The producer's connections are closed: their buffers no longer count.
    time.sleep(0.1)
    used_after, scripts_after = bench.memory()
    grown = (used_after - used_before) - (scripts_after - scripts_before)
    return {"memory_bytes_per_task": grown / n}


def cold_start(bench: Bench, peer: Peer, label: str) -> Figures:
    """Milliseconds from launching a one-thread worker to its first task having run.

    The task is enqueued before the worker starts, so the figure is the
    worker's start-up (interpreter, imports, connecting, first claim) plus
    one task, as a user waits for it after typing the command.
    """
    bench.flush()
    with producing(peer):
        peer.enqueue(1)
    begin = time.perf_counter()
    with bench.worker(peer, 1, label) as worker:
        samples = bench.wait_count(1, worker, timeout=0.0)
    return {"cold_start_ms": (samples[-1][0] - begin) * 1000}


def depth_rate(
    bench: Bench, peer: Peer, depth: int, window: int, label: str, *, drains: int = 1
) -> Figures:
    """Drain rate over the first `window` tasks of a backlog of `depth`: the median of `drains`.

    Each drain starts from a backlog of its own and a worker of its own.
    """
    rates = []
    for _ in range(drains):
        bench.flush()
        with producing(peer):
            peer.fill(depth)
        with bench.worker(peer, 1, label) as worker:
            rates.append(bench.drain_rate(min(window, depth), worker))
    return {"depth_rate": statistics.median(rates)}


#: The hoarding measurement (issue 38): this many tasks of `threadmill_peer.NAP` seconds ...
HOARD_TASKS = 40
#: ... on this many worker processes of one thread each.
HOARD_PROCESSES = 2


def hoarding(bench: Bench, peer: Peer, label: str) -> Figures:
    """40 tasks of 100 ms, then two one-thread worker processes: the makespan and its ratio to
    the ideal (40 x 0.1 s / 2 = 2 s). A worker that prefetches long tasks holds what the
    other could run. The makespan runs from the first look that sees a task done, less one
    task's run, to the look that sees the last (threadmill only: its `nap` task)."""
    from benchmarks.peers.threadmill_peer import NAP, enqueue_naps

    bench.flush()
    enqueue_naps(bench.redis_url, HOARD_TASKS)
    command = list(peer.worker_command(1))
    command[command.index("--processes") + 1] = str(HOARD_PROCESSES)
    env = {URL_VARIABLE: bench.redis_url, **peer.worker_env()}
    log_path = bench.log_dir / f"{label}-{peer.name}-{HOARD_PROCESSES}p.log"
    with running(command, env, log_path, peer.worker_cwd()) as worker:
        samples = bench.wait_count(HOARD_TASKS, worker, timeout=60)
    done = [t for t, count in samples if count > 0]
    makespan = done[-1] - done[0] + NAP
    ideal = HOARD_TASKS * NAP / HOARD_PROCESSES
    return {"hoard_makespan_s": makespan, "hoard_ratio": makespan / ideal}
