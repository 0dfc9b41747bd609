"""What scheduling costs: a scheduler of 1,000 schedules idle, and 10,000 due ticks stored.

    python -m benchmarks.schedules redis://127.0.0.1:6379/0 [postgresql://...]

For each URL (a fresh namespace on it):

1. Idle: a `Scheduler` of 1,000 daily cron schedules, none due in the
   window, runs its loop in a thread for `IDLE_SECONDS`; the process's CPU
   time over the window, as a share of one core.
2. Due: 1,000 every-second schedules and a scheduler that has just started,
   so each has its 10 latest ticks due (`CATCH_UP_TICKS`): one `run_pass`
   stores the 10,000 ticks (in one `enqueue` call); its wall time.
   A second scheduler's pass over the same ticks (all stored already) too.

Not a test: the figures go in the commit that changes scheduling.
"""

from __future__ import annotations

import sys
import threading
import time
import uuid
from datetime import timedelta

from threadmill_core import connect
from threadmill_core.models import TaskResult
from threadmill_core.periodic import Schedule
from threadmill_core.worker.scheduling import Scheduler

IDLE_SECONDS = 20.0
SCHEDULES = 1000
TEMPLATE = TaskResult(id="", task_path="bench.tasks:tick", queue="bench")


def _with_namespace(url: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}namespace=sched_{uuid.uuid4().hex[:8]}"


def idle(url: str, *, steady: bool = False) -> float:
    """Share of one core the process spends over `IDLE_SECONDS` of a scheduler.

    Idle: 1,000 daily schedules, none due meanwhile. `steady`: 1,000
    schedules of intervals 1,000 to 1,999 s, so a tick falls due every
    second or two (about 13 in the window), each stored as it comes.
    """
    if steady:
        schedules = [
            Schedule(name=f"steady-{n}", template=TEMPLATE, every=timedelta(seconds=1000 + n))
            for n in range(SCHEDULES)
        ]
    else:
        schedules = [
            Schedule(name=f"daily-{n}", template=TEMPLATE, cron=f"{n % 60} {n // 60 % 24} * * *")
            for n in range(SCHEDULES)
        ]
    with connect(_with_namespace(url)) as broker:
        now = broker.backend.now()
        quiet = schedules if steady else [
            s for s in schedules if s.next_tick(now) > now + timedelta(seconds=IDLE_SECONDS + 5)
        ]  # fmt: skip
        scheduler = Scheduler(broker.backend, quiet)
        stop = threading.Event()
        thread = threading.Thread(target=scheduler.run, args=(stop,))
        thread.start()
        time.sleep(1.0)  # past the first pass
        cpu, wall = time.process_time(), time.monotonic()
        time.sleep(IDLE_SECONDS)
        cpu, wall = time.process_time() - cpu, time.monotonic() - wall
        stored = scheduler.stored
        stop.set()
        thread.join()
        print(f"  {'steady' if steady else 'idle'}: {len(quiet)} schedules, {cpu * 1000:.1f} ms "
              f"CPU in {wall:.1f} s = {100 * cpu / wall:.3f}% of one core "
              f"({stored} ticks stored in all)")  # fmt: skip
        return cpu / wall


def due(url: str) -> float:
    """Seconds one pass takes to store 10,000 due ticks."""
    every = [
        Schedule(name=f"every-{n}", template=TEMPLATE, every=timedelta(seconds=1))
        for n in range(SCHEDULES)
    ]
    with connect(_with_namespace(url)) as broker:
        now = broker.backend.now()
        first = Scheduler(broker.backend, every)
        started = time.perf_counter()
        first.run_pass(now)
        took = time.perf_counter() - started
        stored = broker.backend.counts()["bench"].pending
        print(f"  due: {first.stored} ticks of {SCHEDULES} schedules stored in {took:.3f} s "
              f"({stored} READY)")  # fmt: skip
        second = Scheduler(broker.backend, every)
        started = time.perf_counter()
        second.run_pass(now)
        again = time.perf_counter() - started
        print(f"  due, a second scheduler over the same ticks: {again:.3f} s, "
              f"{broker.backend.counts()['bench'].pending} READY")  # fmt: skip
        return took


def main(urls: list[str]) -> None:
    for url in urls:
        print(url.split("@")[-1])
        due(url)
        idle(url)
        idle(url, steady=True)


if __name__ == "__main__":
    main(sys.argv[1:] or ["redis://127.0.0.1:6379/0"])
