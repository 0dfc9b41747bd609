"""``threadmill worker --tracing`` on real Redis: attempts traced in the worker's processes."""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.trace import SpanKind

from tests.spans import recorded
from tests.worker.test_startup import THREADMILL
from threadmill_core import Broker, TaskResultStatus, tracing

pytestmark = pytest.mark.redis

#: The worker's task module: it sets up its process's tracer provider, whose exporter
#: appends each finished span to $SPANS as one JSON line (one write, so the worker
#: processes' lines never interleave).
TASKS = """\
import json
import os
import time

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from threadmill_core import ExponentialBackoff, TaskContext, task


class FileExporter(SpanExporter):
    def export(self, spans):
        for span in spans:
            line = json.dumps({
                "name": span.name,
                "kind": span.kind.name,
                "trace_id": span.context.trace_id,
                "span_id": span.context.span_id,
                "parent": span.parent.span_id if span.parent else None,
                "links": [link.context.span_id for link in span.links],
                "attributes": dict(span.attributes),
                "events": [[e.name, dict(e.attributes)] for e in span.events],
                "status": span.status.status_code.name,
                "pid": os.getpid(),
            })
            fd = os.open(os.environ["SPANS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            try:
                os.write(fd, (line + "\\n").encode())
            finally:
                os.close(fd)
        return SpanExportResult.SUCCESS


provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(FileExporter()))
trace.set_tracer_provider(provider)


@task
def ok(n):
    with trace.get_tracer("tracedapp").start_as_current_span("inside"):
        return n


@task
def hold(marker):
    open(marker, "w").close()
    while not os.path.exists(marker + ".gate"):
        time.sleep(0.05)
    return 1


@task(retry=ExponentialBackoff(base_delay=0.05, max_retries=3, jitter=0))
def flaky(context: TaskContext, n):
    if context.attempt < 3:
        raise ConnectionError(f"attempt {context.attempt} fails")
    return n
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory holding ``tracedapp.tasks``, importable here too."""
    package = tmp_path / "tracedapp"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "tasks.py").write_text(TASKS)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


@pytest.fixture
def tasks(project: Path) -> Any:
    """``tracedapp.tasks`` imported in this process, its tracer provider left to `recorded`."""
    recorded()  # set up first, so the module's own set_tracer_provider is refused here
    module = importlib.import_module("tracedapp.tasks")
    assert trace.get_tracer_provider() is not module.provider
    return module


