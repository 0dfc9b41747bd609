-- threadmill_postgres, operator actions: requeue, cancel and purge, each run in
-- one transaction with its lock statement (PostgresBackend.requeue, cancel, purge),
-- and request_cancel, one statement.
-- Every query of this file is documented by the comment lines under its name;
-- queries.py says how the files are read and the conventions they keep.

-- name: requeue_lock --
-- Lock a FAILED or CANCELLED task for `requeue`. Params: id, ttl.
-- Rows: `rows.TASK_COLUMNS`.
WITH now AS MATERIALIZED (SELECT {schema}.now_ms() AS ms)
SELECT t.id, t.queue, t.priority, t.status, t.payload, t.run_after, t.enqueued_at,
    t.started_at, t.last_attempted_at, t.finished_at, t.attempts, t.errors, t.worker_ids,
    t.return_value, t.progress, t.cancel_requested_at
FROM {schema}.tasks t CROSS JOIN now
WHERE t.id = %(id)s AND t.status IN ('FAILED', 'CANCELLED')
    AND (t.finished_at IS NULL OR t.finished_at > now.ms - %(ttl)s)
FOR UPDATE OF t;

-- name: requeue --
-- Send the locked task to the READY tail. Params: id, channel.
-- Row: how many (1), and how many queues were woken.
WITH now AS MATERIALIZED (SELECT {schema}.now_ms() AS ms),
moved AS (
    UPDATE {schema}.tasks t SET
        status = 'READY', ready_order = nextval('{schema}.ready_order'),
        finished_at = NULL, return_value = NULL, token = NULL,
        progress = NULL, cancel_requested_at = NULL
    WHERE t.id = %(id)s
    RETURNING t.queue
),
counted AS (
    INSERT INTO {schema}.rates AS r (second, queue, shard, entered)
    SELECT now.ms / 1000, c.queue, pg_backend_pid(), count(*)
    FROM (SELECT queue FROM moved) c CROSS JOIN now GROUP BY now.ms, c.queue
    ON CONFLICT (second, queue, shard)
        DO UPDATE SET entered = r.entered + EXCLUDED.entered
),
rates_trimmed AS (
    DELETE FROM {schema}.rates r WHERE r.ctid = ANY(ARRAY(
        SELECT ctid FROM {schema}.rates
        WHERE second < (SELECT ms FROM now) / 1000 - 3600
        LIMIT 4 FOR UPDATE SKIP LOCKED
    ))
),
notified AS (
    SELECT pg_notify(%(channel)s, left(q.queue, 1000))
    FROM (SELECT DISTINCT queue FROM (SELECT queue FROM moved) woken) q
)
SELECT (SELECT count(*) FROM moved), (SELECT count(*) FROM notified);

-- name: cancel_lock --
-- Lock a READY or DEFERRED task for `cancel`. Params: id.
-- Rows: `rows.TASK_COLUMNS`.
SELECT t.id, t.queue, t.priority, t.status, t.payload, t.run_after, t.enqueued_at,
    t.started_at, t.last_attempted_at, t.finished_at, t.attempts, t.errors, t.worker_ids,
    t.return_value, t.progress, t.cancel_requested_at
FROM {schema}.tasks t
WHERE t.id = %(id)s AND t.status IN ('READY', 'DEFERRED')
FOR UPDATE OF t;

-- name: cancel --
-- Cancel the locked task. Params: id. Row: its finished_at.
WITH now AS MATERIALIZED (SELECT {schema}.now_ms() AS ms),
cancelled AS (
    UPDATE {schema}.tasks t SET
        status = 'CANCELLED', ready_order = NULL, finished_at = now.ms, token = NULL
    FROM now
    WHERE t.id = %(id)s
    RETURNING t.queue, t.finished_at
),
counted AS (
    INSERT INTO {schema}.rates AS r (second, queue, shard, finished)
    SELECT now.ms / 1000, c.queue, pg_backend_pid(), count(*)
    FROM (SELECT queue FROM cancelled) c CROSS JOIN now GROUP BY now.ms, c.queue
    ON CONFLICT (second, queue, shard)
        DO UPDATE SET finished = r.finished + EXCLUDED.finished
),
rates_trimmed AS (
    DELETE FROM {schema}.rates r WHERE r.ctid = ANY(ARRAY(
        SELECT ctid FROM {schema}.rates
        WHERE second < (SELECT ms FROM now) / 1000 - 3600
        LIMIT 4 FOR UPDATE SKIP LOCKED
    ))
)
SELECT finished_at FROM cancelled;

