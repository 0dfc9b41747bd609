"""``python -m benchmarks postgres``: threadmill on PostgreSQL, django-tasks-db, Procrastinate.

threadmill on Redis runs the same workload beside them, for scale. One run starts a
redis-server of its own (the counter every task INCRs, and threadmill's
Redis backend), creates a database of its own on the PostgreSQL server at
``--postgres`` (dropped at the end), and takes each measurement for every
system in turn, the order rotated each repeat:

- **enqueue** µs/task: a loop of single enqueue calls; **batch** µs/task:
  the system's batch API (threadmill `enqueue_many`, Procrastinate
  `batch_defer`), a batch of ``--tasks``.
- **drain 1x1** tasks/s: one worker process, one thread (threadmill with
  prefetch 64), the whole backlog in place first; timed from the first task
  done to the last (`benchmarks.measure.Bench.drain_rate`).
- **history**: threadmill on PostgreSQL only, the drain rate of ``--window``
  tasks with the tasks table empty and with ``--history`` finished tasks in
  it (inserted, then vacuumed and analyzed, as autovacuum leaves a table).
- **footprint** (issue 38), each PostgreSQL system: PG B/task, the bytes a
  queued task takes, ``pg_total_relation_size`` of the system's tables
  (heap, TOAST, indexes) after a backlog of ``--footprint`` tasks with no
  worker, vacuumed and analyzed, less the empty tables, over the backlog;
  and the same split per relation (`benchmarks.postgres.footprint`).

The report gives medians over the repeats and the floors of issue 22:
drain at least 20x django-tasks-db's, enqueue_many at least 10x faster per
task than a single enqueue, and the drain beside 100k finished tasks at
least 0.8x the rate beside none. It needs Django 6 (Python 3.12+) for
django-tasks-db; see benchmarks/README.md for the venv.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
import traceback
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg

from benchmarks import measure
from benchmarks.peers import Peer
from benchmarks.peers._common import URL_VARIABLE
from benchmarks.postgres.footprint import footprint
from benchmarks.postgres.peers import (
    NAMESPACE,
    PG_VARIABLE,
    DjangoTasksDbPeer,
    PostgresPeer,
    ProcrastinatePeer,
    ThreadmillPostgresPeer,
    ThreadmillRedisPeer,
)
from benchmarks.server import RedisServer

RESULTS_DIR = Path(__file__).resolve().parent.parent / "results"

#: The systems, in table order; the first is the one the floors are about.
SYSTEMS: dict[str, Callable[[str], Peer]] = {
    "threadmill-pg": ThreadmillPostgresPeer,
    "django-tasks-db": DjangoTasksDbPeer,
    "procrastinate": ProcrastinatePeer,
    "threadmill-redis": ThreadmillRedisPeer,
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks postgres", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a smoke run: fewer tasks, one repeat")
    parser.add_argument(
        "--postgres",
        default=os.environ.get(
            "THREADMILL_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres"
        ),
        help="a database on the server to make the benchmark's database on (%(default)s)",
    )
    parser.add_argument("--tasks", type=int, help="backlog of each drain (default 2000)")
    parser.add_argument("--singles", type=int, help="single enqueues timed (default 1000)")
    parser.add_argument("--repeat", type=int, help="repeats of the schedule (default 3)")
    parser.add_argument("--history", type=int, default=100_000, help="finished tasks (%(default)s)")
    parser.add_argument("--window", type=int, help="tasks drained by the history runs (2000)")
    parser.add_argument(
        "--footprint",
        type=int,
        help="queued tasks whose bytes are measured (default 100000; 0 leaves it out)",
    )
    parser.add_argument(
        "--systems", default=",".join(SYSTEMS), help="systems to run (default: %(default)s)"
    )
    parser.add_argument("--redis-server", default="redis-server", help="the server executable")
    parser.add_argument("--name", help="results file name (default: postgres, or postgres-quick)")
    return parser


@contextlib.contextmanager
def database(admin_url: str) -> Iterator[str]:
    """A database of the run's own on the server of `admin_url`; its URL. Dropped afterwards."""
    name = f"threadmill_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield urlunsplit(urlsplit(admin_url)._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def fresh(bench: measure.Bench, peer: Peer) -> None:
    """An empty store: Redis flushed (the counter, threadmill-redis), the peer's tables dropped."""
    bench.flush()
    if isinstance(peer, PostgresPeer):
        peer.reset()


def enqueue_and_drain(
    bench: measure.Bench, peer: Peer, singles: int, n: int, label: str
) -> dict[str, Any]:
    """Single enqueues timed, then a backlog of `n` drained by one worker with one thread."""
    fresh(bench, peer)
    with measure.producing(peer):
        figures: dict[str, Any] = {"enqueue_us": peer.enqueue(singles) / singles * 1e6}
    # Each phase on an empty store, by a producer of its own (a store is dropped
    # only while no producer holds it).
    fresh(bench, peer)
    with measure.producing(peer):
        if peer.has_batch:
            figures["batch_us"] = peer.enqueue_batch(n) / n * 1e6
        else:
            peer.fill(n)
    with bench.worker(peer, 1, label) as worker:
        figures["drain_1x1"] = bench.drain_rate(n, worker)
    return figures


