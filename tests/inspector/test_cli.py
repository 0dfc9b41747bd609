"""The inspecting commands, run in-process on a memory backend: output, JSON and exit codes."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from datetime import timedelta

import pytest

from tests.inspector.conftest import Fleet, Threadmill, shared_start, stored
from threadmill_core import Backend, Broker, FakeClock, TaskResultStatus, cli
from threadmill_core.checks import MAX_COUNT
from threadmill_core.cli import commands
from threadmill_core.models import QueueRates
from threadmill_memory import MemoryBackend

READY = TaskResultStatus.READY
FAILED = TaskResultStatus.FAILED
CANCELLED = TaskResultStatus.CANCELLED
SUCCESSFUL = TaskResultStatus.SUCCESSFUL


class NoTelemetry(MemoryBackend):
    """A backend that keeps no history, as the interface's default."""

    def rates(self, window: timedelta) -> Mapping[str, QueueRates] | None:
        return Backend.rates(self, window)


def row(out: str, first_cell: str) -> list[str]:
    """The cells of the table row starting with `first_cell`."""
    for line in out.splitlines():
        cells = line.split()
        if cells and cells[0] == first_cell:
            return cells
    raise AssertionError(f"no row {first_cell!r} in:\n{out}")


# --- stats -----------------------------------------------------------------------------


def test_stats_shows_each_queue_by_segment_with_rates(fleet: Fleet, threadmill: Threadmill) -> None:
    """stats prints every queue's count per segment, a total, and rates over the window."""
    ran = threadmill("stats", "--window", "10")
    assert ran.code == 0
    headers = ran.out.splitlines()[0].split()
    assert headers == [
        "queue", "ready", "deferred", "running", "successful", "failed", "cancelled",
        "in/s", "out/s",
    ]  # fmt: skip
    # emails: 6 entered, 3 finished; reports: 2 entered, 2 finished, over 10 s.
    assert row(ran.out, "emails") == ["emails", "1", "1", "1", "3", "0", "0", "0.60", "0.30"]
    assert row(ran.out, "reports") == ["reports", "0", "0", "0", "0", "2", "0", "0.20", "0.20"]
    assert row(ran.out, "total") == ["total", "1", "1", "1", "3", "2", "0", "0.80", "0.50"]
    assert "over the last 10 s" in ran.out


def test_stats_rates_fall_to_zero_once_the_window_has_passed(
    fleet: Fleet, threadmill: Threadmill, clock: FakeClock
) -> None:
    """Rates count only the window: after it passes with nothing happening, they are 0.00."""
    clock.advance(timedelta(seconds=61))
    ran = threadmill("stats")
    assert row(ran.out, "emails")[-2:] == ["0.00", "0.00"]
    assert row(ran.out, "emails")[4] == "3"


def test_stats_json_carries_counts_and_rates(fleet: Fleet, threadmill: Threadmill) -> None:
    """stats --json gives per-queue counts, the entered/finished counts and per-second rates."""
    ran = threadmill("stats", "--json", "--window", "10")
    data = json.loads(ran.out)
    assert data["rates_known"] is True
    assert data["window_seconds"] == 10
    emails = next(q for q in data["queues"] if q["queue"] == "emails")
    assert emails == {
        "queue": "emails", "ready": 1, "deferred": 1, "running": 1, "successful": 3,
        "failed": 0, "cancelled": 0, "entered": 6, "finished": 3,
        "ingress_per_second": 0.6, "egress_per_second": 0.3,
    }  # fmt: skip
    assert data["total"]["failed"] == 2


def test_stats_shows_rates_as_unknown_for_a_backend_without_telemetry(
    clock: FakeClock, capsys: pytest.CaptureFixture[str]
) -> None:
    """A backend whose rates() is None shows "-" and says n/a, and JSON rates are null."""
    broker = Broker(NoTelemetry(clock=clock))
    from tests.inspector.conftest import make_fleet

    make_fleet(broker)
    assert cli.main(["stats"], broker=broker) == 0
    out = capsys.readouterr().out
    assert row(out, "emails")[-2:] == ["-", "-"]
    assert "rates: n/a" in out
    assert cli.main(["stats", "--json"], broker=broker) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["rates_known"] is False
    assert {q["ingress_per_second"] for q in data["queues"]} == {None}


