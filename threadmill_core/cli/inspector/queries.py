"""Reading queues: counts and rates per queue (`overview`), one page of a segment (`list_tasks`).

Every function takes a `Broker` and works on any backend. Rates come from
`Backend.rates`; a backend that keeps no telemetry answers None, and rates
show as unknown, never as zero.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import attrs

from threadmill_core.broker import Broker
from threadmill_core.errors import PayloadError
from threadmill_core.models import QueueCounts, QueueRates, TaskResult, TaskResultStatus

READY = TaskResultStatus.READY
DEFERRED = TaskResultStatus.DEFERRED
RUNNING = TaskResultStatus.RUNNING
SUCCESSFUL = TaskResultStatus.SUCCESSFUL
FAILED = TaskResultStatus.FAILED
CANCELLED = TaskResultStatus.CANCELLED
#: Segments in the order tables show them.
STATUSES = tuple(TaskResultStatus)


@attrs.frozen(kw_only=True)
class QueueStats:
    """One queue's counts per segment and, when the backend keeps telemetry, its rates."""

    counts: QueueCounts
    #: None when the backend keeps no telemetry (rates unknown, not zero).
    rates: QueueRates | None

    @property
    def queue(self) -> str:
        return self.counts.queue


@attrs.frozen(kw_only=True)
class Overview:
    """Every queue's `QueueStats`, read at `taken_at` on the backend's clock."""

    queues: tuple[QueueStats, ...]
    window: timedelta
    rates_known: bool
    taken_at: datetime

    def total(self) -> QueueStats:
        """All queues added up (rates too, over the same window)."""
        fields = [s.value.lower() for s in STATUSES]
        counts = QueueCounts(
            queue="total",
            **{f: sum(getattr(q.counts, f) for q in self.queues) for f in fields},
        )
        rates = None
        if self.rates_known:
            known = [q.rates for q in self.queues if q.rates is not None]
            rates = QueueRates(
                queue="total",
                window=max((r.window for r in known), default=self.window),
                entered=sum(r.entered for r in known),
                finished=sum(r.finished for r in known),
            )
        return QueueStats(counts=counts, rates=rates)


def overview(broker: Broker, window: timedelta) -> Overview:
    """Counts and rates of every queue that holds a task or saw one enter or finish lately.

    A queue the backend has rates for but no task in (all purged or expired)
    is listed with zero counts; with telemetry, a queue with no rate entry
    had nothing enter or finish in the window (zero, not unknown).
    """
    taken_at = broker.backend.now()
    counts = broker.counts()
    rates = broker.backend.rates(window)
    names = sorted(set(counts) | set(rates or {}))
    queues = []
    for name in names:
        queue_rates = None
        if rates is not None:
            queue_rates = rates.get(name) or QueueRates(queue=name, window=window)
        queues.append(
            QueueStats(counts=counts.get(name) or QueueCounts(queue=name), rates=queue_rates)
        )
    return Overview(
        queues=tuple(queues), window=window, rates_known=rates is not None, taken_at=taken_at
    )


@attrs.frozen(kw_only=True)
class Undecodable:
    """A place in a segment whose stored bytes do not decode (poison); `message` names the task."""

    position: int
    message: str


Listed = TaskResult | Undecodable


def list_tasks(
    broker: Broker, queue: str, status: TaskResultStatus, *, offset: int = 0, limit: int = 20
) -> list[Listed]:
    """One page of a segment, in segment order.

    A backend's `peek` raises `PayloadError` for a whole page when one record
    in it is poison; then the page is read again one record at a time, so
    every other record still shows, and the poison shows as `Undecodable`.
    """
    try:
        return list(broker.peek(queue, status, offset=offset, limit=limit))
    except PayloadError:
        pass
    listed: list[Listed] = []
    for position in range(offset, offset + limit):
        try:
            one = broker.peek(queue, status, offset=position, limit=1)
        except PayloadError as exc:
            listed.append(Undecodable(position=position, message=str(exc)))
            continue
        if not one:
            break
        listed.extend(one)
    return listed
