"""``python -m benchmarks``: measure threadmill and its peers on a redis-server of our own.

One run starts a redis-server on a free loopback port, then takes every
measurement of `benchmarks.measure` for every system, round-robin: one
measurement for all systems (in an order rotated each repeat), then the
next, and the whole schedule `--repeat` times. The cold starts come first:
`--cold-starts` rounds, the systems in an order rotated each round. The
report gives the median of the repeats, the ratio of threadmill to each
peer, and the issues' floors; it is printed and written to
``benchmarks/results/NAME.{md,json,png}``.
"""

from __future__ import annotations

import compileall
import functools
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks import measure, report
from benchmarks.arguments import THREADMILL, build_parser, settings_from
from benchmarks.peers import REGISTRY, Peer, load
from benchmarks.peers._common import URL_VARIABLE
from benchmarks.peers.checkout import PACKAGES, CheckoutPeer
from benchmarks.peers.own_process import InOwnProcess
from benchmarks.server import REPO_ROOT, RedisServer, WorkerDied


class Run:
    """Collects every figure of every repeat, and every failure, as the schedule goes."""

    def __init__(self, peers: dict[str, Peer], bench: measure.Bench) -> None:
        self.peers = peers
        self.bench = bench
        self.figures: dict[str, dict[str, list[Any]]] = {name: {} for name in peers}
        self.errors: list[dict[str, Any]] = []
        self.notes: dict[str, set[str]] = {name: set() for name in peers}
        #: The 1-minute load average as each measurement began (ours included).
        self.loads: list[float] = []

    def record(self, name: str, key: str, value: Any) -> None:
        self.figures[name].setdefault(key, []).append(value)

    def attempt(
        self,
        name: str,
        what: str,
        repeat: int,
        action: Callable[[], measure.Figures],
        keys: dict[str, str],
    ) -> None:
        """Run one measurement; record its figures under `keys` (figure -> recorded name)."""
        begin = time.monotonic()
        self.loads.append(round(os.getloadavg()[0], 2))
        try:
            figures = action()
        except Exception as exc:
            message = f"{type(exc).__name__}: {exc}"
            if not isinstance(exc, measure.MeasurementFailed | WorkerDied):
                message += "\n" + traceback.format_exc(limit=-3)
            self.errors.append({"system": name, "measurement": what, "repeat": repeat,
                                "error": message})  # fmt: skip
            for recorded in keys.values():
                self.record(name, recorded, None)
            print(f"  {name:<11} {what:<22} FAILED: {message.splitlines()[0][:160]}", flush=True)
            return
        if figures.get("notes"):
            self.notes[name].add(str(figures["notes"]))
        shown = []
        for figure, recorded in keys.items():
            value = figures.get(figure)
            self.record(name, recorded, value)
            if isinstance(value, float | int):
                shown.append(f"{recorded}={value:,.1f}")
        took = time.monotonic() - begin
        print(f"  {name:<11} {what:<22} {'  '.join(shown) or 'n/a'}  ({took:.1f} s)", flush=True)


def rotated(names: Sequence[str], by: int) -> list[str]:
    by %= len(names)
    return [*names[by:], *names[:by]]


def compile_sources(baselines: Sequence[Path]) -> None:
    """Byte-compile the threadmill sources the workers import, as pip does at install.

    The peers are installed packages, their bytecode written by pip. This
    repository (and a baseline checkout) is imported from its sources,
    whose bytecode Python writes on first import, unless
    ``PYTHONDONTWRITEBYTECODE`` is set: then every worker start would
    compile them again, which is no user's cold start.
    """
    folders = [*sorted(REPO_ROOT.glob("threadmill_*/")), REPO_ROOT / "benchmarks"]
    folders += [checkout / package for checkout in baselines for package in PACKAGES]
    for folder in folders:
        if folder.is_dir():
            compileall.compile_dir(folder, quiet=2)


def cold_starts(run: Run, settings: dict[str, Any]) -> None:
    """Time `settings["cold_starts"]` launches of each system's worker, the systems in turn.

    One untimed launch of each first, so every system's files are in the
    page cache alike (the harness imported each peer module, but not its
    worker's CLI); then launch i runs the systems in an order rotated by i.
    """
    count = settings["cold_starts"]
    if count < 1 or "cold" in settings["skip"]:
        return
    names = list(run.peers)
    print(f"cold starts: one untimed launch of each system, then {count} timed")
    for name in names:
        try:
            measure.cold_start(run.bench, run.peers[name], "cold-warmup")
        except Exception as exc:
            print(f"  {name:<11} cold start (untimed)   FAILED: {exc}", flush=True)
    for index in range(count):
        for name in rotated(names, index):
            run.attempt(name, "cold start", index,
                        functools.partial(measure.cold_start, run.bench, run.peers[name],
                                          f"cold{index + 1}"),
                        {"cold_start_ms": "cold_start_ms"})  # fmt: skip


