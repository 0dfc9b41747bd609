"""A worker process for the multi-process tests: ``python sqlite_worker_main.py URL ID MODE``.

MODE ``run`` works until killed; ``burst`` returns once nothing is ready or running.
Maintenance is off: the test runs the reaper itself, on a clock it moves.
"""

from __future__ import annotations

import sys
from datetime import timedelta

from threadmill_core import Worker, connect

import sqlite_tasks  # noqa: F401 - registers the tasks this worker may run


def main(url: str, worker_id: str, mode: str) -> None:
    with connect(url) as broker:
        worker = Worker(
            broker,
            queues=["default"],
            threads=1,
            lease_ttl=timedelta(hours=1),
            maintenance=False,
            worker_id=worker_id,
        )
        worker.run(burst=mode == "burst")


if __name__ == "__main__":
    main(*sys.argv[1:])
