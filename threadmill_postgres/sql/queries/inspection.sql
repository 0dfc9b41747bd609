-- threadmill_postgres, inspection: the clock and the reads (PostgresBackend.now,
-- get, peek, counts, rates).
-- Every query of this file is documented by the comment lines under its name;
-- queries.py says how the files are read and the conventions they keep.

-- name: now --
-- The database's clock, in milliseconds since the epoch.
SELECT {schema}.now_ms();

-- name: get --
-- One task. Params: id, ttl. Rows: `rows.TASK_COLUMNS`.
WITH now AS MATERIALIZED (SELECT {schema}.now_ms() AS ms)
SELECT t.id, t.queue, t.priority, t.status, t.payload, t.run_after, t.enqueued_at,
    t.started_at, t.last_attempted_at, t.finished_at, t.attempts, t.errors, t.worker_ids,
    t.return_value, t.progress, t.cancel_requested_at
FROM {schema}.tasks t CROSS JOIN now
WHERE t.id = %(id)s AND (t.finished_at IS NULL OR t.finished_at > now.ms - %(ttl)s);

-- name: peek_ready --
-- One page of a queue's READY tasks, in the segment's order.
-- Params: queue, ttl, offset, limit. Rows: `rows.TASK_COLUMNS`.
WITH now AS MATERIALIZED (SELECT {schema}.now_ms() AS ms)
SELECT t.id, t.queue, t.priority, t.status, t.payload, t.run_after, t.enqueued_at,
    t.started_at, t.last_attempted_at, t.finished_at, t.attempts, t.errors, t.worker_ids,
    t.return_value, t.progress, t.cancel_requested_at
FROM {schema}.tasks t CROSS JOIN now
WHERE t.queue = %(queue)s AND t.status = 'READY'
    AND (t.finished_at IS NULL OR t.finished_at > now.ms - %(ttl)s)
ORDER BY t.priority DESC, t.ready_order
OFFSET %(offset)s LIMIT %(limit)s;

-- name: peek_deferred --
-- One page of a queue's DEFERRED tasks, in the segment's order.
-- Params: queue, ttl, offset, limit. Rows: `rows.TASK_COLUMNS`.
WITH now AS MATERIALIZED (SELECT {schema}.now_ms() AS ms)
SELECT t.id, t.queue, t.priority, t.status, t.payload, t.run_after, t.enqueued_at,
    t.started_at, t.last_attempted_at, t.finished_at, t.attempts, t.errors, t.worker_ids,
    t.return_value, t.progress, t.cancel_requested_at
FROM {schema}.tasks t CROSS JOIN now
WHERE t.queue = %(queue)s AND t.status = 'DEFERRED'
    AND (t.finished_at IS NULL OR t.finished_at > now.ms - %(ttl)s)
ORDER BY t.run_after, t.id
OFFSET %(offset)s LIMIT %(limit)s;

-- name: peek_running --
-- One page of a queue's RUNNING tasks, in the segment's order.
-- Params: queue, ttl, offset, limit. Rows: `rows.TASK_COLUMNS`.
WITH now AS MATERIALIZED (SELECT {schema}.now_ms() AS ms)
SELECT t.id, t.queue, t.priority, t.status, t.payload, t.run_after, t.enqueued_at,
    t.started_at, t.last_attempted_at, t.finished_at, t.attempts, t.errors, t.worker_ids,
    t.return_value, t.progress, t.cancel_requested_at
FROM {schema}.tasks t CROSS JOIN now
WHERE t.queue = %(queue)s AND t.status = 'RUNNING'
    AND (t.finished_at IS NULL OR t.finished_at > now.ms - %(ttl)s)
ORDER BY t.deadline, t.id
OFFSET %(offset)s LIMIT %(limit)s;

-- name: peek_successful --
-- One page of a queue's SUCCESSFUL tasks, in the segment's order.
-- Params: queue, ttl, offset, limit. Rows: `rows.TASK_COLUMNS`.
WITH now AS MATERIALIZED (SELECT {schema}.now_ms() AS ms)
SELECT t.id, t.queue, t.priority, t.status, t.payload, t.run_after, t.enqueued_at,
    t.started_at, t.last_attempted_at, t.finished_at, t.attempts, t.errors, t.worker_ids,
    t.return_value, t.progress, t.cancel_requested_at
FROM {schema}.tasks t CROSS JOIN now
WHERE t.queue = %(queue)s AND t.status = 'SUCCESSFUL'
    AND (t.finished_at IS NULL OR t.finished_at > now.ms - %(ttl)s)
ORDER BY t.finished_at, t.id
OFFSET %(offset)s LIMIT %(limit)s;

-- name: peek_failed --
-- One page of a queue's FAILED tasks, in the segment's order.
-- Params: queue, ttl, offset, limit. Rows: `rows.TASK_COLUMNS`.
WITH now AS MATERIALIZED (SELECT {schema}.now_ms() AS ms)
SELECT t.id, t.queue, t.priority, t.status, t.payload, t.run_after, t.enqueued_at,
    t.started_at, t.last_attempted_at, t.finished_at, t.attempts, t.errors, t.worker_ids,
    t.return_value, t.progress, t.cancel_requested_at
FROM {schema}.tasks t CROSS JOIN now
WHERE t.queue = %(queue)s AND t.status = 'FAILED'
    AND (t.finished_at IS NULL OR t.finished_at > now.ms - %(ttl)s)
ORDER BY t.finished_at, t.id
OFFSET %(offset)s LIMIT %(limit)s;

-- name: peek_cancelled --
-- One page of a queue's CANCELLED tasks, in the segment's order.
-- Params: queue, ttl, offset, limit. Rows: `rows.TASK_COLUMNS`.
WITH now AS MATERIALIZED (SELECT {schema}.now_ms() AS ms)
SELECT t.id, t.queue, t.priority, t.status, t.payload, t.run_after, t.enqueued_at,
    t.started_at, t.last_attempted_at, t.finished_at, t.attempts, t.errors, t.worker_ids,
    t.return_value, t.progress, t.cancel_requested_at
FROM {schema}.tasks t CROSS JOIN now
WHERE t.queue = %(queue)s AND t.status = 'CANCELLED'
    AND (t.finished_at IS NULL OR t.finished_at > now.ms - %(ttl)s)
ORDER BY t.finished_at, t.id
OFFSET %(offset)s LIMIT %(limit)s;

-- name: counts --
-- Tasks per queue and segment. Params: ttl. Rows: queue, status, count.
WITH now AS MATERIALIZED (SELECT {schema}.now_ms() AS ms)
SELECT t.queue, t.status, count(*) FROM {schema}.tasks t CROSS JOIN now
WHERE (t.finished_at IS NULL OR t.finished_at > now.ms - %(ttl)s)
GROUP BY t.queue, t.status;

-- name: rates --
-- Telemetry of the last ``seconds`` whole seconds (the current one included).
-- Params: seconds. Rows: queue, entered, finished.
WITH now AS MATERIALIZED (SELECT {schema}.now_ms() AS ms)
SELECT r.queue, sum(r.entered)::bigint, sum(r.finished)::bigint
FROM {schema}.rates r CROSS JOIN now
WHERE r.second > now.ms / 1000 - %(seconds)s
GROUP BY r.queue;
