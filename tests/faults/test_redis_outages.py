"""Redis outages under working workers: SIGKILL and restart, and a server out of memory."""

from __future__ import annotations

import logging
import re
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import timedelta

import pytest

from tests.faults import fault_tasks
from tests.faults.runs import Runs, burst_settings, supervising, wait_until
from tests.faults.servers import Server
from threadmill_core import TaskResultStatus, Worker, connect
from threadmill_redis import RedisUnavailable

pytestmark = [pytest.mark.redis]

WARNING = "backend unavailable"
BACK = "backend reachable again"

#: Seconds Redis stays down, kill by kill: the middle outage outlasts the
#: leases (1 s), so the reaper may take tasks over from workers whose
#: acknowledgements are waiting; the others do not.
OUTAGES = (0.3, 1.5, 0.5)


def child_lines(output: str, text: str) -> Counter[str]:
    """How many log lines containing `text` each worker process wrote (by process name)."""
    found: Counter[str] = Counter()
    for line in output.splitlines():
        match = re.search(r"(threadmill-worker-\d+) ", line)
        if match and text in line:
            found[match.group(1)] += 1
    return found


@pytest.mark.slow
@pytest.mark.parametrize("prefetch", [2, None], ids=["prefetch-2", "adaptive"])
def test_redis_killed_three_times_mid_run_loses_nothing(
    prefetch: int | None,
    durable: Server,
    log_url: str,
    namespace: str,
    read_events: Callable[[str], list[str]],
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Three SIGKILLs of an fsync-always Redis: all SUCCESSFUL, reruns only of tasks in flight.

    With a fixed prefetch of one per thread, and with the default adaptive one, which
    sizes itself from the run.
    """
    caplog.set_level(logging.INFO, logger="threadmill")
    total, kills = 240, len(OUTAGES)
    url = f"{durable.url}?namespace={namespace}"
    with connect(url) as broker:
        config = broker.backend.client.config_get("append*")  # type: ignore[attr-defined]  # a RedisBackend, as the URL says
        assert (config["appendonly"], config["appendfsync"]) == ("yes", "always")
        work = fault_tasks.work.using(broker=broker)
        records = broker.enqueue_many(
            work, [((log_url, namespace, n, 20), {}) for n in range(total)]
        )

    settings = burst_settings(url, prefetch=prefetch, lease_ttl=timedelta(seconds=1))
    with supervising(settings) as (supervisor, runner):
        for kill, outage in enumerate(OUTAGES):
            wait_until(
                lambda k=kill: len(read_events(namespace)) >= 120 * (k + 1),
                timeout=60,
                what="the workers to make progress",
            )
            durable.kill()
            # The marker goes in after the kill has landed: a task in flight at
            # the kill started before it, and was acknowledged after it.
            fault_tasks.log_event(log_url, namespace, f"kill:{kill}")
            time.sleep(outage)
            durable.start()
            fault_tasks.log_event(log_url, namespace, f"restart:{kill}")
        runner.join(timeout=120)
        assert not runner.is_alive(), "the supervisor did not finish the burst"
    assert supervisor.restarts == 0, "no worker process died"

    with connect(url) as broker:
        finals = [broker.get_result(r.id) for r in records]
    assert Counter(f.status for f in finals) == {TaskResultStatus.SUCCESSFUL: total}
    assert sorted(f.return_value for f in finals) == list(range(total))
    runs = Runs(read_events(namespace))
    outages = list(zip(runs.markers("kill"), runs.markers("restart"), strict=True))
    rerun = runs.check(total, outages)
    if prefetch is not None:  # one per thread: at most the threads' tasks, outage by outage
        assert len(rerun) <= settings.processes * settings.threads * len(OUTAGES)
    # The adaptive window's bound (threads + `prefetch_window.CEILING` a process) is more
    # than the run holds: `runs.check` has held each rerun to a task in flight at a kill.

    # Every process logged at most one warning per outage, and as many lines
    # when it was back; no traceback anywhere.
    output = capfd.readouterr().err
    warnings, backs = child_lines(output, WARNING), child_lines(output, BACK)
    assert warnings, "the worker processes noticed the outages"
    assert all(count <= kills for count in warnings.values()), warnings
    assert warnings == backs
    supervisor_lines = [r.getMessage() for r in caplog.records if r.name == "threadmill.supervisor"]
    supervisor_warnings = sum(WARNING in line for line in supervisor_lines)
    assert 1 <= supervisor_warnings <= kills
    assert supervisor_warnings == sum(BACK in line for line in supervisor_lines)
    assert "Traceback" not in output
    assert not any(r.exc_info for r in caplog.records)


@pytest.fixture
def full_server() -> Iterator[Server]:
    """A server under ``noeviction`` whose memory limit the test lowers and lifts."""
    server = Server("--maxmemory-policy", "noeviction")
    try:
        yield server
    finally:
        server.close()


def test_a_server_out_of_memory_refuses_enqueues_and_still_drains(
    full_server: Server, namespace: str
) -> None:
    """Under noeviction and no memory left, enqueue is an outage while workers drain the queue."""
    with connect(f"{full_server.url}?namespace={namespace}") as broker:
        client = broker.backend.client  # type: ignore[attr-defined]  # a RedisBackend, as the URL says
        work = fault_tasks.echo.using(broker=broker)
        records = broker.enqueue_many(work, [((n,), {}) for n in range(10)])
        client.config_set("maxmemory", 1)  # every byte is now over the limit
        try:
            with pytest.raises(RedisUnavailable, match="maxmemory"):
                work.enqueue("refused")
            # A claim or an acknowledgement first frees memory (it takes the task
            # out of its segment), and Redis lets a script that has written go on.
            assert Worker(broker, threads=2, poll_interval=0.05).run(burst=True) == 10
        finally:
            client.config_set("maxmemory", 0)
        finals = [broker.get_result(r.id) for r in records]
        assert [f.status for f in finals] == [TaskResultStatus.SUCCESSFUL] * 10
        assert work.enqueue("accepted again").status is TaskResultStatus.READY
        assert broker.counts()[records[0].queue].ready == 1, "the refused enqueue stored nothing"