def schedule(run: Run, settings: dict[str, Any], depth_names: Sequence[str]) -> None:
    bench = run.bench
    n = settings["tasks"]
    threads = settings["threads"]
    skip = set(settings["skip"])
    names = list(run.peers)
    for repeat in range(settings["repeat"]):
        order = rotated(names, repeat)
        print(f"repeat {repeat + 1} of {settings['repeat']} (order: {', '.join(order)})")
        steps: list[tuple[str, str, Callable[[str, str], Callable[[], Any]], dict[str, str]]] = []
        if "drain" not in skip:
            steps.append(("drain", f"enqueue, drain 1x1 {n}",
                          lambda name, label: lambda: measure.enqueue_and_drain(
                              bench, run.peers[name], n, label),
                          {"enqueue_us": "enqueue_us", "drain_1x1": "drain_1x1"}))  # fmt: skip
        if "threads" not in skip:
            steps.append(("threads", f"batch, drain 1x{threads} {n}",
                          lambda name, label: lambda: measure.batch_and_drain(
                              bench, run.peers[name], n, threads, label,
                              batches=settings["batches"]),
                          {"enqueue_batch_us": "enqueue_batch_us",
                           "drain_1xN": "drain_1xN"}))  # fmt: skip
        if "latency" not in skip:
            steps.append(("latency", "latency, idle",
                          lambda name, label: lambda: measure.latency_and_idle(
                              bench, run.peers[name], settings["latency_samples"],
                              settings["idle_seconds"], settings["settle_seconds"], label),
                          {"latency_p50_ms": "latency_p50_ms", "latency_p99_ms": "latency_p99_ms",
                           "latency_samples_ms": "latency_samples_ms",
                           "idle_cmds_per_s": "idle_cmds_per_s",
                           "idle_requests_per_s": "idle_requests_per_s",
                           "idle_commands": "idle_commands",
                           "idle_monitor": "idle_monitor"}))  # fmt: skip
        if "memory" not in skip:
            steps.append(("memory", f"memory {settings['memory_tasks']}",
                          lambda name, label: lambda: measure.memory_per_task(
                              bench, run.peers[name], settings["memory_tasks"]),
                          {"memory_bytes_per_task": "memory_bytes_per_task"}))  # fmt: skip
        if "hoard" not in skip:  # threadmill's configurations only: a long task of its own
            steps.append(("hoard", f"hoarding {measure.HOARD_TASKS} x 100 ms, 2p x 1t",
                          lambda name, label: lambda: measure.hoarding(
                              bench, run.peers[name], label),
                          {"hoard_makespan_s": "hoard_makespan_s",
                           "hoard_ratio": "hoard_ratio"}))  # fmt: skip
        for step, what, make, keys in steps:
            for name in order:
                if step == "hoard" and name not in THREADMILL:
                    continue
                label = f"r{repeat + 1}-{step}"
                run.attempt(name, what, repeat, make(name, label), keys)
        if "depth" in skip:
            continue
        window = settings["depth_window"]
        scanned = [name for name in order if name in depth_names]

        def counted(name: str) -> tuple[int, int]:
            figures = run.figures[name]
            return len(figures.get("depth_1000", [])), len(figures.get("depth_100000", []))

        before = {name: counted(name) for name in scanned}
        # The depths in turn, in an order rotated each repeat like the systems'.
        depths = list(settings["depths"])
        for depth in rotated(depths, repeat) if depths else []:
            for name in scanned:
                label = f"r{repeat + 1}-depth{depth}"
                run.attempt(
                    name,
                    f"depth {depth:,} (first {min(window, depth):,})",
                    repeat,
                    functools.partial(
                        measure.depth_rate,
                        bench,
                        run.peers[name],
                        depth,
                        window,
                        label,
                        drains=settings["depth_drains"],
                    ),
                    {"depth_rate": f"depth_{depth}"},
                )
        # 100k ÷ 1k within this repeat: both measured a minute apart at most,
        # so the machine's drift between repeats does not enter the ratio.
        for name in scanned:
            if all(now > then for now, then in zip(counted(name), before[name], strict=True)):
                shallow = run.figures[name]["depth_1000"][-1]
                deep = run.figures[name]["depth_100000"][-1]
                if shallow and deep is not None:  # a figure the measurement lacked is None
                    run.record(name, "depth_ratio", deep / shallow)


def wait_for_quiet(longest: float, load: float) -> None:
    deadline = time.monotonic() + longest
    while (now := os.getloadavg()[0]) >= load and time.monotonic() < deadline:
        print(f"waiting for a quiet machine: load average {now:.2f}", flush=True)
        time.sleep(15)


