"""Every SQL statement the backend runs, one per operation, each documented here.

Each state change is one statement, run in autocommit mode, so it is one
transaction and one commit however many tasks it touches: a data-modifying
``WITH`` query whose parts lock, change, count and announce together. The
operator's rarer actions (`requeue`, `cancel`, `purge`) lock and read in one
statement and change in another, inside one explicit transaction, because
the record must be decoded in Python before anything changes.

Conventions, which every statement keeps:

- ``{s}`` is the namespace's schema, quoted (`Statements` fills it in);
  parameters are psycopg's ``%(name)s``. Arrays are unnested ``WITH
  ORDINALITY``, so ``n`` is each item's place in the call, and answers come
  back ordered by it.
- ``now`` is the one clock reading, ``{s}.now_ms()`` (the database's clock at
  the transaction's start), made once per statement.
- Tokens are checked in the statement that applies the change, against the
  row as locked: ``FOR UPDATE`` waits for a change in flight and then sees
  its result, so a decision racing the reaper (or its own lost first send)
  is judged on what was committed. Rows that several workers compete for
  (READY, due DEFERRED, expired RUNNING) are taken with ``SKIP LOCKED``;
  rows a caller names by id are locked in id order, so two batches can
  never deadlock on each other.
- Entering READY draws from the ``ready_order`` sequence. Several tasks
  entering in one statement draw in a `_places` block: the values drawn are
  sorted and handed out in the order the protocol gives (call order, DEFERRED
  order), which does not depend on the order the planner evaluates rows in.
- A statement that makes a task READY (or stores one) sends a NOTIFY on the
  namespace's channel with the queue name (its first 1,000 characters) as the
  payload; PostgreSQL delivers it at commit, once per queue and transaction.
- Telemetry (``rates``) is counted by the statement that makes the change,
  on a row of its own server process (``pg_backend_pid()``), so counting
  never makes two connections wait for each other; the same statement
  deletes a few rows older than an hour (`_TRIM_RATES`).
- Results past ``result_ttl`` are invisible to every read at once (`_VISIBLE`)
  and deleted, oldest first, ``prune`` at a time by the statements that
  finish tasks and by `promote_due` (`_PRUNE_RESULTS`).
"""

from __future__ import annotations

from threadmill_core.backend import RATE_HISTORY
from threadmill_core.clock import duration_ms
from threadmill_postgres.lease_expiry import EXPIRE_LEASES
from threadmill_postgres.rows import MAX_MS, MIN_MS
from threadmill_postgres.schema import quote_ident

#: Seconds of telemetry kept (see `threadmill_core.backend.RATE_HISTORY`).
RATE_HISTORY_S = duration_ms(RATE_HISTORY) // 1000

#: The columns a record is decoded from (see `rows.record`), in this order.
TASK_COLUMNS = (
    "t.id, t.queue, t.priority, t.status, t.payload, t.run_after, t.enqueued_at, t.started_at, "
    "t.last_attempted_at, t.finished_at, t.attempts, t.errors, t.worker_ids, t.return_value"
)

#: The stored milliseconds a datetime can hold: a timestamp outside them is corrupt.
_TIMES = f"{MIN_MS} AND {MAX_MS}"

#: The one clock reading of a statement.
_NOW = "now AS MATERIALIZED (SELECT {s}.now_ms() AS ms)"

#: Rows a read may see: not a result that expired.
_VISIBLE = "(t.finished_at IS NULL OR t.finished_at > now.ms - %(ttl)s)"


def _places(asked: str, name: str) -> str:
    """CTEs giving each row of `asked` (``id``, ``k``) its READY place: `name` (id, ready_order).

    One value is drawn from the sequence per row; the values are sorted and
    the smallest goes to ``k = 1``, and so on, so the places follow ``k``
    whichever order the values were drawn in.
    """
    return (
        f"{name}_drawn AS MATERIALIZED (\n"
        f"    SELECT v, row_number() OVER (ORDER BY v) AS k\n"
        f"    FROM (SELECT nextval('{{s}}.ready_order') AS v FROM {asked}) drawn\n"
        f"),\n"
        f"{name} AS MATERIALIZED (\n"
        f"    SELECT a.id, d.v AS ready_order FROM {asked} a JOIN {name}_drawn d ON d.k = a.k\n"
        f")"
    )


def _count(name: str, column: str, source: str) -> str:
    """A CTE that adds the rows of `source` (with a ``queue`` column) to ``rates.column``."""
    return (
        f"{name} AS (\n"
        f"    INSERT INTO {{s}}.rates AS r (second, queue, shard, {column})\n"
        f"    SELECT now.ms / 1000, c.queue, pg_backend_pid(), count(*)\n"
        f"    FROM ({source}) c CROSS JOIN now GROUP BY now.ms, c.queue\n"
        f"    ON CONFLICT (second, queue, shard)\n"
        f"        DO UPDATE SET {column} = r.{column} + EXCLUDED.{column}\n"
        f")"
    )


