"""The floors the benchmark checks: what each issue asked of threadmill, as ratios in one run.

`floors` takes the median figures of every system in a run (`report.build`)
and answers one row per floor: its name, what was measured, the target, and
whether it passed (None: not measured in this run).
"""

from __future__ import annotations

from typing import Any


def _floor(name: str, measured: str, target: str, passed: bool | None) -> dict[str, Any]:
    return {"floor": name, "measured": measured, "target": target, "passed": passed}


def floors(medians: dict[str, dict[str, Any]], settings: dict[str, Any]) -> list[dict[str, Any]]:
    """The floors of issue 7, each with what was measured and PASS/FAIL (None: not measured)."""
    tm = medians["threadmill"]
    # A baseline (`--baseline`: threadmill@COMMIT) is not a peer the floors are measured against.
    peers = {
        name: m
        for name, m in medians.items()
        if name != "threadmill" and not name.startswith("threadmill@")
    }
    out = []

    def best(key: str, pick: Any) -> tuple[str, float] | None:
        values = [(name, m[key]) for name, m in peers.items() if m.get(key) is not None]
        return pick(values, key=lambda item: item[1]) if values else None

    drain, top = tm.get("drain_1x1"), best("drain_1x1", max)
    if drain is not None and top is not None:
        out.append(_floor(
            "drain, 1 process x 1 thread: ≥ 2x the best peer",
            f"{drain:,.0f}/s = {drain / top[1]:.2f}x {top[0]} ({top[1]:,.0f}/s)",
            "≥ 2.00x", drain >= 2 * top[1]))  # fmt: skip
    else:
        out.append(_floor("drain, 1 process x 1 thread: ≥ 2x the best peer", "not measured",
                          "≥ 2.00x", None))  # fmt: skip
    single, fastest = tm.get("enqueue_us"), best("enqueue_us", min)
    if single is not None and fastest is not None:
        out.append(_floor(
            "enqueue of one task: no slower than the fastest peer",
            f"{single:,.1f} µs vs {fastest[0]} {fastest[1]:,.1f} µs",
            f"≤ {fastest[1]:,.1f} µs", single <= fastest[1]))  # fmt: skip
    else:
        out.append(_floor("enqueue of one task: no slower than the fastest peer", "not measured",
                          "", None))  # fmt: skip
    batch = tm.get("enqueue_batch_us")
    if single is not None and batch:
        out.append(_floor(
            "enqueue_many: ≥ 20x faster per task than single enqueues",
            f"{batch:,.2f} µs/task = {single / batch:.1f}x faster", "≥ 20x",
            single / batch >= 20))  # fmt: skip
    else:
        out.append(_floor("enqueue_many: ≥ 20x faster per task than single enqueues",
                          "not measured", "≥ 20x", None))  # fmt: skip
    for key, label, limit in (("latency_p50_ms", "p50", 5.0), ("latency_p99_ms", "p99", 20.0)):
        value = tm.get(key)
        out.append(_floor(
            f"enqueue-to-start, idle worker: {label} < {limit:g} ms",
            "not measured" if value is None else f"{value:.2f} ms",
            f"< {limit:g} ms", None if value is None else value < limit))  # fmt: skip
    idle, requests = tm.get("idle_cmds_per_s"), tm.get("idle_requests_per_s")
    sent = "" if requests is None else f" ({requests:.2f} of them requests sent)"
    out.append(_floor(
        "idle worker: ≤ 2 server commands/s per thread",
        "not measured" if idle is None else f"{idle:.2f} commands/s{sent} with 1 thread",
        "≤ 2.00/s", None if idle is None else idle <= 2.0))  # fmt: skip
    cold, dramatiq = tm.get("cold_start_ms"), peers.get("dramatiq", {}).get("cold_start_ms")
    out.append(_floor(
        "cold start: first task no later than Dramatiq's (issue 20)",
        "not measured" if cold is None or dramatiq is None
        else f"{cold:,.0f} ms vs dramatiq {dramatiq:,.0f} ms",
        "≤ dramatiq", None if cold is None or dramatiq is None else cold <= dramatiq))  # fmt: skip
    shallow, deep, ratio = tm.get("depth_1000"), tm.get("depth_100000"), tm.get("depth_ratio")
    if ratio is not None and shallow and deep is not None:
        out.append(_floor(
            "drain at a 100k backlog within 20% of the rate at 1k",
            f"{ratio:.2f} (median of the repeats' own ratios; of the medians, "
            f"{deep:,.0f}/s vs {shallow:,.0f}/s = {deep / shallow:.2f})", "≥ 0.80",
            ratio >= 0.8))  # fmt: skip
    else:
        out.append(_floor("drain at a 100k backlog within 20% of the rate at 1k",
                          "not measured", "≥ 0.80", None))  # fmt: skip
    out += issue_38_floors(tm, medians.get("threadmill@prefetch64", {}), best)
    limited = medians.get("threadmill@time-limit", {}).get("drain_1x1")
    name = "drain 1p x 1t, --time-limit on every task: ≥ 0.9x without (issue 35)"
    drain = tm.get("drain_1x1")
    if drain and limited is not None:
        out.append(_floor(name, f"{limited:,.0f}/s vs {drain:,.0f}/s = {limited / drain:.2f}x",
                          "≥ 0.90x", limited >= 0.9 * drain))  # fmt: skip
    else:
        out.append(_floor(name, "not measured", "≥ 0.90x", None))
    return out


def issue_38_floors(tm: dict[str, Any], tuned: dict[str, Any], best: Any) -> list[dict[str, Any]]:
    """Issue 38's floors: threadmill's defaults against ``--prefetch 64`` and the peers, and
    no hoarding of long tasks. (Django's is its own run: benchmarks/django_bench.)"""
    out = []
    drain, p64, top = tm.get("drain_1x1"), tuned.get("drain_1x1"), best("drain_1x1", max)
    name = "drain 1p x 1t, defaults: ≥ 0.9x the same worker with --prefetch 64"
    if drain is not None and p64:
        out.append(_floor(name, f"{drain:,.0f}/s vs {p64:,.0f}/s = {drain / p64:.2f}x",
                          "≥ 0.90x", drain >= 0.9 * p64))  # fmt: skip
    else:
        out.append(_floor(name, "not measured", "≥ 0.90x", None))
    name = "drain 1p x 1t, defaults: ≥ 1.8x the best peer"
    if drain is not None and top is not None:
        out.append(_floor(name, f"{drain / top[1]:.2f}x {top[0]} ({top[1]:,.0f}/s)",
                          "≥ 1.80x", drain >= 1.8 * top[1]))  # fmt: skip
    else:
        out.append(_floor(name, "not measured", "≥ 1.80x", None))
    ratio, makespan = tm.get("hoard_ratio"), tm.get("hoard_makespan_s")
    tuned_ratio = tuned.get("hoard_ratio")
    also = "" if tuned_ratio is None else f"; --prefetch 64: {tuned_ratio:.2f}x"
    out.append(_floor(
        "40 tasks of 100 ms on 2 processes x 1 thread, defaults: ≤ 1.15x the ideal 2 s",
        "not measured" if ratio is None or makespan is None
        else f"{makespan:.2f} s = {ratio:.2f}x{also}",
        "≤ 1.15x", None if ratio is None else ratio <= 1.15))  # fmt: skip
    return out
