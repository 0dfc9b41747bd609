"""The PNG: one bar chart per figure, threadmill in its own colour."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter

THREADMILL = "#d9480f"
PEER = "#4c6ef5"
SECOND = "#a5b4fc"


def draw(result: dict[str, Any], path: Path) -> Path:
    medians = result["medians"]
    names = list(result["systems"])
    threads = result["settings"]["threads"]
    colours = [THREADMILL if name == "threadmill" else PEER for name in names]
    panels: list[tuple[str, list[tuple[str, str]], str]] = [
        ("enqueue, µs/task (lower is better)",
         [("enqueue_us", "single"), ("enqueue_batch_us", "batch")], "linear"),
        ("drain, tasks/s (higher is better)",
         [("drain_1x1", "1 thread"), ("drain_1xN", f"{threads} threads")], "linear"),
        ("enqueue-to-start, idle worker, ms (lower; log scale)",
         [("latency_p50_ms", "p50"), ("latency_p99_ms", "p99")], "log"),
        ("idle worker, commands/s: all, and requests sent (lower; log)",
         [("idle_cmds_per_s", "all"), ("idle_requests_per_s", "sent")], "symlog"),
        ("Redis memory per queued task, bytes (lower)",
         [("memory_bytes_per_task", "")], "linear"),
    ]  # fmt: skip
    fig, axes = plt.subplots(2, 3, figsize=(18, 9.5))
    flat = list(axes.flat)
    for ax, (title, series, scale) in zip(flat, panels, strict=False):
        width = 0.8 / len(series)
        for index, (key, _label) in enumerate(series):
            values = [medians[name].get(key) for name in names]
            xs = [i + (index - (len(series) - 1) / 2) * width for i in range(len(names))]
            shown = [v if v is not None else 0.0 for v in values]
            bar_colours = (
                colours
                if index == 0
                else ["#ffa94d" if name == "threadmill" else SECOND for name in names]
            )
            bars = ax.bar(xs, shown, width=width, color=bar_colours, hatch="//" if index else None)
            for bar, value in zip(bars, values, strict=True):
                text = "n/a" if value is None else _short(value)
                height = bar.get_height() if value else 0
                ax.annotate(text, (bar.get_x() + bar.get_width() / 2, height),
                            ha="center", va="bottom", fontsize=7,
                            xytext=(0, 2), textcoords="offset points")  # fmt: skip
        ax.set_xticks(range(len(names)), names, rotation=20)
        ax.margins(y=0.1)
        ax.set_title(title, fontsize=10)
        if scale == "symlog":
            ax.set_yscale("symlog", linthresh=1.0)
        elif scale == "log":
            ax.set_yscale("log")
        if scale != "linear":
            ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
            ax.yaxis.set_minor_formatter(FuncFormatter(lambda value, _: ""))
        if len(series) > 1:
            ax.legend(
                handles=[
                    Patch(facecolor="#868e96", label=series[0][1]),
                    Patch(facecolor="#dee2e6", hatch="//", label=series[1][1]),
                ],
                fontsize=8,
            )
        ax.grid(axis="y", alpha=0.3)
    _depth_panel(flat[5], result)
    machine = result["machine"]
    fig.suptitle(
        f"{result['title']}: {machine['date']}, {machine['cpu']} x {machine['cores']} cores, "
        f"Redis {machine['redis_server']}, Python {machine['python']}; "
        f"median of {result['settings']['repeat']}",
        fontsize=11,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _depth_panel(ax: Any, result: dict[str, Any]) -> None:
    depths = result["settings"]["depths"]
    names = result["depth_systems"]
    if not depths or not names:
        ax.set_axis_off()
        return
    width = 0.8 / len(names)
    for index, name in enumerate(names):
        values = [result["medians"][name].get(f"depth_{d}") for d in depths]
        xs = [i + (index - (len(names) - 1) / 2) * width for i in range(len(depths))]
        colour = THREADMILL if name == "threadmill" else None
        bars = ax.bar(xs, [v or 0.0 for v in values], width=width, label=name, color=colour)
        for bar, value in zip(bars, values, strict=True):
            ax.annotate("n/a" if value is None else _short(value),
                        (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                        ha="center", va="bottom", fontsize=7,
                        xytext=(0, 2), textcoords="offset points")  # fmt: skip
    ax.set_xticks(range(len(depths)), [f"{d:,} queued" for d in depths])
    ax.set_title("drain rate by backlog depth, tasks/s, 1 thread (flat is good)", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)


def _short(value: float) -> str:
    if value >= 10_000:
        return f"{value / 1000:.0f}k"
    if value >= 1_000:
        return f"{value / 1000:.1f}k"
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 1:
        return f"{value:.1f}"
    return f"{value:.2f}"