def history_drain(
    bench: measure.Bench, peer: ThreadmillPostgresPeer, history: int, window: int, label: str
) -> float:
    """The drain rate of `window` tasks beside `history` finished ones (0: an empty table)."""
    fresh(bench, peer)
    with measure.producing(peer):
        peer.fill(window)
    if history:
        with psycopg.connect(os.environ[PG_VARIABLE], autocommit=True) as conn:
            # Finished rows as a drain leaves them; a payload nobody reads ({}).
            conn.execute(
                f'INSERT INTO "{NAMESPACE}".tasks '
                "(id, queue, priority, status, payload, enqueued_at, finished_at, attempts) "
                "SELECT 'done-' || g, 'default', 0, 'SUCCESSFUL', '\\x7b7d'::bytea, n, n, 1 "
                f'FROM generate_series(1, %s) g, "{NAMESPACE}".now_ms() n',
                (history,),
            )
            conn.execute(f'VACUUM ANALYZE "{NAMESPACE}".tasks')
    with bench.worker(peer, 1, label) as worker:
        return bench.drain_rate(window, worker)


def median(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    quick = args.quick
    n = args.tasks or (300 if quick else 2000)
    singles = args.singles or (200 if quick else 1000)
    repeats = args.repeat or (1 if quick else 3)
    window = args.window or (300 if quick else 2000)
    history = args.history if not quick else min(args.history, 100_000)
    backlog = args.footprint if args.footprint is not None else (10_000 if quick else 100_000)
    wanted = [name.strip() for name in args.systems.split(",") if name.strip()]
    figures: dict[str, dict[str, list[Any]]] = {name: {} for name in wanted}
    #: Per system, per relation: its bytes per task in each repeat.
    relations: dict[str, dict[str, list[float]]] = {}
    errors: list[str] = []
    log_dir = Path(tempfile.mkdtemp(prefix="threadmill-pgbench-logs-"))
    started = time.time()
    with RedisServer(args.redis_server) as server, database(args.postgres) as pg:
        os.environ[URL_VARIABLE] = server.url
        os.environ[PG_VARIABLE] = pg
        peers = {name: SYSTEMS[name](server.url) for name in wanted}
        bench = measure.Bench(server.url, log_dir)
        try:
            for repeat in range(repeats):
                order = wanted[repeat % len(wanted) :] + wanted[: repeat % len(wanted)]
                print(f"repeat {repeat + 1} of {repeats} (order: {', '.join(order)})", flush=True)
                for name in order:
                    label = f"r{repeat + 1}-drain"
                    try:
                        got = enqueue_and_drain(bench, peers[name], singles, n, label)
                    except Exception as exc:
                        errors.append(f"{name} {label}: {type(exc).__name__}: {exc}")
                        print(f"  {name:<17} FAILED: {exc}", flush=True)
                        print(traceback.format_exc(limit=-2), flush=True)
                        continue
                    for key, value in got.items():
                        figures[name].setdefault(key, []).append(value)
                    shown = "  ".join(f"{k}={v:,.1f}" for k, v in got.items())
                    print(f"  {name:<17} {shown}", flush=True)
                tm = peers.get("threadmill-pg")
                if isinstance(tm, ThreadmillPostgresPeer):
                    for depth in [0, history] if repeat % 2 == 0 else [history, 0]:
                        key = "history_rate" if depth else "empty_rate"
                        label = f"r{repeat + 1}-h{depth}"
                        try:
                            rate = history_drain(bench, tm, depth, window, label)
                        except Exception as exc:
                            errors.append(f"threadmill-pg history {depth}: {exc}")
                            print(f"  history {depth:,} FAILED: {exc}", flush=True)
                            continue
                        figures["threadmill-pg"].setdefault(key, []).append(rate)
                        print(
                            f"  threadmill-pg     beside {depth:,} finished: {rate:,.1f}/s",
                            flush=True,
                        )
                for name in order if backlog else []:
                    peer = peers[name]
                    if not isinstance(peer, PostgresPeer):
                        continue
                    try:
                        got = footprint(bench, peer, backlog)
                    except Exception as exc:
                        errors.append(f"{name} footprint: {type(exc).__name__}: {exc}")
                        print(f"  {name:<17} footprint FAILED: {exc}", flush=True)
                        print(traceback.format_exc(limit=-2), flush=True)
                        continue
                    figures[name].setdefault("pg_bytes", []).append(got["pg_bytes"])
                    for part, size in got["relations"].items():
                        relations.setdefault(name, {}).setdefault(part, []).append(size)
                    print(
                        f"  {name:<17} {got['pg_bytes']:,.1f} B/task in PostgreSQL "
                        f"({backlog:,} queued)",
                        flush=True,
                    )
        finally:
            bench.close()
    result = {
        "settings": {"tasks": n, "singles": singles, "repeat": repeats, "window": window,
                     "history": history, "footprint": backlog,
                     "elapsed_s": round(time.time() - started, 1),
                     "load_end": round(os.getloadavg()[0], 2)},
        "versions": {name: _version(peer) for name, peer in peers.items()},
        "describe": {name: peer.describe(1) for name, peer in peers.items()},
        "medians": {name: {k: median(v) for k, v in f.items()} for name, f in figures.items()},
        "figures": figures,
        # B/task of each relation (heap, TOAST, each index), median over the repeats.
        "relations": {
            name: {part: median(sizes) for part, sizes in parts.items()}
            for name, parts in relations.items()
        },
        "relation_figures": relations,
        "errors": errors,
    }  # fmt: skip
    text = markdown(result)
    print()
    print(text)
    out = args.name or ("postgres-quick" if quick else "postgres")
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / f"{out}.json").write_text(json.dumps(result, indent=2), encoding="utf-8")
    (RESULTS_DIR / f"{out}.md").write_text(text, encoding="utf-8")
    print(f"written: {RESULTS_DIR / out}.md, .json; worker logs in {log_dir}")
    return 1 if errors else 0