def _notify(source: str) -> str:
    """A CTE ``notified`` that wakes the idle workers of every queue in `source`."""
    return (
        "notified AS (\n"
        "    SELECT pg_notify(%(channel)s, left(q.queue, 1000))\n"
        f"    FROM (SELECT DISTINCT queue FROM ({source}) woken) q\n"
        ")"
    )


#: Deletes up to four telemetry rows older than the history: each counting
#: statement makes at most one row per queue, so this keeps up with them.
_TRIM_RATES = f"""rates_trimmed AS (
    DELETE FROM {{s}}.rates r WHERE r.ctid = ANY(ARRAY(
        SELECT ctid FROM {{s}}.rates
        WHERE second < (SELECT ms FROM now) / 1000 - {RATE_HISTORY_S}
        LIMIT 4 FOR UPDATE SKIP LOCKED
    ))
)"""

#: Deletes up to ``prune`` expired results, oldest first.
_PRUNE_RESULTS = """expired AS (
    DELETE FROM {s}.tasks t WHERE t.id = ANY(ARRAY(
        SELECT id FROM {s}.tasks
        WHERE finished_at <= (SELECT ms FROM now) - %(ttl)s
        ORDER BY finished_at LIMIT %(prune)s FOR UPDATE SKIP LOCKED
    ))
)"""


def _prune_receipts(limit: str) -> str:
    """A CTE that deletes up to `limit` claim receipts whose leases have expired."""
    return f"""receipts_pruned AS (
    DELETE FROM {{s}}.claims c WHERE c.request = ANY(ARRAY(
        SELECT request FROM {{s}}.claims WHERE expires <= (SELECT ms FROM now)
        ORDER BY expires LIMIT {limit} FOR UPDATE SKIP LOCKED
    ))
)"""


# --- the clock ---------------------------------------------------------------------------

NOW = "SELECT {s}.now_ms()"

# --- producing ---------------------------------------------------------------------------

#: Store new tasks; answer, per record given, what is stored under its id.
#:
#: Params: ids (unique), queues, priorities, run_after (ms or NULL), payloads
#: (arrays in step), ttl, channel, guard. With ``guard`` true, a batch some of
#: whose ids are stored (and live) inserts nothing: the caller decodes what is
#: stored first (poison raises before anything changes), then sends the rest
#: with ``guard`` false. A stored result that expired is replaced, as if gone.
#:
#: Rows, in call order: n, now_ms, status (set when stored now), then
#: `TASK_COLUMNS` of what was stored before (NULL for new). A row with
#: neither lost a race with another enqueue of that id; the caller reads it.
ENQUEUE = f"""WITH {_NOW},
given AS (
    SELECT * FROM unnest(%(ids)s::text[], %(queues)s::text[], %(priorities)s::smallint[],
                         %(run_after)s::bigint[], %(payloads)s::bytea[])
        WITH ORDINALITY AS g (id, queue, priority, run_after, payload, n)
),
stored AS MATERIALIZED (
    SELECT {TASK_COLUMNS} FROM {{s}}.tasks t CROSS JOIN now
    WHERE t.id = ANY(%(ids)s::text[]) AND {_VISIBLE}
),
ready_asked AS MATERIALIZED (
    SELECT g.id, row_number() OVER (ORDER BY g.n) AS k FROM given g CROSS JOIN now
    WHERE g.run_after IS NULL OR g.run_after <= now.ms
),
{_places("ready_asked", "ready_places")},
added AS (
    INSERT INTO {{s}}.tasks AS t
        (id, queue, priority, status, payload, ready_order, run_after, enqueued_at)
    SELECT g.id, g.queue, g.priority,
           CASE WHEN p.id IS NULL THEN 'DEFERRED' ELSE 'READY' END,
           g.payload, p.ready_order, g.run_after, now.ms
    FROM given g CROSS JOIN now LEFT JOIN ready_places p ON p.id = g.id
    WHERE NOT (%(guard)s AND EXISTS (SELECT 1 FROM stored))
    ON CONFLICT (id) DO UPDATE SET
        (queue, priority, status, payload, ready_order, run_after, deadline, token,
         enqueued_at, started_at, last_attempted_at, finished_at, attempts, worker_ids,
         errors, return_value, started, unstarted_expiries)
        = (EXCLUDED.queue, EXCLUDED.priority, EXCLUDED.status, EXCLUDED.payload,
           EXCLUDED.ready_order, EXCLUDED.run_after, NULL, NULL, EXCLUDED.enqueued_at,
           NULL, NULL, NULL, 0, '{{}}', EXCLUDED.errors, NULL, false, 0)
        WHERE t.finished_at <= EXCLUDED.enqueued_at - %(ttl)s
    RETURNING t.id, t.queue, t.status
),
{_count("counted", "entered", "SELECT queue FROM added")},
{_TRIM_RATES},
{_notify("SELECT queue FROM added")}
SELECT g.n, now.ms, a.status, s.*
FROM given g CROSS JOIN now
    LEFT JOIN added a ON a.id = g.id
    LEFT JOIN stored s ON s.id = g.id
    CROSS JOIN (SELECT count(*) FROM notified) announced
ORDER BY g.n"""

