"""What the supervisor does with the leases of a worker process that exited.

A process that exited runs nothing, so its tasks need not wait out their
leases: the supervisor expires them at once (`Backend.expire_leases`, with
the worker id it gave the process, see
`threadmill_core.worker.process.worker_id_of`) and runs a reaper pass right
after, which decides them by its usual rules: a task the process had claimed
without starting it goes back to READY uncharged, a started one meets its
retry policy. A process that exited cleanly holds no lease, and the call
finds nothing. Should the backend be unreachable, the leases run out in
their own time, as they did before.

The process's live entry (`Backend.register_worker`) goes too
(`forget_worker`): a process killed without a word could not remove it,
and ``threadmill workers`` would list it until it lapsed.
"""

from __future__ import annotations

import logging

from threadmill_core.backend import Backend
from threadmill_core.errors import BackendUnavailable


def expire_leases(backend: Backend, log: logging.Logger, index: int, worker_id: str) -> bool:
    """Expire the live leases of worker process `index` (`worker_id`), which exited; whether
    it held any (the reaper's pass is then due at once). Never raises: a failure is logged."""
    try:
        expired = backend.expire_leases(worker_id)
    except BackendUnavailable as exc:
        log.warning("worker %d exited; its leases run out in their own time (%s)", index, exc)
        return False
    except Exception:
        log.exception("worker %d exited; could not expire its leases, they run out in time", index)
        return False
    if expired:
        log.info(
            "worker %d (%s) exited holding %d lease(s): expired them for the reaper",
            index, worker_id, expired,
        )  # fmt: skip
    return expired > 0


def forget_worker(backend: Backend, log: logging.Logger, index: int, worker_id: str) -> None:
    """Remove the live entry of worker process `index` (`worker_id`), which exited (one that
    stopped cleanly removed it already: the call finds nothing). Never raises: a failure is
    logged, and the entry lapses in its own time."""
    try:
        backend.unregister_worker(worker_id)
    except Exception as exc:
        log.warning(
            "worker %d exited; its live entry lapses in its own time (%s: %s)",
            index, type(exc).__name__, exc,
        )  # fmt: skip
