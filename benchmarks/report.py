"""Medians, ratios and floors of a run, rendered as Markdown and JSON."""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import platform
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import redis

import threadmill_core
from benchmarks.floors import floors
from benchmarks.peers import Unsupported
from benchmarks.peers.checkout import commit_of
from benchmarks.server import REPO_ROOT

if TYPE_CHECKING:
    from benchmarks.run import Run

#: The figures of the main table: key, column heading, which way is better.
METRICS: list[tuple[str, str, str]] = [
    ("enqueue_us", "enqueue µs/task", "lower"),
    ("enqueue_batch_us", "batch enqueue µs/task", "lower"),
    ("drain_1x1", "drain 1px1t tasks/s", "higher"),
    ("drain_1xN", "drain 1px{threads}t tasks/s", "higher"),
    ("latency_p50_ms", "start p50 ms", "lower"),
    ("latency_p99_ms", "start p99 ms", "lower"),
    ("idle_cmds_per_s", "idle cmds/s", "lower"),
    ("idle_requests_per_s", "idle requests/s", "lower"),
    ("memory_bytes_per_task", "Redis B/task", "lower"),
    ("cold_start_ms", "cold start ms", "lower"),
    ("hoard_makespan_s", "40x100 ms on 2p s", "lower"),
]


# --- the machine ---------------------------------------------------------------------


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_total() -> str:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    except OSError:
        pass
    return "unknown"


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _git_commit() -> str:
    found = commit_of(REPO_ROOT)
    if found is None:
        return "unknown"
    commit, dirty = found
    return f"{commit} (with uncommitted changes)" if dirty else commit