# --- working -----------------------------------------------------------------------------

#: The columns of a lease, after its place in the answer: what `rows.lease` reads.
_LEASE_COLUMNS = f"t.token, t.deadline, {TASK_COLUMNS}, t.unstarted_expiries"

#: Promote the due DEFERRED tasks of the queues, then take up to ``limit``
#: tasks to RUNNING, queues in the order given, each in READY order, and leave
#: a receipt of the call when it took any.
#:
#: Params: queues (unique, best first), worker, ttl (lease ms), limit,
#: request (32 hex digits, fresh per call), channel. Tokens are
#: ``<request>-<n>``, n being the lease's place in the answer.
#:
#: Promoted tasks enter READY after every task there, in DEFERRED order, so
#: they compete with the READY ones by priority and then that place; those
#: not taken stay READY and their queues are woken. Each queue offers at most
#: ``limit`` candidates (`FOR UPDATE SKIP LOCKED`: tasks another claim holds
#: are passed over, never waited for), and the best ``limit`` of all are taken.
#:
#: Rows: n, then `_LEASE_COLUMNS` (the task's count of give-backs last), best
#: first. An empty answer leaves nothing.
CLAIM = f"""WITH {_NOW},
wanted AS (
    SELECT w.queue, w.pos FROM unnest(%(queues)s::text[]) WITH ORDINALITY AS w (queue, pos)
),
due AS MATERIALIZED (
    SELECT t.id, t.queue, t.priority, t.run_after FROM {{s}}.tasks t
    WHERE t.status = 'DEFERRED' AND t.queue = ANY(%(queues)s::text[])
        AND t.run_after <= (SELECT ms FROM now)
    ORDER BY t.run_after, t.id
    FOR UPDATE SKIP LOCKED
),
due_asked AS MATERIALIZED (
    SELECT id, row_number() OVER (ORDER BY run_after, id) AS k FROM due
),
{_places("due_asked", "promoted")},
ready AS MATERIALIZED (
    SELECT r.id, w.pos, r.priority, r.ready_order
    FROM wanted w CROSS JOIN LATERAL (
        SELECT t.id, t.priority, t.ready_order FROM {{s}}.tasks t
        WHERE t.status = 'READY' AND t.queue = w.queue
        ORDER BY t.priority DESC, t.ready_order
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    ) r
),
chosen AS MATERIALIZED (
    SELECT c.id, row_number() OVER (ORDER BY c.pos, c.priority DESC, c.ready_order) AS n
    FROM (
        SELECT r.id, r.pos, r.priority, r.ready_order FROM ready r
        UNION ALL
        SELECT d.id, w.pos, d.priority, p.ready_order
        FROM due d JOIN promoted p ON p.id = d.id JOIN wanted w ON w.queue = d.queue
    ) c
    ORDER BY c.pos, c.priority DESC, c.ready_order
    LIMIT %(limit)s
),
receipt AS (
    INSERT INTO {{s}}.claims (request, expires)
    SELECT %(request)s, now.ms + %(ttl)s FROM now WHERE EXISTS (SELECT 1 FROM chosen)
),
{_prune_receipts("2")},
running AS (
    UPDATE {{s}}.tasks t SET
        status = 'RUNNING', ready_order = NULL,
        token = %(request)s || '-' || c.n, deadline = now.ms + %(ttl)s, started = false,
        attempts = t.attempts + 1, last_attempted_at = now.ms,
        started_at = coalesce(t.started_at, now.ms),
        worker_ids = array_append(t.worker_ids, %(worker)s::text)
    FROM chosen c CROSS JOIN now
    WHERE t.id = c.id
    RETURNING c.n, {_LEASE_COLUMNS}
),
waiting AS (
    UPDATE {{s}}.tasks t SET status = 'READY', ready_order = p.ready_order
    FROM promoted p
    WHERE t.id = p.id AND NOT EXISTS (SELECT 1 FROM chosen c WHERE c.id = p.id)
    RETURNING t.queue
),
{_notify("SELECT queue FROM waiting")}
SELECT r.* FROM running r CROSS JOIN (SELECT count(*) FROM notified) announced
ORDER BY r.n"""

