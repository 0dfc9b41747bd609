"""The producer of one system, in a process of its own (`benchmarks.peers.own_process`).

``python -m benchmarks.peers.producer_driver NAME`` builds peer NAME of
`benchmarks.peers.REGISTRY` (threadmill from whatever checkout comes first
on the import path). Reads one JSON request a line on stdin and answers
each with one JSON line on stdout: ``{"op": "enqueue", "n": 5000}`` ->
``{"seconds": 0.61}``, timed here by the peer itself; ``enqueue_batch``
likewise; ``fill``, ``send_probe``, ``teardown``; ``setup``, which answers
where threadmill was imported from (None if it was not). A failure answers
``{"error": "..."}``; `Unsupported` is named as such.
"""

from __future__ import annotations

import json
import sys
import traceback
from typing import Any

from benchmarks.peers import Peer, Unsupported, load
from benchmarks.peers._common import redis_url


def answer(peer: Peer, request: dict[str, Any]) -> dict[str, Any]:
    op = request["op"]
    if op == "setup":
        peer.setup()
        core = sys.modules.get("threadmill_core")
        return {"threadmill_core": getattr(core, "__file__", None)}
    if op == "teardown":
        peer.teardown()
        return {}
    if op == "enqueue":
        return {"seconds": peer.enqueue(request["n"])}
    if op == "enqueue_batch":
        return {"seconds": peer.enqueue_batch(request["n"])}
    if op == "fill":
        peer.fill(request["n"])
        return {}
    if op == "send_probe":
        peer.send_probe()
        return {}
    raise ValueError(f"unknown request {op!r}")


def main(argv: list[str]) -> int:
    peer = load(argv[0] if argv else "threadmill", redis_url())
    for line in sys.stdin:
        try:
            reply = answer(peer, json.loads(line))
        except Unsupported as exc:
            reply = {"unsupported": str(exc)}
        except Exception as exc:
            reply = {"error": f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=-3)}"}
        print(json.dumps(reply), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
