"""``python -m benchmarks.django_bench.mandated``: how much of the adapter's cost is Django's.

`benchmarks.django_bench.instructions` counts what threadmill_django adds
to each task of a drain. Part of that is work any conforming backend of
``django.tasks`` does for every task, in Django's own code: building the
`TaskResult` that ``task_started`` carries (its ``__post_init__``
normalises the arguments), sending ``task_started`` and ``task_finished``
to Django's receivers, normalising the return value; and the database
upkeep issue 19 asks for around each task, as Django's request cycle does
it (``reset_queries``, ``close_old_connections`` before and after). This
counts those, with callgrind, in the same drain (``incr`` tasks enqueued
through Django, drained by `benchmarks.instructions.counted_drain_worker`).

Each of those Django calls is made, in the counted child only, through a
C function of a small library built for the run (``gcc``, Python's
headers), one per kind of work, which only calls it (``PyObject_Call``);
callgrind's ``--toggle-collect`` counts instructions inside those C
functions only, so the figures are the Django calls' own instructions,
not the wrapping's (which costs the child time, and is not counted). The
rest of what the adapter adds, the drain's count through Django minus
through threadmill's API (``instructions``'s two figures, counted here
again, ``--runs`` times each, medians), is the adapter's own.

Needs what ``instructions`` needs (Python 3.12+ with Django, ``valgrind``,
``redis-server``) and a C compiler; takes about three minutes.
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import os
import re
import statistics
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from benchmarks.django_bench import instructions
from benchmarks.instructions import CALLGRIND, instrument
from benchmarks.server import REPO_ROOT, RedisServer

#: The kinds of Django work counted, each through a C function of its own.
KINDS = {
    "result": "building the TaskResult task_started carries (Django's dataclass)",
    "signals": "task_started and task_finished sent, Django's receivers run",
    "normalize": "normalize_json of the return value",
    "connections": "reset_queries, close_old_connections (before, after, per batch)",
}
PREFIX = "threadmill_measure_"
#: A module of one function a kind, ``KIND(function, args, kwargs)``: calls it, only that.
SOURCE = "\n".join(
    [
        "#include <Python.h>",
        *(
            f"static PyObject *{PREFIX}{kind}(PyObject *self, PyObject *const *a, Py_ssize_t n)"
            " { return PyObject_Call(a[0], a[1], a[2]); }"
            for kind in KINDS
        ),
        "static PyMethodDef methods[] = {",
        *(
            f'    {{"{kind}", (PyCFunction)(void (*)(void)){PREFIX}{kind}, METH_FASTCALL, NULL}},'
            for kind in KINDS
        ),
        "    {NULL}};",
        'static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "measure", NULL, -1, methods};',
        "PyMODINIT_FUNC PyInit_measure(void) { return PyModule_Create(&module); }",
        "",
    ]
)


def build_library(folder: Path) -> Path:
    """The C module that calls go through to be counted, compiled in `folder`.

    Not a tail call (``-fno-optimize-sibling-calls``): callgrind must see
    each function return after the call it makes.
    """
    source, library = folder / "measure.c", folder / "measure.so"
    source.write_text(SOURCE)
    include = sysconfig.get_paths()["include"]
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-fno-optimize-sibling-calls",
                    f"-I{include}", "-o", str(library), str(source)], check=True)  # fmt: skip
    return library


def _load(library_path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location("measure", library_path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _through(library: ModuleType, kind: str, func: Callable[..., Any]) -> Callable[..., Any]:
    measure = getattr(library, kind)

    def call(*args: Any, **kwargs: Any) -> Any:
        return measure(func, args, kwargs)

    return call


def _route(library_path: str) -> None:
    """Make the adapter's Django calls through the counted C functions (this process only)."""
    from django.tasks.signals import task_finished, task_started

    from threadmill_django import observer, results, runner

    library = _load(library_path)
    results.DjangoTaskResult = _through(library, "result", results.DjangoTaskResult)
    for signal in (task_started, task_finished):
        signal.send = _through(library, "signals", signal.send)  # type: ignore[method-assign]
    runner.normalize_json = _through(library, "normalize", runner.normalize_json)
    for module in (runner, observer):
        module.close_old_connections = _through(
            library, "connections", module.close_old_connections
        )
    runner.reset_queries = _through(library, "connections", runner.reset_queries)


