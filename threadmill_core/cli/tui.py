"""`threadmill inspect`: a live terminal UI over the queues, built on Textual.

Only the ``inspect`` command imports this module, so the core needs Textual
only with the ``tui`` extra. The app works on any backend: it reads and acts
through `threadmill_core.cli.inspector`, exactly like the shell commands, so
every requeue and cancel is one fenced backend operation, and a refusal is
shown with its reason.

Backend calls run in a thread (`asyncio.to_thread`) inside Textual workers,
so a slow or unreachable backend never freezes the screen: the status line
shows the error and the next refresh tries again. Refreshes do not overlap;
one that is due while another is still loading is skipped.

Keys: arrows move; on the queue table the column under the cursor picks the
segment (or press 1-6); Enter on a task opens it; ``r`` requeues and ``c``
cancels the task under the cursor (after a confirmation); ``Esc`` goes back;
``Ctrl+R`` refreshes now; ``s`` shows the schedules and ``w`` the live
workers (`threadmill_core.cli.tui_workers`); ``q`` quits.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import ClassVar

import attrs
from rich.text import Text
from textual import on
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Grid, VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Button, DataTable, Footer, Header, Label, Static

from threadmill_core.broker import Broker
from threadmill_core.cli import inspector
from threadmill_core.cli.inspector import STATUSES, Listed, Overview, Report
from threadmill_core.errors import PayloadError
from threadmill_core.models import TaskResult, TaskResultStatus
from threadmill_core.periodic import Schedule

#: Tasks shown per segment; the title says when there are more.
PAGE_SIZE = 200


@attrs.frozen(kw_only=True)
class _Loaded:
    """One refresh's reads, made off the UI thread."""

    view: Overview
    queue: str | None
    status: TaskResultStatus
    tasks: list[Listed]


def _cell(value: str, *, right: bool = False) -> Text:
    # Text, not str: DataTable would read a str as markup, and a message like
    # "KeyError: [x]" must show as it is.
    return Text(value, justify="right" if right else "left", no_wrap=True)


class ConfirmScreen(ModalScreen[bool]):
    """A yes/no question; dismissed with True only for Yes (button or ``y``)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "Yes"),
        Binding("n", "answer(False)", "No"),
        Binding("escape", "answer(False)", "No", show=False),
    ]
    DEFAULT_CSS = """
    ConfirmScreen { align: center middle; }
    ConfirmScreen > Grid {
        grid-size: 2; grid-gutter: 1 2; grid-rows: auto 3;
        width: 72; height: auto; padding: 1 2; border: thick $warning; background: $surface;
    }
    ConfirmScreen Label { column-span: 2; width: 100%; }
    ConfirmScreen Button { width: 100%; }
    """

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Grid():
            yield Label(Text(self.question))
            yield Button("Yes (y)", variant="warning", id="yes")
            yield Button("No (n)", variant="primary", id="no")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, answer: bool) -> None:
        self.dismiss(answer)


class TaskScreen(Screen[None]):
    """One task's whole record and its error history, with requeue and cancel."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("r", "requeue", "Requeue"),
        Binding("c", "cancel", "Cancel"),
        Binding("ctrl+r", "reload", "Refresh"),
    ]

    def __init__(self, task_id: str) -> None:
        super().__init__()
        self.task_id = task_id
        self.record: TaskResult | None = None

    @property
    def inspector_app(self) -> InspectorApp:
        app = self.app
        assert isinstance(app, InspectorApp)
        return app

    def compose(self) -> ComposeResult:
        yield Header()
        with VerticalScroll():
            yield Static(Text(f"loading task {self.task_id} ..."), id="record")
        yield Footer()

    def on_mount(self) -> None:
        self.action_reload()

    def action_reload(self) -> None:
        self.run_worker(self._reload(), group="task")

    async def _reload(self) -> None:
        body = self.query_one("#record", Static)
        broker = self.inspector_app.broker
        try:
            record = await asyncio.to_thread(broker.backend.get, self.task_id)
        except PayloadError as exc:
            body.update(Text(f"task {self.task_id}: its stored bytes do not decode ({exc})"))
            return
        except Exception as exc:  # a live view outlives an outage; shown, tried again on reload
            body.update(Text(f"task {self.task_id}: backend error: {exc}"))
            return
        self.record = record
        if record is None:
            text = f"no task {self.task_id} (never enqueued, purged, or its result expired)"
            body.update(Text(text))
        else:
            body.update(Text(inspector.format_record(record)))

    def action_requeue(self) -> None:
        self.inspector_app.confirm_action("requeue", self.task_id, self.record, self.action_reload)

    def action_cancel(self) -> None:
        self.inspector_app.confirm_action("cancel", self.task_id, self.record, self.action_reload)


