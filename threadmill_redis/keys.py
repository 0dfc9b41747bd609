"""Every Redis key threadmill uses, built here and nowhere else.

Key schema, for a namespace ``ns`` (default ``threadmill``). The ``{ns}``
hash tag puts every key of a namespace in one Redis Cluster slot, so each
script runs on one shard; scripts get every key in ``KEYS``.

Per-task data lives in namespace-wide hashes keyed by task id, so a script
that learns ids at run time (a claim, a reaper pass) still touches only keys
it declared::

    {ns}:payload      HASH  id -> the record as enqueued: codec bytes, opaque to Lua
    {ns}:state        HASH  id -> the fields scripts change, packed as `STATE_LAYOUT`
                            says: "status|priority|attempts|sort|enqueued_at|...|queue"
                            (times in server milliseconds, empty for none)
    {ns}:errors       HASH  id -> the task's errors, codec bytes (absent, or [], for none)
    {ns}:workers      HASH  id -> worker ids, each as b"<byte length>:<id>", concatenated
    {ns}:result       HASH  id -> the return value, codec bytes (SUCCESSFUL only; absent for None)
    {ns}:starts       HASH  id -> "<given back>|<claim>": how many expired unstarted claims
                            of the task were given back, then the token of the claim whose
                            start was recorded, "r<token>" for a reaper's claim, or empty
                            (absent for 0 and empty; deleted with the task)
    {ns}:progress         HASH  id -> the last progress stored (`Backend.record_progress`):
                                codec bytes of a `Progress`, its ``updated_at`` written by the
                                script (absent for none; kept when the task finishes, deleted
                                by requeue and with the task)
    {ns}:cancel_requests  HASH  id -> when a cancel was requested for the RUNNING task
                                (`Backend.request_cancel`), server ms; the first request
                                wins (absent for none; kept when the task finishes, deleted
                                by requeue and with the task)

Progress and cancel requests live beside the state, not in it: a claim or a
completion never writes them, stored states of earlier versions read as they
are (no field was added to `STATE_LAYOUT`), and a task without either costs
nothing but the HGET or HMGET of the scripts that report or act on them
(`extend` and `extend_many`, which tell the holder of a request; `retry`,
`release` and `claim_expired`, which finalize a task with one CANCELLED
instead of sending it back; the rows of `lib/task_row`).

A claim's start (`mark_started`) is a token in ``starts``, not a field of
the state: a claim or a decision never touches it, so a drain of short
tasks (decided before they are marked) pays nothing for it. A new token
never matches what ``starts`` holds, so every claim begins unstarted
without a write; the reaper's pass, `release` and `mark_started` read it,
and a claim reads the count of give-backs (one HMGET a batch) for its
leases. The count of give-backs outlives claims and decisions.

Scripts read and write that string with ``lib/parse_task`` and
``lib/pack_task``; a claim and a completion change it in place
(``lib/claimed_state``, ``lib/finished_state``), and tests hold both to the
pair. All of them, and `threadmill_redis.replies`, take the layout from
`STATE_LAYOUT` below (``scripts.py`` writes it into the scripts at
``--@layout``), so it is spelled once.

``sort`` is the task's place in its segment and the time every scheduling
decision reads: the entered-READY sequence for READY, else the due time,
lease deadline or finished time. It starts equal to that timestamp, but is
kept apart from the record's fields so that test support can move
scheduling (`threadmill_redis.testing.advance`) without rewriting history.

Segment views, one sorted set per status over all queues. Every member has
score 0 and is ``<queue length, 8 hex><queue><19-digit sort key><id>``
(`QUEUE_LENGTH_DIGITS`, `SORT_KEY_DIGITS`, `PRIORITY_DIGITS`), so
one lexicographic range is one queue's segment in segment order, and no
score ever has to pack priority, time and sequence into a double::

    {ns}:ready        ZSET  sort key: 100 - priority (3 digits), then sort (16)
    {ns}:deferred     ZSET  sort key: sort = due time (run_after) ms
    {ns}:running      ZSET  sort key: sort = lease deadline ms
    {ns}:successful   ZSET  sort key: sort = finished_at ms
    {ns}:failed       ZSET  sort key: sort = finished_at ms
    {ns}:cancelled    ZSET  sort key: sort = finished_at ms

Time indexes over all queues, for maintenance. Scores are milliseconds
(exact: far below 2^53); ties fall to the member, the id, which is exactly
the protocol's order::

    {ns}:due          ZSET  DEFERRED id -> due time ms        (promote_due)
    {ns}:leases       ZSET  RUNNING id -> lease deadline ms   (claim_expired)
    {ns}:finished     ZSET  terminal id -> finished time ms   (result expiry)

Bookkeeping and wake-ups::

    {ns}:counters     HASH  seq -> last entered-READY sequence, token -> the last number
                            of a fencing token (a token is "<number>-<nonce>", the nonce
                            random text of the client's for each script call, so a rollback
                            of the data, which repeats numbers, never repeats a token)
    {ns}:queues       HASH  queue -> number of tasks stored (queues listed by counts())
    {ns}:notify:<q>   LIST  wake-up tokens for workers idle on queue q, capped
    {ns}:claim:<r>    LIST  receipt of claim call r: a base, then the ids it granted, the
                            n-th id's token being base + n and the call's nonce (a call's
                            tokens come from one counter, in order; an empty id where a
                            corrupt record took a number); expires with the leases it
                            granted (PEXPIRE lease_ms)

Telemetry (`RedisBackend.rates`): tasks that entered each queue (new ids
stored by enqueue, requeues) and finished (reached SUCCESSFUL, FAILED or
CANCELLED), counted by the script that makes the change, in one-second
buckets of the server clock. ``<second>`` is milliseconds // 1000 in
decimal, and a pair is ``<second>|<queue>`` (the queue is everything after
the first ``|``, so it may hold ``|`` itself)::

    {ns}:rates        HASH  "<pair>|e" -> tasks that entered the queue in that second,
                            "<pair>|f" -> tasks that finished in it
    {ns}:rate_index   ZSET  pair -> its second, one member per pair counted

Schedules (`Backend.set_schedule_paused`; `threadmill_redis.pauses`)::

    {ns}:schedules    HASH  schedule name -> "<1 paused, 0 not>|<since, server ms>"

Live workers (`Backend.register_worker`; `threadmill_redis.live_workers`)::

    {ns}:live_workers        HASH  worker id -> "<last seen, server ms>|<packed entry>"
    {ns}:live_worker_expiry  ZSET  worker id -> when its entry lapses, server ms

A script aggregates its counts per queue first, so it sends one HINCRBY per
queue and kind, never one per task. Only a script that starts a new pair
writes the index, and only then does it delete pairs older than
``RATE_HISTORY`` (an hour) with their fields: oldest first, at most 100 more
than it started, so no call does unbounded work and deletion keeps pace with
creation. The history is bounded by what an hour (two, while deletion
catches up after a busier hour) of traffic leaves; pairs that age out while
nothing is counted wait for the next count, unread. `rates` reads the
pairs of its window from the index and their fields with HMGET, nothing
outside the window.

Nothing else has a TTL: eviction could not tell a lease from a cache entry.
A receipt only lets a claim repeated after a lost reply be answered with the
same leases; were it evicted, the repeat would claim afresh and the leases
first granted would lapse and be reaped, nothing worse. Expired results are
deleted by the scripts, oldest first, in bounded batches.
"""

