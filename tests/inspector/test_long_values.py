"""Long values are shown cut to a readable length, with a marker saying how much was cut."""

from __future__ import annotations

import json

from tests.inspector import tasks
from tests.inspector.conftest import Threadmill
from threadmill_core import Broker, TaskError, TaskResult, Worker, task
from threadmill_core.cli.inspector import format_record
from threadmill_core.display import REPR_CHARS, SHOWN_CHARS

LONG = 200_000  # characters: far past what a screen shows, well under max_payload_bytes


@task(queue="reports")
def refuse(text: str) -> None:
    """Fail with the whole argument in the message, as careless code does."""
    raise ValueError(f"cannot use {text}")


def test_show_cuts_long_arguments_and_results(broker: Broker, threadmill: Threadmill) -> None:
    """`threadmill show` prints a long argument and return value cut, each with a marker saying
    how many characters were cut; `show --json` prints them whole."""
    to = "x" * LONG
    record = tasks.send_email.using(broker=broker).enqueue(to)
    Worker(broker, queues=["emails"], maintenance=False).run(burst=True)
    ran = threadmill("show", record.id)
    assert ran.code == 0
    lines = {line.split("  ", 1)[0]: line for line in ran.out.splitlines()}
    args_cut = len(json.dumps([to])) - SHOWN_CHARS
    assert lines["args"].endswith(f"…[{args_cut:,} more characters; --json shows all]")
    returned_cut = len(json.dumps(f"sent to {to}")) - SHOWN_CHARS
    assert ran.out.count(f"…[{returned_cut:,} more characters; --json shows all]") == 1
    assert len(ran.out) < 3 * SHOWN_CHARS + 2_000
    whole = threadmill("show", record.id, "--json")
    assert json.loads(whole.out)["args"] == [to]


def test_show_cuts_a_long_error_message(broker: Broker, threadmill: Threadmill) -> None:
    """A failure whose message holds a long value is shown cut, in its line and its traceback."""
    record = refuse.using(broker=broker).enqueue("z" * LONG)
    Worker(broker, queues=["reports"], maintenance=False).run(burst=True)
    ran = threadmill("show", record.id)
    assert ran.code == 0
    # The argument, the message, and the traceback's last line.
    assert ran.out.count("more characters; --json shows all]") == 3
    assert len(ran.out) < 3 * SHOWN_CHARS + 4_000


def test_short_values_are_shown_whole() -> None:
    """A value of at most SHOWN_CHARS characters is shown as it is, without a marker."""
    value = "y" * (SHOWN_CHARS - 4)  # as JSON, ["yy…y"], exactly SHOWN_CHARS
    text = format_record(TaskResult(id="t", task_path="m:f", args=[value]))
    assert f'["{value}"]' in text
    assert "more characters" not in text


def test_reprs_cut_long_values() -> None:
    """repr of a record or an error (what logs and tracebacks show) cuts each long value."""
    record = TaskResult(
        id="t", task_path="m:f", args=["a" * LONG], kwargs={"k": "b" * LONG},
        return_value="c" * LONG,
        errors=(TaskError(exception_class_path="E", message="d" * LONG, traceback="e" * LONG),),
    )  # fmt: skip
    shown = repr(record)
    assert len(shown) < 5 * (REPR_CHARS + 50) + 500
    assert shown.count("more characters]") == 5
    assert f"…[{LONG + 4 - REPR_CHARS:,} more characters]" in shown  # ['aaa…'] is LONG + 4


def test_show_lists_a_traced_tasks_headers_and_no_line_for_none() -> None:
    """`show` has a ``headers`` line for a task stored with trace context, none otherwise."""
    traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    headers = {"traceparent": traceparent}
    traced = format_record(TaskResult(id="t", task_path="m:f", headers=headers))
    assert f'headers          {{"traceparent": "{traceparent}"}}' in traced.splitlines()
    plain = format_record(TaskResult(id="t", task_path="m:f"))
    assert not any(line.startswith("headers") for line in plain.splitlines())
