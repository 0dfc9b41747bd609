"""The Procrastinate peer's app: its one task INCRs the Redis counter every system's task does.

Workers run it as ``procrastinate --app benchmarks.postgres.procrastinate_app.app worker``;
the database comes from ``BENCH_PG_URL``.
"""

from __future__ import annotations

import os

import procrastinate

from benchmarks.peers import _common as common

app = procrastinate.App(
    connector=procrastinate.PsycopgConnector(
        conninfo=os.environ.get("BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
    )
)


@app.task(name="incr")
def incr() -> None:
    common.incr()
