"""Make docs/inspector.svg and docs/inspector-task.svg from a real run against a real Redis.

    python docs/inspector_screenshot.py        # needs redis-server, and the redis and tui extras

It starts a redis-server on a free loopback port, enqueues a small shop's
tasks, runs ``threadmill worker`` on them (a burst, in which some tasks fail
for good after their retries), leaves one long task running under a second
worker and some tasks waiting, then drives ``threadmill inspect`` headless:
the queue table, the FAILED tasks of one queue, and one task's record with
its error history. Everything it starts, it stops.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from datetime import timedelta
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent

TASKS = '''
"""A small shop's tasks."""

import time

from threadmill_core import ExponentialBackoff, task

RETRY = ExponentialBackoff(base_delay=0.05, max_retries=2, jitter=0)


@task(queue="emails", retry=RETRY)
def send_receipt(order: int, email: str) -> str:
    if email.endswith(".invalid"):
        raise ConnectionRefusedError(f"SMTP refused recipient {email}")
    return f"receipt for order {order} sent to {email}"


@task(queue="thumbnails", priority=10)
def render_thumbnail(image: str, width: int) -> str:
    time.sleep(0.01)
    return f"{image}@{width}w.webp"


@task(queue="reports", retry=RETRY)
def import_orders(path: str) -> int:
    if path.endswith(".xls"):
        raise ValueError(f"{path}: not a CSV file (found an Excel workbook)")
    if "2031" in path:
        rows = {"2030-12": 41}
        return rows[path[-11:-4]]
    return 120


@task(queue="reports", lease_ttl=120)
def export_ledger(year: int) -> str:
    time.sleep(600)
    return f"ledger-{year}.csv"
'''


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main() -> None:
    workdir = Path(tempfile.mkdtemp(prefix="threadmill-screenshot-"))
    (workdir / "shop_tasks.py").write_text(textwrap.dedent(TASKS))
    sys.path.insert(0, str(workdir))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(workdir), str(ROOT)])}
    port = free_port()
    redis = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", str(workdir)],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    long_worker: subprocess.Popen[bytes] | None = None
    try:
        url = f"redis://127.0.0.1:{port}/0?namespace=shop"
        _wait_for(port)
        long_worker = _populate(url, env)
        asyncio.run(_shoot(url))
    finally:
        if long_worker is not None:
            os.killpg(long_worker.pid, signal.SIGKILL)
            long_worker.wait()
        redis.terminate()
        redis.wait()
        shutil.rmtree(workdir, ignore_errors=True)


def _wait_for(port: int) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit("redis-server did not start")


def _populate(url: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    import shop_tasks  # type: ignore[import-not-found]  # written by main()

    from threadmill_core import connect

    worker = [
        sys.executable, "-m", "threadmill_core.cli", "worker", "shop_tasks",
        "--broker", url, "--processes", "2", "--threads", "4", "--log-level", "WARNING",
    ]  # fmt: skip
    with connect(url) as broker:
        emails = shop_tasks.send_receipt.using(broker=broker)
        broker.enqueue_many(
            emails,
            [((1000 + n, f"customer{n}@example.com"), {}) for n in range(180)]
            + [((1200 + n, f"customer{n}@mail.invalid"), {}) for n in range(3)],
        )
        thumbnails = shop_tasks.render_thumbnail.using(broker=broker)
        broker.enqueue_many(thumbnails, [((f"sku-{n}.png", 320), {}) for n in range(240)])
        reports = shop_tasks.import_orders.using(broker=broker)
        broker.enqueue_many(
            reports,
            [((f"orders-2030-{m:02}.csv",), {}) for m in range(1, 12)]
            + [(("orders-2030-12.xls",), {}), (("orders-2031-01.csv",), {})],
        )
        queues = "emails,thumbnails,reports"
        subprocess.run([*worker, "--queues", queues, "--burst"], env=env, check=True, timeout=300)

        # Left for the screenshot: work waiting, work deferred, one long task running.
        broker.enqueue_many(emails, [((2000 + n, f"late{n}@example.com"), {}) for n in range(12)])
        emails.using(run_after=timedelta(hours=1)).enqueue(3000, "tomorrow@example.com")
        broker.enqueue_many(thumbnails, [((f"banner-{n}.png", 1280), {}) for n in range(5)])
        shop_tasks.export_ledger.using(broker=broker).enqueue(2030)
        # In a session of its own, so that its worker processes go with it (killpg).
        long_worker = subprocess.Popen(
            [*worker, "--queues", "reports", "--processes", "1"], env=env, start_new_session=True
        )
        deadline = time.monotonic() + 30
        while broker.counts()["reports"].running == 0:
            if time.monotonic() > deadline:
                raise SystemExit("the long task did not start")
            time.sleep(0.1)
        return long_worker


async def _shoot(url: str) -> None:
    from threadmill_core import connect
    from threadmill_core.cli.tui import InspectorApp

    with connect(url) as broker:
        app = InspectorApp(broker, refresh_interval=3600)
        async with app.run_test(size=(132, 34)) as pilot:
            await _settle(pilot)
            # The reports row, its "failed" column: the FAILED tasks listed below.
            reports = [q.queue for q in app.overview.queues].index("reports") if app.overview else 0
            await pilot.press(*["down"] * reports, *["right"] * 5)
            await _settle(pilot)
            app.save_screenshot("inspector.svg", str(DOCS))
            await pilot.press("tab", "enter")
            await _settle(pilot)
            app.save_screenshot("inspector-task.svg", str(DOCS))
    print(f"wrote {DOCS / 'inspector.svg'} and {DOCS / 'inspector-task.svg'}")


async def _settle(pilot: object) -> None:
    from textual.pilot import Pilot

    assert isinstance(pilot, Pilot)
    await pilot.pause()
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()


if __name__ == "__main__":
    main()
