"""``threadmill workers`` and the TUI's workers screen (key w), on a memory backend."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta

import pytest

from tests.inspector.conftest import Threadmill
from threadmill_core import Broker, FakeClock
from threadmill_core.live_workers import RunningTask, WorkerInfo

NEVER = 3600.0
TTL = timedelta(seconds=30)


def info(worker_id: str, *running: str) -> WorkerInfo:
    return WorkerInfo(
        id=worker_id,
        host="box-1",
        pid=4321,
        queues=("emails", "reports"),
        threads=4,
        version="0.1.0",
        started_at=datetime(2030, 1, 1, 12, 0, tzinfo=UTC),
        running=tuple(RunningTask(task_id, "app.tasks:send") for task_id in running),
    )


def test_workers_lists_each_live_worker_with_its_running_tasks(
    broker: Broker, clock: FakeClock, threadmill: Threadmill
) -> None:
    """`threadmill workers` shows every live worker and its running tasks; --json says the same."""
    broker.backend.register_worker(info("box-1:11:aaaaaa", "t-1", "t-2"), TTL)
    broker.backend.register_worker(info("box-1:12:bbbbbb"), TTL)
    clock.advance(timedelta(seconds=2.5))
    ran = threadmill("workers")
    assert ran.code == 0, ran.err
    lines = ran.out.splitlines()
    assert lines[0].split() == [
        "id", "host", "pid", "queues", "threads", "version", "started", "last", "seen", "running",
    ]  # fmt: skip
    assert lines[1].split() == [
        "box-1:11:aaaaaa", "box-1", "4321", "emails,reports", "4", "0.1.0",
        "2030-01-01", "12:00:00.000Z", "2.5", "s", "ago", "2",
    ]  # fmt: skip
    assert lines[2:4] == [
        "    running t-1  app.tasks:send",
        "    running t-2  app.tasks:send",
    ]
    assert lines[4].split()[0] == "box-1:12:bbbbbb"
    assert lines[-1] == "2 workers, 2 task(s) running"

    ran = threadmill("workers", "--json")
    listed = json.loads(ran.out)
    assert [w["id"] for w in listed] == ["box-1:11:aaaaaa", "box-1:12:bbbbbb"]
    assert listed[0]["running"] == [
        {"id": "t-1", "task_path": "app.tasks:send"},
        {"id": "t-2", "task_path": "app.tasks:send"},
    ]
    assert (listed[0]["pid"], listed[0]["queues"], listed[0]["threads"]) == (
        4321, ["emails", "reports"], 4,
    )  # fmt: skip
    assert listed[0]["started_at"] == "2030-01-01T12:00:00+00:00"


def test_workers_leaves_out_a_worker_whose_entry_lapsed(
    broker: Broker, clock: FakeClock, threadmill: Threadmill
) -> None:
    """A worker not refreshed for its ttl is no longer listed; with none left, it says so."""
    broker.backend.register_worker(info("box-1:11:aaaaaa"), TTL)
    clock.advance(TTL)
    ran = threadmill("workers")
    assert (ran.code, ran.out) == (0, "no live workers\n")
    assert json.loads(threadmill("workers", "--json").out) == []


def test_the_workers_screen_lists_workers_and_their_tasks(broker: Broker, clock: FakeClock) -> None:
    """w shows a row per live worker and one per task it runs; a refresh drops a stopped one."""
    pytest.importorskip("textual", reason="the TUI needs the 'tui' extra (Textual)")
    from rich.text import Text
    from textual.widgets import DataTable

    from threadmill_core.cli.tui import InspectorApp
    from threadmill_core.cli.tui_workers import WorkersScreen

    broker.backend.register_worker(info("box-1:11:aaaaaa", "t-1"), TTL)
    broker.backend.register_worker(info("box-1:12:bbbbbb"), TTL)

    async def drive() -> None:
        app = InspectorApp(broker, refresh_interval=NEVER)
        async with app.run_test(size=(180, 30)) as pilot:
            await pilot.press("w")
            await pilot.pause()
            await app.workers.wait_for_complete()
            await pilot.pause()
            assert isinstance(app.screen, WorkersScreen)
            table: DataTable[Text] = app.screen.query_one("#workers", DataTable)
            rows = [[cell.plain for cell in table.get_row_at(n)] for n in range(table.row_count)]
            assert [row[:3] for row in rows] == [
                ["box-1:11:aaaaaa", "box-1", "4321"],
                ["  running t-1", "app.tasks:send", ""],
                ["box-1:12:bbbbbb", "box-1", "4321"],
            ]
            broker.backend.unregister_worker("box-1:11:aaaaaa")
            await pilot.press("ctrl+r")
            await pilot.pause()
            await app.workers.wait_for_complete()
            await pilot.pause()
            assert table.row_count == 1
            assert table.get_row_at(0)[0].plain == "box-1:12:bbbbbb"

    asyncio.run(drive())
