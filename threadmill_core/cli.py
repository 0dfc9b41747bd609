"""The ``threadmill`` command."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from threadmill_core.errors import ThreadmillError


def _demo(args: argparse.Namespace) -> int:
    from threadmill_core.demo import run_demo
    from threadmill_core.models import TaskResultStatus

    logging.basicConfig(level=logging.ERROR if not args.verbose else logging.INFO)
    final = run_demo()
    expected = {TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED}
    return 0 if all(r.status in expected for r in final) else 1


def _backends(args: argparse.Namespace) -> int:
    from threadmill_core.plugins import KNOWN_EXTRAS, installed_backends

    rows = installed_backends()
    width = max([len(r.scheme) for r in rows] + [6]) + 3
    print(f"{'scheme':<{width}} {'from':<28} description")
    for row in rows:
        print(f"{row.scheme + '://':<{width}} {row.source:<28} {row.description}")
    installed = {r.scheme for r in rows}
    missing = sorted({extra for scheme, extra in KNOWN_EXTRAS.items() if scheme not in installed})
    for extra in missing:
        print(f"(more with: pip install 'threadmill[{extra}]')")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="threadmill", description="A durable task queue with a pluggable broker."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = commands.add_parser(
        "demo",
        help="run a short tour on the in-memory backend",
        description="Enqueue a batch of tasks on the in-memory backend and run a worker on "
        "them: successes, a retry with backoff, a permanent failure, and a lease that "
        "expires when its worker dies and is recovered by the reaper.",
    )
    demo.add_argument("-v", "--verbose", action="store_true", help="also show the worker's log")
    demo.set_defaults(handler=_demo)

    backends = commands.add_parser(
        "backends",
        help="list installed backends",
        description="List the URL schemes of the installed backends and where each comes from.",
    )
    backends.set_defaults(handler=_backends)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args))
    except ThreadmillError as exc:
        print(f"threadmill: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
