"""The producer of `benchmarks.peers.checkout.CheckoutPeer`, in a process of its own.

Run with the checkout's threadmill first on the import path. Reads one JSON
request a line on stdin and answers each with one JSON line on stdout:
``{"op": "enqueue", "n": 5000}`` -> ``{"seconds": 0.61}``, timed here as
`ThreadmillPeer` times it; ``enqueue_batch`` likewise; ``send_probe``,
``teardown``; ``setup``, which answers where threadmill was imported from.
A failure answers ``{"error": "..."}``.
"""

from __future__ import annotations

import json
import sys
import traceback
from typing import Any

import threadmill_core
from benchmarks.peers._common import redis_url
from benchmarks.peers.threadmill_peer import ThreadmillPeer


def answer(peer: ThreadmillPeer, request: dict[str, Any]) -> dict[str, Any]:
    op = request["op"]
    if op == "setup":
        peer.setup()
        return {"threadmill_core": threadmill_core.__file__}
    if op == "teardown":
        peer.teardown()
        return {}
    if op == "enqueue":
        return {"seconds": peer.enqueue(request["n"])}
    if op == "enqueue_batch":
        return {"seconds": peer.enqueue_batch(request["n"])}
    if op == "send_probe":
        peer.send_probe()
        return {}
    raise ValueError(f"unknown request {op!r}")


def main() -> int:
    peer = ThreadmillPeer(redis_url())
    for line in sys.stdin:
        try:
            reply = answer(peer, json.loads(line))
        except Exception as exc:
            reply = {"error": f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=-3)}"}
        print(json.dumps(reply), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