#: The first part of repeating a claim whose reply was lost: take the call's
#: receipt. Waits while a first send holding it is in flight. A row back means
#: it was free: that send took nothing, and now never will (should it still
#: run, its own receipt fails as a duplicate). No row means the first send
#: committed: `CLAIM_FOUND` reads its leases.
#:
#: Params: request, ttl.
CLAIM_BURN = f"""WITH {_NOW}
INSERT INTO {{s}}.claims (request, expires) SELECT %(request)s, now.ms + %(ttl)s FROM now
ON CONFLICT (request) DO NOTHING
RETURNING request"""

#: The leases a committed claim granted, those still held under their tokens.
#:
#: Params: request. Rows as `CLAIM`'s.
CLAIM_FOUND = f"""SELECT split_part(t.token, '-', 2)::bigint AS n, {_LEASE_COLUMNS}
FROM {{s}}.tasks t
WHERE t.status = 'RUNNING' AND left(t.token, 33) = %(request)s || '-'
ORDER BY n"""

#: Renew leases whose token is current and whose task is RUNNING.
#:
#: Params: ids, tokens (arrays in step), ttl (lease ms).
#: Rows, in call order: n, the new deadline (NULL: refused).
EXTEND_MANY = f"""WITH {_NOW},
given AS (
    SELECT * FROM unnest(%(ids)s::text[], %(tokens)s::text[]) WITH ORDINALITY AS g (id, token, n)
),
held AS MATERIALIZED (
    SELECT t.id FROM {{s}}.tasks t WHERE t.id = ANY(%(ids)s::text[]) ORDER BY t.id FOR UPDATE
),
renewed AS (
    UPDATE {{s}}.tasks t SET deadline = now.ms + %(ttl)s
    FROM now
    WHERE t.id IN (SELECT id FROM held) AND t.status = 'RUNNING'
        AND t.token IN (SELECT g.token FROM given g WHERE g.id = t.id)
    RETURNING t.id, t.token, t.deadline
)
SELECT g.n, r.deadline
FROM given g LEFT JOIN renewed r ON r.id = g.id AND r.token = g.token
ORDER BY g.n"""

#: Record that claimed tasks began to run: ``started`` of each task whose
#: token is the lease's, a worker's claim (a reaper's token starts with
#: ``r``), while it is RUNNING. A claim marked already is marked again,
#: changing nothing a reader sees.
#:
#: Params: ids, tokens (arrays in step). Rows, in call order: n, marked.
MARK_STARTED = """WITH given AS (
    SELECT * FROM unnest(%(ids)s::text[], %(tokens)s::text[]) WITH ORDINALITY AS g (id, token, n)
),
held AS MATERIALIZED (
    SELECT t.id FROM {s}.tasks t WHERE t.id = ANY(%(ids)s::text[]) ORDER BY t.id FOR UPDATE
),
marked AS (
    UPDATE {s}.tasks t SET started = true
    WHERE t.id IN (SELECT id FROM held) AND t.status = 'RUNNING' AND left(t.token, 1) <> 'r'
        AND t.token IN (SELECT g.token FROM given g WHERE g.id = t.id)
    RETURNING t.id, t.token
)
SELECT g.n, m.id IS NOT NULL
FROM given g LEFT JOIN marked m ON m.id = g.id AND m.token = g.token
ORDER BY g.n"""

#: The decided tasks that finished.
_FINISHED_NOW = "SELECT queue FROM decided WHERE status IN ('SUCCESSFUL', 'FAILED')"

