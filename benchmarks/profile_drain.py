"""``python -m benchmarks.profile_drain``: where a threadmill worker's time goes in a drain.

Starts its own redis-server, enqueues a backlog of ``incr`` tasks, then
drains it with an in-process `Worker` (one thread and the benchmark's
prefetch by default, maintenance off, logging at INFO to a file as
``threadmill worker`` does) with each task thread under cProfile (the task
threads claim, acknowledge and run tasks; the calling thread only waits),
while ``MONITOR`` counts what reaches the server. Prints the requests per
task by command (each one a round trip unless pipelined), the commands the
Lua scripts run per task, and the functions that take the time, summed over
the task threads.
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import io
import logging
import os
import pstats
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from typing import cast

from benchmarks.measure import Bench
from benchmarks.peers._common import COUNT_KEY, URL_VARIABLE
from benchmarks.peers.threadmill_peer import PREFETCH
from benchmarks.server import RedisServer


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile_drain")
    parser.add_argument("--tasks", type=int, default=3000)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--prefetch", type=int, default=PREFETCH, help="default: the benchmark's, %(default)s"
    )
    parser.add_argument("--top", type=int, default=30, help="functions to list")
    parser.add_argument("--quiet", action="store_true", help="log at WARNING, not INFO")
    args = parser.parse_args(argv)
    with RedisServer() as server:
        os.environ[URL_VARIABLE] = server.url
        from benchmarks.peers.threadmill_peer import ThreadmillPeer, broker_url
        from threadmill_core import Worker, connect

        log_path = os.path.join(tempfile.mkdtemp(prefix="threadmill-profile-"), "worker.log")
        handler = logging.FileHandler(log_path)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
        logging.basicConfig(
            level=logging.WARNING if args.quiet else logging.INFO, handlers=[handler]
        )
        peer = ThreadmillPeer(server.url)
        peer.setup()
        peer.fill(args.tasks)
        peer.teardown()
        bench = Bench(server.url)
        broker = connect(broker_url(server.url))
        worker = Worker(broker, threads=args.threads, prefetch=args.prefetch, maintenance=False)
        monitored: collections.Counter[tuple[str, str]] = collections.Counter()
        stop_monitor = threading.Event()
        watching = threading.Thread(
            target=lambda: monitored.update(bench.monitor(3600, stop=stop_monitor)), daemon=True
        )
        watching.start()
        time.sleep(0.2)
        profiles: list[cProfile.Profile] = []
        run_thread = worker._task_thread

        def profiled_thread() -> None:  # what each task thread runs, under its own profile
            profile = cProfile.Profile()
            profiles.append(profile)
            profile.enable()
            try:
                run_thread()
            finally:
                profile.disable()

        worker._task_thread = profiled_thread  # type: ignore[method-assign]  # profiling the worker's own thread, on purpose
        begin = time.perf_counter()
        worker.run(burst=True)
        elapsed = time.perf_counter() - begin
        stop_monitor.set()
        watching.join()
        done = int(cast("bytes | None", bench.admin.get(COUNT_KEY)) or 0)
        broker.close()
        bench.close()
        handler.close()
    print(f"{done} tasks in {elapsed:.2f} s under cProfile: {done / elapsed:,.0f} tasks/s")
    print("\nrequests the worker sent, per task (each a round trip unless pipelined):")
    sent = {k[1]: v for k, v in monitored.items() if k[0] == "client"}
    for command, count in sorted(sent.items(), key=lambda item: -item[1]):
        if command != "incr":
            print(f"  {command:<16} {count / done:6.2f}")
    print("\ncommands the Lua scripts ran, per task:")
    ran = {k[1]: v for k, v in monitored.items() if k[0] == "lua"}
    for command, count in sorted(ran.items(), key=lambda item: -item[1]):
        print(f"  {command:<16} {count / done:6.2f}")
    for order in ("cumulative", "tottime"):
        out = io.StringIO()
        pstats.Stats(*profiles, stream=out).sort_stats(order).print_stats(args.top)
        print(f"\nby {order}:")
        print("\n".join(out.getvalue().splitlines()[4:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
