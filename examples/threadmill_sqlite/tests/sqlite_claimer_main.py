"""A claiming process for the multi-process tests: ``python sqlite_claimer_main.py URL NAME``.

Waits for a line on stdin (so every claimer starts at once), connects, claims and
completes until the queues are empty, with batch sizes 1 to 4 in turn, and
prints the ids it claimed as one JSON list.
"""

from __future__ import annotations

import itertools
import json
import sys
from datetime import timedelta

import attrs
from threadmill_core import TaskResultStatus, connect
from threadmill_core.models import Decision


def main(url: str, name: str) -> None:
    claimed: list[str] = []
    sys.stdin.readline()
    with connect(url) as broker:
        backend = broker.backend
        for limit in itertools.cycle((1, 2, 3, 4)):
            leases = backend.claim(
                ["high", "default"], worker=name, lease_ttl=timedelta(hours=1), limit=limit
            )
            if not leases:
                break
            claimed += [lease.task_id for lease in leases]
            backend.decide_many(
                [
                    Decision(
                        lease=lease,
                        record=attrs.evolve(
                            lease.record, status=TaskResultStatus.SUCCESSFUL, return_value=name
                        ),
                    )
                    for lease in leases
                ]
            )
    print(json.dumps(claimed), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
