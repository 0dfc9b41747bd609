"""``python -m benchmarks redis-footprint``: where Redis memory per queued task goes (issue 38).

One run starts a redis-server of its own and, for threadmill and for
Dramatiq in turn (FLUSHALL before each), queues a backlog of ``--tasks``
benchmark ``incr`` tasks with no worker running, through the peer's own
``fill`` in a producer process of its own, as the main run's memory
measurement does (`benchmarks.measure.memory_per_task`). It reports:

- **used_memory B/task**: ``used_memory`` after the backlog minus before,
  less any change in the Lua script cache, over the backlog; both looks
  with no producer connected (the main run's first look is taken with the
  producer set up, and threadmill's connects at setup: its ``Redis
  B/task`` reads about 27 KB over the backlog lower).
- **by key**: every key on the server, ``MEMORY USAGE key SAMPLES 0``
  (every element counted, not an estimate) after the backlog less before,
  over the backlog, with its type, encoding and element count; then each
  key is deleted in turn, largest first, and **DEL frees** is the
  used_memory that went with it, as the allocator counts it (MEMORY USAGE
  counts a dictionary entry as 24 bytes, which jemalloc's 32-byte size
  class holds). **in no key**: used_memory left once every key is
  deleted, less before. Keys below `FOLD_BELOW` B/task both ways are
  folded into one "other" line.
- **READY index shapes**: what one entry of a READY index costs in other
  shapes, each built alone on the emptied server from the threadmill
  backlog's own READY entries: a sorted set of exactly the members
  threadmill stores in ``{ns}:ready`` (and their scores), a sorted set of
  the bare task ids (score 0), the same with distinct integer scores, and a
  list of the bare ids (RPUSH); MEMORY USAGE and used_memory growth, per
  entry.

The server runs with ``latency-tracking no``: Redis 7 allocates a latency
histogram of about 24 KB for each command the first time it runs, which
would land in the figures of whatever ran the command first (on a fresh
server, some 25 B/task of threadmill's 10,000).

The figures are printed as Markdown and written, with the JSON, to
``--output-dir``/``NAME.{md,json}`` (default
``benchmarks/results/redis-footprint``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

import redis

from benchmarks import measure, report
from benchmarks.arguments import RESULTS_DIR
from benchmarks.peers import Peer, load
from benchmarks.peers._common import URL_VARIABLE
from benchmarks.peers.own_process import InOwnProcess
from benchmarks.peers.threadmill_peer import NAMESPACE
from benchmarks.server import RedisServer
from threadmill_redis.keys import QUEUE_LENGTH_DIGITS, SORT_KEY_DIGITS

#: The systems, in table order.
SYSTEMS = ("threadmill", "dramatiq")
#: Keys that take less than this many bytes per task are folded into one "other" line.
FOLD_BELOW = 1.0
#: Entries per command when the shapes are built.
CHUNK = 1_000

KeySizes = dict[str, dict[str, Any]]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks redis-footprint",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--tasks", type=int, default=10_000, help="queued tasks, and shape entries (%(default)s)"
    )
    parser.add_argument("--redis-server", default="redis-server", help="the server executable")
    parser.add_argument(
        "--output-dir", type=Path, default=RESULTS_DIR, help="where results go (%(default)s)"
    )
    parser.add_argument(
        "--name", default="redis-footprint", help="file name of the results (%(default)s)"
    )
    return parser


# --- measuring -----------------------------------------------------------------------------


def key_sizes(admin: redis.Redis) -> KeySizes:
    """Every key on the server: its type, encoding, element count and exact MEMORY USAGE."""
    sizes: KeySizes = {}
    for raw in admin.scan_iter(count=1_000):
        key = cast("bytes", raw)
        kind = cast("bytes", admin.type(key)).decode()
        count: Callable[[bytes], Any] | None = {
            "hash": admin.hlen,
            "zset": admin.zcard,
            "list": admin.llen,
            "set": admin.scard,
            "stream": admin.xlen,
        }.get(kind)
        sizes[key.decode(errors="backslashreplace")] = {
            "type": kind,
            "encoding": cast("bytes", admin.object("encoding", key)).decode(),
            "elements": int(count(key)) if count else 1,
            "bytes": int(cast("int", admin.memory_usage(key, samples=0))),
        }
    return sizes


def data_memory(bench: measure.Bench) -> int:
    """``used_memory`` less the Lua script cache's part of it."""
    used, scripts = bench.memory()
    return used - scripts


def per_task(
    before: KeySizes, after: KeySizes, freed: dict[str, int], n: int
) -> list[dict[str, Any]]:
    """Each key's MEMORY USAGE growth (after less before) and what DEL freed, over `n`.

    Largest growth first.
    """
    rows = [
        {
            "key": key,
            **got,
            "bytes_per_task": (got["bytes"] - before.get(key, {}).get("bytes", 0)) / n,
            "freed_per_task": freed.get(key, 0) / n,
        }
        for key, got in after.items()
    ]
    return sorted(rows, key=lambda row: (-row["bytes_per_task"], row["key"]))