def run_worker(
    project: Path, url: str, *args: str, tasks: str = "tracedapp.tasks"
) -> list[dict[str, Any]]:
    """`threadmill worker TASKS --burst` in two processes; the spans they exported."""
    spans = project / "spans.jsonl"
    env = {**os.environ, "SPANS": str(spans)}
    env.pop("THREADMILL_TRACING", None)
    command = [THREADMILL, "worker", tasks, "-b", url, "-p", "2", "-t", "1",
               "--burst", *args]  # fmt: skip
    done = subprocess.run(
        command, cwd=project, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    if not spans.exists():
        return []
    return [json.loads(line) for line in spans.read_text().splitlines()]


def test_a_task_enqueued_in_a_span_runs_in_a_consumer_span_of_that_trace_in_the_worker(
    project: Path, tasks: Any, broker: Broker, broker_url: str
) -> None:
    """Enqueued here inside a span, each task runs in another process in a CONSUMER span of
    the same trace, child of and linked to its PRODUCER span; a task retried twice has three,
    the failures with their exception; the task's own span is the consumer span's child."""
    exporter = recorded()
    exporter.clear()
    tracing.enable()
    try:
        with trace.get_tracer("test").start_as_current_span("request") as request:
            ok = tasks.ok.using(broker=broker).enqueue(1)
            flaky = tasks.flaky.using(broker=broker).enqueue(2)
    finally:
        tracing.disable()
    producers = {
        (span.attributes or {})["messaging.message.id"]: span
        for span in exporter.get_finished_spans()
        if span.kind is SpanKind.PRODUCER
    }
    assert set(producers) == {ok.id, flaky.id}
    trace_id = request.get_span_context().trace_id

    spans = run_worker(project, broker_url, "--tracing")
    assert broker.get_result(ok.id).status is TaskResultStatus.SUCCESSFUL
    final = broker.get_result(flaky.id)
    assert (final.status, final.attempts) == (TaskResultStatus.SUCCESSFUL, 3)
    assert final.headers == flaky.headers != {}

    consumers = [span for span in spans if span["kind"] == SpanKind.CONSUMER.name]
    assert {span["trace_id"] for span in spans} == {trace_id}
    assert all(span["pid"] != os.getpid() for span in spans)
    for task_id, attempts in ((ok.id, 1), (flaky.id, 3)):
        mine = [s for s in consumers if s["attributes"]["messaging.message.id"] == task_id]
        producer = producers[task_id].context
        assert producer is not None
        assert [s["attributes"]["threadmill.task.attempt"] for s in mine] == list(
            range(1, attempts + 1)
        )
        assert all(s["parent"] == producer.span_id for s in mine)
        assert all(s["links"] == [producer.span_id] for s in mine)
        assert all(s["attributes"]["messaging.system"] == "threadmill" for s in mine)
        assert all(s["attributes"]["messaging.destination.name"] == "default" for s in mine)
    retried = [s for s in consumers if s["attributes"]["messaging.message.id"] == flaky.id]
    assert [s["attributes"]["threadmill.task.outcome"] for s in retried] == [
        "retried", "retried", "successful"
    ]  # fmt: skip
    assert [s["status"] for s in retried] == ["ERROR", "ERROR", "UNSET"]
    assert [[e[1]["exception.message"] for e in s["events"]] for s in retried] == [
        ["attempt 1 fails"], ["attempt 2 fails"], []
    ]  # fmt: skip
    [inside] = [span for span in spans if span["name"] == "inside"]
    [ran] = [s for s in consumers if s["attributes"]["messaging.message.id"] == ok.id]
    assert inside["parent"] == ran["span_id"]


def batched(project: Path) -> Any:
    """``batchedapp.tasks``: the tasks above, their process's provider batching its spans
    (a `BatchSpanProcessor` and its thread, as the docs set one up), exported only by a flush
    or the provider's shutdown; imported here too (its provider refused here)."""
    source = TASKS.replace(
        "SimpleSpanProcessor(FileExporter())",
        "BatchSpanProcessor(FileExporter(), schedule_delay_millis=3_600_000)",
    ).replace("import SimpleSpanProcessor", "import BatchSpanProcessor")
    package = project / "batchedapp"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "tasks.py").write_text(source)
    recorded()  # this process's provider first: the module's is refused here
    return importlib.import_module("batchedapp.tasks")