def test_stats_of_an_empty_backend_says_so(threadmill: Threadmill) -> None:
    """stats on a backend with no tasks prints the header and says there are none."""
    ran = threadmill("stats")
    assert ran.code == 0
    assert "no tasks in any queue" in ran.out


def test_stats_watch_refreshes_until_ctrl_c(
    fleet: Fleet, threadmill: Threadmill, monkeypatch: pytest.MonkeyPatch
) -> None:
    """stats --watch prints a table per refresh and exits 0 on Ctrl-C."""
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        if len(waits) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(commands, "_sleep", sleep)
    ran = threadmill("stats", "--watch", "--interval", "0.5")
    assert ran.code == 0
    assert waits == [0.5, 0.5]
    assert ran.out.count("successful") == 2
    assert ran.out.count("memory://") == 2


# --- ls --------------------------------------------------------------------------------


def test_ls_lists_one_segment_with_its_last_errors(fleet: Fleet, threadmill: Threadmill) -> None:
    """ls QUEUE --status FAILED lists those tasks in order, each with its last error."""
    ran = threadmill("ls", "reports", "--status", "failed")
    assert ran.code == 0
    lines = ran.out.splitlines()
    assert lines[0].split() == [
        "id", "task", "prio", "tries", "finished", "last", "error", "progress",
    ]  # fmt: skip
    assert [line.split()[0] for line in lines[1:3]] == fleet.failed
    assert "ValueError: invalid literal for int() with base 10: 'n/a'" in lines[1]
    assert lines[-1] == "1-2 of 2 FAILED in queue 'reports'"


def test_ls_pages_with_limit_and_offset(fleet: Fleet, threadmill: Threadmill) -> None:
    """--limit and --offset take a slice of the segment, and the footer says how to go on."""
    ran = threadmill("ls", "emails", "-s", "SUCCESSFUL", "--limit", "2", "--offset", "1")
    ids = [line.split()[0] for line in ran.out.splitlines()[1:-1]]
    assert ids == fleet.successful[1:3]
    assert ran.out.splitlines()[-1] == "2-3 of 3 SUCCESSFUL in queue 'emails'"
    first = threadmill("ls", "emails", "-s", "successful", "--limit", "2")
    assert first.out.splitlines()[-1].endswith("--offset 2 for more")


def test_ls_json_gives_whole_records(fleet: Fleet, threadmill: Threadmill) -> None:
    """ls --json gives the total and each record with ISO timestamps and its errors."""
    data = json.loads(threadmill("ls", "reports", "-s", "failed", "--json").out)
    assert (data["queue"], data["status"], data["total"]) == ("reports", "FAILED", 2)
    first = data["tasks"][0]
    assert first["id"] == fleet.failed[0]
    assert first["status"] == "FAILED"
    assert first["finished_at"] == "2030-01-01T00:00:00.000Z"
    assert first["errors"][0]["exception_class_path"] == "builtins.ValueError"
    assert "Traceback" in first["errors"][0]["traceback"]


def test_ls_of_an_empty_segment_says_so(fleet: Fleet, threadmill: Threadmill) -> None:
    """ls of a segment with no tasks exits 0 and says it is empty."""
    ran = threadmill("ls", "emails", "--status", "cancelled")
    assert (ran.code, ran.out.strip()) == (0, "no CANCELLED tasks in queue 'emails'")


def test_ls_shows_poison_in_place_and_the_other_tasks_around_it(
    fleet: Fleet, threadmill: Threadmill, backend: MemoryBackend
) -> None:
    """A record that does not decode shows in its place, and the rest of the page still shows."""
    backend._plant_raw("poisoned", b"not json", queue="reports", status=FAILED)
    ran = threadmill("ls", "reports", "--status", "failed")
    assert ran.code == 0
    lines = ran.out.splitlines()
    assert [line.split()[0] for line in lines[1:4]] == [*fleet.failed, "?"]
    assert "does not decode" in lines[3]
    assert "poisoned" in lines[3]