#: Apply `complete` / `retry` decisions, each fenced on its own.
#:
#: Params: ids, tokens, targets (SUCCESSFUL or FAILED to complete, READY for a
#: zero-delay retry, DEFERRED for a later one), delays (ms), errors, results
#: (codec bytes or NULL; arrays in step), ttl, prune, channel.
#:
#: Of the decisions on one task, the first whose token is current applies, if
#: the task is RUNNING; zero-delay retries enter READY in call order. The
#: others change nothing here: the caller answers them (a repeat, or refused)
#: from the state this returns.
#:
#: Rows, in call order: n; current (the token is the task's); applied; the
#: task's status, run_after and finished_at after the statement; and, where
#: the task was not changed here, its stored errors and result.
DECIDE_MANY = f"""WITH {_NOW},
given AS (
    SELECT * FROM unnest(%(ids)s::text[], %(tokens)s::text[], %(targets)s::text[],
                         %(delays)s::bigint[], %(errors)s::bytea[], %(results)s::bytea[])
        WITH ORDINALITY AS g (id, token, target, delay, errors, result, n)
),
held AS MATERIALIZED (
    SELECT t.id, t.token, t.status, t.run_after, t.finished_at, t.errors, t.return_value
    FROM {{s}}.tasks t WHERE t.id = ANY(%(ids)s::text[]) ORDER BY t.id FOR UPDATE
),
chosen AS MATERIALIZED (
    SELECT DISTINCT ON (g.id) g.id, g.n, g.target, g.delay, g.errors, g.result
    FROM given g JOIN held h ON h.id = g.id AND h.token = g.token AND h.status = 'RUNNING'
        -- A corrupt time is refused: the reaper's claim quarantines the task.
        AND coalesce(h.run_after BETWEEN {_TIMES}, true)
    ORDER BY g.id, g.n
),
requeued_asked AS MATERIALIZED (
    SELECT id, row_number() OVER (ORDER BY n) AS k FROM chosen WHERE target = 'READY'
),
{_places("requeued_asked", "requeued")},
decided AS (
    UPDATE {{s}}.tasks t SET
        status = c.target,
        errors = c.errors,
        return_value = CASE WHEN c.target = 'SUCCESSFUL' THEN c.result END,
        finished_at = CASE WHEN c.target IN ('SUCCESSFUL', 'FAILED') THEN now.ms END,
        run_after = CASE WHEN c.target = 'DEFERRED' THEN now.ms + c.delay ELSE t.run_after END,
        ready_order = q.ready_order,
        deadline = NULL
    FROM chosen c LEFT JOIN requeued q ON q.id = c.id CROSS JOIN now
    WHERE t.id = c.id
    RETURNING t.id, t.queue, t.status, t.run_after, t.finished_at
),
{_count("counted", "finished", _FINISHED_NOW)},
{_TRIM_RATES},
{_PRUNE_RESULTS},
{_notify("SELECT queue FROM decided WHERE status = 'READY'")}
SELECT g.n,
    coalesce(h.token = g.token, false) AS current,
    coalesce(c.n = g.n, false) AS applied,
    CASE WHEN d.id IS NULL THEN h.status ELSE d.status END,
    CASE WHEN d.id IS NULL THEN h.run_after ELSE d.run_after END,
    CASE WHEN d.id IS NULL THEN h.finished_at ELSE d.finished_at END,
    CASE WHEN d.id IS NULL AND h.token = g.token THEN h.errors END,
    CASE WHEN d.id IS NULL AND h.token = g.token THEN h.return_value END
FROM given g
    LEFT JOIN held h ON h.id = g.id
    LEFT JOIN chosen c ON c.id = g.id
    LEFT JOIN decided d ON d.id = g.id
    CROSS JOIN (SELECT count(*) FROM notified) announced
ORDER BY g.n"""

#: Give back claimed tasks that never started: to the READY tail in call
#: order (DEFERRED due at now + delay when the delay is above zero), the claim
#: undone (see `Backend.release`), the token cleared. A claim whose start was
#: recorded, and a reaper's, are refused.
#:
#: Params: ids, tokens (arrays in step), delay (ms), channel.
#: Rows, in call order: n, then (NULL when refused) attempts, worker_ids,
#: started_at, last_attempted_at, status and run_after after the release.
RELEASE = f"""WITH {_NOW},
given AS (
    SELECT * FROM unnest(%(ids)s::text[], %(tokens)s::text[]) WITH ORDINALITY AS g (id, token, n)
),
held AS MATERIALIZED (
    SELECT t.id, t.token, t.status, t.started FROM {{s}}.tasks t
    WHERE t.id = ANY(%(ids)s::text[]) ORDER BY t.id FOR UPDATE
),
chosen AS MATERIALIZED (
    SELECT DISTINCT ON (g.id) g.id, g.n
    FROM given g JOIN held h ON h.id = g.id AND h.token = g.token AND h.status = 'RUNNING'
        AND NOT h.started AND left(h.token, 1) <> 'r'
    ORDER BY g.id, g.n
),
asked AS MATERIALIZED (SELECT id, row_number() OVER (ORDER BY n) AS k FROM chosen),
{_places("asked", "placed")},
released AS (
    UPDATE {{s}}.tasks t SET
        status = CASE WHEN %(delay)s::bigint > 0 THEN 'DEFERRED' ELSE 'READY' END,
        ready_order = CASE WHEN %(delay)s::bigint > 0 THEN NULL ELSE p.ready_order END,
        run_after = CASE WHEN %(delay)s::bigint > 0
            THEN now.ms + %(delay)s::bigint ELSE t.run_after END,
        token = NULL, deadline = NULL,
        attempts = greatest(t.attempts - 1, 0),
        worker_ids = t.worker_ids[1:cardinality(t.worker_ids) - 1],
        started_at = CASE WHEN t.attempts > 1 THEN t.started_at END,
        last_attempted_at = CASE WHEN t.attempts > 1 THEN t.last_attempted_at END
    FROM placed p CROSS JOIN now
    WHERE t.id = p.id
    RETURNING t.id, t.queue, t.attempts, t.worker_ids, t.started_at, t.last_attempted_at,
        t.status, t.run_after
),
{_notify("SELECT queue FROM released")}
SELECT g.n, r.attempts, r.worker_ids, r.started_at, r.last_attempted_at, r.status, r.run_after
FROM given g
    LEFT JOIN chosen c ON c.n = g.n
    LEFT JOIN released r ON r.id = c.id
    CROSS JOIN (SELECT count(*) FROM notified) announced
ORDER BY g.n"""

