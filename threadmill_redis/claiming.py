"""Claims (`Backend.claim`) and the reaper's claims (`Backend.claim_expired`), a part of
`RedisBackend`: leases from claim rows, poison quarantined on the way."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

from threadmill_core import codec
from threadmill_core.checks import check_limit, queue_names, ttl_ms
from threadmill_core.errors import PayloadError, TaskQuarantined
from threadmill_core.models import Lease, TaskError, TaskResult
from threadmill_redis.host import Host
from threadmill_redis.replies import Row, encode_worker, parse_state

log = logging.getLogger("threadmill_redis")


def new_nonce() -> str:
    """The nonce of one script call's tokens: 48 random bits in hex, so a token repeated after a
    rollback of the data (which repeats the counter's numbers) needs two calls to draw the same
    bits (see ``claim.lua``)."""
    return secrets.token_hex(6)


def new_receipt_name() -> str:
    """The name of one claim call's receipt (see `Keys.claim_receipt`): 128 random bits in hex."""
    return secrets.token_hex(16)


class RedisClaims(Host):
    """`claim` and `claim_expired`, each one script call unless poison took places."""

    def claim(
        self, queues: Sequence[str], *, worker: str, lease_ttl: timedelta, limit: int = 1
    ) -> list[Lease]:
        names = queue_names(queues)
        head = [encode_worker(worker), ttl_ms("lease_ttl", lease_ttl)]
        check_limit(limit)
        if not names:
            return []

        def take(want: int) -> list[Row]:
            # A receipt per call (not per repeat): a repeat after a lost reply
            # is answered with the leases the first send granted.
            receipt = self.keys.claim_receipt(new_receipt_name())
            args = [*head, want, new_nonce(), *names]
            reply = self._run("claim", args, repeatable=True, receipt=receipt)
            return [Row.parse(row) for row in reply]

        return self._filled(limit, take)

    def _filled(self, limit: int, take: Callable[[int], list[Row]]) -> list[Lease]:
        """Leases from claim rows of `take(n)` calls, poison quarantined and not counted.

        One call unless a claim found poison: then the rest of `limit` is
        claimed again, so poison never costs a worker its share of tasks.
        """
        leases: list[Lease] = []
        while len(leases) < limit:
            want = limit - len(leases)
            rows = take(want)
            poison = []
            for row in rows:
                try:
                    leases.append(row.lease())
                except PayloadError as exc:
                    poison.append((row, exc))
            if not poison or len(rows) < want:
                if poison:
                    self._quarantine(poison)
                break
            self._quarantine(poison)
        return leases

    def _quarantine(self, poison: Sequence[tuple[Row, PayloadError]]) -> None:
        """Finalize undecodable claimed tasks FAILED (fenced by the claim's token).

        The payload is replaced by a readable stand-in with an empty
        ``task_path``, so the task can still be read, counted and purged.
        """
        args: list[Any] = [self._ttl_ms, self.options.prune_batch]
        for row, exc in poison:
            log.error("quarantining task %s as FAILED: %s", row.id, exc)
            state = parse_state(row.state or b"")
            try:
                errors = codec.decode_errors(row.errors) if row.errors else ()
            except PayloadError:
                errors = ()
            message = f"the stored payload could not be decoded, so the task cannot run: {exc}"
            error = TaskError.from_exception(TaskQuarantined(message))
            stand_in = TaskResult(
                id=row.id, task_path="", queue=state.queue, priority=state.priority
            )
            args += [row.id, state.token or "", codec.encode_record(stand_in)]
            args.append(codec.encode_errors((*errors, error)))
        self._run("quarantine", args, repeatable=True)

    def claim_expired(self, *, limit: int, claim_ttl: timedelta) -> list[Lease]:
        """One ``claim_expired.lua`` (more only to replace quarantined poison); then the
        queues of the tasks it gave back are woken, and the give-backs logged."""
        ttl = ttl_ms("claim_ttl", claim_ttl)
        given_back: list[str] = []

        def take(want: int) -> list[Row]:
            reply: list[Any] = self._run(
                "claim_expired", [want, ttl, new_nonce()], repeatable=False
            )
            given_back.extend(queue.decode() for queue in reply[0])
            return [Row.parse(row) for row in reply[1:]]

        leases = self._filled(check_limit(limit), take)
        if given_back:
            log.info(
                "gave back %d expired task(s) whose start was never recorded, uncharged",
                len(given_back),
            )
            self._notify(list(dict.fromkeys(given_back)))
        return leases