def test_ls_refuses_an_unknown_status(threadmill: Threadmill) -> None:
    """An unknown --status is a usage error naming the statuses."""
    with pytest.raises(SystemExit) as exit_:
        threadmill("ls", "emails", "--status", "LOST")
    assert exit_.value.code == 2


@pytest.mark.parametrize(
    ("option", "value", "rule"),
    [
        ("--limit", "0", "from 1 to 1,000,000,000,000"),
        ("--limit", str(2**63), "from 1 to 1,000,000,000,000"),
        ("--offset", "-1", "from 0 to 1,000,000,000,000"),
        ("--offset", str(MAX_COUNT + 1), "from 0 to 1,000,000,000,000"),
    ],
)
def test_ls_refuses_a_count_out_of_range(
    threadmill: Threadmill, capsys: pytest.CaptureFixture[str], option: str, value: str, rule: str
) -> None:
    """A --limit or --offset past the backends' range is a usage error naming the range, not
    an error of the store's."""
    with pytest.raises(SystemExit) as exit_:
        threadmill("ls", "emails", option, value)
    assert exit_.value.code == 2
    assert f"must be {rule}, got {value}" in capsys.readouterr().err


def test_ls_takes_the_largest_offset_and_finds_nothing_there(
    fleet: Fleet, threadmill: Threadmill
) -> None:
    """--offset MAX_COUNT is past the end of any segment: a page with nothing on it."""
    ran = threadmill("ls", "emails", "-s", "successful", "--offset", str(MAX_COUNT))
    assert ran.code == 0
    assert ran.out == (
        "no SUCCESSFUL tasks in queue 'emails' from offset 1000000000000 (it holds 3)\n"
    )


def test_ls_without_status_lists_the_waiting_tasks_and_counts_the_others(
    fleet: Fleet, threadmill: Threadmill
) -> None:
    """ls QUEUE alone lists READY, then counts the other segments and says how to list one."""
    ran = threadmill("ls", "emails")
    assert ran.code == 0, ran.err
    lines = ran.out.splitlines()
    assert [line.split()[0] for line in lines[1:-2]] == fleet.ready
    assert lines[-2] == "1-1 of 1 READY in queue 'emails'"
    assert lines[-1] == (
        "other segments: 1 DEFERRED, 1 RUNNING, 3 SUCCESSFUL, 0 FAILED, 0 CANCELLED "
        "(--status STATUS lists one; threadmill stats counts every queue)"
    )
    data = json.loads(threadmill("ls", "emails", "--json").out)
    assert (data["status"], [t["id"] for t in data["tasks"]]) == ("READY", fleet.ready)


# --- show ------------------------------------------------------------------------------


def test_show_prints_the_whole_record_with_tracebacks(fleet: Fleet, threadmill: Threadmill) -> None:
    """show ID prints every field, the arguments and each error with its traceback."""
    ran = threadmill("show", fleet.failed[1])
    assert ran.code == 0
    fields = dict(line.split(None, 1) for line in ran.out.splitlines()[:3])
    assert fields == {"id": fleet.failed[1], "task": "tests.inspector.tasks:parse_report",
                      "queue": "reports"}  # fmt: skip
    assert "status           FAILED" in ran.out
    assert 'args             ["12x"]' in ran.out
    assert "errors (1, oldest first):" in ran.out
    assert "  #1 builtins.ValueError: invalid literal for int() with base 10: '12x'" in ran.out
    assert "     Traceback (most recent call last):" in ran.out
    assert "in parse_report\n         return int(text)" in ran.out


def test_show_json_is_the_record(fleet: Fleet, threadmill: Threadmill) -> None:
    """show --json gives the record, the return value of a successful task included."""
    data = json.loads(threadmill("show", fleet.successful[0], "--json").out)
    assert data["status"] == "SUCCESSFUL"
    assert data["return_value"] == "sent to user0@example.com"
    assert data["attempts"] == 1


def test_show_of_an_unknown_id_says_so_and_exits_3(threadmill: Threadmill) -> None:
    """show of an id no backend holds explains, on stderr, and exits 3."""
    ran = threadmill("show", "no-such-task")
    assert ran.code == 3
    assert ran.out == ""
    assert "no task with id 'no-such-task'" in ran.err