#: Finalize undecodable claimed tasks FAILED, fenced by the claim's token,
#: with a stand-in payload, errors that say why and a priority in bounds (see
#: `rows.stand_in`). A timestamp column no datetime can hold is reset
#: (``enqueued_at`` to now, the others to NULL), so the record reads back.
#:
#: Params: ids, tokens, payloads, errors, priorities (arrays in step).
#: Rows: how many were finalized.
QUARANTINE = f"""WITH {_NOW},
given AS (
    SELECT * FROM unnest(%(ids)s::text[], %(tokens)s::text[], %(payloads)s::bytea[],
                         %(errors)s::bytea[], %(priorities)s::smallint[])
        AS g (id, token, payload, errors, priority)
),
poisoned AS (
    UPDATE {{s}}.tasks t SET
        status = 'FAILED', finished_at = now.ms, token = NULL, deadline = NULL,
        ready_order = NULL, payload = g.payload, errors = g.errors, return_value = NULL,
        priority = g.priority,
        enqueued_at = CASE WHEN t.enqueued_at BETWEEN {_TIMES}
                           THEN t.enqueued_at ELSE now.ms END,
        run_after = CASE WHEN t.run_after BETWEEN {_TIMES} THEN t.run_after END,
        started_at = CASE WHEN t.started_at BETWEEN {_TIMES}
                          THEN t.started_at END,
        last_attempted_at = CASE WHEN t.last_attempted_at BETWEEN {_TIMES}
                                 THEN t.last_attempted_at END
    FROM given g CROSS JOIN now
    WHERE t.id = g.id AND t.token = g.token AND t.status = 'RUNNING'
    RETURNING t.queue
),
{_count("counted", "finished", "SELECT queue FROM poisoned")},
{_TRIM_RATES}
SELECT count(*) FROM poisoned"""

# --- maintenance -------------------------------------------------------------------------

#: The reaper's pass (see `Backend.claim_expired`) over up to ``scan``
#: expired leases, oldest deadline first. A worker's claim whose start was
#: never recorded goes to the READY tail (in deadline order) with the claim undone as `RELEASE`
#: undoes it and ``unstarted_expiries`` one higher. Any other gets a reaper's
#: token (``r<request>-<n>``) and the deadline ``now + ttl``; nothing else
#: changes (it is not an attempt). The pass stops at its ``limit``-th claim:
#: expired leases after it are left as they are.
#:
#: Params: limit, scan (at least limit), ttl (claim ms), request,
#: channel. Rows: one per reaper claim, oldest deadline first: how many
#: expired leases the pass looked at (``scan`` of them: more may be left),
#: then the columns of `CLAIM`'s rows. With no claim, one row: that count,
#: then NULLs.
CLAIM_EXPIRED = f"""WITH {_NOW},
picked AS MATERIALIZED (
    SELECT t.id, t.deadline,
        NOT t.started AND left(t.token, 1) <> 'r' AS give
    FROM {{s}}.tasks t
    WHERE t.status = 'RUNNING' AND t.deadline <= (SELECT ms FROM now)
    ORDER BY t.deadline, t.id
    LIMIT %(scan)s
    FOR UPDATE SKIP LOCKED
),
ranked AS MATERIALIZED (
    SELECT id, deadline, give,
        count(*) FILTER (WHERE NOT give) OVER (ORDER BY deadline, id) AS claims
    FROM picked
),
claimed AS MATERIALIZED (
    SELECT id, claims AS n FROM ranked WHERE NOT give AND claims <= %(limit)s
),
asked AS MATERIALIZED (
    SELECT id, row_number() OVER (ORDER BY deadline, id) AS k
    FROM ranked WHERE give AND claims < %(limit)s
),
{_places("asked", "placed")},
given_back AS (
    UPDATE {{s}}.tasks t SET
        status = 'READY', ready_order = p.ready_order, token = NULL, deadline = NULL,
        attempts = greatest(t.attempts - 1, 0),
        worker_ids = t.worker_ids[1:cardinality(t.worker_ids) - 1],
        started_at = CASE WHEN t.attempts > 1 THEN t.started_at END,
        last_attempted_at = CASE WHEN t.attempts > 1 THEN t.last_attempted_at END,
        unstarted_expiries = t.unstarted_expiries + 1
    FROM placed p
    WHERE t.id = p.id
    RETURNING t.queue
),
{_notify("SELECT queue FROM given_back")},
reaped AS (
    UPDATE {{s}}.tasks t SET token = 'r' || %(request)s || '-' || c.n, deadline = now.ms + %(ttl)s
    FROM claimed c CROSS JOIN now
    WHERE t.id = c.id
    RETURNING c.n, {_LEASE_COLUMNS}
)
SELECT (SELECT count(*) FROM picked) AS looked, r.*
FROM (SELECT count(*) FROM notified) announced LEFT JOIN reaped r ON true
ORDER BY r.n"""

