"""``python -m benchmarks.instructions``: instructions per operation, counted by callgrind.

On a shared VM, wall-clock figures move by a third from one hour to the
next, so a change worth a few percent cannot be told from noise by timing
it. An instruction count moves by a few percent at most (see the README
in this folder): this counts, with valgrind's
callgrind, what one threadmill operation costs the client process and what
it costs redis-server, so a change to a hot path can be judged by a
repeatable number before the interleaved benchmark (``python -m benchmarks``)
confirms it in time. It needs ``valgrind`` (Debian: ``apt-get install
valgrind``) and ``redis-server``; it takes a few minutes.

Each figure is the instructions counted while the operation ran `n` times,
over `n`, with instrumentation switched on (``callgrind_control -i on``)
only around those calls, so set-up, imports and start-up are not counted.
Instructions are not time: a syscall or a round trip costs time and few
instructions, and the client's and the server's instructions do not run
at the same speed. The client figures count every thread of the process.

Operations, each on a store already past the sizes where Redis keeps small
hashes and sorted sets in a compact (slower to search) encoding:

- ``enqueue``: one `Broker.enqueue` of a task without arguments;
- ``enqueue_many``: per task of one `Broker.enqueue_many` of 5,000;
- ``claim``: per task of `claim` calls of 64 tasks;
- ``decide_many``: per task of `decide_many` calls of 64 successes;
- ``drain`` (client only): per task of a one-thread, prefetch-64 `Worker`
  draining ``incr`` tasks, the benchmark's own task (one redis-py INCR),
  with the worker's two timers (`scheduler.ACK_DELAY`, `scheduler.MARK_DELAY`)
  off in that process: callgrind slows it some fiftyfold, so a 10 ms delay
  would send an acknowledgement every few tasks (the child made 287
  script calls with the timers on, 73 with them off; more on a busier
  machine), and the count would measure valgrind's speed. Off, the calls
  are those of a run at full speed: one claim and one acknowledgement per
  65 tasks;
- ``incr`` (client only): that INCR alone, to subtract from ``drain``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks.peers import _common as common
from benchmarks.server import REPO_ROOT, RedisServer

if TYPE_CHECKING:
    from threadmill_core import Broker, Worker

#: How many times each operation runs (tasks, for the per-task operations).
COUNTS = {
    "enqueue": 1000,
    "enqueue_many": 5000,
    "claim": 640,
    "decide_many": 640,
    "drain": 1280,
    "incr": 1000,
}
SERVER_SIDE = ("enqueue", "enqueue_many", "claim", "decide_many")
#: Tasks run through claim and decide before a measurement: past 512 entries
#: (Redis's default hash-max-listpack-entries), every hash is a hash table.
WARM = 600
BATCH = 64
CALLGRIND = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]
COLLECTED = re.compile(rb"Collected : (\d+)")


def instrument(pid: int, on: bool) -> None:
    subprocess.run(
        ["callgrind_control", "-i", "on" if on else "off", str(pid)],
        check=True,
        capture_output=True,
    )


def collected(output: bytes) -> int:
    found = COLLECTED.findall(output)
    if not found:
        raise RuntimeError(f"callgrind reported no count: {output[-500:]!r}")
    return sum(int(n) for n in found)


# --- the operations, run in a process of their own (`--child`) ------------------------


def _operation(name: str, url: str, n: int) -> Callable[[], object]:
    """Set up operation `name` for `n` runs; return the part to count."""
    import attrs

    from benchmarks.peers.threadmill_peer import broker_url, incr
    from threadmill_core import Lease, connect
    from threadmill_core.models import Decision, TaskResultStatus

    os.environ[common.URL_VARIABLE] = url
    if name == "incr":
        common.incr()  # the client, made outside the count
        return lambda: [common.incr() for _ in range(n)]
    broker = connect(broker_url(url))
    backend = broker.backend

    def claim(count: int) -> list[Lease]:
        leases: list[Lease] = []
        while len(leases) < count:
            got = backend.claim(
                ["default"], worker="w", lease_ttl=timedelta(minutes=5), limit=BATCH
            )
            if not got:  # never loop on an empty queue
                raise RuntimeError(f"claimed {len(leases)} of {count} tasks; no more are ready")
            leases += got
        return leases

    def decide(leases: Sequence[Lease]) -> None:
        for at in range(0, len(leases), BATCH):
            backend.decide_many(
                [
                    Decision(
                        lease=lease,
                        record=attrs.evolve(lease.record, status=TaskResultStatus.SUCCESSFUL),
                    )
                    for lease in leases[at : at + BATCH]
                ]
            )

    def enqueue() -> None:
        for _ in range(n):
            broker.enqueue(incr)

    broker.enqueue_many(incr, [((), {})] * WARM)
    decide(claim(WARM))
    if name == "enqueue":
        return enqueue
    if name == "enqueue_many":
        return lambda: broker.enqueue_many(incr, [((), {})] * n)
    broker.enqueue_many(incr, [((), {})] * n)
    if name == "claim":
        return lambda: claim(n)
    if name == "decide_many":
        leases = claim(n)
        return lambda: decide(leases)
    if name == "drain":
        worker = counted_drain_worker(broker)
        return lambda: worker.run(burst=True)
    raise ValueError(f"unknown operation {name!r}")


def counted_drain_worker(broker: Broker) -> Worker:
    """A one-thread, prefetch-64 worker for a drain under callgrind, its timers off.

    It sets the worker's two timers (`scheduler.ACK_DELAY`,
    `scheduler.MARK_DELAY`) to never in this process, which only measures:
    see the module docstring.
    """
    from threadmill_core import Worker
    from threadmill_core.worker import scheduler

    scheduler.ACK_DELAY = scheduler.MARK_DELAY = float("inf")
    return Worker(broker, threads=1, prefetch=BATCH, maintenance=False)


def _child(name: str, url: str, n: int, pid: int) -> None:
    """Run `name` `n` times, with callgrind counting in process `pid` meanwhile."""
    counted = _operation(name, url, n)
    instrument(pid, True)
    try:
        counted()
    finally:
        instrument(pid, False)


# --- the parent: who is counted, and how ----------------------------------------------


def _run_child(name: str, url: str, n: int, instrument: str, wrapper: Sequence[str] = ()) -> bytes:
    """Run `_child` in a process of its own (under `wrapper`); its stderr."""
    command = [
        *wrapper,
        sys.executable,
        "-m",
        "benchmarks.instructions",
        "--child",
        name,
        url,
        str(n),
        instrument,
    ]
    done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{name}: the client failed: {done.stderr[-800:]!r}")
    return done.stderr


def _client(name: str, url: str, n: int) -> int:
    """Instructions of the client process running `name` `n` times."""
    return collected(_run_child(name, url, n, "self", [*CALLGRIND, "--instr-atstart=no"]))


def _server(name: str, n: int) -> int:
    """Instructions of a redis-server (under callgrind) serving `name` `n` times."""
    with tempfile.TemporaryDirectory(prefix="threadmill-instructions-") as folder:
        log = Path(folder) / "valgrind.log"
        server = RedisServer(
            wrapper=[*CALLGRIND, "--instr-atstart=no"], stderr=log, start_timeout=60
        )
        with server:
            assert server.process is not None  # valgrind runs redis-server in this process
            _run_child(name, server.url, n, str(server.process.pid))
        return collected(log.read_bytes())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.instructions")
    parser.add_argument(
        "--ops", default=",".join(COUNTS), help=f"which, comma-separated: {', '.join(COUNTS)}"
    )
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        name, url, n, pid = args.child
        _child(name, url, int(n), os.getpid() if pid == "self" else int(pid))
        return 0
    for tool in ("valgrind", "callgrind_control"):
        if shutil.which(tool) is None:
            parser.error(f"{tool} not found; install valgrind (Debian: apt-get install valgrind)")
    names = [name.strip() for name in args.ops.split(",") if name.strip()]
    unknown = sorted(set(names) - set(COUNTS))
    if unknown:
        parser.error(f"unknown operation(s): {', '.join(unknown)}")
    print("| operation | runs | client instructions/op | server instructions/op |")
    print("| --- | ---: | ---: | ---: |")
    for name in names:
        n = COUNTS[name]
        with RedisServer() as plain:  # a fresh store for each
            client = _client(name, plain.url, n) / n
        server = f"{_server(name, n) / n:,.0f}" if name in SERVER_SIDE else "-"
        print(f"| {name} | {n:,} | {client:,.0f} | {server} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