def folded(rows: Sequence[dict[str, Any]], below: float = FOLD_BELOW) -> list[dict[str, Any]]:
    """`rows`, those under `below` B/task both ways folded into one "other (k keys)" row."""

    def small(row: dict[str, Any]) -> bool:
        return bool(abs(row["bytes_per_task"]) < below and abs(row["freed_per_task"]) < below)

    kept = [row for row in rows if not small(row)]
    if rest := [row for row in rows if small(row)]:
        kept.append({"key": f"other ({len(rest)} {'key' if len(rest) == 1 else 'keys'})",
                     "type": "", "encoding": "", "elements": None,
                     "bytes_per_task": sum(row["bytes_per_task"] for row in rest),
                     "freed_per_task": sum(row["freed_per_task"] for row in rest)})  # fmt: skip
    return kept


def delete_each(bench: measure.Bench, keys: Sequence[str]) -> dict[str, int]:
    """DEL each key in turn: the used_memory each one freed, as the allocator counts it."""
    freed = {}
    for key in keys:
        before = data_memory(bench)
        bench.admin.delete(key)
        freed[key] = before - data_memory(bench)
    return freed


def system_footprint(
    bench: measure.Bench, peer: Peer, n: int, inspect: Callable[[], None] | None = None
) -> dict[str, Any]:
    """A backlog of `n` with no worker: used_memory B/task, and each key's share.

    `inspect` runs while the backlog is in place, before its keys are deleted.
    """
    bench.flush()
    # Both looks with no producer connected (threadmill's connects at setup): its
    # connections' buffers are in neither.
    used_before = data_memory(bench)
    keys_before = key_sizes(bench.admin)
    with measure.producing(peer):
        peer.fill(n)
    time.sleep(0.1)
    used_after = data_memory(bench)
    keys_after = key_sizes(bench.admin)
    if inspect is not None:
        inspect()
        time.sleep(0.1)
    largest = sorted(keys_after, key=lambda key: -keys_after[key]["bytes"])
    freed = delete_each(bench, largest)
    rows = per_task(keys_before, keys_after, freed, n)
    return {
        "used_memory_bytes_per_task": (used_after - used_before) / n,
        "keys_bytes_per_task": sum(row["bytes_per_task"] for row in rows),
        "freed_bytes_per_task": sum(row["freed_per_task"] for row in rows),
        "left_bytes_per_task": (data_memory(bench) - used_before) / n,
        "keys": rows,
    }


def bare_id(member: bytes) -> bytes:
    """The task id a segment member ends with: ``<queue length><queue><sort key><id>``."""
    queue_length = int(member[:QUEUE_LENGTH_DIGITS], 16)
    return member[QUEUE_LENGTH_DIGITS + queue_length + SORT_KEY_DIGITS :]


Entries = list[tuple[bytes, float]]


def shapes(entries: Entries) -> dict[str, tuple[str, Callable[[Any, Entries], None]]]:
    """The READY index shapes: label -> (key, how to add a chunk of entries with a pipeline)."""
    width = sum(len(member) for member, _ in entries) / len(entries)
    id_width = sum(len(bare_id(member)) for member, _ in entries) / len(entries)
    ids = {member: index for index, (member, _) in enumerate(entries)}
    return {
        f"sorted set, threadmill's members ({width:.0f} B)": (
            "shape:members",
            lambda pipe, chunk: pipe.zadd("shape:members", dict(chunk)),
        ),
        f"sorted set, bare ids ({id_width:.0f} B), score 0": (
            "shape:ids",
            lambda pipe, chunk: pipe.zadd("shape:ids", {bare_id(m): 0 for m, _ in chunk}),
        ),
        "sorted set, bare ids, distinct integer scores": (
            "shape:scored",
            lambda pipe, chunk: pipe.zadd("shape:scored", {bare_id(m): ids[m] for m, _ in chunk}),
        ),
        "list, bare ids (RPUSH)": (
            "shape:list",
            lambda pipe, chunk: pipe.rpush("shape:list", *(bare_id(m) for m, _ in chunk)),
        ),
    }


def shape_costs(bench: measure.Bench, entries: Entries) -> list[dict[str, Any]]:
    """Each shape built alone on an emptied server: MEMORY USAGE and used_memory per entry."""
    rows = []
    n = len(entries)
    for label, (key, add) in shapes(entries).items():
        bench.flush()
        used_before = data_memory(bench)
        # A client of its own, closed before the second look: its buffers do not count.
        with redis.Redis.from_url(bench.redis_url) as client:
            pipe = client.pipeline(transaction=False)
            for start in range(0, n, CHUNK):
                add(pipe, entries[start : start + CHUNK])
            pipe.execute()
        time.sleep(0.1)
        used_after = data_memory(bench)
        got = key_sizes(bench.admin)[key]
        if got["elements"] != n:
            raise RuntimeError(f"{label}: {got['elements']} entries, not {n}")
        rows.append({"shape": label, "key": key, **got, "bytes_per_entry": got["bytes"] / n,
                     "used_memory_bytes_per_entry": (used_after - used_before) / n})  # fmt: skip
    return rows