def _child(url: str, n: int, library_path: str) -> None:
    worker = instructions.prepared_drain("threadmill_django", url, n)
    _route(library_path)
    instrument(os.getpid(), True)
    try:
        ran = worker.run(burst=True)
    finally:
        instrument(os.getpid(), False)
    if ran != n:
        raise RuntimeError(f"the worker ran {ran} of {n} tasks")


NAMED = re.compile(r"^(c?)fn=\((\d+)\)(?: (.*))?$")


def inclusive(callgrind_out: str) -> dict[str, int]:
    """The instructions spent inside each counted C function, from callgrind's output.

    A call's cost is the line after its ``calls=`` line; functions are
    named by number once named (``fn=(N) name``, ``cfn=(N) name``).
    """
    names: dict[str, str] = {}
    costs: collections.Counter[str] = collections.Counter()
    callee = ""
    lines = iter(callgrind_out.splitlines())
    for line in lines:
        found = NAMED.match(line)
        if found:
            called, number, name = found.groups()
            if name is not None:
                names[number] = name
            if called:
                callee = names[number]
        elif line.startswith("calls=") and callee.startswith(PREFIX):
            costs[callee.removeprefix(PREFIX)] += int(next(lines).split()[1])
    return dict(costs)


def _count_kinds(n: int, library: Path, folder: Path) -> dict[str, float]:
    out = folder / "callgrind.out"
    with RedisServer() as server:
        command = [*CALLGRIND[:2], f"--callgrind-out-file={out}", "--instr-atstart=no",
                   f"--toggle-collect={PREFIX}*", "--compress-strings=yes", sys.executable,
                   "-m", "benchmarks.django_bench.mandated", "--child", server.url, str(n),
                   str(library)]  # fmt: skip
        done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the client failed: {done.stderr[-800:]!r}")
    return {kind: count / n for kind, count in inclusive(out.read_text()).items()}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.django_bench.mandated")
    parser.add_argument("--tasks", type=int, default=1280, help="tasks a drain (%(default)s)")
    parser.add_argument("--runs", type=int, default=3, help="drains counted each way")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        url, n, library_path = args.child
        _child(url, int(n), library_path)
        return 0
    with tempfile.TemporaryDirectory(prefix="threadmill-mandated-") as name:
        folder = Path(name)
        library = build_library(folder)
        runs = [_count_kinds(args.tasks, library, folder) for _ in range(args.runs)]
    kinds = {kind: statistics.median(run.get(kind, 0.0) for run in runs) for kind in KINDS}
    ways = {way: statistics.median(instructions.count(way, args.tasks) for _ in range(args.runs))
            for way in instructions.WAYS}  # fmt: skip
    core, django = ways["threadmill"], ways["threadmill_django"]
    mandated = sum(kinds.values())
    print("| per task of the drain | client instructions (median) |")
    print("| --- | ---: |")
    print(f"| threadmill's own API | {core:,.0f} |")
    print(f"| through Django (threadmill_django) | {django:,.0f} |")
    print(f"| added by the adapter | {django - core:,.0f} |")
    for kind, what in KINDS.items():
        print(f"| - in Django: {what} | {kinds[kind]:,.0f} |")
    print(f"| - in Django, all of the above | {mandated:,.0f} |")
    print(f"| - the adapter's own (the rest) | {django - core - mandated:,.0f} |")
    print(f"\nthreadmill / threadmill_django = {core / django:.3f}; with only the Django work "
          f"above added: {core / (core + mandated):.3f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