def spans_in(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@contextmanager
def batched_worker(project: Path, broker_url: str) -> Iterator[subprocess.Popen[str]]:
    """`threadmill worker batchedapp.tasks --tracing`, one process of one thread without
    prefetch, its spans written to ``spans.jsonl``; killed, its output shown, if the block
    raises."""
    env = {**os.environ, "SPANS": str(project / "spans.jsonl")}
    env.pop("THREADMILL_TRACING", None)
    command = [THREADMILL, "worker", "batchedapp.tasks", "-b", broker_url, "-p", "1",
               "-t", "1", "--prefetch", "0", "--tracing"]  # fmt: skip
    with subprocess.Popen(
        command, cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as process:
        try:
            yield process
        except BaseException:
            process.kill()
            print(process.communicate(timeout=60)[0])
            raise


def test_a_sigterm_lets_the_running_task_finish_where_the_tracing_setup_started_a_thread(
    project: Path, broker: Broker, broker_url: str
) -> None:
    """A worker process whose task module started a thread (a `BatchSpanProcessor`'s, as the
    docs' tracing setup does) stops gracefully at SIGTERM: its running task finishes, its
    outcome and its span are kept, and the command exits 0."""
    module = batched(project)
    marker = project / "holding"
    record = module.hold.using(broker=broker).enqueue(str(marker))
    with batched_worker(project, broker_url) as process:
        until("the task running", marker.exists)
        process.send_signal(signal.SIGTERM)
        # No way to see the worker process take the signal: it finishes the task either way.
        time.sleep(1)
        (project / "holding.gate").touch()
        out, _ = process.communicate(timeout=120)
    assert process.returncode == 0, out
    assert broker.get_result(record.id).status is TaskResultStatus.SUCCESSFUL, out
    spans = spans_in(project / "spans.jsonl")
    [consumer] = [span for span in spans if span["kind"] == SpanKind.CONSUMER.name]
    assert consumer["attributes"]["threadmill.task.outcome"] == "successful"


def test_spans_a_worker_process_holds_in_a_batch_are_exported_when_it_is_stopped_now(
    project: Path, broker: Broker, broker_url: str
) -> None:
    """A worker process stopped now (a second signal) exports the spans its provider still
    holds in a batch (a `BatchSpanProcessor`, as the docs set one up) before it exits."""
    module = batched(project)
    records = [module.ok.using(broker=broker).enqueue(n) for n in range(3)]
    marker = project / "holding"
    with batched_worker(project, broker_url) as process:
        until("three tasks done", lambda: all(
            broker.get_result(r.id).status is TaskResultStatus.SUCCESSFUL for r in records
        ))  # fmt: skip
        module.hold.using(broker=broker).enqueue(str(marker))
        until("a task holding the worker", marker.exists)
        process.send_signal(signal.SIGTERM)
        process.send_signal(signal.SIGTERM)  # the second: stop now, the held task abandoned
        out, _ = process.communicate(timeout=120)
    assert process.returncode in (1, 4), out  # after a second signal; EXIT_ABANDONED
    exported = spans_in(project / "spans.jsonl")
    consumers = [span for span in exported if span["kind"] == SpanKind.CONSUMER.name]
    assert sorted(s["attributes"]["messaging.message.id"] for s in consumers) == sorted(
        r.id for r in records
    ), out


def until(what: str, check: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_with_tracing_off_nothing_is_stored_or_traced(
    project: Path, tasks: Any, broker: Broker, broker_url: str
) -> None:
    """Without tracing on either side, a task enqueued in a span stores no headers, and the
    worker (whose modules set up a provider) makes no span of its own: only the task's."""
    with trace.get_tracer("test").start_as_current_span("request"):
        record = tasks.ok.using(broker=broker).enqueue(1)
    assert broker.get_result(record.id).headers == {}
    spans = run_worker(project, broker_url)
    assert broker.get_result(record.id).status is TaskResultStatus.SUCCESSFUL
    assert [(span["name"], span["parent"]) for span in spans] == [("inside", None)]


def test_tracing_without_opentelemetry_is_one_clear_line_and_exit_code_3(
    project: Path, tmp_path: Path, broker_url: str
) -> None:
    """``--tracing`` where opentelemetry-api cannot be imported stops the command at start,
    saying which extra to install."""
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "opentelemetry.py").write_text("raise ImportError('no opentelemetry here')\n")
    env = {**os.environ, "PYTHONPATH": str(shadow), "SPANS": str(tmp_path / "spans.jsonl")}
    command = [THREADMILL, "worker", "tracedapp.tasks", "-b", broker_url, "--tracing", "--burst"]
    done = subprocess.run(
        command, cwd=project, env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 3, done.stdout + done.stderr
    errors = [line for line in done.stderr.splitlines() if "ERROR" in line]
    assert len(errors) == 1, done.stderr
    assert "tracing needs OpenTelemetry's API: pip install 'threadmill[otel]'" in errors[0]