def _version(peer: Peer) -> str:
    try:
        return peer.version
    except Exception:
        return "?"


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def markdown(result: dict[str, Any]) -> str:
    medians: dict[str, dict[str, float | None]] = result["medians"]
    s = result["settings"]
    lines = [
        "# threadmill on PostgreSQL, against django-tasks-db and Procrastinate",
        "",
        f"Medians of {s['repeat']} repeat(s); drains of {s['tasks']:,} tasks, "
        f"{s['singles']:,} single enqueues; load average {s['load_end']} at the end.",
        "",
        "| system | version | worker | enqueue µs/task | batch µs/task | drain 1x1 tasks/s "
        "| PG B/task |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, got in medians.items():
        lines.append(
            f"| {name} | {result['versions'].get(name, '?')} | {result['describe'].get(name, '')} "
            f"| {_fmt(got.get('enqueue_us'))} | {_fmt(got.get('batch_us'))} "
            f"| {_fmt(got.get('drain_1x1'))} | {_fmt(got.get('pg_bytes'), 0)} |"
        )
    tm, django = medians.get("threadmill-pg", {}), medians.get("django-tasks-db", {})
    floors = [
        (
            "drain 1x1 >= 20x django-tasks-db",
            _ratio(tm.get("drain_1x1"), django.get("drain_1x1")),
            20.0,
        ),
        (
            "enqueue_many >= 10x faster per task than enqueue",
            _ratio(tm.get("enqueue_us"), tm.get("batch_us")),
            10.0,
        ),
        (
            f"drain beside {s['history']:,} finished >= 0.8x beside none",
            _ratio(tm.get("history_rate"), tm.get("empty_rate")),
            0.8,
        ),
    ]
    lines += ["", f"History: drain of {s['window']:,} beside none "
              f"{_fmt(tm.get('empty_rate'))}/s, beside {s['history']:,} finished "
              f"{_fmt(tm.get('history_rate'))}/s.", "",
              "| floor (issue 22) | measured | verdict |", "| --- | --- | --- |"]  # fmt: skip
    for what, ratio, floor in floors:
        verdict = "n/a" if ratio is None else ("PASS" if ratio >= floor else "FAIL")
        lines.append(f"| {what} | {_fmt(ratio, 2)}x | {verdict} |")
    lines += footprint_lines(result)
    if result["errors"]:
        lines += ["", "Failed measurements:", *(f"- {e}" for e in result["errors"])]
    return "\n".join(lines) + "\n"


def footprint_lines(result: dict[str, Any]) -> list[str]:
    """The footprint section: PG B/task of each system, and threadmill-pg's by relation."""
    backlog = result["settings"].get("footprint")
    medians: dict[str, dict[str, float | None]] = result["medians"]
    measured = {name: got["pg_bytes"] for name, got in medians.items() if got.get("pg_bytes")}
    if not backlog or not measured:
        return []
    lines = [
        "",
        f"PG B/task (issue 38; lower is better): pg_total_relation_size of each system's "
        f"tables (heap, TOAST, every index) with {backlog:,} tasks queued and no worker, "
        "after VACUUM ANALYZE, less the same tables empty, over the backlog.",
    ]
    tm = measured.get("threadmill-pg")
    lines += ["", "| system | PG B/task | threadmill-pg ÷ system |", "| --- | --- | --- |"]
    for name, size in measured.items():
        lines.append(f"| {name} | {_fmt(size, 0)} | {_fmt(_ratio(tm, size), 2)}x |")
    split: dict[str, float | None] = result.get("relations", {}).get("threadmill-pg", {})
    if split:
        lines += ["", "threadmill-pg by relation (heap, TOAST, index):", "",
                  "| relation | B/task |", "| --- | --- |"]  # fmt: skip
        lines += [f"| {part} | {_fmt(size, 1)} |" for part, size in split.items() if size]
        if empty := [part for part, size in split.items() if not size]:
            lines += ["", f"No growth (0 B/task): {', '.join(empty)}."]
    return lines


def _ratio(top: float | None, bottom: float | None) -> float | None:
    return None if top is None or not bottom else top / bottom


if __name__ == "__main__":
    sys.exit(main())
