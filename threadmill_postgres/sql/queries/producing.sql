-- threadmill_postgres, producing: storing new tasks (PostgresBackend.enqueue and
-- enqueue_on; see producing.py).
-- Every query of this file is documented by the comment lines under its name;
-- queries.py says how the files are read and the conventions they keep.

-- name: enqueue --
-- Store new tasks; answer, per record given, what is stored under its id.
--
-- Params: ids (unique), queues, priorities, run_after (ms or NULL), payloads
-- (arrays in step), ttl, channel, guard. With ``guard`` true, a batch some of
-- whose ids are stored (and live) inserts nothing: the caller decodes what is
-- stored first (poison raises before anything changes), then sends the rest
-- with ``guard`` false. A stored result that expired is replaced, as if gone.
--
-- Rows, in call order: n, now_ms, status (set when stored now), then
-- `rows.TASK_COLUMNS` of what was stored before (NULL for new). A row with
-- neither lost a race with another enqueue of that id; the caller reads it.
WITH now AS MATERIALIZED (SELECT {schema}.now_ms() AS ms),
given AS (
    SELECT * FROM unnest(%(ids)s::text[], %(queues)s::text[], %(priorities)s::smallint[],
                         %(run_after)s::bigint[], %(payloads)s::bytea[])
        WITH ORDINALITY AS g (id, queue, priority, run_after, payload, n)
),
stored AS MATERIALIZED (
    SELECT t.id, t.queue, t.priority, t.status, t.payload, t.run_after, t.enqueued_at,
        t.started_at, t.last_attempted_at, t.finished_at, t.attempts, t.errors, t.worker_ids,
        t.return_value, t.progress, t.cancel_requested_at
    FROM {schema}.tasks t CROSS JOIN now
    WHERE t.id = ANY(%(ids)s::text[])
        AND (t.finished_at IS NULL OR t.finished_at > now.ms - %(ttl)s)
),
ready_asked AS MATERIALIZED (
    SELECT g.id, row_number() OVER (ORDER BY g.n) AS k FROM given g CROSS JOIN now
    WHERE g.run_after IS NULL OR g.run_after <= now.ms
),
ready_places_drawn AS MATERIALIZED (
    SELECT v, row_number() OVER (ORDER BY v) AS k
    FROM (SELECT nextval('{schema}.ready_order') AS v FROM ready_asked) drawn
),
ready_places AS MATERIALIZED (
    SELECT a.id, d.v AS ready_order FROM ready_asked a JOIN ready_places_drawn d ON d.k = a.k
),
added AS (
    INSERT INTO {schema}.tasks AS t
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
           NULL, NULL, NULL, 0, '{}', EXCLUDED.errors, NULL, false, 0)
        WHERE t.finished_at <= EXCLUDED.enqueued_at - %(ttl)s
    RETURNING t.id, t.queue, t.status
),
counted AS (
    INSERT INTO {schema}.rates AS r (second, queue, shard, entered)
    SELECT now.ms / 1000, c.queue, pg_backend_pid(), count(*)
    FROM (SELECT queue FROM added) c CROSS JOIN now GROUP BY now.ms, c.queue
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
    FROM (SELECT DISTINCT queue FROM (SELECT queue FROM added) woken) q
)
SELECT g.n, now.ms, a.status, s.*
FROM given g CROSS JOIN now
    LEFT JOIN added a ON a.id = g.id
    LEFT JOIN stored s ON s.id = g.id
    CROSS JOIN (SELECT count(*) FROM notified) announced
ORDER BY g.n;
