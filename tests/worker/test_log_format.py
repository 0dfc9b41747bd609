"""``threadmill worker --log-format json``: one JSON object per stderr line, the fields named."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from tests.worker import logging_tasks
from threadmill_core import Broker, TaskResultStatus

pytestmark = pytest.mark.redis

#: Fields every line has.
EVERY = {"time", "level", "logger", "message", "process", "process_name", "thread"}


def worker(broker_url: str, *options: str) -> subprocess.CompletedProcess[str]:
    command = [
        sys.executable, "-m", "threadmill_core.cli", "worker", logging_tasks.__name__,
        "--broker", broker_url, "--queues", "logs", "--processes", "2", "--threads", "2",
        "--poll-interval", "0.1", "--burst", *options,
    ]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("start", [(), ("--spawn",)], ids=["forked", "spawned"])
def test_json_log_lines_name_the_fields_of_each_event(
    broker: Broker, broker_url: str, start: tuple[str, ...]
) -> None:
    """Every stderr line of a JSON-logging worker command is one JSON object with the time,
    level, logger, message and process; worker lines name the worker, task events and what a
    task logs name the task, and a logged exception carries its traceback; in worker processes
    forked from the supervisor and in spawned ones alike."""
    chatty = broker.enqueue(logging_tasks.chatty, 7)
    caught = broker.enqueue(logging_tasks.caught)
    broken = broker.enqueue(logging_tasks.broken)

    done = worker(broker_url, "--log-format", "json", "--log-level", "DEBUG", *start)

    assert done.returncode == 0, done.stderr
    assert broker.get_result(broken.id).status is TaskResultStatus.FAILED
    events: list[dict[str, Any]] = [json.loads(line) for line in done.stderr.splitlines()]
    assert events
    for event in events:
        assert set(event) >= EVERY, event
        assert event["time"].endswith("+00:00")
    by_message = {event["message"]: event for event in events}

    working = by_message["working on 7"]
    assert (working["task_id"], working["task_name"], working["queue"], working["n"]) == (
        chatty.id,
        "tests.worker.logging_tasks:chatty",
        "logs",
        7,
    )
    assert working["logger"] == "tests.worker.logging_tasks"
    assert isinstance(working["worker_index"], int)
    assert working["worker_id"].count(":") == 2

    caught_it = by_message["caught it"]
    assert caught_it["task_id"] == caught.id
    assert caught_it["level"] == "ERROR"
    assert "ValueError: a caught problem" in caught_it["exception"]

    [failure] = [e for e in events if e.get("task_id") == broken.id and e["level"] == "WARNING"]
    assert failure["task_name"] == "tests.worker.logging_tasks:broken"
    assert failure["logger"] == "threadmill.worker"
    assert "FAILED" in failure["message"]
    assert failure["error"] == "builtins.RuntimeError: broken on purpose"
    assert 'raise RuntimeError("broken on purpose")' in failure["exception"]

    supervisor = [e for e in events if e["process_name"] == "MainProcess"]
    assert supervisor
    assert all("worker_index" not in e and "task_id" not in e for e in supervisor)


def test_text_stays_the_default(broker: Broker, broker_url: str) -> None:
    """Without --log-format, the lines are the text format's, not JSON."""
    broker.enqueue(logging_tasks.chatty, 1)
    done = worker(broker_url)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert lines
    assert not any(line.startswith("{") for line in lines)
    assert any(" INFO    MainProcess threadmill.supervisor: " in line for line in lines)


def test_an_unknown_log_format_is_one_line_and_a_usage_error(broker_url: str) -> None:
    """--log-format xml: one line naming the formats, exit code 2, nothing run."""
    done = worker(broker_url, "--log-format", "xml")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "threadmill: unknown log format 'xml': --log-format takes text or json"
    ]
