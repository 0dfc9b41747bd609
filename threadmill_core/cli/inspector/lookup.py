"""Finding tasks by a piece of their id: `find_task`, for the commands that take an id.

``show``, ``requeue`` and ``cancel`` take a whole id, or an abbreviation
of one: its start or its end, at least `MIN_ABBREVIATION` characters and
fewer than a whole UUID's, in any case, as long as it names one task. Ids
are UUIDv7, whose first twelve hex digits are the millisecond they were
made in, so the tasks of one batch share a long start; the end is random,
and is what ``threadmill demo`` prints (the last eight characters). An
abbreviation that names several tasks names none: the caller lists the
matches and acts on none of them.

Cost: the storage interface finds a task by its whole id only
(`Backend.get`, one round trip, which is tried first, so a whole id costs
no more than it did). An abbreviation is looked up over the interface's
reads: one `counts`, then every non-empty segment of every queue read a
page of `PAGE_SIZE` records at a time (`peek`), stopping once more than
`MAX_MATCHES` tasks match. So an abbreviation that matches one task or none
reads every stored record once: fine for thousands of tasks, slow for
millions (give the whole id there). A task that moves between segments
while they are read may be missed; poison (records that do not decode) is
skipped.
"""

from __future__ import annotations

import attrs

from threadmill_core.broker import Broker
from threadmill_core.cli.inspector.queries import STATUSES, list_tasks
from threadmill_core.models import TaskResult

#: The fewest characters an abbreviation may have; a shorter one matches only a whole id.
MIN_ABBREVIATION = 4
#: An abbreviation is shorter than this, a UUID's length: a whole id that no task has is
#: not looked for as a piece of a longer one (that would read every record for nothing).
WHOLE_ID_LENGTH = 36
#: How many matches an ambiguous abbreviation lists; the search stops at one more.
MAX_MATCHES = 10
#: How many records each `peek` of the search reads.
PAGE_SIZE = 500


@attrs.frozen(kw_only=True)
class Found:
    """What `find_task` found for `given`: one task, none, or several (ambiguous)."""

    given: str
    #: The tasks matched (for a whole id, the one it names), at most `MAX_MATCHES` + 1.
    matches: tuple[TaskResult, ...]

    @property
    def task_id(self) -> str | None:
        """The id of the one task `given` names; None when none or several match."""
        return self.matches[0].id if len(self.matches) == 1 else None

    def ambiguity(self) -> str:
        """The matches of an ambiguous `given`, in one sentence: each id, queue and status."""
        listed = ", ".join(
            f"{m.id} ({m.queue}, {m.status.value})" for m in self.matches[:MAX_MATCHES]
        )
        more = " and more" if len(self.matches) > MAX_MATCHES else ""
        return (
            f"{self.given!r} starts or ends {len(self.matches)}{'+' if more else ''} task ids: "
            f"{listed}{more}; give more of the id"
        )


def find_task(broker: Broker, given: str) -> Found:
    """The task whose id is `given`, or starts or ends with it (any case); see the module doc.

    A whole id is one `get`. `PayloadError` propagates when the task `given`
    names exactly is poison; poison met while searching is skipped.
    """
    record = broker.backend.get(given)
    if record is not None:
        return Found(given=given, matches=(record,))
    return search(broker, given)


def search(broker: Broker, given: str) -> Found:
    """The tasks whose ids start or end with `given` (any case), for a `given` that is no
    whole id; none when it has fewer than `MIN_ABBREVIATION` characters or `WHOLE_ID_LENGTH`
    or more (no read then). See the module doc's cost."""
    if not MIN_ABBREVIATION <= len(given) < WHOLE_ID_LENGTH:
        return Found(given=given, matches=())
    piece = given.lower()
    matches: list[TaskResult] = []
    for queue, counts in sorted(broker.counts().items()):
        for status in STATUSES:
            held = counts.of(status)
            for offset in range(0, held, PAGE_SIZE):
                for item in list_tasks(broker, queue, status, offset=offset, limit=PAGE_SIZE):
                    if not isinstance(item, TaskResult):
                        continue
                    task_id = item.id.lower()
                    if task_id.startswith(piece) or task_id.endswith(piece):
                        matches.append(item)
                        if len(matches) > MAX_MATCHES:
                            return Found(given=given, matches=tuple(matches))
    return Found(given=given, matches=tuple(matches))
