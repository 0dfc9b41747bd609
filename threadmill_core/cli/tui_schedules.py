"""The schedules screen of ``threadmill inspect`` (key ``s``): see and pause schedules.

A table of the schedules this process knows (those the modules named to
``threadmill inspect MODULE...`` declare, and every name paused or resumed
in the backend), as ``threadmill schedules`` lists them; ``p`` pauses or
resumes the one under the cursor, for every worker (stored in the backend).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Static

from threadmill_core.cli.schedules import rows
from threadmill_core.periodic import registered_schedules

if TYPE_CHECKING:
    from threadmill_core.broker import Broker
    from threadmill_core.periodic import Schedule

COLUMNS = (
    ("name", "NAME"),
    ("task", "TASK"),
    ("expression", "EXPRESSION"),
    ("tz", "TZ"),
    ("next_tick", "NEXT TICK"),
    ("last_tick", "LAST TICK"),
    ("last_status", "OUTCOME"),
    ("paused", "PAUSED"),
)


class SchedulesScreen(Screen[None]):
    """Every schedule known here, with its next and last tick; ``p`` pauses or resumes one."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("p", "toggle_pause", "Pause/resume"),
        Binding("ctrl+r", "reload", "Refresh"),
    ]

    def __init__(
        self, broker: Broker, schedules: Callable[[], Mapping[str, Schedule]] | None = None
    ) -> None:
        super().__init__()
        self.broker = broker
        #: The schedules listed, by name; None: every one declared in the process.
        self.schedules = schedules or registered_schedules
        self.rows: list[dict[str, Any]] = []

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(id="schedules-note")
        table: DataTable[Text] = DataTable(id="schedules", cursor_type="row", zebra_stripes=True)
        yield table
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#schedules", DataTable)
        for key, header in COLUMNS:
            table.add_column(header, key=key)
        self.action_reload()

    def action_reload(self) -> None:
        self.run_worker(self._reload(), group="schedules")

    async def _reload(self) -> None:
        note = self.query_one("#schedules-note", Static)
        try:
            self.rows = await asyncio.to_thread(
                lambda: list(rows(self.broker, dict(self.schedules())))
            )
        except Exception as exc:  # a live view outlives an outage; shown, tried again
            note.update(Text(f"backend error: {exc}", style="red"))
            return
        table: DataTable[Text] = self.query_one("#schedules", DataTable)
        table.clear()
        for row in self.rows:
            cells = [
                Text("yes" if row[key] else "no")
                if key == "paused"
                else Text("-" if row[key] is None else str(row[key]))
                for key, _ in COLUMNS
            ]
            table.add_row(*cells, key=row["name"])
        note.update(
            Text(f"{len(self.rows)} schedule(s); p pauses or resumes one, for every worker")
            if self.rows
            else Text("no schedules: name the modules that declare them (inspect MODULE...)")
        )

    def action_toggle_pause(self) -> None:
        table: DataTable[Text] = self.query_one("#schedules", DataTable)
        if not self.rows or table.cursor_row >= len(self.rows):
            return
        row = self.rows[table.cursor_row]
        self.run_worker(self._toggle(row["name"], not row["paused"]), group="schedules")

    async def _toggle(self, name: str, paused: bool) -> None:
        note = self.query_one("#schedules-note", Static)
        try:
            await asyncio.to_thread(self.broker.backend.set_schedule_paused, name, paused)
        except Exception as exc:
            note.update(Text(f"{name}: not {'paused' if paused else 'resumed'}: {exc}"))
            return
        await self._reload()
        note.update(Text(f"{name}: {'paused' if paused else 'resumed'}"))