-- name: request_cancel --
-- Note a cancel request on a RUNNING task (the first one wins) and read it.
-- Params: id. Rows (none unless RUNNING): `rows.TASK_COLUMNS`.
WITH now AS MATERIALIZED (SELECT {schema}.now_ms() AS ms)
UPDATE {schema}.tasks t SET cancel_requested_at = coalesce(t.cancel_requested_at, now.ms)
FROM now
WHERE t.id = %(id)s AND t.status = 'RUNNING'
RETURNING t.id, t.queue, t.priority, t.status, t.payload, t.run_after, t.enqueued_at,
    t.started_at, t.last_attempted_at, t.finished_at, t.attempts, t.errors, t.worker_ids,
    t.return_value, t.progress, t.cancel_requested_at;

-- name: purge_ready --
-- Delete up to ``batch`` READY tasks of one queue, passing over rows
-- another statement holds. Params: queue, batch, ttl. Row: how many were
-- deleted, and how many of those were not expired results.
WITH now AS MATERIALIZED (SELECT {schema}.now_ms() AS ms),
gone AS (
    DELETE FROM {schema}.tasks t WHERE t.id = ANY(ARRAY(
        SELECT id FROM {schema}.tasks
        WHERE queue = %(queue)s AND status = 'READY'
        LIMIT %(batch)s
        FOR UPDATE SKIP LOCKED
    ))
    RETURNING t.finished_at
)
SELECT count(*), count(*) FILTER (WHERE t.finished_at IS NULL OR t.finished_at > now.ms - %(ttl)s)
FROM gone t CROSS JOIN now;

-- name: purge_deferred --
-- Delete up to ``batch`` DEFERRED tasks of one queue, passing over rows
-- another statement holds. Params: queue, batch, ttl. Row: how many were
-- deleted, and how many of those were not expired results.
WITH now AS MATERIALIZED (SELECT {schema}.now_ms() AS ms),
gone AS (
    DELETE FROM {schema}.tasks t WHERE t.id = ANY(ARRAY(
        SELECT id FROM {schema}.tasks
        WHERE queue = %(queue)s AND status = 'DEFERRED'
        LIMIT %(batch)s
        FOR UPDATE SKIP LOCKED
    ))
    RETURNING t.finished_at
)
SELECT count(*), count(*) FILTER (WHERE t.finished_at IS NULL OR t.finished_at > now.ms - %(ttl)s)
FROM gone t CROSS JOIN now;

-- name: purge_successful --
-- Delete up to ``batch`` SUCCESSFUL tasks of one queue, passing over rows
-- another statement holds. Params: queue, batch, ttl. Row: how many were
-- deleted, and how many of those were not expired results.
WITH now AS MATERIALIZED (SELECT {schema}.now_ms() AS ms),
gone AS (
    DELETE FROM {schema}.tasks t WHERE t.id = ANY(ARRAY(
        SELECT id FROM {schema}.tasks
        WHERE queue = %(queue)s AND status = 'SUCCESSFUL'
        LIMIT %(batch)s
        FOR UPDATE SKIP LOCKED
    ))
    RETURNING t.finished_at
)
SELECT count(*), count(*) FILTER (WHERE t.finished_at IS NULL OR t.finished_at > now.ms - %(ttl)s)
FROM gone t CROSS JOIN now;

-- name: purge_failed --
-- Delete up to ``batch`` FAILED tasks of one queue, passing over rows
-- another statement holds. Params: queue, batch, ttl. Row: how many were
-- deleted, and how many of those were not expired results.
WITH now AS MATERIALIZED (SELECT {schema}.now_ms() AS ms),
gone AS (
    DELETE FROM {schema}.tasks t WHERE t.id = ANY(ARRAY(
        SELECT id FROM {schema}.tasks
        WHERE queue = %(queue)s AND status = 'FAILED'
        LIMIT %(batch)s
        FOR UPDATE SKIP LOCKED
    ))
    RETURNING t.finished_at
)
SELECT count(*), count(*) FILTER (WHERE t.finished_at IS NULL OR t.finished_at > now.ms - %(ttl)s)
FROM gone t CROSS JOIN now;

-- name: purge_cancelled --
-- Delete up to ``batch`` CANCELLED tasks of one queue, passing over rows
-- another statement holds. Params: queue, batch, ttl. Row: how many were
-- deleted, and how many of those were not expired results.
WITH now AS MATERIALIZED (SELECT {schema}.now_ms() AS ms),
gone AS (
    DELETE FROM {schema}.tasks t WHERE t.id = ANY(ARRAY(
        SELECT id FROM {schema}.tasks
        WHERE queue = %(queue)s AND status = 'CANCELLED'
        LIMIT %(batch)s
        FOR UPDATE SKIP LOCKED
    ))
    RETURNING t.finished_at
)
SELECT count(*), count(*) FILTER (WHERE t.finished_at IS NULL OR t.finished_at > now.ms - %(ttl)s)
FROM gone t CROSS JOIN now;