def _in_own_process(name: str, redis_url: str) -> Peer:
    """Peer `name`, its producer in a process of its own (see `benchmarks.peers.own_process`)."""
    return InOwnProcess(load(name, redis_url))


def load_peers(
    wanted: Sequence[str], redis_url: str, baselines: Sequence[Path] = ()
) -> tuple[dict[str, Peer], dict[str, str]]:
    """The systems that import and set up here, and a reason for each that does not.

    `baselines` are checkouts of threadmill measured as well (`CheckoutPeer`).
    """
    peers: dict[str, Peer] = {}
    skipped: dict[str, str] = {}
    makers: list[tuple[str, Callable[[], Peer]]] = [
        (name, functools.partial(_in_own_process, name, redis_url)) for name in wanted
    ]
    makers += [
        (f"baseline {path}", functools.partial(CheckoutPeer, redis_url, path)) for path in baselines
    ]
    for name, make in makers:
        try:
            peer = make()
            name = peer.name
            peer.setup()
            peer.teardown()
        except ImportError as exc:
            hint = (
                ""
                if name.startswith("baseline")
                else "; pip install -r benchmarks/requirements.txt"
            )
            skipped[name] = f"not installed ({exc}){hint}"
        except Exception as exc:
            skipped[name] = f"cannot set up: {type(exc).__name__}: {exc}"
        else:
            peers[name] = peer
    return peers, skipped


def draw_chart(result: dict[str, Any], path: Path) -> list[Path]:
    try:
        from benchmarks import chart
    except ImportError as exc:
        print(f"no chart: {exc} (pip install matplotlib)")
        return []
    return [chart.draw(result, path)]


def render(path: Path, *, chart: bool) -> int:
    """Write NAME.md (and NAME.png) again beside NAME.json."""
    result = json.loads(path.read_text(encoding="utf-8"))
    text = report.markdown(result)
    markdown_path = path.with_suffix(".md")
    markdown_path.write_text(text, encoding="utf-8")
    written = [markdown_path]
    if chart:
        written += draw_chart(result, path.with_suffix(".png"))
    print("written: " + ", ".join(str(p) for p in written))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.render is not None:
        return render(args.render, chart=not args.no_chart)
    settings = settings_from(args)
    wanted = list(THREADMILL)
    for name in (p.strip() for p in args.peers.split(",")):
        if not name or name in THREADMILL:
            continue
        if name not in REGISTRY:
            print(f"unknown peer {name!r}; known: {', '.join(REGISTRY)}", file=sys.stderr)
            return 2
        wanted.append(name)
    name = args.name or ("quick" if args.quick else "latest")
    if args.wait_quiet > 0:
        wait_for_quiet(args.wait_quiet, args.quiet_load)
    compile_sources(args.baseline)
    log_dir = Path(tempfile.mkdtemp(prefix="threadmill-bench-logs-"))
    started = time.time()
    with RedisServer(args.redis_server) as server:
        # Peer modules read the URL when they are imported, as their workers do.
        os.environ[URL_VARIABLE] = server.url
        peers, skipped = load_peers(wanted, server.url, args.baseline)
        for peer_name, reason in skipped.items():
            print(f"skipping {peer_name}: {reason}", flush=True)
        if "threadmill" not in peers:
            print(f"threadmill itself cannot run: {skipped['threadmill']}", file=sys.stderr)
            return 1
        if args.depth_peers.strip() == "all":
            depth_names = list(peers)
        else:
            baselines = [n for n in peers if n.startswith("threadmill@") and n not in THREADMILL]
            depth_names = [
                "threadmill",
                *baselines,
                *[p.strip() for p in args.depth_peers.split(",")],
            ]
        bench = measure.Bench(server.url, log_dir)
        try:
            machine = report.machine_info(bench.admin)
            print(report.machine_line(machine), flush=True)
            if machine["load_start"] > 0.5:
                print(
                    f"warning: the load average is {machine['load_start']}: other work on "
                    "this machine will skew the figures (see --wait-quiet)",
                    flush=True,
                )
            run = Run(peers, bench)
            cold_starts(run, settings)
            schedule(run, settings, depth_names)
        finally:
            bench.close()
    settings["elapsed_s"] = round(time.time() - started, 1)
    machine["load_end"] = round(os.getloadavg()[0], 2)
    result = report.build(run, settings, machine, skipped, depth_names)
    markdown = report.markdown(result)
    print()
    print(markdown)
    args.output_dir.mkdir(parents=True, exist_ok=True)
    written = report.write(result, markdown, args.output_dir, name)
    if not args.no_chart:
        written += draw_chart(result, args.output_dir / f"{name}.png")
    print("written: " + ", ".join(str(path) for path in written))
    if run.errors or args.keep_logs:
        print(f"worker logs kept in {log_dir}")
    else:
        shutil.rmtree(log_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
