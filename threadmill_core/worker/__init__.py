"""The worker runtime: what runs tasks, and what the ``threadmill worker`` command starts.

Applications and backends do not import from here, except `Worker` (also
``from threadmill_core import Worker``). The modules, by job:

- `worker` (the `Worker` class and its run) with its task thread's steps in
  `steps`, the pure `scheduler` that decides them, `held` (what it holds),
  `execution` (one attempt), `acknowledgement` (reporting outcomes),
  `heartbeat` and `upkeep` (renewing leases, marking starts, forced stops),
  `presence` (the worker's live entry), `maintenance` (promote and reap
  passes) and `outage` (backing off while the backend is away);
- the process tree of ``threadmill worker``: `supervisor` and `pool` (the
  worker processes it forks or spawns and their exits), `process` (a worker
  process's main), `settings`, `logs`, `startup` (finding task modules),
  `child_leases` (a dead child's leases), `wakeup` (signal-safe flag),
  `scheduling` (storing the ticks of ``@periodic`` schedules), and the
  ``--metrics-port`` endpoints: `monitor`, `metrics` and `health`.

This package imports the protocol (the top level of `threadmill_core`) and
never the command line (`threadmill_core.cli`); tests/core/test_layers.py
keeps it so.
"""

from threadmill_core.worker.worker import Worker

__all__ = ["Worker"]