#: Move up to ``limit`` due DEFERRED tasks (any queue) to READY, in DEFERRED
#: order, and wake their queues; delete expired results and lapsed receipts,
#: ``prune`` of each at most. A due time past any datetime (a corrupt row)
#: counts as due, after the others: the claim that takes it quarantines it
#: (see `rows.record`); it is looked for in a range of its own, so the scan of
#: what is due stops where it always did.
#:
#: Params: limit, ttl, prune, channel. Row: how many were promoted.
PROMOTE_DUE = f"""WITH {_NOW},
due_now AS MATERIALIZED (
    SELECT t.id, t.run_after FROM {{s}}.tasks t
    WHERE t.status = 'DEFERRED' AND t.run_after <= (SELECT ms FROM now)
    ORDER BY t.run_after, t.id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
due_corrupt AS MATERIALIZED (
    SELECT t.id, t.run_after FROM {{s}}.tasks t
    WHERE t.status = 'DEFERRED' AND t.run_after > {MAX_MS}
    ORDER BY t.run_after, t.id
    LIMIT (SELECT %(limit)s - count(*) FROM due_now)
    FOR UPDATE SKIP LOCKED
),
due AS (SELECT * FROM due_now UNION ALL SELECT * FROM due_corrupt),
asked AS MATERIALIZED (SELECT id, row_number() OVER (ORDER BY run_after, id) AS k FROM due),
{_places("asked", "placed")},
promoted AS (
    UPDATE {{s}}.tasks t SET status = 'READY', ready_order = p.ready_order
    FROM placed p WHERE t.id = p.id
    RETURNING t.queue
),
{_PRUNE_RESULTS},
{_prune_receipts("%(prune)s")},
{_TRIM_RATES},
{_notify("SELECT queue FROM promoted")}
SELECT (SELECT count(*) FROM promoted), (SELECT count(*) FROM notified)"""

#: Milliseconds until the earliest DEFERRED task falls due (negative once due);
#: NULL when none is DEFERRED. One read of the ``tasks_due`` index. A due time
#: out of any datetime's range (a corrupt row) counts as due now, as in `PROMOTE_DUE`.
NEXT_DUE = f"""SELECT CASE WHEN first NOT BETWEEN {_TIMES} THEN 0 ELSE first - {{s}}.now_ms() END
FROM (
    SELECT (SELECT t.run_after FROM {{s}}.tasks t WHERE t.status = 'DEFERRED'
            ORDER BY t.run_after LIMIT 1) AS first
) earliest"""

#: Whether a task is READY, or DEFERRED and due, in any of the queues: the look
#: `wait_for_tasks` takes when it cannot tell from wake-ups alone.
#:
#: Params: queues.
HAS_WORK = """SELECT EXISTS (
    SELECT 1 FROM {s}.tasks t WHERE t.status = 'READY' AND t.queue = ANY(%(queues)s::text[])
) OR EXISTS (
    SELECT 1 FROM {s}.tasks t WHERE t.status = 'DEFERRED' AND t.queue = ANY(%(queues)s::text[])
        AND t.run_after <= {s}.now_ms()
)"""

# --- inspection --------------------------------------------------------------------------

#: One task. Params: id, ttl. Rows: `TASK_COLUMNS`.
GET = f"""WITH {_NOW}
SELECT {TASK_COLUMNS} FROM {{s}}.tasks t CROSS JOIN now
WHERE t.id = %(id)s AND {_VISIBLE}"""

#: Each segment's order (the protocol's), as ORDER BY.
SEGMENT_ORDER = {
    "READY": "t.priority DESC, t.ready_order",
    "DEFERRED": "t.run_after, t.id",
    "RUNNING": "t.deadline, t.id",
    "SUCCESSFUL": "t.finished_at, t.id",
    "FAILED": "t.finished_at, t.id",
    "CANCELLED": "t.finished_at, t.id",
}

#: One page of one segment, by status. Params: queue, ttl, offset, limit.
PEEK = {
    status: f"""WITH {_NOW}
SELECT {TASK_COLUMNS} FROM {{s}}.tasks t CROSS JOIN now
WHERE t.queue = %(queue)s AND t.status = '{status}' AND {_VISIBLE}
ORDER BY {order}
OFFSET %(offset)s LIMIT %(limit)s"""
    for status, order in SEGMENT_ORDER.items()
}

#: Tasks per queue and segment. Params: ttl. Rows: queue, status, count.
COUNTS = f"""WITH {_NOW}
SELECT t.queue, t.status, count(*) FROM {{s}}.tasks t CROSS JOIN now
WHERE {_VISIBLE}
GROUP BY t.queue, t.status"""

