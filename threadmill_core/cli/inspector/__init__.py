"""What the inspecting shell commands and the TUI share: reading queues, acting, reporting.

Reading (`threadmill_core.cli.inspector.queries`): `overview` (counts and rates
per queue) and `list_tasks` (one page of a segment). Acting
(`threadmill_core.cli.inspector.actions`): `requeue`, `requeue_failed` and
`cancel`, fenced by the backend one task at a time, each `Report` saying
what was done and why anything was refused. Finding a task by the start
or end of its id (`threadmill_core.cli.inspector.lookup`): `find_task`, and
what it costs. Schedules and live workers
(`threadmill_core.cli.inspector.schedules`): `schedule_rows`, `set_paused`,
`run_now`, `live_workers`. Reporting: tables and records
as text (`threadmill_core.cli.inspector.text`) or as JSON
(`threadmill_core.cli.inspector.as_json`).

Every function takes a `Broker` and works on any backend. Rates come from
`Backend.rates`; a backend that keeps no telemetry answers None, and rates
show as unknown ("-" in tables, null in JSON), never as zero.
"""

from threadmill_core.cli.exit_codes import EXIT_CODES_HELP, ExitCode
from threadmill_core.cli.inspector.actions import (
    PAGE_SIZE,
    Outcome,
    Report,
    cancel,
    requeue,
    requeue_failed,
)
from threadmill_core.cli.inspector.as_json import (
    dumps,
    listed_json,
    outcome_json,
    overview_json,
    record_json,
    report_json,
    stats_json,
)
from threadmill_core.cli.inspector.lookup import Found, find_task
from threadmill_core.cli.inspector.queries import (
    CANCELLED,
    DEFERRED,
    FAILED,
    READY,
    RUNNING,
    STATUSES,
    SUCCESSFUL,
    Listed,
    Overview,
    QueueStats,
    Undecodable,
    list_tasks,
    overview,
)
from threadmill_core.cli.inspector.schedules import (
    LiveWorkers,
    ScheduleRow,
    live_workers,
    run_now,
    schedule_rows,
    set_paused,
)
from threadmill_core.cli.inspector.text import (
    LIST_HEADERS,
    STATS_HEADERS,
    TIME_COLUMN,
    format_errors,
    format_list,
    format_overview,
    format_rate,
    format_record,
    format_time,
    last_error,
    list_headers,
    list_row,
    rates_note,
    stats_row,
    table,
)
from threadmill_core.urls import redact

__all__ = [
    "CANCELLED",
    "DEFERRED",
    "EXIT_CODES_HELP",
    "FAILED",
    "LIST_HEADERS",
    "PAGE_SIZE",
    "READY",
    "RUNNING",
    "STATS_HEADERS",
    "STATUSES",
    "SUCCESSFUL",
    "TIME_COLUMN",
    "ExitCode",
    "Found",
    "Listed",
    "LiveWorkers",
    "Outcome",
    "Overview",
    "QueueStats",
    "Report",
    "ScheduleRow",
    "Undecodable",
    "cancel",
    "dumps",
    "find_task",
    "format_errors",
    "format_list",
    "format_overview",
    "format_rate",
    "format_record",
    "format_time",
    "last_error",
    "list_headers",
    "list_row",
    "list_tasks",
    "listed_json",
    "live_workers",
    "outcome_json",
    "overview",
    "overview_json",
    "rates_note",
    "record_json",
    "redact",
    "report_json",
    "requeue",
    "requeue_failed",
    "run_now",
    "schedule_rows",
    "set_paused",
    "stats_json",
    "stats_row",
    "table",
]
