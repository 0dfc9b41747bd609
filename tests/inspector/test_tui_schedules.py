"""`threadmill inspect`'s schedules screen (key s), driven headless: listing and pausing."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import timedelta

import pytest

pytest.importorskip("textual", reason="the TUI needs the 'tui' extra (Textual)")

from rich.text import Text
from textual.pilot import Pilot
from textual.widgets import DataTable

from tests.core import periodic_tasks
from threadmill_core import Broker
from threadmill_core.cli.tui import InspectorApp
from threadmill_core.cli.tui_schedules import SchedulesScreen
from threadmill_core.periodic import add_schedule, registered_schedules, unregister_schedule

NEVER = 3600.0


@pytest.fixture(autouse=True)
def _no_schedules_left() -> Iterator[None]:
    for name in registered_schedules():
        unregister_schedule(name)
    yield
    for name in registered_schedules():
        unregister_schedule(name)


async def settle(pilot: Pilot[None]) -> None:
    await pilot.pause()
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()


def test_the_schedules_screen_lists_schedules_and_p_pauses_one_in_the_backend(
    broker: Broker,
) -> None:
    """s shows each schedule (declared, or paused in the backend); p pauses the one selected."""
    add_schedule(periodic_tasks.poll, every=timedelta(minutes=1), name="a-poll")
    broker.backend.set_schedule_paused("b-gone", True)  # paused, declared nowhere here

    async def drive() -> None:
        app = InspectorApp(broker, refresh_interval=NEVER)
        async with app.run_test(size=(180, 30)) as pilot:
            await settle(pilot)
            await pilot.press("s")
            await settle(pilot)
            screen = app.screen
            assert isinstance(screen, SchedulesScreen)
            table: DataTable[Text] = screen.query_one("#schedules", DataTable)
            listed = {key.value: [cell.plain for cell in table.get_row(key)] for key in table.rows}
            assert listed["a-poll"][:3] == ["a-poll", "tests.core.periodic_tasks:poll", "every 60s"]
            assert listed["a-poll"][-1] == "no"
            assert listed["b-gone"][-1] == "yes"
            await pilot.press("p")  # the cursor is on the first row: a-poll
            await settle(pilot)
            assert broker.backend.schedule_pauses()["a-poll"].paused is True
            assert [cell.plain for cell in table.get_row("a-poll")][-1] == "yes"

    asyncio.run(drive())
