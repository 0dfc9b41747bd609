"""The workers screen of ``threadmill inspect`` (key ``w``): the live worker processes.

A table of the workers registered in the backend, as ``threadmill workers``
lists them (`threadmill_core.cli.workers`), one row per worker and one per
task it runs now under it; it refreshes every `refresh_interval` seconds
(and on ``Ctrl+R``). A backend error is shown and the next refresh tries
again.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Static

from threadmill_core.cli.inspector.schedules import live_workers
from threadmill_core.cli.workers import HEADERS, row

if TYPE_CHECKING:
    from threadmill_core.broker import Broker
    from threadmill_core.live_workers import WorkerInfo


class WorkersScreen(Screen[None]):
    """Every live worker, with the tasks it runs now."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("ctrl+r", "reload", "Refresh"),
    ]

    def __init__(self, broker: Broker, refresh_interval: float = 1.0) -> None:
        super().__init__()
        self.broker = broker
        self.refresh_interval = refresh_interval
        self.found: list[WorkerInfo] = []

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(id="workers-note")
        table: DataTable[Text] = DataTable(id="workers", cursor_type="row", zebra_stripes=True)
        yield table
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#workers", DataTable)
        for header in HEADERS:
            table.add_column(header.upper(), key=header)
        self.set_interval(self.refresh_interval, self.action_reload)
        self.action_reload()

    def action_reload(self) -> None:
        self.run_worker(self._reload(), group="workers", exclusive=True)

    async def _reload(self) -> None:
        note = self.query_one("#workers-note", Static)
        try:
            read = await asyncio.to_thread(live_workers, self.broker)
            self.found, now = list(read.workers), read.now
        except Exception as exc:  # a live view outlives an outage; shown, tried again
            note.update(Text(f"backend error: {exc}", style="red"))
            return
        table: DataTable[Text] = self.query_one("#workers", DataTable)
        table.clear()
        blank = [""] * (len(HEADERS) - 2)
        for info in self.found:
            table.add_row(*(Text(cell) for cell in row(info, now)), key=info.id)
            for task in info.running:
                cells = [f"  running {task.id}", task.task_path, *blank]
                table.add_row(*(Text(cell, style="dim") for cell in cells))
        running = sum(len(info.running) for info in self.found)
        note.update(
            Text(f"{len(self.found)} live worker(s), {running} task(s) running")
            if self.found
            else Text("no live workers")
        )