def machine_info(admin: redis.Redis) -> dict[str, Any]:
    server = cast("dict[str, Any]", admin.info("server"))
    return {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "memory": _memory_total(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "redis_server": str(server.get("redis_version")),
        "redis_py": _version("redis"),
        "hiredis": _version("hiredis"),
        "threadmill_commit": _git_commit(),
        "threadmill_from": str(Path(threadmill_core.__file__).resolve().parent.parent),
        "load_start": round(os.getloadavg()[0], 2),
    }


def machine_line(machine: dict[str, Any]) -> str:
    return (
        f"{machine['date']}: {machine['cpu']}, {machine['cores']} cores, {machine['memory']}; "
        f"Redis {machine['redis_server']} on loopback; Python {machine['python']}, "
        f"redis-py {machine['redis_py']}, hiredis {machine['hiredis']}; "
        f"threadmill at {machine['threadmill_commit']} from {machine['threadmill_from']}; "
        f"load average {machine['load_start']}"
    )


# --- medians, ratios, floors ---------------------------------------------------------


def median(values: Sequence[Any]) -> float | None:
    present = [v for v in values if isinstance(v, int | float)]
    return statistics.median(present) if present else None


def _median_rates(runs: Sequence[Any]) -> dict[str, float]:
    present = [r for r in runs if isinstance(r, dict)]
    names = sorted({name for r in present for name in r})
    return {name: round(statistics.median([r.get(name, 0.0) for r in present]), 3)
            for name in names}  # fmt: skip


def build(
    run: Run,
    settings: dict[str, Any],
    machine: dict[str, Any],
    skipped: dict[str, str],
    depth_names: Sequence[str],
) -> dict[str, Any]:
    threads = settings["threads"]
    systems: dict[str, Any] = {}
    for name, peer in run.peers.items():
        try:
            many = peer.describe(threads)
            peer.worker_command(threads)
        except Unsupported as exc:
            many = f"n/a: {exc}"
        systems[name] = {
            "version": peer.version,
            "one_thread": peer.describe(1),
            "n_threads": many,
            "batch_enqueue": peer.has_batch,
            "notes": sorted(run.notes[name]),
        }
    medians: dict[str, dict[str, Any]] = {}
    for name, figures in run.figures.items():
        medians[name] = {
            key: median(values)
            for key, values in figures.items()
            if key not in ("latency_samples_ms", "idle_commands", "idle_monitor")
        }
        medians[name]["idle_commands"] = _median_rates(figures.get("idle_commands", []))
        medians[name]["idle_monitor"] = _median_rates(figures.get("idle_monitor", []))
    keys = [key for key, _, _ in METRICS] + [f"depth_{d}" for d in settings["depths"]]
    tm = medians["threadmill"]
    ratios = {
        name: {
            key: (tm[key] / m[key] if tm.get(key) is not None and m.get(key) else None)
            for key in keys
        }
        for name, m in medians.items()
        if name != "threadmill"
    }
    return {
        "title": "threadmill benchmark (issue 7)",
        "machine": machine,
        "settings": settings,
        "systems": systems,
        "skipped": skipped,
        "depth_systems": [name for name in run.peers if name in depth_names],
        "runs": run.figures,
        "medians": medians,
        "ratios": ratios,
        "floors": floors(medians, settings),
        "errors": run.errors,
        "load_averages": run.loads,
    }


# --- rendering -----------------------------------------------------------------------


def fmt(key: str, value: float | None) -> str:
    if value is None:
        return "-"
    if key.startswith(("drain", "depth", "cold")) or key == "memory_bytes_per_task":
        return f"{value:,.0f}"
    if key.startswith("enqueue"):
        return f"{value:,.1f}" if value < 1000 else f"{value:,.0f}"
    if key.startswith("latency"):
        return f"{value:,.2f}" if value < 100 else f"{value:,.0f}"
    return f"{value:,.2f}" if value < 100 else f"{value:,.0f}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], align: str = "r") -> list[str]:
    lines = ["| " + " | ".join(header) + " |"]
    rule = "---:" if align == "r" else "---"
    lines.append("| " + " | ".join(["---"] + [rule] * (len(header) - 1)) + " |")
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def _rates(rates: dict[str, float]) -> str:
    ordered = sorted(rates.items(), key=lambda item: (-item[1], item[0]))
    return ", ".join(f"{cmd} {rate:.2g}" for cmd, rate in ordered) or "-"


def markdown(result: dict[str, Any]) -> str:
    settings, machine = result["settings"], result["machine"]
    medians, systems, runs = result["medians"], result["systems"], result["runs"]
    threads = settings["threads"]
    names = list(systems)
    lines = [f"# {result['title']}", ""]
    lines.append(
        f"{machine['date']}. {machine['cpu']}, {machine['cores']} cores, {machine['memory']}, "
        f"{machine['os']}. Redis {machine['redis_server']} on loopback (started by the "
        f"benchmark, no persistence). Python {machine['python']}, redis-py "
        f"{machine['redis_py']}, hiredis {machine['hiredis']}. threadmill at "
        f"{machine['threadmill_commit']}, imported from `{machine['threadmill_from']}`."
    )
    loads = result.get("load_averages") or []
    lines.append("")
    lines.append(
        f"Load average (1 min) {machine['load_start']} before the run; as measurements began, "
        + (
            f"{min(loads):.2f} to {max(loads):.2f}, median {statistics.median(loads):.2f} "
            "(the benchmark's own processes count in it). Other work "
            "on the machine skews every figure."
            if loads
            else "not recorded."
        )
    )
    lines.append("")
    mode = "quick smoke run" if settings["quick"] else "full run"
    lines.append(
        f"A {mode}: median of {settings['repeat']} interleaved repeat(s); drains of "
        f"{settings['tasks']:,} tasks, {settings['latency_samples']} latency samples, idle "
        f"window {settings['idle_seconds']:g} s, memory for {settings['memory_tasks']:,} queued "
        f"tasks; {settings['elapsed_s']:,.0f} s in all."
    )
    lines += ["", "## Figures", ""]
    header = ["system", "version"] + [label.format(threads=threads) for _, label, _ in METRICS]
    rows = []
    for name in names:
        rows.append([f"**{name}**" if name == "threadmill" else name, systems[name]["version"]]
                    + [fmt(key, medians[name].get(key)) for key, _, _ in METRICS])  # fmt: skip
    lines += _table(header, rows)
    lines += ["", "Lower is better for µs, ms, commands and bytes; higher for tasks/s.", ""]
    if settings["repeat"] > 1:
        lines += ["Spread over the repeats (lowest to highest), to judge the noise:", ""]
        rows = []
        for name in names:
            cells = []
            for key, _, _ in METRICS:
                present = [v for v in runs.get(name, {}).get(key, []) if v is not None]
                low, high = (min(present), max(present)) if present else (None, None)
                cells.append("-" if low is None else f"{fmt(key, low)}-{fmt(key, high)}")
            rows.append([name, *cells])
        lines += _table(["system", *header[2:]], rows)
        lines.append("")
    lines += ["## threadmill ÷ peer", ""]
    lines.append(
        "Each cell is threadmill's figure divided by the peer's: above 1 favours threadmill "
        "for tasks/s, below 1 favours it for µs, ms, commands and bytes."
    )
    lines.append("")
    header = ["peer"] + [label.format(threads=threads) for _, label, _ in METRICS]
    rows = []
    for name, ratio in result["ratios"].items():
        rows.append([name] + [("-" if ratio.get(key) is None else f"{ratio[key]:.2f}x")
                              for key, _, _ in METRICS])  # fmt: skip
    lines += _table(header, rows)
    depths = settings["depths"]
    if depths and "depth" not in settings["skip"]:
        lines += ["", "## Drain rate by backlog depth (1 process x 1 thread)", ""]
        window = settings["depth_window"]
        lines.append(
            f"Tasks/s over the first {window:,} tasks drained from a backlog of the given depth "
            "(the same number at every depth, so only the depth changes), the depths in an "
            f"order rotated each repeat; each repeat's rate is the median of "
            f"{settings.get('depth_drains', 1)} drain(s), each from a backlog of its own. "
            "100k ÷ 1k is the median of each repeat's own ratio, "
            "its two rates taken a few minutes apart at most; the spread is over the repeats."
        )
        lines.append("")
        header = ["system"] + [f"{d:,}" for d in depths]
        if 1000 in depths and 100_000 in depths:
            header += ["100k ÷ 1k", "spread"]
        rows = []
        for name in result["depth_systems"]:
            m = medians[name]
            row = [name] + [fmt("depth", m.get(f"depth_{d}")) for d in depths]
            if 1000 in depths and 100_000 in depths:
                ratio = m.get("depth_ratio")
                ratios = result["runs"][name].get("depth_ratio", [])
                row.append("-" if ratio is None else f"{ratio:.2f}")
                row.append(f"{min(ratios):.2f}-{max(ratios):.2f}" if ratios else "-")
            rows.append(row)
        lines += _table(header, rows)
    lines += _cold_start_section(result)
    lines += ["", "## Floors (issues 7 and 20), threadmill in this run", ""]
    rows = []
    for floor in result["floors"]:
        verdict = {True: "PASS", False: "**FAIL**", None: "not measured"}[floor["passed"]]
        rows.append([floor["floor"], floor["measured"], floor["target"], verdict])
    lines += _table(["floor", "measured", "target", "result"], rows, align="l")
    lines += ["", "## An idle worker's commands per second, one thread", ""]
    lines.append(
        "All: every command the server ran (`INFO commandstats`), those run inside Lua "
        "scripts included. Sent: the requests clients sent (`MONITOR`). In scripts: what the "
        "scripts ran (`MONITOR`)."
    )
    lines.append("")
    rows = []
    for name in names:
        monitor = medians[name].get("idle_monitor") or {}
        sent = {k.partition(":")[2]: v for k, v in monitor.items() if k.startswith("client:")}
        run = {k.partition(":")[2]: v for k, v in monitor.items() if k.startswith("lua:")}
        rows.append(
            [name, _rates(medians[name].get("idle_commands") or {}), _rates(sent), _rates(run)]
        )
    lines += _table(["system", "all", "sent", "in scripts"], rows, align="l")
    lines += ["", "## Configurations", ""]
    rows = []
    for name in names:
        s = systems[name]
        rows.append([name, s["version"], s["one_thread"], s["n_threads"],
                     "yes" if s["batch_enqueue"] else "no"])  # fmt: skip
    lines += _table(["system", "version", "1 thread", f"{threads} threads", "batch enqueue"],
                    rows, align="l")  # fmt: skip
    lines.append("")
    lines.append(
        "Every worker is its project's own CLI in a process of its own, with its default "
        "logging (Huey, arq and RQ log every task; threadmill, which logs failures and "
        "retries, Dramatiq, SAQ and Celery do not by default), output to a file. Each task "
        "INCRs a counter with redis-py (the asyncio peers with their own async client)."
    )
    if result["skipped"]:
        lines += ["", "## Skipped", ""]
        lines += [f"- {name}: {reason}" for name, reason in result["skipped"].items()]
    if result["errors"]:
        lines += ["", "## Failed measurements", ""]
        for error in result["errors"]:
            first = error["error"].splitlines()[0]
            lines.append(f"- {error['system']}, {error['measurement']}, repeat "
                         f"{error['repeat'] + 1}: {first}")  # fmt: skip
    lines += ["", "## How it was measured", ""]
    lines += [
        "- One redis-server started by the run; FLUSHALL before every measurement.",
        "- Interleaved: each measurement runs for every system in turn, the order rotated each "
        "repeat; figures are medians over repeats.",
        "- Producers: each system's in a process of its own for the whole run, timing its own "
        "calls; each measurement opens and closes a producer in it.",
        "- Enqueue: a loop of single enqueue calls, timed around the loop; batch enqueue: the "
        "peer's batch API (threadmill `enqueue_many`, RQ `enqueue_many`), each repeat's "
        f"figure the median of {settings.get('batches', 1)} batch(es), each by a producer of "
        "its own into an empty store.",
        "- Drain: the backlog is in place before the worker starts; the counter is polled every "
        "2 ms and the rate taken from the first look that sees a task done to the look that "
        "sees the last.",
        "- Start latency: an idle worker; a task carrying `time.time()` read just before the "
        "enqueue call reports `time.time() - sent` when it starts; samples 5-45 ms apart.",
        "- Idle commands: the same worker, producer closed, after settling; the change in "
        "`INFO commandstats` over the window, our own INFO call left out.",
        "- Memory: `used_memory` after minus before a backlog (no worker), less any change in "
        "the script cache, per task.",
        "- Cold start: one task enqueued, then the one-thread worker command launched; the time "
        "from just before the launch to the first look (every 2 ms) that sees the task done.",
    ]
    return "\n".join(lines) + "\n"


def _cold_start_section(result: dict[str, Any]) -> list[str]:
    """Every system's cold starts: how many, median, spread, and threadmill ÷ it."""
    runs, medians = result["runs"], result["medians"]
    names = [name for name in result["systems"] if runs.get(name, {}).get("cold_start_ms")]
    if not names:
        return []
    lines = ["", "## Cold start", ""]
    lines.append(
        "Milliseconds from launching the worker command (a subprocess, as a user would) to "
        "the first look at the counter that sees its first task done, the task enqueued "
        "before the launch; each system's worker is launched once untimed first, then the "
        "timed launches go round the systems, the order rotated each round. threadmill's "
        "sources were byte-compiled first, as pip compiles an installed package's."
    )
    lines.append("")
    rows = []
    tm = medians["threadmill"].get("cold_start_ms")
    for name in names:
        present = sorted(v for v in runs[name]["cold_start_ms"] if v is not None)
        m = medians[name].get("cold_start_ms")
        spread = f"{present[0]:,.0f}-{present[-1]:,.0f}" if present else "-"
        quartiles = (
            "-"
            if len(present) < 2
            else "-".join(f"{q:,.0f}" for q in statistics.quantiles(present, n=4)[::2])
        )
        ratio = "-" if tm is None or not m or name == "threadmill" else f"{tm / m:.2f}x"
        rows.append([f"**{name}**" if name == "threadmill" else name, str(len(present)),
                     fmt("cold_start_ms", m), quartiles, spread, ratio])  # fmt: skip
    lines += _table(
        ["system", "launches", "median ms", "quartiles ms", "lowest-highest ms",
         "threadmill ÷ system"], rows)  # fmt: skip
    return lines


def write(result: dict[str, Any], text: str, directory: Path, name: str) -> list[Path]:
    md_path = directory / f"{name}.md"
    json_path = directory / f"{name}.json"
    md_path.write_text(text, encoding="utf-8")
    json_path.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n",
                         encoding="utf-8")  # fmt: skip
    return [md_path, json_path]
