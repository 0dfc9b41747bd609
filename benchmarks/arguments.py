"""``python -m benchmarks``' command line: its options and the settings a run takes from them."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from benchmarks.peers import REGISTRY

RESULTS_DIR = Path(__file__).resolve().parent / "results"


#: threadmill's own configurations, measured in every run: its defaults, and `--prefetch 64`.
THREADMILL = ("threadmill", "threadmill@prefetch64")


def _int_list(text: str) -> list[int]:
    return [int(part.replace("_", "").replace("k", "000")) for part in text.split(",") if part]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Measure threadmill against Dramatiq, Huey, SAQ, Celery, arq and RQ on a "
        "redis-server this command starts, and report medians, ratios and the floors of "
        "issue 7.",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a smoke run (about two minutes): 1,000 tasks, one repeat, fewer samples",
    )
    parser.add_argument(
        "--peers",
        default=",".join(name for name in REGISTRY if name not in THREADMILL),
        help="peers to measure besides threadmill, comma-separated (default: %(default)s)",
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        action="append",
        default=[],
        metavar="CHECKOUT",
        help="also measure threadmill as the checkout at CHECKOUT has it (a git worktree of "
        "an earlier commit, say), as one more system of the same interleaved run named "
        "threadmill@COMMIT, in the depth scan too; left out of the floors; repeatable",
    )
    parser.add_argument("--tasks", type=int, help="backlog drained per run (default 5000)")
    parser.add_argument("--repeat", type=int, help="repeats of the schedule (default 3)")
    parser.add_argument(
        "--threads", type=int, default=4, help="threads of the multi-thread drain (default 4)"
    )
    parser.add_argument(
        "--latency-samples", type=int, help="enqueue-to-start samples per run (default 200)"
    )
    parser.add_argument(
        "--idle-seconds", type=float, help="window of the idle command count (default 5)"
    )
    parser.add_argument(
        "--memory-tasks", type=int, help="backlog of the memory measurement (default 10000)"
    )
    parser.add_argument(
        "--depths",
        type=_int_list,
        default=[1_000, 10_000, 100_000],
        help="backlogs of the depth scan (default 1k,10k,100k)",
    )
    parser.add_argument(
        "--depth-window",
        type=int,
        help="tasks drained per depth run, from the front of the backlog (default: the "
        "smallest depth, so every depth is timed over the same number of tasks)",
    )
    parser.add_argument(
        "--batches",
        type=int,
        help="batch enqueues per repeat, each by a producer of its own into an empty store, "
        "whose median is the repeat's figure (default 3; 1 with --quick): a batch of 5,000 "
        "lasts about 30 ms, and one of them moves by a quarter from run to run",
    )
    parser.add_argument(
        "--depth-drains",
        type=int,
        help="drains per depth and repeat, each from a backlog of its own, whose median is "
        "the repeat's rate (default 3; 1 with --quick): a window of 1,000 tasks lasts a "
        "fifth of a second, and one drain of it moves by a third from run to run",
    )
    parser.add_argument(
        "--depth-peers",
        default="",
        help="peers that also run the depth scan, comma-separated, or 'all' (default: none, "
        "threadmill only: a 100k backlog of single enqueues takes a peer 20-100 s per repeat)",
    )
    parser.add_argument(
        "--cold-starts",
        type=int,
        metavar="N",
        help="launches of each system's worker timed from the command to its first task, "
        "interleaved across the systems, after one untimed launch each (default 10; 3 with "
        "--quick; 0 leaves the measurement out)",
    )
    parser.add_argument(
        "--skip",
        default="",
        help="measurements to leave out: drain,threads,latency,memory,hoard,depth,cold",
    )
    parser.add_argument("--redis-server", default="redis-server", help="the server executable")
    parser.add_argument(
        "--output-dir", type=Path, default=RESULTS_DIR, help="where results go (%(default)s)"
    )
    parser.add_argument(
        "--name", help="file name of the results (default: latest, or quick with --quick)"
    )
    parser.add_argument(
        "--wait-quiet",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="first wait up to this long for the 1-minute load average to drop below "
        "--quiet-load (other work on the machine skews every figure)",
    )
    parser.add_argument(
        "--quiet-load", type=float, default=0.5, help="what --wait-quiet waits for (%(default)s)"
    )
    parser.add_argument("--no-chart", action="store_true", help="skip the PNG")
    parser.add_argument(
        "--render",
        type=Path,
        metavar="JSON",
        help="measure nothing: write the Markdown and PNG again from a results JSON",
    )
    parser.add_argument(
        "--keep-logs", action="store_true", help="keep the workers' logs (kept anyway on errors)"
    )
    return parser


def settings_from(args: argparse.Namespace) -> dict[str, Any]:
    quick = args.quick

    def pick(value: Any, full: Any, smoke: Any) -> Any:
        return value if value is not None else (smoke if quick else full)

    return {
        "quick": quick,
        "tasks": pick(args.tasks, 5_000, 1_000),
        "repeat": pick(args.repeat, 3, 1),
        "threads": args.threads,
        "latency_samples": pick(args.latency_samples, 200, 50),
        "idle_seconds": pick(args.idle_seconds, 5.0, 2.0),
        "settle_seconds": 1.0 if quick else 2.0,
        "memory_tasks": pick(args.memory_tasks, 10_000, 2_000),
        "depths": args.depths,
        "depth_window": args.depth_window or min(args.depths, default=1_000),
        "depth_drains": pick(args.depth_drains, 3, 1),
        "batches": pick(args.batches, 3, 1),
        "cold_starts": pick(args.cold_starts, 10, 3),
        "skip": sorted({s.strip() for s in args.skip.split(",") if s.strip()}),
    }