def test_show_of_poison_says_it_does_not_decode(
    threadmill: Threadmill, backend: MemoryBackend
) -> None:
    """show of a task whose stored bytes do not decode says so and exits 3."""
    backend._plant_raw("poisoned", b"\xff garbage", status=FAILED)
    ran = threadmill("show", "poisoned")
    assert ran.code == 3
    assert "exists but cannot be shown: its stored bytes do not decode" in ran.err


def test_show_takes_the_start_or_the_end_of_an_id_that_names_one_task(
    fleet: Fleet, threadmill: Threadmill
) -> None:
    """show accepts a unique start or end of an id, in any case, as the whole id."""
    whole = fleet.failed[1]
    for piece in (whole[-8:], whole[-8:].upper(), whole[:-4]):
        ran = threadmill("show", piece)
        assert ran.code == 0, (piece, ran.err)
        assert ran.out.splitlines()[0] == f"id               {whole}"


def test_show_of_an_ambiguous_piece_of_an_id_lists_the_matches_and_exits_3(
    fleet: Fleet, threadmill: Threadmill
) -> None:
    """A start shared by several ids (UUIDv7 ids of one batch share their time) lists each
    match with its queue and status, shows none and exits 3."""
    shared = shared_start(fleet)
    ran = threadmill("show", shared)
    assert (ran.code, ran.out) == (3, "")
    assert ran.err.startswith(f"threadmill show: {shared!r} starts or ends 8 task ids: ")
    every = [*fleet.failed, *fleet.successful, *fleet.ready, *fleet.deferred, *fleet.running]
    assert all(task_id in ran.err for task_id in every)
    assert f"{fleet.failed[0]} (reports, FAILED)" in ran.err
    assert ran.err.rstrip().endswith("; give more of the id")
    short = threadmill("show", fleet.failed[0][-3:])
    assert short.code == 3
    assert "no task with id" in short.err, "3 characters are too few to look for"


# --- requeue ---------------------------------------------------------------------------


def test_requeue_of_failed_tasks_does_it_and_exits_0(
    fleet: Fleet, threadmill: Threadmill, broker: Broker
) -> None:
    """requeue ID... moves FAILED tasks to READY, keeping their errors, and reports each."""
    ran = threadmill("requeue", *fleet.failed)
    assert ran.code == 0
    for task_id in fleet.failed:
        assert f"requeued   {task_id}  (reports, now READY)" in ran.out
        record = stored(broker, task_id)
        assert (record.status, len(record.errors)) == (READY, 1)
    assert ran.out.splitlines()[-1] == "requeued 2 of 2"


def test_requeue_reports_each_refusal_and_exits_1_when_partly_done(
    fleet: Fleet, threadmill: Threadmill, broker: Broker
) -> None:
    """A running, a successful, a pending and an unknown task are refused with reasons; exit 1."""
    asked = [fleet.failed[0], *fleet.running, fleet.successful[0], *fleet.ready, "nope"]
    ran = threadmill("requeue", *asked)
    assert ran.code == 1
    lines = ran.out.splitlines()
    assert lines[0].startswith(f"requeued   {fleet.failed[0]}")
    assert lines[1] == (
        f"refused    {fleet.running[0]}  it is RUNNING: its lease holder (a worker or the "
        "reaper) decides it, not an operator"
    )
    assert lines[2] == (
        f"refused    {fleet.successful[0]}  it finished SUCCESSFUL: a successful task is never "
        "run again"
    )
    assert lines[3] == f"refused    {fleet.ready[0]}  it is READY: already waiting to run"
    assert lines[4] == (
        "refused    nope  no such task (never enqueued, purged, or its result expired)"
    )
    assert lines[5] == "requeued 1 of 5; refused 4"
    assert stored(broker, fleet.running[0]).status is TaskResultStatus.RUNNING
    assert stored(broker, fleet.successful[0]).status is SUCCESSFUL


def test_requeue_exits_3_when_nothing_could_be_done(fleet: Fleet, threadmill: Threadmill) -> None:
    """When every task asked for is refused, requeue exits 3."""
    ran = threadmill("requeue", *fleet.running, *fleet.successful)
    assert ran.code == 3
    assert ran.out.splitlines()[-1] == "requeued 0 of 4; refused 4"