def ready_entries(redis_url: str, key: str) -> Entries:
    """Every member of sorted set `key` with its score, read by a client of its own."""
    with redis.Redis.from_url(redis_url) as client:
        return cast("Entries", client.zrange(key, 0, -1, withscores=True))


# --- the report ---------------------------------------------------------------------------


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def markdown(result: dict[str, Any]) -> str:
    s = result["settings"]
    systems: dict[str, dict[str, Any]] = result["systems"]
    lines = [
        "# Redis memory per queued task: threadmill and Dramatiq",
        "",
        report.machine_line(result["machine"]),
        "",
        f"{s['tasks']:,} benchmark tasks queued with no worker running, each system alone on "
        "the server (FLUSHALL between; latency-tracking off). used_memory: after less before, "
        "less the Lua script cache's change, over the backlog, both looks with no producer "
        "connected. MEMORY USAGE: each key's `MEMORY USAGE key SAMPLES 0`, after less before, "
        "over the backlog. DEL frees: the used_memory each key's DEL then freed. In no key: "
        "used_memory left once every key is deleted, less before.",
        "",
        "| system | version | used_memory B/task | MEMORY USAGE B/task | DEL frees B/task "
        "| in no key B/task |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for name, got in systems.items():
        lines.append(f"| {name} | {result['versions'].get(name, '?')} "
                     f"| {_fmt(got['used_memory_bytes_per_task'])} "
                     f"| {_fmt(got['keys_bytes_per_task'])} | {_fmt(got['freed_bytes_per_task'])} "
                     f"| {_fmt(got['left_bytes_per_task'])} |")  # fmt: skip
    lines += ["", f"By key (under {FOLD_BELOW:g} B/task folded into other):", "",
              "| system | key | type | encoding | elements | MEMORY USAGE B/task "
              "| DEL frees B/task |",
              "| --- | --- | --- | --- | ---: | ---: | ---: |"]  # fmt: skip
    for name, got in systems.items():
        for row in folded(got["keys"]):
            elements = "" if row["elements"] is None else f"{row['elements']:,}"
            lines.append(f"| {name} | `{row['key']}` | {row['type']} | {row['encoding']} "
                         f"| {elements} | {_fmt(row['bytes_per_task'])} "
                         f"| {_fmt(row['freed_per_task'])} |")  # fmt: skip
    if result["shapes"]:
        entries = result["shapes"][0]["elements"]
        lines += ["", f"READY index shapes, {entries:,} entries each, each alone on the server "
                  "(the members and ids of threadmill's backlog above):", "",
                  "| shape | encoding | MEMORY USAGE B/entry | used_memory B/entry |",
                  "| --- | --- | ---: | ---: |"]  # fmt: skip
        for row in result["shapes"]:
            lines.append(f"| {row['shape']} | {row['encoding']} | {_fmt(row['bytes_per_entry'])} "
                         f"| {_fmt(row['used_memory_bytes_per_entry'])} |")  # fmt: skip
    if result["errors"]:
        lines += ["", "Failed measurements:", *(f"- {e}" for e in result["errors"])]
    return "\n".join(lines) + "\n"


# --- the run ------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    n = args.tasks
    result: dict[str, Any] = {"settings": {"tasks": n, "latency_tracking": "no"},
                              "versions": {}, "systems": {},
                              "shapes": [], "errors": []}  # fmt: skip
    with RedisServer(args.redis_server) as server:
        # Peer modules read the URL when they are imported, as their workers do.
        os.environ[URL_VARIABLE] = server.url
        bench = measure.Bench(server.url)
        try:
            result["machine"] = report.machine_info(bench.admin)
            print(report.machine_line(result["machine"]), flush=True)
            # Redis 7 allocates a latency histogram (about 24 KB) for each command on its
            # first use: it would land in the figures of whatever first runs the command.
            bench.admin.config_set("latency-tracking", "no")
            entries: Entries = []

            def keep_ready() -> None:
                entries.extend(ready_entries(server.url, f"{{{NAMESPACE}}}:ready"))

            for name in SYSTEMS:
                try:
                    peer = InOwnProcess(load(name, server.url))
                    result["versions"][name] = peer.version
                    inspect = keep_ready if name == "threadmill" else None
                    got = system_footprint(bench, peer, n, inspect)
                except Exception as exc:
                    result["errors"].append(f"{name}: {type(exc).__name__}: {exc}")
                    print(f"  {name:<11} FAILED: {exc}", flush=True)
                    continue
                result["systems"][name] = got
                print(f"  {name:<11} {got['used_memory_bytes_per_task']:,.1f} B/task used_memory, "
                      f"{got['keys_bytes_per_task']:,.1f} in keys", flush=True)  # fmt: skip
            if entries:
                try:
                    result["shapes"] = shape_costs(bench, entries)
                except Exception as exc:
                    result["errors"].append(f"shapes: {type(exc).__name__}: {exc}")
                    print(f"  shapes      FAILED: {exc}", flush=True)
        finally:
            bench.close()
    text = markdown(result)
    print()
    print(text)
    args.output_dir.mkdir(parents=True, exist_ok=True)
    written = report.write(result, text, args.output_dir, args.name)
    print("written: " + ", ".join(str(path) for path in written))
    return 1 if result["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
