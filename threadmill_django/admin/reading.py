"""What the admin pages read, all through threadmill's inspector API: aliases, pages, searches.

A page of a segment is one `peek` at an offset (`inspector.list_tasks`), so
its cost does not grow with the segment: the 1,000th page of a queue of
100,000 tasks costs what the first does. The number of pages comes from the
queue's counts (`Broker.counts`), never from reading the records.

A search in a segment reads it a page of `SEARCH_PAGE` records at a time,
at most `SEARCH_LIMIT` records, and says so when it stopped there; a task
with a known id (whole, or its start or end) is found anywhere with
`inspector.find_task`, whose cost its module states.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import timedelta

import attrs
from django.conf import settings
from django.tasks import task_backends
from django.tasks.exceptions import InvalidTaskBackend

from threadmill_core.broker import Broker
from threadmill_core.cli.inspector import Listed, Overview, QueueStats, list_tasks, overview
from threadmill_core.errors import ThreadmillError
from threadmill_core.models import QueueCounts, QueueRates, TaskResult, TaskResultStatus
from threadmill_core.urls import redact
from threadmill_django.backend import TaskBackend

#: Tasks on one page of a list.
PER_PAGE = 100
#: Records one `peek` of a search reads.
SEARCH_PAGE = 500
#: The most records of a segment one search reads.
SEARCH_LIMIT = 10_000
#: The rates' window: the last hour.
RATES_WINDOW = timedelta(hours=1)


def served_aliases() -> list[str]:
    """The ``TASKS`` aliases whose backend is threadmill_django's, in the setting's order.

    An alias whose backend cannot be built (a wrong ``BACKEND``) is left out:
    it is not threadmill's to show, and Django's checks report it.
    """
    configured: dict[str, object] = getattr(settings, "TASKS", {})
    served = []
    for alias in configured:
        try:
            backend = task_backends[alias]
        except InvalidTaskBackend:
            continue
        if isinstance(backend, TaskBackend):
            served.append(alias)
    return served


def backend_of(alias: str) -> TaskBackend | None:
    """The alias's backend if threadmill_django serves it, else None."""
    if alias not in served_aliases():
        return None
    backend = task_backends[alias]
    assert isinstance(backend, TaskBackend)
    return backend


@attrs.frozen(kw_only=True)
class AliasOverview:
    """One alias on the overview: its queues' counts and rates, or why they cannot be read."""

    alias: str
    #: The URL with any password hidden, or "" when the settings are wrong.
    url: str
    queues: tuple[QueueStats, ...] = ()
    total: QueueStats | None = None
    rates_known: bool = False
    window: timedelta = RATES_WINDOW
    #: Why nothing could be read (wrong settings, backend unreachable); empty when read.
    problem: str = ""


def alias_overview(alias: str, backend: TaskBackend) -> AliasOverview:
    """The alias's queues (the configured ones first, zero when empty) with counts and rates."""
    if backend.settings is None:
        return AliasOverview(alias=alias, url="", problem="; ".join(backend.problems))
    url = redact(backend.settings.url)
    try:
        read = overview(backend.broker, RATES_WINDOW)
    except ThreadmillError as exc:
        return AliasOverview(alias=alias, url=url, problem=f"{type(exc).__name__}: {exc}")
    queues = {stats.queue: stats for stats in read.queues}
    for queue in backend.settings.queues:
        queues.setdefault(queue, _empty(queue, read))
    order = [*backend.settings.queues, *sorted(set(queues) - set(backend.settings.queues))]
    shown = Overview(
        queues=tuple(queues[name] for name in order),
        window=read.window,
        rates_known=read.rates_known,
        taken_at=read.taken_at,
    )
    return AliasOverview(
        alias=alias,
        url=url,
        queues=shown.queues,
        total=shown.total(),
        rates_known=read.rates_known,
        window=read.window,
    )


def _empty(queue: str, read: Overview) -> QueueStats:
    rates = QueueRates(queue=queue, window=read.window) if read.rates_known else None
    return QueueStats(counts=QueueCounts(queue=queue), rates=rates)


@attrs.frozen(kw_only=True)
class Page:
    """One page of a segment's list, or of the matches of a search in it."""

    items: tuple[Listed, ...]
    #: 1-based; the last page when a larger one was asked for.
    number: int
    pages: int
    #: Tasks in the segment (no search) or matches found (search).
    total: int
    #: A search only: records read, and whether it stopped at `SEARCH_LIMIT`.
    searched: int = 0
    capped: bool = False

    @property
    def first_index(self) -> int:
        return (self.number - 1) * PER_PAGE


def segment_count(broker: Broker, queue: str, status: TaskResultStatus) -> int:
    """How many tasks `queue` holds in `status` (zero for a queue the backend never saw)."""
    counts = broker.counts().get(queue)
    return 0 if counts is None else counts.of(status)


def segment_page(broker: Broker, queue: str, status: TaskResultStatus, number: int) -> Page:
    """Page `number` (1-based, clamped to the pages there are) of the segment: one `peek`."""
    total = segment_count(broker, queue, status)
    pages = max(1, math.ceil(total / PER_PAGE))
    number = min(max(1, number), pages)
    items = list_tasks(broker, queue, status, offset=(number - 1) * PER_PAGE, limit=PER_PAGE)
    return Page(items=tuple(items), number=number, pages=pages, total=total)


def matches(item: Listed, query: str) -> bool:
    """Whether a record's id starts or ends with `query`, or its task name contains it (any
    case). Poison never matches."""
    if not isinstance(item, TaskResult):
        return False
    piece = query.lower()
    task_id = item.id.lower()
    return task_id.startswith(piece) or task_id.endswith(piece) or piece in item.task_path.lower()


def search_segment(
    broker: Broker, queue: str, status: TaskResultStatus, query: str, number: int
) -> Page:
    """Page `number` of the segment's tasks that `matches` `query`, read from the head of the
    segment, at most `SEARCH_LIMIT` records."""
    found: list[Listed] = []
    searched = 0
    for page in _pages(broker, queue, status):
        searched += len(page)
        found.extend(item for item in page if matches(item, query))
        if searched >= SEARCH_LIMIT:
            break
    capped = searched >= SEARCH_LIMIT and segment_count(broker, queue, status) > searched
    pages = max(1, math.ceil(len(found) / PER_PAGE))
    number = min(max(1, number), pages)
    start = (number - 1) * PER_PAGE
    return Page(
        items=tuple(found[start : start + PER_PAGE]),
        number=number,
        pages=pages,
        total=len(found),
        searched=searched,
        capped=capped,
    )


def _pages(broker: Broker, queue: str, status: TaskResultStatus) -> Iterator[list[Listed]]:
    offset = 0
    while True:
        page = list_tasks(broker, queue, status, offset=offset, limit=SEARCH_PAGE)
        if page:
            yield page
        if len(page) < SEARCH_PAGE:
            return
        offset += SEARCH_PAGE