from __future__ import annotations

from threadmill_core.errors import InvalidOption

#: The keys that make up a namespace's task store, in the order scripts that
#: take the whole store declare them (KEYS[1] to KEYS[16]).
STORE = (
    "payload",
    "state",
    "errors",
    "workers",
    "result",
    "ready",
    "deferred",
    "running",
    "successful",
    "failed",
    "cancelled",
    "due",
    "leases",
    "finished",
    "counters",
    "queues",
)

#: The telemetry keys, which the scripts that count declare after the store
#: (KEYS[17] and KEYS[18]) and `rates.lua` declares alone.
TELEMETRY = ("rates", "rate_index")

#: Recorded starts: declared by the scripts that read them (`mark_started`,
#: `release`, `claim_expired`, `claim`, `expire_leases`) and by those that delete
#: tasks (lib/delete_task).
STARTS = ("starts",)

#: Progress and cancel requests (see above): declared by the scripts that read or
#: write them, and by those that delete tasks (lib/delete_task) or answer rows.
CONTROL = ("progress", "cancel_requests")

#: The schedules' pause states: declared by ``set_schedule_paused.lua`` alone.
SCHEDULES = ("schedules",)

#: The live workers' entries: declared by their own scripts (and the test clock's).
LIVE_WORKERS = ("live_workers", "live_worker_expiry")


