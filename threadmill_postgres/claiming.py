"""`PostgresBackend.claim` and `claim_expired`: taking tasks, a mixin of its own.

A claim is one statement (sql/queries/working.sql, ``claim``) that promotes
the due DEFERRED tasks of its queues and takes the best READY ones. A claim
whose reply was lost is repeated through its receipt (``claim_burn``, then
``claim_found``): the leases its first send granted are found and returned,
or that send is made void, so no task is claimed by a reply nobody read.
The reaper's pass (``claim_expired``, sql/queries/maintenance.sql) is
repeated as it is: it takes only what is expired now.

Poison: a claimed row that does not decode is never returned. It is
finalized FAILED (``quarantine``) and the rest of the claim's `limit` is
claimed again, so poison never costs a worker its share of tasks.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from threadmill_core.checks import check_limit, queue_names, ttl_ms
from threadmill_core.errors import PayloadError
from threadmill_core.models import Lease
from threadmill_postgres import rows
from threadmill_postgres.connection import REPEATS, Failure, Rows

if TYPE_CHECKING:
    from threadmill_postgres.connection import Database
    from threadmill_postgres.listener import Listener
    from threadmill_postgres.queries import Statements

log = logging.getLogger("threadmill_postgres")

#: How many expired leases a reaper pass may give back beyond its `limit` of
#: claims in one statement; a pass that meets more goes on in another.
GIVE_BACK_SCAN = 256


class PostgresClaims:
    """`claim` and `claim_expired` for `PostgresBackend`, which mixes this in."""

    if TYPE_CHECKING:
        db: Database
        sql: Statements
        channel: str
        _listener: Listener | None
        _marks: threading.local

    def claim(
        self, queues: Sequence[str], *, worker: str, lease_ttl: timedelta, limit: int = 1
    ) -> list[Lease]:
        names = queue_names(queues)
        worker = rows.check_worker(worker)
        held_ms = ttl_ms("lease_ttl", lease_ttl)
        check_limit(limit)
        names = [name for name in names if rows.storable(name)]  # a NUL-named queue holds nothing
        listener = self._listener
        # Wake-ups from now on count for this thread's next wait (see listener.Listener.wait).
        self._marks.mark = None if listener is None else listener.mark()
        if not names:
            return []

        def take(want: int) -> tuple[Rows, bool]:
            got = self._claim_rows(names, worker, held_ms, want)
            return got, len(got) == want

        return self._filled(limit, take)

    def _claim_rows(self, names: list[str], worker: str, ttl_ms: int, limit: int) -> Rows:
        """One claim's rows; after a lost reply, the receipt decides (see the module doc)."""
        request = uuid.uuid4().hex
        params = {
            "queues": names,
            "worker": worker,
            "ttl": ttl_ms,
            "limit": limit,
            "request": request,
            "channel": self.channel,
        }
        for attempt in range(REPEATS + 1):
            try:
                return self.db.attempt(self.sql.claim, params, "claim")
            except Failure as failure:
                if failure.maybe_applied:
                    found = self._claimed_before(request, ttl_ms)
                    if found is not None:
                        return found
                    request = params["request"] = uuid.uuid4().hex
                if attempt == REPEATS:
                    raise self.db.unavailable(failure, "claim") from failure.cause
                log.debug("claim: %s; repeating the call", failure)
                time.sleep(0.05 * 2**attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    def _claimed_before(self, request: str, ttl_ms: int) -> Rows | None:
        """What a claim whose reply was lost granted; None if it took nothing (and never will).

        Taking the receipt waits for that claim if it is still in flight. The
        receipt free: the claim took nothing (and now cannot commit). Taken:
        it committed, and the leases it granted that are still held come back
        (None if there are none left, so the caller claims afresh).
        """
        params = {"request": request, "ttl": ttl_ms}
        if self.db.fetch(self.sql.claim_burn, params, what="claim", repeatable=True):
            return None
        found = self.db.fetch(self.sql.claim_found, params, what="claim", repeatable=True)
        log.debug("claim: the first send of a repeated claim had granted %d leases", len(found))
        return found or None

    def _filled(self, limit: int, take: Callable[[int], tuple[Rows, bool]]) -> list[Lease]:
        """Leases from the rows of `take(n)` calls, poison quarantined and not counted.

        `take(n)` claims up to n and says whether more may be left. One call
        unless poison was found (or the call could not look at everything):
        then the rest of `limit` is claimed again, so poison never costs a
        worker its share of tasks.
        """
        leases: list[Lease] = []
        while len(leases) < limit:
            got, more = take(limit - len(leases))
            poison: list[tuple[Sequence[Any], PayloadError]] = []
            for row in got:
                try:
                    leases.append(rows.lease(row))
                except PayloadError as exc:
                    poison.append((row, exc))
            if poison:
                self._quarantine(poison)
            if not more:
                break
        return leases

    def _quarantine(self, poison: Sequence[tuple[Sequence[Any], PayloadError]]) -> None:
        """Finalize undecodable claimed tasks FAILED (fenced by the claim's token)."""
        ids, tokens, payloads, errors, priorities = [], [], [], [], []
        for row, exc in poison:
            task_id, queue = row[rows.LEASE_ID], row[rows.LEASE_QUEUE]
            log.error("quarantining task %s of queue %r as FAILED: %s", task_id, queue, exc)
            made = rows.stand_in(row, exc)
            ids.append(task_id)
            tokens.append(row[rows.LEASE_TOKEN])
            payloads.append(made[0])
            errors.append(made[1])
            priorities.append(made[2])
        params = {"ids": ids, "tokens": tokens, "payloads": payloads, "errors": errors,
                  "priorities": priorities}  # fmt: skip
        self.db.fetch(self.sql.quarantine, params, what="quarantine", repeatable=True)

    def claim_expired(self, *, limit: int, claim_ttl: timedelta) -> list[Lease]:
        check_limit(limit)
        held_ms = ttl_ms("claim_ttl", claim_ttl)

        def take(want: int) -> tuple[Rows, bool]:
            scan = want + GIVE_BACK_SCAN
            params = {
                "limit": want,
                "scan": scan,
                "ttl": held_ms,
                "request": uuid.uuid4().hex,
                "channel": self.channel,
            }
            got = self.db.fetch(
                self.sql.claim_expired, params, what="claim_expired", repeatable=True
            )
            claimed = [row[1:] for row in got if row[1] is not None]
            # More may be left when the pass stopped at a bound: its scan, or its `want`-th claim.
            return claimed, got[0][0] == scan or len(claimed) == want

        return self._filled(limit, take)