#: Telemetry of the last ``seconds`` whole seconds (the current one included).
#: Params: seconds. Rows: queue, entered, finished.
RATES = f"""WITH {_NOW}
SELECT r.queue, sum(r.entered)::bigint, sum(r.finished)::bigint
FROM {{s}}.rates r CROSS JOIN now
WHERE r.second > now.ms / 1000 - %(seconds)s
GROUP BY r.queue"""

# --- operator actions (each inside one transaction with its LOCK statement) ---------------

#: Lock a FAILED or CANCELLED task for `requeue`. Params: id, ttl. Rows: `TASK_COLUMNS`.
REQUEUE_LOCK = f"""WITH {_NOW}
SELECT {TASK_COLUMNS} FROM {{s}}.tasks t CROSS JOIN now
WHERE t.id = %(id)s AND t.status IN ('FAILED', 'CANCELLED') AND {_VISIBLE}
FOR UPDATE OF t"""

#: Send the locked task to the READY tail. Params: id, channel. Row: how many (1).
REQUEUE = f"""WITH {_NOW},
moved AS (
    UPDATE {{s}}.tasks t SET
        status = 'READY', ready_order = nextval('{{s}}.ready_order'),
        finished_at = NULL, return_value = NULL, token = NULL
    WHERE t.id = %(id)s
    RETURNING t.queue
),
{_count("counted", "entered", "SELECT queue FROM moved")},
{_TRIM_RATES},
{_notify("SELECT queue FROM moved")}
SELECT (SELECT count(*) FROM moved), (SELECT count(*) FROM notified)"""

#: Lock a READY or DEFERRED task for `cancel`. Params: id. Rows: `TASK_COLUMNS`.
CANCEL_LOCK = f"""SELECT {TASK_COLUMNS} FROM {{s}}.tasks t
WHERE t.id = %(id)s AND t.status IN ('READY', 'DEFERRED')
FOR UPDATE OF t"""

#: Cancel the locked task. Params: id. Row: its finished_at.
CANCEL = f"""WITH {_NOW},
cancelled AS (
    UPDATE {{s}}.tasks t SET
        status = 'CANCELLED', ready_order = NULL, finished_at = now.ms, token = NULL
    FROM now
    WHERE t.id = %(id)s
    RETURNING t.queue, t.finished_at
),
{_count("counted", "finished", "SELECT queue FROM cancelled")},
{_TRIM_RATES}
SELECT finished_at FROM cancelled"""

#: Delete up to ``batch`` tasks of one segment (not RUNNING), by status,
#: passing over rows another statement holds. Params: queue, batch, ttl.
#: Row: how many were deleted, and how many of those were not expired results.
PURGE = {
    status: f"""WITH {_NOW},
gone AS (
    DELETE FROM {{s}}.tasks t WHERE t.id = ANY(ARRAY(
        SELECT id FROM {{s}}.tasks
        WHERE queue = %(queue)s AND status = '{status}'
        LIMIT %(batch)s
        FOR UPDATE SKIP LOCKED
    ))
    RETURNING t.finished_at
)
SELECT count(*), count(*) FILTER (WHERE t.finished_at IS NULL OR t.finished_at > now.ms - %(ttl)s)
FROM gone t CROSS JOIN now"""
    for status in SEGMENT_ORDER
    if status != "RUNNING"
}


class Statements:
    """Every statement above, with the schema of one namespace filled in."""

    def __init__(self, schema: str) -> None:
        quoted = quote_ident(schema)

        def fill(template: str) -> str:
            return template.replace("{s}", quoted)

        self.now = fill(NOW)
        self.enqueue = fill(ENQUEUE)
        self.claim = fill(CLAIM)
        self.claim_burn = fill(CLAIM_BURN)
        self.claim_found = fill(CLAIM_FOUND)
        self.extend_many = fill(EXTEND_MANY)
        self.mark_started = fill(MARK_STARTED)
        self.decide_many = fill(DECIDE_MANY)
        self.release = fill(RELEASE)
        self.quarantine = fill(QUARANTINE)
        self.claim_expired = fill(CLAIM_EXPIRED)
        self.expire_leases = fill(EXPIRE_LEASES)
        self.promote_due = fill(PROMOTE_DUE)
        self.next_due = fill(NEXT_DUE)
        self.has_work = fill(HAS_WORK)
        self.get = fill(GET)
        self.peek = {status: fill(text) for status, text in PEEK.items()}
        self.counts = fill(COUNTS)
        self.rates = fill(RATES)
        self.requeue_lock = fill(REQUEUE_LOCK)
        self.requeue = fill(REQUEUE)
        self.cancel_lock = fill(CANCEL_LOCK)
        self.cancel = fill(CANCEL)
        self.purge = {status: fill(text) for status, text in PURGE.items()}