class InspectorApp(App[None]):
    """Queues with counts and rates, the tasks of one segment, and actions on them.

    `refresh_interval` is in seconds; rates are over the last `window`.
    """

    TITLE = "threadmill inspect"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "Quit"),
        Binding("r", "requeue", "Requeue"),
        Binding("c", "cancel", "Cancel"),
        Binding("ctrl+r", "refresh", "Refresh"),
        Binding("s", "schedules", "Schedules"),
        Binding("w", "workers", "Workers"),
        *(
            Binding(str(n), f"segment('{s.value}')", s.value.title(), show=False)
            for n, s in enumerate(STATUSES, 1)
        ),
    ]
    CSS = """
    #source { height: 1; padding: 0 1; color: $text-muted; }
    #outcome { height: 1; padding: 0 1; }
    #queues { height: auto; max-height: 12; }
    #segment { height: 1; padding: 0 1; margin-top: 1; text-style: bold; }
    #tasks { height: 1fr; }
    """

    def __init__(
        self,
        broker: Broker,
        *,
        refresh_interval: float = 1.0,
        window: timedelta = timedelta(seconds=60),
        schedules: Callable[[], Mapping[str, Schedule]] | None = None,
    ) -> None:
        super().__init__()
        self.broker = broker
        #: The schedules the schedules screen lists (see `threadmill_core.cli.main`).
        self.schedules = schedules
        self.refresh_interval = refresh_interval
        self.window = window
        self.queue: str | None = None
        self.status = TaskResultStatus.READY
        self.overview: Overview | None = None
        self._loading = False
        self._again = False
        #: What each requeue or cancel reported, oldest first (the latest is also on screen).
        self.action_log: list[str] = []

    # --- layout ------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(id="source")
        yield Static(id="outcome")
        queues: DataTable[Text] = DataTable(id="queues", cursor_type="cell", zebra_stripes=True)
        yield queues
        yield Static(id="segment")
        tasks: DataTable[Text] = DataTable(id="tasks", cursor_type="row", zebra_stripes=True)
        yield tasks
        yield Footer()

    def on_mount(self) -> None:
        queues = self._queues()
        for header in inspector.STATS_HEADERS:
            queues.add_column(header, key=header)
        self.sub_title = inspector.redact(self.broker.url or repr(self.broker))
        self._show_columns()
        self.set_interval(self.refresh_interval, self.action_refresh)
        self.action_refresh()

    def _queues(self) -> DataTable[Text]:
        return self.query_one("#queues", DataTable)

    def _tasks(self) -> DataTable[Text]:
        return self.query_one("#tasks", DataTable)

    # --- refreshing --------------------------------------------------------------------

    def action_schedules(self) -> None:
        """The schedules screen (`threadmill_core.cli.tui_schedules`)."""
        from threadmill_core.cli.tui_schedules import SchedulesScreen

        self.push_screen(SchedulesScreen(self.broker, self.schedules))

    def action_workers(self) -> None:
        """The workers screen (`threadmill_core.cli.tui_workers`)."""
        from threadmill_core.cli.tui_workers import WorkersScreen

        self.push_screen(WorkersScreen(self.broker, self.refresh_interval))

    def action_refresh(self) -> None:
        """Refresh now; if a refresh is still loading, refresh again once it is done."""
        if self._loading:
            self._again = True
            return
        self._loading = True
        self.run_worker(self._refresh(), group="refresh")

    async def _refresh(self) -> None:
        try:
            while True:
                self._again = False
                try:
                    loaded = await asyncio.to_thread(self._load, self.queue, self.status)
                except Exception as exc:  # a live view outlives an outage: shown, tried again
                    source = self.query_one("#source", Static)
                    source.update(Text(f"backend error: {exc}", style="red"))
                    return
                self._apply(loaded)
                if not self._again:
                    return
        finally:
            self._loading = False

    def _load(self, queue: str | None, status: TaskResultStatus) -> _Loaded:
        """Everything a refresh shows, read in this worker thread."""
        view = inspector.overview(self.broker, self.window)
        names = [q.queue for q in view.queues]
        if queue not in names:
            queue = names[0] if names else None
        tasks = (
            []
            if queue is None
            else inspector.list_tasks(self.broker, queue, status, limit=PAGE_SIZE)
        )
        return _Loaded(view=view, queue=queue, status=status, tasks=tasks)

    def _apply(self, loaded: _Loaded) -> None:
        self.overview = loaded.view
        stamp = inspector.format_time(loaded.view.taken_at)
        note = inspector.rates_note(loaded.view)
        self.query_one("#source", Static).update(Text(f"{note}   refreshed {stamp}"))
        self._fill_queues(loaded.view)
        if self.queue not in {q.queue for q in loaded.view.queues}:
            # The first queue, until the operator picks one (or after theirs went away).
            self.queue = loaded.queue
        # The choice may have changed while this loaded; then the next refresh lists it.
        if loaded.queue == self.queue and loaded.status is self.status:
            self._fill_tasks(loaded.tasks)
        self._show_title()

    def _fill_queues(self, view: Overview) -> None:
        table = self._queues()
        rows = {q.queue: inspector.stats_row(q) for q in view.queues}
        for key in list(table.rows):
            if key.value not in rows:
                table.remove_row(key)
        for name, cells in rows.items():
            texts = [_cell(c, right=i > 0) for i, c in enumerate(cells)]
            if name in {key.value for key in table.rows}:
                for header, text in zip(inspector.STATS_HEADERS, texts, strict=True):
                    table.update_cell(name, header, text)
            else:
                table.add_row(*texts, key=name)

    def _fill_tasks(self, tasks: list[Listed]) -> None:
        table = self._tasks()
        keep = self.selected_task_id()
        table.clear()
        for item in tasks:
            cells = inspector.list_row(item, self.status)
            key = item.id if isinstance(item, TaskResult) else f"?{item.position}"
            table.add_row(*(_cell(c, right=i in (2, 3)) for i, c in enumerate(cells)), key=key)
        if keep is not None and keep in {row.value for row in table.rows}:
            table.move_cursor(row=table.get_row_index(keep))

    def _show_columns(self) -> None:
        table = self._tasks()
        table.clear(columns=True)
        for header in inspector.list_headers(self.status):
            table.add_column(header, key=header)

    def _show_title(self) -> None:
        title = self.query_one("#segment", Static)
        if self.queue is None:
            title.update(Text("no queues yet"))
            return
        held = 0
        for stats in self.overview.queues if self.overview else ():
            if stats.queue == self.queue:
                held = stats.counts.of(self.status)
        shown = self._tasks().row_count
        more = f", first {shown} shown" if held > shown else ""
        text = f"{self.status.value} tasks of queue {self.queue!r} ({held}{more})"
        title.update(Text(f"{text}   1-6 segment, Enter open, r requeue, c cancel"))

    # --- choosing what to list ---------------------------------------------------------

    @on(DataTable.CellHighlighted, "#queues")
    def _queue_cell(self, event: DataTable.CellHighlighted) -> None:
        queue = event.cell_key.row_key.value
        column = event.coordinate.column
        status = STATUSES[column - 1] if 1 <= column <= len(STATUSES) else self.status
        self.choose(queue, status)

    def action_segment(self, status: str) -> None:
        self.choose(self.queue, TaskResultStatus(status))

    def choose(self, queue: str | None, status: TaskResultStatus) -> None:
        """List `status` of `queue` (the current queue when None) from the next refresh on."""
        if queue == self.queue and status is self.status:
            return
        if status is not self.status:
            self.status = status
            self._show_columns()
        else:
            self._tasks().clear()
        self.queue = queue if queue is not None else self.queue
        self._show_title()
        self.action_refresh()

    def selected_task_id(self) -> str | None:
        """The id under the task list's cursor, if it is a task."""
        table = self._tasks()
        if table.row_count == 0:
            return None
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        return None if key is None or key.startswith("?") else key

    # --- opening and acting ------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # The main screen's keys act on its task list only while it is the screen shown.
        main_only = {"requeue", "cancel", "segment", "refresh"}
        return action not in main_only or len(self.screen_stack) == 1

    @on(DataTable.RowSelected, "#tasks")
    def _task_chosen(self, event: DataTable.RowSelected) -> None:
        self.action_open_task()

    def action_open_task(self) -> None:
        task_id = self.selected_task_id()
        if task_id is not None:
            self.push_screen(TaskScreen(task_id))

    def action_requeue(self) -> None:
        self._act_on_selected("requeue")

    def action_cancel(self) -> None:
        self._act_on_selected("cancel")

    def _act_on_selected(self, action: str) -> None:
        task_id = self.selected_task_id()
        if task_id is None:
            self.notify("no task selected", severity="warning")
            return
        self.confirm_action(action, task_id, None, lambda: None)

    def confirm_action(
        self, action: str, task_id: str, record: TaskResult | None, then: Callable[[], None]
    ) -> None:
        """Ask, and on yes run `action` ("requeue" or "cancel") on the task, then call `then`."""
        status = record.status.value if record is not None else self.status.value
        question = f"{action.title()} task {task_id} ({status} when last seen)?"

        def answered(yes: bool | None) -> None:
            if yes:
                self.run_worker(self._act(action, task_id, then), group="action")

        self.push_screen(ConfirmScreen(question), answered)

    async def _act(self, action: str, task_id: str, then: Callable[[], None]) -> None:
        act: Callable[[Broker, list[str]], Report] = (
            inspector.requeue if action == "requeue" else inspector.cancel
        )
        try:
            report = await asyncio.to_thread(act, self.broker, [task_id])
        except Exception as exc:  # shown, not fatal: the operator can try again
            self.notify(f"{action} of {task_id} failed: {exc}", severity="error")
            return
        (outcome,) = report.outcomes
        if outcome.done and outcome.record is not None:
            done = "requeued" if action == "requeue" else "cancelled"
            if action == "cancel" and outcome.record.status is TaskResultStatus.RUNNING:
                done = "cancel requested for"
            message = f"{done} {task_id}: now {outcome.record.status.value}"
            self.notify(message)
        else:
            message = f"{action} refused for {task_id}: {outcome.reason}"
            self.notify(message, severity="warning")
        self.action_log.append(message)
        self.query_one("#outcome", Static).update(Text(message))
        then()
        self.action_refresh()