def test_requeue_json_lists_done_and_refused(fleet: Fleet, threadmill: Threadmill) -> None:
    """requeue --json gives what was done, what was refused with the status found and why."""
    data = json.loads(threadmill("requeue", fleet.failed[0], *fleet.running, "--json").out)
    assert data == {
        "action": "requeue",
        "done": [{"id": fleet.failed[0], "status": "READY"}],
        "refused": [
            {
                "id": fleet.running[0],
                "status": "RUNNING",
                "reason": "it is RUNNING: its lease holder (a worker or the reaper) decides it, "
                "not an operator",
            }
        ],
        "exit_code": 1,
    }


def test_requeue_failed_requeues_a_whole_queue_page_by_page(
    threadmill: Threadmill, broker: Broker
) -> None:
    """requeue --failed QUEUE moves every FAILED task of the queue (several pages) to READY."""
    from tests.inspector import tasks
    from threadmill_core import Worker

    reports = tasks.parse_report.using(broker=broker)
    records = broker.enqueue_many(reports, [((f"bad{n}",), {}) for n in range(250)])
    Worker(broker, queues=["reports"], maintenance=False).run(burst=True)
    assert broker.counts()["reports"].failed == 250

    ran = threadmill("requeue", "--failed", "reports")
    assert ran.code == 0
    assert ran.out.strip() == "requeued 250 of 250 FAILED in queue 'reports'"
    assert broker.counts()["reports"].ready == 250
    assert {stored(broker, r.id).status for r in records} == {READY}


def test_requeue_failed_of_a_queue_with_none_does_nothing_and_exits_0(
    fleet: Fleet, threadmill: Threadmill
) -> None:
    """requeue --failed of a queue without failures says so and exits 0."""
    ran = threadmill("requeue", "--failed", "emails")
    assert ran.code == 0
    assert ran.out.strip() == "no FAILED tasks in queue 'emails': nothing to requeue"


def test_requeue_needs_ids_or_failed_but_not_both(fleet: Fleet, threadmill: Threadmill) -> None:
    """requeue with neither ids nor --failed, or with both, is a usage error (exit 2)."""
    assert threadmill("requeue").code == 2
    ran = threadmill("requeue", fleet.failed[0], "--failed", "reports")
    assert ran.code == 2
    assert "give task IDs, or --failed QUEUE (not both)" in ran.err


# --- cancel ----------------------------------------------------------------------------


def test_cancel_cancels_pending_tasks_requests_running_and_refuses_finished(
    fleet: Fleet, threadmill: Threadmill, broker: Broker
) -> None:
    """cancel moves READY and DEFERRED to CANCELLED, requests the cancel of a running task
    (which keeps running until its worker stops it), and refuses a finished one."""
    ran = threadmill("cancel", *fleet.ready, *fleet.deferred, *fleet.running, fleet.failed[0])
    assert ran.code == 1
    lines = ran.out.splitlines()
    assert lines[0] == f"cancelled  {fleet.ready[0]}  (emails, now CANCELLED)"
    assert lines[1] == f"cancelled  {fleet.deferred[0]}  (emails, now CANCELLED)"
    assert lines[2] == f"requested  {fleet.running[0]}  cancel requested (emails, now RUNNING)"
    assert lines[3] == (
        f"refused    {fleet.failed[0]}  it already finished (FAILED): a finished task cannot "
        "be cancelled"
    )
    assert stored(broker, fleet.ready[0]).status is CANCELLED
    running = stored(broker, fleet.running[0])
    assert running.status is TaskResultStatus.RUNNING
    assert running.cancel_requested_at is not None
    assert threadmill("cancel", *fleet.successful).code == 3


def test_requeue_and_cancel_take_pieces_of_ids_and_refuse_ambiguous_ones(
    fleet: Fleet, threadmill: Threadmill, broker: Broker
) -> None:
    """requeue and cancel act on the task a unique piece of an id names, and refuse a piece
    that names several, listing them, acting on none."""
    ran = threadmill("requeue", fleet.failed[0][-8:])
    assert (ran.code, ran.out.splitlines()[0]) == (
        0, f"requeued   {fleet.failed[0]}  (reports, now READY)"
    )  # fmt: skip
    shared = shared_start(fleet)
    ran = threadmill("cancel", fleet.deferred[0][-10:].upper(), shared)
    assert ran.code == 1
    lines = ran.out.splitlines()
    assert lines[0] == f"cancelled  {fleet.deferred[0]}  (emails, now CANCELLED)"
    assert lines[1].startswith(f"refused    {shared}  {shared!r} starts or ends 8 task ids: ")
    assert stored(broker, fleet.ready[0]).status is READY, "an ambiguous piece acts on none"


