"""``python -m benchmarks django``: the Django section, measured interleaved in one run.

One run starts a redis-server of its own, creates a PostgreSQL database of
its own (on ``--pg-host``, dropped at the end), migrates it, then, for each
repeat, takes every system's single-enqueue and one-thread drain figures
(`benchmarks.measure.enqueue_and_drain`, the main benchmark's measurement)
in an order rotated each repeat. The report gives each system's medians
and the floors of issue 19, as ratios within the run:

- drain: threadmill_django at least 3 times the best Django peer;
- enqueue: threadmill_django no slower than the fastest Django peer;
- adapter: threadmill_django's drain at least 85 % of threadmill's own API.
- defaults (issue 38): threadmill_django's drain at least 0.9x the same worker with
  ``--prefetch 64`` (``threadmill_django@prefetch64``).

It is written to ``benchmarks/results/django.{md,json}`` (``quick.django.*``,
which git ignores, with ``--quick``). Needs Python 3.12+ with Django, psycopg and the peers
installed (``benchmarks/django_bench/README.md``); a peer that is not installed is left
out and the report says so.
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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks import measure
from benchmarks.peers import Peer
from benchmarks.peers._common import URL_VARIABLE
from benchmarks.server import RedisServer

RESULTS_DIR = Path(__file__).resolve().parents[1] / "results"
DJANGO_PEERS = ("django-tasks-redis", "django-tasks-db", "django-ox")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks django",
        description="Measure threadmill_django against django-tasks-redis, django-tasks-db and "
        "django-ox, and threadmill's own API, through Django's task API, in one run.",
    )
    parser.add_argument("--quick", action="store_true", help="1,000 tasks, one repeat")
    parser.add_argument("--tasks", type=int, help="tasks enqueued and drained (default 5000)")
    parser.add_argument("--repeat", type=int, help="repeats of the schedule (default 3)")
    parser.add_argument("--pg-host", default="127.0.0.1", help="PostgreSQL host (%(default)s)")
    parser.add_argument("--pg-port", default="5432", help="PostgreSQL port (%(default)s)")
    parser.add_argument("--pg-user", default="postgres", help="PostgreSQL user (%(default)s)")
    parser.add_argument("--redis-server", default="redis-server", help="the server executable")
    parser.add_argument("--output-dir", type=Path, default=RESULTS_DIR)
    parser.add_argument(
        "--name", help="file name of the results (default: django, or quick.django with --quick)"
    )
    return parser


@contextlib.contextmanager
def scratch_database(host: str, port: str, user: str) -> Iterator[str]:
    """A new database for the run, dropped afterwards."""
    import psycopg

    name = f"threadmill_bench_{uuid.uuid4().hex[:8]}"
    dsn = f"host={host} port={port} user={user} dbname=postgres"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield name
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def installed_systems() -> tuple[dict[str, type[Peer]], dict[str, str]]:
    """The systems that can run here, and why each other one cannot."""
    import importlib.util

    from benchmarks.django_bench.peers import SYSTEMS

    found: dict[str, type[Peer]] = {}
    missing: dict[str, str] = {}
    for name, (cls, module) in SYSTEMS.items():
        if importlib.util.find_spec(module) is None:
            missing[name] = f"not installed (no module {module})"
        else:
            found[name] = cls
    return found, missing


def floors(medians: dict[str, dict[str, float | None]]) -> list[dict[str, Any]]:
    """The issue's floors as PASS/FAIL with the ratio behind each."""
    ours = medians.get("threadmill_django", {})
    core = medians.get("threadmill", {})
    peers = {name: medians[name] for name in DJANGO_PEERS if name in medians}

    def best(key: str, pick: Any) -> tuple[str, float] | None:
        rated = [(name, v[key]) for name, v in peers.items() if v.get(key) is not None]
        return pick(rated, key=lambda item: item[1]) if rated else None

    rows: list[dict[str, Any]] = []
    drain, enqueue = ours.get("drain_1x1"), ours.get("enqueue_us")
    top = best("drain_1x1", max)
    if drain and top:
        ratio = drain / top[1]
        rows.append({"floor": f"drain >= 3x the best Django peer ({top[0]})",
                     "ratio": ratio, "pass": ratio >= 3})  # fmt: skip
    fastest = best("enqueue_us", min)
    if enqueue and fastest:
        ratio = enqueue / fastest[1]
        rows.append({"floor": f"enqueue no slower than the fastest Django peer ({fastest[0]})",
                     "ratio": ratio, "pass": ratio <= 1})  # fmt: skip
    if drain and core.get("drain_1x1"):
        ratio = drain / core["drain_1x1"]
        rows.append({"floor": "adapter drain >= 85% of threadmill's own API",
                     "ratio": ratio, "pass": ratio >= 0.85})  # fmt: skip
    tuned = medians.get("threadmill_django@prefetch64", {}).get("drain_1x1")
    if drain and tuned:
        ratio = drain / tuned
        rows.append({"floor": "defaults drain >= 0.9x --prefetch 64 (issue 38)",
                     "ratio": ratio, "pass": ratio >= 0.9})  # fmt: skip
    return rows