#: The packed state string of ``{ns}:state``: its fields in order, joined by
#: '|', each with the Lua pattern its text matches. The queue comes last, as
#: it may itself hold '|'. Number fields are decimal text; an empty field is
#: none (no time, no token). ``sort`` is the task's place in its segment (see
#: above). Python reads it with `threadmill_redis.replies.parse_state`; Lua
#: gets ``STATE_PATTERN``, ``STATE_FIELDS`` and ``STATE`` (each field's place)
#: from ``--@layout`` (see `threadmill_redis.scripts`).
STATE_LAYOUT: tuple[tuple[str, str], ...] = (
    ("status", "%u+"),
    ("priority", "%-?%d+"),
    ("attempts", "%d+"),
    ("sort", "%-?%d+"),
    ("enqueued_at", "%d*"),
    ("run_after", "%-?%d*"),
    ("started_at", "%d*"),
    ("last_attempted_at", "%d*"),
    ("finished_at", "%d*"),
    ("deadline", "%d*"),
    ("token", "[^|]*"),
    ("queue", ".*"),
)

#: The names of the state's fields, in order.
STATE_FIELDS = tuple(name for name, _ in STATE_LAYOUT)

#: A segment member: the queue's byte length in this many hex digits, the
#: queue, a sort key of `SORT_KEY_DIGITS` decimal digits, then the task id.
QUEUE_LENGTH_DIGITS = 8

#: The digits of a segment member's sort key: the time (ms) of a timed
#: segment; for READY, 100 - priority in `PRIORITY_DIGITS` digits, then the
#: entered-READY sequence in the rest.
SORT_KEY_DIGITS = 19

#: The digits of 100 - priority that lead a READY member's sort key.
PRIORITY_DIGITS = 3


def check_namespace(namespace: object) -> str:
    """Return `namespace` if it can be a hash tag, else raise `InvalidOption`."""
    if not isinstance(namespace, str) or not namespace or "{" in namespace or "}" in namespace:
        raise InvalidOption(
            f"namespace must be a non-empty str without braces (it becomes the hash tag "
            f"{{namespace}}), got {namespace!r}"
        )
    return namespace


class Keys:
    """The keys of one namespace."""

    def __init__(self, namespace: str) -> None:
        self.namespace = check_namespace(namespace)
        self.prefix = f"{{{namespace}}}:"
        self._store = {
            name: self.prefix + name
            for name in STORE + TELEMETRY + STARTS + CONTROL + SCHEDULES + LIVE_WORKERS
        }

    def store(self, name: str) -> str:
        """The namespace-wide key called `name` (in `STORE`, `TELEMETRY`, `STARTS`, `CONTROL`,
        `SCHEDULES`, `LIVE_WORKERS`)."""
        return self._store[name]

    def notify(self, queue: str) -> str:
        """The list idle workers of `queue` block on."""
        return f"{self.prefix}notify:{queue}"

    def claim_receipt(self, request: str) -> str:
        """The receipt of one claim call, `request` being unique to that call."""
        return f"{self.prefix}claim:{request}"

    def pattern(self) -> str:
        """A SCAN pattern matching every key of the namespace (tests and cleanup only)."""
        escaped = "".join(f"\\{c}" if c in "*?[]\\" else c for c in self.prefix)
        return escaped + "*"
