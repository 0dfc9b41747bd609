"""The data structure under `MemoryBackend`: encoded tasks, indexed by segment.

Nothing here knows the protocol. An `Entry` is a task's codec bytes plus the
few fields needed to place it without decoding them (as the Redis backend
keeps its scripts' fields beside an opaque payload); a `Store` keeps every
entry in exactly one `Segment` of its queue, sorted by the entry's key.
The backend chooses keys so that segment order is the protocol's order:
``(-priority, entered_ready_seq)`` for READY and ``(ms,)`` (due time, lease
deadline or finish time) for the others, with the id breaking ties.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Iterable

import attrs

from threadmill_core.models import TaskResultStatus

SortKey = tuple[int, ...]
#: A segment position: the entry's key, then its id.
Item = tuple[SortKey, str]


@attrs.frozen(kw_only=True)
class Entry:
    """One stored task. `queue`, `priority`, `status`, `key` and `token` decide where it sits
    and who may change it, and the fields after them what an expiry of its lease costs; `data`
    is the record as the codec encoded it (or, for poison, bytes that do not decode)."""

    id: str
    queue: str
    priority: int
    status: TaskResultStatus
    key: SortKey
    data: bytes
    token: str | None = None
    #: What holds `token`: a worker's claim whose start was recorded (`started`),
    #: or a reaper's claim (`reaped`); neither for a worker's unstarted claim.
    started: bool = False
    reaped: bool = False
    #: How many expired unstarted claims of this task were given back (never reset).
    unstarted_expiries: int = 0


class Segment:
    """The items of one segment of one queue, kept sorted."""

    def __init__(self) -> None:
        self._items: list[Item] = []

    def __len__(self) -> int:
        return len(self._items)

    def add(self, item: Item) -> None:
        bisect.insort(self._items, item)

    def remove(self, item: Item) -> None:
        index = bisect.bisect_left(self._items, item)
        if index == len(self._items) or self._items[index] != item:
            raise KeyError(item)  # the index and the entries disagree: a bug here, not the caller's
        del self._items[index]

    def first(self) -> Item | None:
        return self._items[0] if self._items else None

    def up_to(self, ms: int) -> list[Item]:
        """The items whose key starts with a time at or before `ms`, in order."""
        # ((ms + 1,), "") sorts after every ((ms,), id) and before every ((ms + 1,), id).
        return self._items[: bisect.bisect_left(self._items, ((ms + 1,), ""))]

    def slice(self, offset: int, limit: int) -> list[Item]:
        return self._items[offset : offset + limit]


class Store:
    """Every entry by id, and per queue one `Segment` per status that holds any.

    A queue with no entries left has no segments and is not listed by `queues`.
    """

    def __init__(self) -> None:
        self._entries: dict[str, Entry] = {}
        self._queues: dict[str, dict[TaskResultStatus, Segment]] = {}

    def get(self, task_id: str) -> Entry | None:
        return self._entries.get(task_id)

    def __getitem__(self, task_id: str) -> Entry:
        return self._entries[task_id]

    def put(self, entry: Entry) -> None:
        """Store `entry`, replacing (and unindexing) any entry with its id."""
        old = self._entries.get(entry.id)
        if old is not None:
            self._unindex(old)
        self._entries[entry.id] = entry
        segments = self._queues.setdefault(entry.queue, {})
        segments.setdefault(entry.status, Segment()).add((entry.key, entry.id))

    def delete(self, task_id: str) -> None:
        self._unindex(self._entries.pop(task_id))

    def _unindex(self, entry: Entry) -> None:
        segments = self._queues[entry.queue]
        segment = segments[entry.status]
        segment.remove((entry.key, entry.id))
        if not segment:
            del segments[entry.status]
            if not segments:
                del self._queues[entry.queue]

    def _segment(self, queue: str, status: TaskResultStatus) -> Segment | None:
        return self._queues.get(queue, {}).get(status)

    def queues(self) -> list[str]:
        """Names of the queues holding at least one entry, sorted."""
        return sorted(self._queues)

    def count(self, queue: str, status: TaskResultStatus) -> int:
        segment = self._segment(queue, status)
        return len(segment) if segment is not None else 0

    def first(self, queue: str, status: TaskResultStatus) -> Item | None:
        segment = self._segment(queue, status)
        return segment.first() if segment is not None else None

    def slice(self, queue: str, status: TaskResultStatus, offset: int, limit: int) -> list[Item]:
        segment = self._segment(queue, status)
        return segment.slice(offset, limit) if segment is not None else []

    def up_to(self, status: TaskResultStatus, ms: int, queues: Iterable[str] | None) -> list[Item]:
        """Items of `status` keyed at or before `ms` over `queues` (all if None), merged in order.

        A snapshot: the caller may move or delete the entries while walking it.
        """
        names = self._queues if queues is None else dict.fromkeys(queues)
        found = []
        for name in names:
            segment = self._segment(name, status)
            if segment is not None:
                found.append(segment.up_to(ms))
        return list(heapq.merge(*found))

    def purge(self, queue: str, status: TaskResultStatus) -> int:
        items = self.slice(queue, status, 0, self.count(queue, status))
        for _key, task_id in items:
            self.delete(task_id)
        return len(items)