# --- purge -----------------------------------------------------------------------------


def test_purge_asks_first_and_does_nothing_unless_confirmed(
    fleet: Fleet, threadmill: Threadmill, broker: Broker
) -> None:
    """purge asks on stderr; anything but yes (or no answer at all) purges nothing and exits 3."""
    for answer in ("n\n", "", "maybe\n"):
        ran = threadmill("purge", "emails", "--status", "successful", stdin=answer)
        assert ran.code == 3
        assert "Delete the 3 SUCCESSFUL task(s) of queue 'emails'? No undo. [y/N]" in ran.err
        assert ran.out.strip() == "not confirmed: nothing purged"
    assert broker.counts()["emails"].successful == 3


def test_purge_deletes_the_segment_when_confirmed(
    fleet: Fleet, threadmill: Threadmill, broker: Broker
) -> None:
    """purge answered yes deletes the segment and says how many went."""
    ran = threadmill("purge", "emails", "--status", "successful", stdin="y\n")
    assert ran.code == 0
    assert ran.out.strip() == "purged 3 SUCCESSFUL task(s) from queue 'emails'"
    assert broker.counts()["emails"].successful == 0
    assert broker.counts()["emails"].ready == 1


def test_purge_yes_does_not_ask(fleet: Fleet, threadmill: Threadmill, broker: Broker) -> None:
    """purge --yes purges without a prompt, and --json reports the count."""
    ran = threadmill("purge", "reports", "--status", "failed", "--yes", "--json")
    assert ran.err == ""
    assert json.loads(ran.out) == {
        "action": "purge", "queue": "reports", "status": "FAILED", "purged": 2,
        "confirmed": True, "exit_code": 0,
    }  # fmt: skip
    assert "reports" not in broker.counts()


def test_purge_of_running_is_refused_as_a_usage_error(
    threadmill: Threadmill, capsys: pytest.CaptureFixture[str]
) -> None:
    """purge --status RUNNING is refused before anything is asked: a running task has a holder."""
    with pytest.raises(SystemExit) as exit_:
        threadmill("purge", "emails", "--status", "running", "--yes")
    assert exit_.value.code == 2
    assert "RUNNING cannot be purged" in capsys.readouterr().err


# --- connecting ------------------------------------------------------------------------


def test_inspecting_commands_need_a_broker_url(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without --broker or THREADMILL_URL, a command says what to give and exits 2."""
    monkeypatch.delenv("THREADMILL_URL", raising=False)
    assert cli.main(["stats"]) == 2
    assert "threadmill stats: give --broker URL or set THREADMILL_URL" in capsys.readouterr().err


def test_an_unknown_scheme_is_reported_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    """A broker URL no installed backend handles exits 2 naming the installed schemes."""
    assert cli.main(["ls", "q", "-s", "ready", "--broker", "nosuch://x"]) == 2
    assert "no installed backend handles nosuch://" in capsys.readouterr().err


def test_inspect_without_textual_names_the_extra(
    broker: Broker, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """threadmill inspect without Textual installed says which extra to install, exit 2."""
    monkeypatch.setitem(sys.modules, "textual", None)  # import textual raises ImportError
    monkeypatch.delitem(sys.modules, "threadmill_core.cli.tui", raising=False)
    assert cli.main(["inspect"], broker=broker) == 2
    assert "pip install 'threadmill[tui]'" in capsys.readouterr().err


def test_help_documents_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    """Every inspecting command's --help ends with the exit code table."""
    for command in ("stats", "ls", "show", "requeue", "cancel", "purge", "inspect"):
        with pytest.raises(SystemExit):
            cli.main([command, "--help"])
        out = capsys.readouterr().out
        assert "exit codes:" in out
        assert "3  nothing was done" in out
