"""The inspector's JSON: what the inspecting commands print with ``--json``, for scripts.

Timestamps are ISO 8601 in UTC to the millisecond, statuses by name, and
unknown rates null.
"""

from __future__ import annotations

import enum
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs

from threadmill_core.cli.inspector.actions import Outcome, Report
from threadmill_core.cli.inspector.queries import (
    STATUSES,
    Listed,
    Overview,
    QueueStats,
    Undecodable,
)
from threadmill_core.models import TaskResult


def _iso(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _plain(_instance: object, _attribute: object, value: Any) -> Any:
    if isinstance(value, datetime):
        return _iso(value)
    if isinstance(value, timedelta):  # a time limit, in seconds
        return value.total_seconds()
    if isinstance(value, enum.Enum):
        return value.value
    return value


def record_json(record: TaskResult) -> dict[str, Any]:
    """The record as JSON-ready data: timestamps ISO 8601 in UTC, the status by name."""
    data: dict[str, Any] = attrs.asdict(record, value_serializer=_plain)
    return data


def listed_json(item: Listed) -> dict[str, Any]:
    if isinstance(item, Undecodable):
        return {"undecodable": True, "position": item.position, "message": item.message}
    return record_json(item)


def stats_json(stats: QueueStats) -> dict[str, Any]:
    rates = stats.rates
    return {
        "queue": stats.queue,
        **{s.value.lower(): stats.counts.of(s) for s in STATUSES},
        "entered": rates.entered if rates else None,
        "finished": rates.finished if rates else None,
        "ingress_per_second": rates.ingress if rates else None,
        "egress_per_second": rates.egress if rates else None,
    }


def overview_json(view: Overview) -> dict[str, Any]:
    """`stats --json`: rates are null when the backend keeps no telemetry."""
    return {
        "taken_at": _iso(view.taken_at),
        "window_seconds": view.window.total_seconds(),
        "rates_known": view.rates_known,
        "queues": [stats_json(q) for q in view.queues],
        "total": stats_json(view.total()),
    }


def outcome_json(outcome: Outcome) -> dict[str, Any]:
    if outcome.done and outcome.record is not None:
        done: dict[str, Any] = {"id": outcome.task_id, "status": outcome.record.status.value}
        if outcome.record.cancel_requested_at is not None:  # a running task's cancel request
            done["cancel_requested_at"] = _iso(outcome.record.cancel_requested_at)
        return done
    return {
        "id": outcome.task_id,
        "status": outcome.status.value if outcome.status else None,
        "reason": outcome.reason,
    }


def report_json(report: Report) -> dict[str, Any]:
    return {
        "action": report.action,
        "done": [outcome_json(o) for o in report.done],
        "refused": [outcome_json(o) for o in report.refused],
        "exit_code": int(report.exit_code),
    }


def dumps(data: object) -> str:
    """JSON for scripts: not ASCII-escaped; ints of any size kept exact."""
    return json.dumps(data, ensure_ascii=False)
