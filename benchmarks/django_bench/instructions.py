"""``python -m benchmarks.django_bench.instructions``: what the Django adapter costs a task.

The Django benchmark's adapter floor (threadmill_django draining at least
85 % as fast as threadmill's own API) is a ratio of two drains of a fifth
of a second each, which move by a third from run to run on a shared VM.
This counts instead, with callgrind as `benchmarks.instructions` does, the
client instructions per task of the same drain both ways: ``incr`` tasks
(one redis-py INCR each) enqueued through threadmill's API or through
Django's (``benchmarks.django_bench.tasks.incr``), then drained by an
in-process `Worker` with one thread and the benchmark's prefetch, its
timers off and instrumentation on only while it runs (see
`benchmarks.instructions.counted_drain_worker`). Each way is counted ``--runs``
times and the median is printed (a threaded drain's count moves by a few
percent from run to run), with the ratio of the two.

Needs Python 3.12+ with Django (the Django benchmark's venv, see
``benchmarks/django_bench/README.md``), ``valgrind`` and ``redis-server``;
no database is used.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from benchmarks.instructions import CALLGRIND, collected, counted_drain_worker, instrument
from benchmarks.peers import _common as common
from benchmarks.server import REPO_ROOT, RedisServer

if TYPE_CHECKING:
    from threadmill_core import Worker

WAYS = ("threadmill", "threadmill_django")


def prepared_drain(way: str, url: str, n: int) -> Worker:
    """`n` tasks enqueued `way`, and the worker that will drain them (not yet run)."""
    from threadmill_core import connect

    os.environ[common.URL_VARIABLE] = url  # where incr's counter is
    if way == "threadmill":
        from benchmarks.peers.threadmill_peer import broker_url, incr

        broker = connect(broker_url(url))
        for _ in range(n):
            broker.enqueue(incr)
    else:
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.django_bench.settings")
        os.environ["BENCH_REDIS_URL"] = url
        import django

        django.setup()
        from django.tasks import task_backends

        from benchmarks.django_bench import tasks
        from threadmill_django import runner

        runner.serve("default")  # as `manage.py threadmill worker` does in its processes
        for _ in range(n):
            tasks.incr.enqueue()
        broker = task_backends["default"].broker  # type: ignore[attr-defined]  # threadmill_django's
    return counted_drain_worker(broker)


def _child(way: str, url: str, n: int) -> None:
    """Enqueue `n` tasks `way`, then drain them with instrumentation on."""
    worker = prepared_drain(way, url, n)
    instrument(os.getpid(), True)
    try:
        ran = worker.run(burst=True)
    finally:
        instrument(os.getpid(), False)
    if ran != n:
        raise RuntimeError(f"{way}: the worker ran {ran} of {n} tasks")


def count(way: str, n: int) -> float:
    """Client instructions per task of one drain of `n` tasks `way`, on a fresh redis-server."""
    with RedisServer() as server:
        module = "benchmarks.django_bench.instructions"
        command = [*CALLGRIND, "--instr-atstart=no", sys.executable, "-m", module,
                   "--child", way, server.url, str(n)]  # fmt: skip
        done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{way}: the client failed: {done.stderr[-800:]!r}")
    return collected(done.stderr) / n


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.django_bench.instructions")
    parser.add_argument("--tasks", type=int, default=1280, help="tasks a drain (%(default)s)")
    parser.add_argument("--runs", type=int, default=3, help="drains counted each way")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        way, url, n = args.child
        _child(way, url, int(n))
        return 0
    counts = {way: [count(way, args.tasks) for _ in range(args.runs)] for way in WAYS}
    medians = {way: statistics.median(found) for way, found in counts.items()}
    print("| drain through | client instructions/task (median) | runs |")
    print("| --- | ---: | --- |")
    for way, found in counts.items():
        runs = ", ".join(f"{c:,.0f}" for c in found)
        print(f"| {way} | {medians[way]:,.0f} | {runs} |")
    core, adapter = medians["threadmill"], medians["threadmill_django"]
    print(f"\nthe adapter adds {adapter - core:,.0f} instructions a task; "
          f"threadmill / threadmill_django = {core / adapter:.2f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