def render(result: dict[str, Any]) -> str:
    lines = [
        "# threadmill through Django's task API, against Django's task backends",
        "",
        f"{result['started']}; {result['tasks']} tasks, {result['repeat']} repeat(s), "
        f"median of the repeats; Python {result['python']}, Django {result['django']}; "
        f"load average at the start {result['load']:.2f}.",
        "",
        "| system | enqueue µs/task | drain, 1 process 1 thread, tasks/s | worker |",
        "| --- | ---: | ---: | --- |",
    ]
    for name, figures in result["medians"].items():
        enqueue, drain = figures.get("enqueue_us"), figures.get("drain_1x1")
        lines.append(
            f"| {name} {result['versions'][name]} | "
            f"{'-' if enqueue is None else f'{enqueue:.1f}'} | "
            f"{'-' if drain is None else f'{drain:,.0f}'} | {result['workers'][name]} |"
        )
    lines += ["", "| floor | ratio | |", "| --- | ---: | --- |"]
    for row in result["floors"]:
        lines.append(
            f"| {row['floor']} | {row['ratio']:.2f} | {'PASS' if row['pass'] else 'FAIL'} |"
        )
    for name, why in result["missing"].items():
        lines.append(f"\n{name}: {why}.")
    for error in result["errors"]:
        lines.append(f"\n{error['system']} (repeat {error['repeat']}) failed: {error['error']}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    tasks = args.tasks or (1_000 if args.quick else 5_000)
    repeat = args.repeat or (1 if args.quick else 3)
    name = args.name or ("quick.django" if args.quick else "django")
    log_dir = Path(tempfile.mkdtemp(prefix="threadmill-django-bench-"))
    with (
        RedisServer(args.redis_server) as server,
        scratch_database(args.pg_host, args.pg_port, args.pg_user) as database,
    ):
        os.environ.update({
            URL_VARIABLE: server.url, "BENCH_PG_NAME": database, "BENCH_PG_HOST": args.pg_host,
            "BENCH_PG_PORT": args.pg_port, "BENCH_PG_USER": args.pg_user,
            "DJANGO_SETTINGS_MODULE": "benchmarks.django_bench.settings",
        })  # fmt: skip
        import django
        from django.core.management import call_command

        django.setup()
        call_command("migrate", verbosity=0)
        classes, missing = installed_systems()
        peers = {system: cls(server.url) for system, cls in classes.items()}
        bench = measure.Bench(server.url, log_dir)
        figures: dict[str, dict[str, list[float]]] = {system: {} for system in peers}
        errors: list[dict[str, Any]] = []
        started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        load = os.getloadavg()[0]
        order = list(peers)
        for r in range(repeat):
            for system in order[r % len(order) :] + order[: r % len(order)]:
                try:
                    taken = measure.enqueue_and_drain(bench, peers[system], tasks, f"r{r}")
                except Exception as exc:
                    errors.append({"system": system, "repeat": r,
                                   "error": f"{type(exc).__name__}: {exc}"})  # fmt: skip
                    traceback.print_exc()
                    continue
                for key, value in taken.items():
                    figures[system].setdefault(key, []).append(value)
                print(f"  repeat {r} {system:<19} enqueue {taken['enqueue_us']:8.1f} µs  "
                      f"drain {taken['drain_1x1']:8,.0f}/s", flush=True)  # fmt: skip
        bench.close()
    medians = {
        system: {key: statistics.median(values) for key, values in by_key.items()}
        for system, by_key in figures.items()
    }
    result = {
        "started": started, "tasks": tasks, "repeat": repeat, "load": load,
        "python": sys.version.split()[0], "django": django.get_version(),
        "versions": {system: peer.version for system, peer in peers.items()},
        "workers": {system: peer.describe(1) for system, peer in peers.items()},
        "medians": medians, "figures": figures, "floors": floors(medians),
        "missing": missing, "errors": errors,
    }  # fmt: skip
    args.output_dir.mkdir(parents=True, exist_ok=True)
    (args.output_dir / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
    text = render(result)
    (args.output_dir / f"{name}.md").write_text(text)
    print(text)
    print(f"worker logs: {log_dir}")
    return 1 if errors else 0
