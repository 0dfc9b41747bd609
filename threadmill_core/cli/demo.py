"""`threadmill demo`: a tour of the protocol on the in-memory backend, in a few seconds.

It enqueues a batch of tasks and runs a worker on them: most succeed, one
fails twice and succeeds on its third attempt after backoff, one fails for
good, and one is started by a worker that "dies" holding it, so its lease
expires and the reaper hands it back for another attempt. Progress comes
from a plugin implementing the lifecycle hooks, the same way a metrics or
tracing plugin would observe a real queue.
"""

from __future__ import annotations

import sys
import threading
import time
from datetime import timedelta
from typing import TextIO

from threadmill_core.broker import Broker, connect
from threadmill_core.context import TaskContext
from threadmill_core.hookspecs import hookimpl
from threadmill_core.models import Lease, TaskResult
from threadmill_core.plugins import plugin_manager
from threadmill_core.retry import ExponentialBackoff
from threadmill_core.task import task
from threadmill_core.worker import Worker

BACKOFF = ExponentialBackoff(base_delay=0.25, factor=2, max_retries=3, jitter=0)


@task(queue="demo")
def resize_image(name: str, width: int) -> dict[str, object]:
    """Pretend to resize an image."""
    time.sleep(0.05)
    return {"name": name, "width": width}


@task(queue="demo", retry=BACKOFF)
def flaky_upload(context: TaskContext, name: str) -> str:
    """Fail with a connection error on the first two attempts, then succeed."""
    if context.attempt < 3:
        raise ConnectionError(f"upload of {name} timed out (attempt {context.attempt})")
    return f"uploaded {name}"


@task(queue="demo", retry=ExponentialBackoff(base_delay=0.1, max_retries=1, jitter=0))
def parse_report(text: str) -> int:
    """Fail every time: the input is not a number."""
    return int(text)


@task(queue="demo", retry=BACKOFF, priority=10)
def crunch_numbers(numbers: list[int]) -> int:
    """Sum some numbers; the demo's ghost worker claims this one and dies."""
    return sum(numbers)


class _Printer:
    """A plugin that prints the lifecycle hooks as they fire."""

    def __init__(self, out: TextIO, started: float) -> None:
        self.out = out
        self.started = started
        self.lock = threading.Lock()

    def say(self, task_id: str, what: str) -> None:
        with self.lock:
            stamp = time.monotonic() - self.started
            print(f"{stamp:6.2f}s  {task_id[-8:]}  {what}", file=self.out, flush=True)

    @hookimpl
    def threadmill_task_enqueued(self, record: TaskResult) -> None:
        self.say(record.id, f"enqueued  {_call(record)}")

    @hookimpl
    def threadmill_task_started(self, lease: Lease) -> None:
        self.say(lease.task_id, f"started   attempt {lease.record.attempts}")

    @hookimpl
    def threadmill_task_retried(self, record: TaskResult, delay: timedelta) -> None:
        error = record.errors[-1].exception_class_path.rsplit(".", 1)[-1]
        self.say(record.id, f"retry in {delay.total_seconds():.2f}s after {error}")

    @hookimpl
    def threadmill_task_finished(self, record: TaskResult) -> None:
        self.say(record.id, f"{record.status.value.lower():9s} after {record.attempts} attempt(s)")

    @hookimpl
    def threadmill_lease_expired(self, record: TaskResult) -> None:
        self.say(record.id, f"lease expired (worker {record.worker_ids[-1]} went silent); reaped")


def _call(record: TaskResult) -> str:
    name = record.task_path.rsplit(":", 1)[-1]
    args = ", ".join(repr(a) for a in record.args)
    return f"{name}({args})"


def run_demo(out: TextIO = sys.stdout, broker: Broker | None = None) -> list[TaskResult]:
    """Run the tour; return the final records (the CLI prints them, tests check them)."""
    broker = broker or connect("memory://")
    printer = _Printer(out, time.monotonic())
    pm = plugin_manager()
    pm.register(printer, name="threadmill-demo-printer")
    try:
        return _tour(broker, printer, out)
    finally:
        pm.unregister(printer)


def _tour(broker: Broker, printer: _Printer, out: TextIO) -> list[TaskResult]:
    records = [resize_image.using(broker=broker).enqueue(f"photo-{i}.jpg", 640) for i in range(4)]
    records.append(flaky_upload.using(broker=broker).enqueue("report.pdf"))
    records.append(parse_report.using(broker=broker).enqueue("forty-two"))
    records.append(crunch_numbers.using(broker=broker).enqueue([1, 2, 3, 2**70]))

    # A worker that claims the highest-priority task, starts it and dies holding it.
    # (Had it died before recording the start, the task would go back uncharged.)
    ghost = broker.backend.claim(["demo"], worker="ghost-worker", lease_ttl=timedelta(seconds=1))
    broker.backend.mark_started(ghost)
    printer.say(ghost[0].task_id, "started by ghost-worker, which then crashes (lease 1s)")

    worker = Worker(
        broker,
        queues=["demo"],
        threads=4,
        lease_ttl=timedelta(seconds=1),
        poll_interval=timedelta(milliseconds=50),
        worker_id="demo-worker",
    )
    thread = threading.Thread(target=worker.run, name="threadmill-demo-worker")
    thread.start()
    try:
        final = [broker.wait(r.id, timeout=30) for r in records]
    finally:
        worker.stop()
        thread.join()

    print(file=out)
    width = max(len(_call(record)) for record in final)  # every call whole, none cut
    print(f"{'task':<{width}} {'status':<11} {'tries':>5}  result / last error", file=out)
    for record in final:
        if record.errors and record.status.value != "SUCCESSFUL":
            last = record.errors[-1]
            outcome = f"{last.exception_class_path.rsplit('.', 1)[-1]}: {last.message}"
        else:
            outcome = repr(record.return_value)
        print(
            f"{_call(record):<{width}} {record.status.value:<11} {record.attempts:>5}  {outcome}",
            file=out,
        )
    print(NEXT_STEPS, file=out)
    return final


#: How the demo ends: what to try next, with a real server.
NEXT_STEPS = """
Next, with a Redis server (pip install 'threadmill[redis]'; from a clone: pip install '.[redis]'):
  export THREADMILL_URL=redis://localhost:6379/0
  threadmill worker myapp.tasks    # run the @task functions of myapp/tasks.py, from its directory
  threadmill stats                 # the queues by segment, with rates
  threadmill ls default -s failed  # what failed, with its last error
'threadmill demo -v' shows the worker's log too; README.md tells the rest."""
