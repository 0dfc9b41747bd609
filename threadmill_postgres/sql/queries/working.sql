-- threadmill_postgres, working: claiming tasks, renewing and deciding their leases
-- (PostgresBackend.claim, extend_many, mark_started, decide_many, release).
-- Every query of this file is documented by the comment lines under its name;
-- queries.py says how the files are read and the conventions they keep.

-- name: claim --
-- Promote the due DEFERRED tasks of the queues, then take up to ``limit``
-- tasks to RUNNING, queues in the order given, each in READY order, and leave
-- a receipt of the call when it took any.
--
-- Params: queues (unique, best first), worker, ttl (lease ms), limit,
-- request (32 hex digits, fresh per call), channel. Tokens are
-- ``<request>-<n>``, n being the lease's place in the answer.
--
-- Promoted tasks enter READY after every task there, in DEFERRED order, so
-- they compete with the READY ones by priority and then that place; those
-- not taken stay READY and their queues are woken. Each queue offers at most
-- ``limit`` candidates (`FOR UPDATE SKIP LOCKED`: tasks another claim holds
-- are passed over, never waited for), and the best ``limit`` of all are taken.
--
-- Rows, best first: n, then what `rows.lease` reads: token, deadline,
-- `rows.TASK_COLUMNS` and the task's count of give-backs. An empty answer
-- leaves nothing.
WITH now AS MATERIALIZED (SELECT {schema}.now_ms() AS ms),
wanted AS (
    SELECT w.queue, w.pos FROM unnest(%(queues)s::text[]) WITH ORDINALITY AS w (queue, pos)
),
due AS MATERIALIZED (
    SELECT t.id, t.queue, t.priority, t.run_after FROM {schema}.tasks t
    WHERE t.status = 'DEFERRED' AND t.queue = ANY(%(queues)s::text[])
        AND t.run_after <= (SELECT ms FROM now)
    ORDER BY t.run_after, t.id
    FOR UPDATE SKIP LOCKED
),
due_asked AS MATERIALIZED (
    SELECT id, row_number() OVER (ORDER BY run_after, id) AS k FROM due
),
promoted_drawn AS MATERIALIZED (
    SELECT v, row_number() OVER (ORDER BY v) AS k
    FROM (SELECT nextval('{schema}.ready_order') AS v FROM due_asked) drawn
),
promoted AS MATERIALIZED (
    SELECT a.id, d.v AS ready_order FROM due_asked a JOIN promoted_drawn d ON d.k = a.k
),
ready AS MATERIALIZED (
    SELECT r.id, w.pos, r.priority, r.ready_order
    FROM wanted w CROSS JOIN LATERAL (
        SELECT t.id, t.priority, t.ready_order FROM {schema}.tasks t
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
    INSERT INTO {schema}.claims (request, expires)
    SELECT %(request)s, now.ms + %(ttl)s FROM now WHERE EXISTS (SELECT 1 FROM chosen)
),
receipts_pruned AS (
    DELETE FROM {schema}.claims c WHERE c.request = ANY(ARRAY(
        SELECT request FROM {schema}.claims WHERE expires <= (SELECT ms FROM now)
        ORDER BY expires LIMIT 2 FOR UPDATE SKIP LOCKED
    ))
),
running AS (
    UPDATE {schema}.tasks t SET
        status = 'RUNNING', ready_order = NULL,
        token = %(request)s || '-' || c.n, deadline = now.ms + %(ttl)s, started = false,
        cancel_requested_at = NULL,
        attempts = t.attempts + 1, last_attempted_at = now.ms,
        started_at = coalesce(t.started_at, now.ms),
        worker_ids = array_append(t.worker_ids, %(worker)s::text)
    FROM chosen c CROSS JOIN now
    WHERE t.id = c.id
    RETURNING c.n, t.token, t.deadline,
        t.id, t.queue, t.priority, t.status, t.payload, t.run_after, t.enqueued_at,
        t.started_at, t.last_attempted_at, t.finished_at, t.attempts, t.errors, t.worker_ids,
        t.return_value, t.progress, t.cancel_requested_at,
        t.unstarted_expiries
),
waiting AS (
    UPDATE {schema}.tasks t SET status = 'READY', ready_order = p.ready_order
    FROM promoted p
    WHERE t.id = p.id AND NOT EXISTS (SELECT 1 FROM chosen c WHERE c.id = p.id)
    RETURNING t.queue
),
notified AS (
    SELECT pg_notify(%(channel)s, left(q.queue, 1000))
    FROM (SELECT DISTINCT queue FROM (SELECT queue FROM waiting) woken) q
)
SELECT r.* FROM running r CROSS JOIN (SELECT count(*) FROM notified) announced
ORDER BY r.n;

-- name: claim_burn --
-- The first part of repeating a claim whose reply was lost: take the call's
-- receipt. Waits while a first send holding it is in flight. A row back means
-- it was free: that send took nothing, and now never will (should it still
-- run, its own receipt fails as a duplicate). No row means the first send
-- committed: claim_found reads its leases.
--
-- Params: request, ttl.
WITH now AS MATERIALIZED (SELECT {schema}.now_ms() AS ms)
INSERT INTO {schema}.claims (request, expires) SELECT %(request)s, now.ms + %(ttl)s FROM now
ON CONFLICT (request) DO NOTHING
RETURNING request;

-- name: claim_found --
-- The leases a committed claim granted, those still held under their tokens.
--
-- Params: request. Rows as claim's.
SELECT split_part(t.token, '-', 2)::bigint AS n, t.token, t.deadline,
    t.id, t.queue, t.priority, t.status, t.payload, t.run_after, t.enqueued_at,
    t.started_at, t.last_attempted_at, t.finished_at, t.attempts, t.errors, t.worker_ids,
    t.return_value, t.progress, t.cancel_requested_at,
    t.unstarted_expiries
FROM {schema}.tasks t
WHERE t.status = 'RUNNING' AND left(t.token, 33) = %(request)s || '-'
ORDER BY n;

-- name: extend_many --
-- Renew leases whose token is current and whose task is RUNNING.
--
-- Params: ids, tokens (arrays in step), ttl (lease ms).
-- Rows, in call order: n, the new deadline (NULL: refused), the task's
-- progress and cancel request.
WITH now AS MATERIALIZED (SELECT {schema}.now_ms() AS ms),
given AS (
    SELECT * FROM unnest(%(ids)s::text[], %(tokens)s::text[]) WITH ORDINALITY AS g (id, token, n)
),
held AS MATERIALIZED (
    SELECT t.id FROM {schema}.tasks t WHERE t.id = ANY(%(ids)s::text[]) ORDER BY t.id FOR UPDATE
),
renewed AS (
    UPDATE {schema}.tasks t SET deadline = now.ms + %(ttl)s
    FROM now
    WHERE t.id IN (SELECT id FROM held) AND t.status = 'RUNNING'
        AND t.token IN (SELECT g.token FROM given g WHERE g.id = t.id)
    RETURNING t.id, t.token, t.deadline, t.progress, t.cancel_requested_at
)
SELECT g.n, r.deadline, r.progress, r.cancel_requested_at
FROM given g LEFT JOIN renewed r ON r.id = g.id AND r.token = g.token
ORDER BY g.n;

-- name: mark_started --
-- Record that claimed tasks began to run: ``started`` of each task whose
-- token is the lease's, a worker's claim (a reaper's token starts with
-- ``r``), while it is RUNNING. A claim marked already is marked again,
-- changing nothing a reader sees.
--
-- Params: ids, tokens (arrays in step). Rows, in call order: n, marked.
WITH given AS (
    SELECT * FROM unnest(%(ids)s::text[], %(tokens)s::text[]) WITH ORDINALITY AS g (id, token, n)
),
held AS MATERIALIZED (
    SELECT t.id FROM {schema}.tasks t WHERE t.id = ANY(%(ids)s::text[]) ORDER BY t.id FOR UPDATE
),
marked AS (
    UPDATE {schema}.tasks t SET started = true
    WHERE t.id IN (SELECT id FROM held) AND t.status = 'RUNNING' AND left(t.token, 1) <> 'r'
        AND t.token IN (SELECT g.token FROM given g WHERE g.id = t.id)
    RETURNING t.id, t.token
)
SELECT g.n, m.id IS NOT NULL
FROM given g LEFT JOIN marked m ON m.id = g.id AND m.token = g.token
ORDER BY g.n;

-- name: record_progress --
-- Store the progress running tasks reported: ``progress`` of each task whose
-- token is the lease's while it is RUNNING becomes the update's head
-- completed with the database's time (see `rows.progress_head`). Of a task
-- given twice, the last accepted update is kept.
--
-- Params: ids, tokens, heads (arrays in step). Rows, in call order: n, stored.
WITH now AS MATERIALIZED (SELECT {schema}.now_ms() AS ms),
given AS (
    SELECT * FROM unnest(%(ids)s::text[], %(tokens)s::text[], %(heads)s::bytea[])
        WITH ORDINALITY AS g (id, token, head, n)
),
held AS MATERIALIZED (
    SELECT t.id, t.token FROM {schema}.tasks t
    WHERE t.id = ANY(%(ids)s::text[]) AND t.status = 'RUNNING'
    ORDER BY t.id FOR UPDATE
),
last AS MATERIALIZED (
    SELECT DISTINCT ON (g.id) g.id, g.head
    FROM given g JOIN held h ON h.id = g.id AND h.token = g.token
    ORDER BY g.id, g.n DESC
),
stored AS (
    UPDATE {schema}.tasks t SET
        progress = l.head || convert_to(now.ms::text || '}', 'UTF8')
    FROM last l CROSS JOIN now
    WHERE t.id = l.id
    RETURNING t.id
)
SELECT g.n, h.id IS NOT NULL
FROM given g LEFT JOIN held h ON h.id = g.id AND h.token = g.token
    CROSS JOIN (SELECT count(*) FROM stored) written
ORDER BY g.n;

-- name: decide_many --
-- Apply `complete` / `retry` decisions, each fenced on its own.
--
-- Params: ids, tokens, targets (SUCCESSFUL, FAILED or CANCELLED to complete,
-- READY for a zero-delay retry, DEFERRED for a later one), delays (ms),
-- errors, results (codec bytes or NULL; arrays in step), ttl, prune, channel.
-- A retry of a task with a cancel request finalizes it CANCELLED instead.
--
-- Of the decisions on one task, the first whose token is current applies, if
-- the task is RUNNING; zero-delay retries enter READY in call order. The
-- others change nothing here: the caller answers them (a repeat, or refused)
-- from the state this returns.
--
-- Rows, in call order: n; current (the token is the task's); applied; the
-- task's status, run_after and finished_at after the statement; and, where
-- the task was not changed here, its stored errors and result; then its
-- progress and cancel request (which no decision changes).
WITH now AS MATERIALIZED (SELECT {schema}.now_ms() AS ms),
given AS (
    SELECT * FROM unnest(%(ids)s::text[], %(tokens)s::text[], %(targets)s::text[],
                         %(delays)s::bigint[], %(errors)s::bytea[], %(results)s::bytea[])
        WITH ORDINALITY AS g (id, token, target, delay, errors, result, n)
),
held AS MATERIALIZED (
    SELECT t.id, t.token, t.status, t.run_after, t.finished_at, t.errors, t.return_value,
        t.progress, t.cancel_requested_at
    FROM {schema}.tasks t WHERE t.id = ANY(%(ids)s::text[]) ORDER BY t.id FOR UPDATE
),
chosen AS MATERIALIZED (
    SELECT DISTINCT ON (g.id) g.id, g.n, g.delay, g.errors, g.result,
        CASE WHEN g.target IN ('READY', 'DEFERRED') AND h.cancel_requested_at IS NOT NULL
             THEN 'CANCELLED' ELSE g.target END AS target
    FROM given g JOIN held h ON h.id = g.id AND h.token = g.token AND h.status = 'RUNNING'
        -- A corrupt time is refused: the reaper's claim quarantines the task.
        AND coalesce(h.run_after BETWEEN -62135596800000 AND 253402300799999, true)
    ORDER BY g.id, g.n
),
requeued_asked AS MATERIALIZED (
    SELECT id, row_number() OVER (ORDER BY n) AS k FROM chosen WHERE target = 'READY'
),
requeued_drawn AS MATERIALIZED (
    SELECT v, row_number() OVER (ORDER BY v) AS k
    FROM (SELECT nextval('{schema}.ready_order') AS v FROM requeued_asked) drawn
),
requeued AS MATERIALIZED (
    SELECT a.id, d.v AS ready_order FROM requeued_asked a JOIN requeued_drawn d ON d.k = a.k
),
decided AS (
    UPDATE {schema}.tasks t SET
        status = c.target,
        errors = c.errors,
        return_value = CASE WHEN c.target = 'SUCCESSFUL' THEN c.result END,
        finished_at = CASE WHEN c.target IN ('SUCCESSFUL', 'FAILED', 'CANCELLED')
                           THEN now.ms END,
        run_after = CASE WHEN c.target = 'DEFERRED' THEN now.ms + c.delay ELSE t.run_after END,
        ready_order = q.ready_order,
        deadline = NULL
    FROM chosen c LEFT JOIN requeued q ON q.id = c.id CROSS JOIN now
    WHERE t.id = c.id
    RETURNING t.id, t.queue, t.status, t.run_after, t.finished_at
),
counted AS (
    INSERT INTO {schema}.rates AS r (second, queue, shard, finished)
    SELECT now.ms / 1000, c.queue, pg_backend_pid(), count(*)
    FROM (SELECT queue FROM decided WHERE status IN ('SUCCESSFUL', 'FAILED', 'CANCELLED')) c
        CROSS JOIN now
    GROUP BY now.ms, c.queue
    ON CONFLICT (second, queue, shard)
        DO UPDATE SET finished = r.finished + EXCLUDED.finished
),
rates_trimmed AS (
    DELETE FROM {schema}.rates r WHERE r.ctid = ANY(ARRAY(
        SELECT ctid FROM {schema}.rates
        WHERE second < (SELECT ms FROM now) / 1000 - 3600
        LIMIT 4 FOR UPDATE SKIP LOCKED
    ))
),
expired AS (
    DELETE FROM {schema}.tasks t WHERE t.id = ANY(ARRAY(
        SELECT id FROM {schema}.tasks
        WHERE finished_at <= (SELECT ms FROM now) - %(ttl)s
        ORDER BY finished_at LIMIT %(prune)s FOR UPDATE SKIP LOCKED
    ))
),
notified AS (
    SELECT pg_notify(%(channel)s, left(q.queue, 1000))
    FROM (SELECT DISTINCT queue FROM (SELECT queue FROM decided WHERE status = 'READY') woken) q
)
SELECT g.n,
    coalesce(h.token = g.token, false) AS current,
    coalesce(c.n = g.n, false) AS applied,
    CASE WHEN d.id IS NULL THEN h.status ELSE d.status END,
    CASE WHEN d.id IS NULL THEN h.run_after ELSE d.run_after END,
    CASE WHEN d.id IS NULL THEN h.finished_at ELSE d.finished_at END,
    CASE WHEN d.id IS NULL AND h.token = g.token THEN h.errors END,
    CASE WHEN d.id IS NULL AND h.token = g.token THEN h.return_value END,
    h.progress, h.cancel_requested_at
FROM given g
    LEFT JOIN held h ON h.id = g.id
    LEFT JOIN chosen c ON c.id = g.id
    LEFT JOIN decided d ON d.id = g.id
    CROSS JOIN (SELECT count(*) FROM notified) announced
ORDER BY g.n;

-- name: release --
-- Give back claimed tasks that never started: to the READY tail in call
-- order (DEFERRED due at now + delay when the delay is above zero), the claim
-- undone (see `Backend.release`), the token cleared. A claim whose start was
-- recorded, and a reaper's, are refused. A task with a cancel request is
-- finalized CANCELLED instead of going back (its claim undone all the same).
--
-- Params: ids, tokens (arrays in step), delay (ms), channel.
-- Rows, in call order: n, then (NULL when refused) attempts, worker_ids,
-- started_at, last_attempted_at, status, run_after and finished_at after the
-- release, its progress and cancel request.
WITH now AS MATERIALIZED (SELECT {schema}.now_ms() AS ms),
given AS (
    SELECT * FROM unnest(%(ids)s::text[], %(tokens)s::text[]) WITH ORDINALITY AS g (id, token, n)
),
held AS MATERIALIZED (
    SELECT t.id, t.token, t.status, t.started, t.cancel_requested_at FROM {schema}.tasks t
    WHERE t.id = ANY(%(ids)s::text[]) ORDER BY t.id FOR UPDATE
),
chosen AS MATERIALIZED (
    SELECT DISTINCT ON (g.id) g.id, g.n, h.cancel_requested_at IS NOT NULL AS requested
    FROM given g JOIN held h ON h.id = g.id AND h.token = g.token AND h.status = 'RUNNING'
        AND NOT h.started AND left(h.token, 1) <> 'r'
    ORDER BY g.id, g.n
),
asked AS MATERIALIZED (
    SELECT id, row_number() OVER (ORDER BY n) AS k FROM chosen WHERE NOT requested
),
placed_drawn AS MATERIALIZED (
    SELECT v, row_number() OVER (ORDER BY v) AS k
    FROM (SELECT nextval('{schema}.ready_order') AS v FROM asked) drawn
),
placed AS MATERIALIZED (
    SELECT a.id, d.v AS ready_order FROM asked a JOIN placed_drawn d ON d.k = a.k
),
released AS (
    UPDATE {schema}.tasks t SET
        status = CASE WHEN c.requested THEN 'CANCELLED'
            WHEN %(delay)s::bigint > 0 THEN 'DEFERRED' ELSE 'READY' END,
        ready_order = CASE WHEN %(delay)s::bigint > 0 THEN NULL ELSE p.ready_order END,
        run_after = CASE WHEN %(delay)s::bigint > 0 AND NOT c.requested
            THEN now.ms + %(delay)s::bigint ELSE t.run_after END,
        finished_at = CASE WHEN c.requested THEN now.ms END,
        token = NULL, deadline = NULL,
        attempts = greatest(t.attempts - 1, 0),
        worker_ids = t.worker_ids[1:cardinality(t.worker_ids) - 1],
        started_at = CASE WHEN t.attempts > 1 THEN t.started_at END,
        last_attempted_at = CASE WHEN t.attempts > 1 THEN t.last_attempted_at END
    FROM chosen c LEFT JOIN placed p ON p.id = c.id CROSS JOIN now
    WHERE t.id = c.id
    RETURNING t.id, t.queue, t.attempts, t.worker_ids, t.started_at, t.last_attempted_at,
        t.status, t.run_after, t.finished_at, t.progress, t.cancel_requested_at
),
counted AS (
    INSERT INTO {schema}.rates AS r (second, queue, shard, finished)
    SELECT now.ms / 1000, c.queue, pg_backend_pid(), count(*)
    FROM (SELECT queue FROM released WHERE status = 'CANCELLED') c CROSS JOIN now
    GROUP BY now.ms, c.queue
    ON CONFLICT (second, queue, shard)
        DO UPDATE SET finished = r.finished + EXCLUDED.finished
),
notified AS (
    SELECT pg_notify(%(channel)s, left(q.queue, 1000))
    FROM (SELECT DISTINCT queue FROM (SELECT queue FROM released WHERE status <> 'CANCELLED') woken) q
)
SELECT g.n, r.attempts, r.worker_ids, r.started_at, r.last_attempted_at, r.status, r.run_after,
    r.finished_at, r.progress, r.cancel_requested_at
FROM given g
    LEFT JOIN chosen c ON c.n = g.n
    LEFT JOIN released r ON r.id = c.id
    CROSS JOIN (SELECT count(*) FROM notified) announced
ORDER BY g.n;

-- name: quarantine --
-- Finalize undecodable claimed tasks FAILED, fenced by the claim's token,
-- with a stand-in payload, errors that say why and a priority in bounds (see
-- `rows.stand_in`). A timestamp column no datetime can hold is reset
-- (``enqueued_at`` to now, the others to NULL), so the record reads back.
--
-- Params: ids, tokens, payloads, errors, priorities (arrays in step).
-- Rows: how many were finalized.
WITH now AS MATERIALIZED (SELECT {schema}.now_ms() AS ms),
given AS (
    SELECT * FROM unnest(%(ids)s::text[], %(tokens)s::text[], %(payloads)s::bytea[],
                         %(errors)s::bytea[], %(priorities)s::smallint[])
        AS g (id, token, payload, errors, priority)
),
poisoned AS (
    UPDATE {schema}.tasks t SET
        status = 'FAILED', finished_at = now.ms, token = NULL, deadline = NULL,
        ready_order = NULL, payload = g.payload, errors = g.errors, return_value = NULL,
        priority = g.priority,
        enqueued_at = CASE WHEN t.enqueued_at BETWEEN -62135596800000 AND 253402300799999
                           THEN t.enqueued_at ELSE now.ms END,
        run_after = CASE WHEN t.run_after BETWEEN -62135596800000 AND 253402300799999
                         THEN t.run_after END,
        started_at = CASE WHEN t.started_at BETWEEN -62135596800000 AND 253402300799999
                          THEN t.started_at END,
        last_attempted_at = CASE WHEN t.last_attempted_at
                                      BETWEEN -62135596800000 AND 253402300799999
                                 THEN t.last_attempted_at END
    FROM given g CROSS JOIN now
    WHERE t.id = g.id AND t.token = g.token AND t.status = 'RUNNING'
    RETURNING t.queue
),
counted AS (
    INSERT INTO {schema}.rates AS r (second, queue, shard, finished)
    SELECT now.ms / 1000, c.queue, pg_backend_pid(), count(*)
    FROM (SELECT queue FROM poisoned) c CROSS JOIN now GROUP BY now.ms, c.queue
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
SELECT count(*) FROM poisoned;
