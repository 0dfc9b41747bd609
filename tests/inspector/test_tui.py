"""`threadmill inspect` driven headless with Textual's pilot, on a memory backend."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

pytest.importorskip("textual", reason="the TUI needs the 'tui' extra (Textual)")

from rich.text import Text
from textual.pilot import Pilot
from textual.widgets import DataTable, Static

from tests.inspector.conftest import Fleet, stored
from threadmill_core import Broker, FakeClock, TaskResultStatus
from threadmill_core.cli.tui import ConfirmScreen, InspectorApp, TaskScreen

#: Long enough that no timer refresh lands inside a test: the tests refresh by key.
NEVER = 3600.0


async def settle(pilot: Pilot[None]) -> None:
    """Let pending messages, and the backend calls they started, finish."""
    await pilot.pause()
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()


def cells(table: DataTable[Text], key: str) -> list[str]:
    return [cell.plain for cell in table.get_row(key)]


def test_inspect_shows_counts_opens_a_failed_task_and_requeues_it(
    fleet: Fleet, broker: Broker
) -> None:
    """The app shows each queue's counts, lists FAILED, opens a task, and requeues it READY."""
    failed_id = fleet.failed[0]

    async def drive() -> None:
        app = InspectorApp(broker, refresh_interval=NEVER, window=timedelta(seconds=10))
        async with app.run_test(size=(160, 40)) as pilot:
            await settle(pilot)
            queues: DataTable[Text] = app.query_one("#queues", DataTable)
            assert cells(queues, "emails") == [
                "emails", "1", "1", "1", "3", "0", "0", "0.60", "0.30",
            ]  # fmt: skip
            assert cells(queues, "reports")[:7] == ["reports", "0", "0", "0", "0", "2", "0"]

            # Down to the reports row, right to its "failed" column: the list follows.
            await pilot.press("down", *["right"] * 5)
            await settle(pilot)
            assert (app.queue, app.status) == ("reports", TaskResultStatus.FAILED)
            tasks: DataTable[Text] = app.query_one("#tasks", DataTable)
            assert [key.value for key in tasks.rows] == fleet.failed
            assert "ValueError: invalid literal" in cells(tasks, failed_id)[5]

            await pilot.press("tab", "enter")  # to the task list; open the first task
            await settle(pilot)
            assert isinstance(app.screen, TaskScreen)
            shown = app.screen.query_one("#record", Static).render()
            text = str(shown)
            assert failed_id in text
            assert "status           FAILED" in text
            assert "Traceback (most recent call last):" in text
            assert "ValueError: invalid literal for int() with base 10: 'n/a'" in text

            await pilot.press("r")
            await settle(pilot)
            assert isinstance(app.screen, ConfirmScreen)
            assert stored(broker, failed_id).status is TaskResultStatus.FAILED  # not before yes
            await pilot.press("y")
            await settle(pilot)
            assert isinstance(app.screen, TaskScreen)
            assert "status           READY" in str(app.screen.query_one("#record", Static).render())

            await pilot.press("escape", "ctrl+r")
            await settle(pilot)
            assert cells(queues, "reports")[1:7] == ["1", "0", "0", "0", "1", "0"]

    asyncio.run(drive())
    assert stored(broker, failed_id).status is TaskResultStatus.READY


def test_inspect_requests_the_cancel_of_a_running_task(fleet: Fleet, broker: Broker) -> None:
    """Cancelling a task that is RUNNING requests it, says so, and the task keeps running
    until its worker stops it."""

    async def drive() -> list[str]:
        app = InspectorApp(broker, refresh_interval=NEVER)
        async with app.run_test(size=(160, 40)) as pilot:
            await settle(pilot)
            await pilot.press("3")  # the RUNNING segment of the first queue, emails
            await settle(pilot)
            tasks: DataTable[Text] = app.query_one("#tasks", DataTable)
            assert [key.value for key in tasks.rows] == fleet.running
            await pilot.press("c")
            await settle(pilot)
            await pilot.press("y")
            await settle(pilot)
            return app.action_log

    messages = asyncio.run(drive())
    assert messages == [f"cancel requested for {fleet.running[0]}: now RUNNING"]
    running = stored(broker, fleet.running[0])
    assert running.status is TaskResultStatus.RUNNING
    assert running.cancel_requested_at is not None


def test_inspect_answering_no_changes_nothing(fleet: Fleet, broker: Broker) -> None:
    """Saying no to the confirmation leaves the task as it was."""

    async def drive() -> None:
        app = InspectorApp(broker, refresh_interval=NEVER)
        async with app.run_test(size=(160, 40)) as pilot:
            await settle(pilot)
            await pilot.press("2", "tab")  # emails, DEFERRED
            await settle(pilot)
            await pilot.press("c")
            await settle(pilot)
            await pilot.press("n")
            await settle(pilot)
            assert not isinstance(app.screen, ConfirmScreen)

    asyncio.run(drive())
    assert stored(broker, fleet.deferred[0]).status is TaskResultStatus.DEFERRED


def test_inspect_moves_on_when_the_listed_queue_is_gone(
    fleet: Fleet, broker: Broker, clock: FakeClock
) -> None:
    """When the queue being listed is gone (no tasks, no recent rates), the list moves on."""

    async def drive() -> None:
        app = InspectorApp(broker, refresh_interval=NEVER)
        async with app.run_test(size=(160, 40)) as pilot:
            await settle(pilot)
            await pilot.press("down", *["right"] * 5)  # reports, FAILED
            await settle(pilot)
            assert app.queue == "reports"
            broker.purge("reports", TaskResultStatus.FAILED)
            clock.advance(timedelta(minutes=2))  # its rates leave the window too
            await pilot.press("ctrl+r")
            await settle(pilot)
            queues: DataTable[Text] = app.query_one("#queues", DataTable)
            assert [key.value for key in queues.rows] == ["emails"]
            assert app.queue == "emails"

    asyncio.run(drive())


def test_inspect_command_runs_the_app_with_its_options(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """threadmill inspect runs the app on the broker with --interval and --window."""
    from threadmill_core.cli import main

    ran: list[InspectorApp] = []
    monkeypatch.setattr(InspectorApp, "run", lambda self: ran.append(self))
    assert main(["inspect", "--interval", "2.5", "--window", "300"], broker=broker) == 0
    (app,) = ran
    assert (app.broker, app.refresh_interval, app.window) == (broker, 2.5, timedelta(minutes=5))
