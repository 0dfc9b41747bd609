-- threadmill_postgres, maintenance: the reaper, the supervisor, promotion of due
-- tasks and the looks an idle worker takes (PostgresBackend.claim_expired,
-- expire_leases, promote_due, next_due, wait_for_tasks).
-- Every query of this file is documented by the comment lines under its name;
-- queries.py says how the files are read and the conventions they keep.

-- name: claim_expired --
-- The reaper's pass (see `Backend.claim_expired`) over up to ``scan``
-- expired leases, oldest deadline first. A worker's claim whose start was
-- never recorded goes to the READY tail (in deadline order) with the claim
-- undone as release undoes it and ``unstarted_expiries`` one higher. Any other gets a reaper's
-- token (``r<request>-<n>``) and the deadline ``now + ttl``; nothing else
-- changes (it is not an attempt). A task with a cancel request is finalized
-- CANCELLED instead, whatever its claim (an unstarted worker's claim undone and
-- counted as a give-back first), its token cleared, and not counted as a
-- claim. The pass stops at its ``limit``-th claim: expired leases after it
-- are left as they are.
--
-- Params: limit, scan (at least limit), ttl (claim ms), request,
-- channel. Rows: one per reaper claim, oldest deadline first: how many
-- expired leases the pass looked at (``scan`` of them: more may be left),
-- then the columns of claim's rows. With no claim, one row: that count,
-- then NULLs.
WITH now AS MATERIALIZED (SELECT {schema}.now_ms() AS ms),
picked AS MATERIALIZED (
    SELECT t.id, t.deadline,
        NOT t.started AND left(t.token, 1) <> 'r' AS give,
        t.cancel_requested_at IS NOT NULL AS requested
    FROM {schema}.tasks t
    WHERE t.status = 'RUNNING' AND t.deadline <= (SELECT ms FROM now)
    ORDER BY t.deadline, t.id
    LIMIT %(scan)s
    FOR UPDATE SKIP LOCKED
),
ranked AS MATERIALIZED (
    SELECT id, deadline, give, requested,
        count(*) FILTER (WHERE NOT give AND NOT requested) OVER (ORDER BY deadline, id) AS claims
    FROM picked
),
claimed AS MATERIALIZED (
    SELECT id, claims AS n FROM ranked WHERE NOT give AND NOT requested AND claims <= %(limit)s
),
asked AS MATERIALIZED (
    SELECT id, row_number() OVER (ORDER BY deadline, id) AS k
    FROM ranked WHERE give AND NOT requested AND claims < %(limit)s
),
cancelled AS (
    UPDATE {schema}.tasks t SET
        status = 'CANCELLED', finished_at = now.ms, token = NULL, deadline = NULL,
        attempts = CASE WHEN r.give THEN greatest(t.attempts - 1, 0) ELSE t.attempts END,
        worker_ids = CASE WHEN r.give THEN t.worker_ids[1:cardinality(t.worker_ids) - 1]
                          ELSE t.worker_ids END,
        started_at = CASE WHEN NOT r.give OR t.attempts > 1 THEN t.started_at END,
        last_attempted_at = CASE WHEN NOT r.give OR t.attempts > 1
                                 THEN t.last_attempted_at END,
        unstarted_expiries = t.unstarted_expiries + CASE WHEN r.give THEN 1 ELSE 0 END
    FROM ranked r CROSS JOIN now
    WHERE t.id = r.id AND r.requested AND r.claims < %(limit)s
    RETURNING t.queue
),
counted AS (
    INSERT INTO {schema}.rates AS r (second, queue, shard, finished)
    SELECT now.ms / 1000, c.queue, pg_backend_pid(), count(*)
    FROM (SELECT queue FROM cancelled) c CROSS JOIN now GROUP BY now.ms, c.queue
    ON CONFLICT (second, queue, shard)
        DO UPDATE SET finished = r.finished + EXCLUDED.finished
),
placed_drawn AS MATERIALIZED (
    SELECT v, row_number() OVER (ORDER BY v) AS k
    FROM (SELECT nextval('{schema}.ready_order') AS v FROM asked) drawn
),
placed AS MATERIALIZED (
    SELECT a.id, d.v AS ready_order FROM asked a JOIN placed_drawn d ON d.k = a.k
),
given_back AS (
    UPDATE {schema}.tasks t SET
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
notified AS (
    SELECT pg_notify(%(channel)s, left(q.queue, 1000))
    FROM (SELECT DISTINCT queue FROM (SELECT queue FROM given_back) woken) q
),
reaped AS (
    UPDATE {schema}.tasks t SET
        token = 'r' || %(request)s || '-' || c.n, deadline = now.ms + %(ttl)s
    FROM claimed c CROSS JOIN now
    WHERE t.id = c.id
    RETURNING c.n, t.token, t.deadline,
        t.id, t.queue, t.priority, t.status, t.payload, t.run_after, t.enqueued_at,
        t.started_at, t.last_attempted_at, t.finished_at, t.attempts, t.errors, t.worker_ids,
        t.return_value, t.progress, t.cancel_requested_at,
        t.unstarted_expiries
)
SELECT (SELECT count(*) FROM picked) AS looked, r.*
FROM (SELECT count(*) FROM notified) announced LEFT JOIN reaped r ON true
ORDER BY r.n;

-- name: expire_leases --
-- Expire at once the live leases of a dead worker: every RUNNING task whose
-- deadline is later than now, held by a worker's claim (a reaper's token
-- starts with ``r``) by ``worker`` (the last of its ``worker_ids``), gets
-- the deadline now; `claim_expired` decides it at its next pass. The rows
-- are locked in id order, as every statement that names rows locks them,
-- and judged again once locked (a decision in flight moves a task on).
--
-- Params: worker. Row: how many leases were expired.
WITH now AS MATERIALIZED (SELECT {schema}.now_ms() AS ms),
live AS MATERIALIZED (
    SELECT t.id FROM {schema}.tasks t
    WHERE t.status = 'RUNNING' AND t.deadline > (SELECT ms FROM now)
        AND left(t.token, 1) <> 'r'
        AND t.worker_ids[cardinality(t.worker_ids)] = %(worker)s
    ORDER BY t.id
    FOR UPDATE
),
expired AS (
    UPDATE {schema}.tasks t SET deadline = now.ms
    FROM now
    WHERE t.id IN (SELECT id FROM live)
    RETURNING t.id
)
SELECT count(*) FROM expired;

-- name: promote_due --
-- Move up to ``limit`` due DEFERRED tasks (any queue) to READY, in DEFERRED
-- order, and wake their queues; delete expired results and lapsed receipts,
-- ``prune`` of each at most. A due time past any datetime (a corrupt row)
-- counts as due, after the others: the claim that takes it quarantines it
-- (see `rows.record`); it is looked for in a range of its own, so the scan of
-- what is due stops where it always did.
--
-- Params: limit, ttl, prune, channel. Row: how many were promoted.
WITH now AS MATERIALIZED (SELECT {schema}.now_ms() AS ms),
due_now AS MATERIALIZED (
    SELECT t.id, t.run_after FROM {schema}.tasks t
    WHERE t.status = 'DEFERRED' AND t.run_after <= (SELECT ms FROM now)
    ORDER BY t.run_after, t.id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
due_corrupt AS MATERIALIZED (
    SELECT t.id, t.run_after FROM {schema}.tasks t
    WHERE t.status = 'DEFERRED' AND t.run_after > 253402300799999
    ORDER BY t.run_after, t.id
    LIMIT (SELECT %(limit)s - count(*) FROM due_now)
    FOR UPDATE SKIP LOCKED
),
due AS (SELECT * FROM due_now UNION ALL SELECT * FROM due_corrupt),
asked AS MATERIALIZED (SELECT id, row_number() OVER (ORDER BY run_after, id) AS k FROM due),
placed_drawn AS MATERIALIZED (
    SELECT v, row_number() OVER (ORDER BY v) AS k
    FROM (SELECT nextval('{schema}.ready_order') AS v FROM asked) drawn
),
placed AS MATERIALIZED (
    SELECT a.id, d.v AS ready_order FROM asked a JOIN placed_drawn d ON d.k = a.k
),
promoted AS (
    UPDATE {schema}.tasks t SET status = 'READY', ready_order = p.ready_order
    FROM placed p WHERE t.id = p.id
    RETURNING t.queue
),
expired AS (
    DELETE FROM {schema}.tasks t WHERE t.id = ANY(ARRAY(
        SELECT id FROM {schema}.tasks
        WHERE finished_at <= (SELECT ms FROM now) - %(ttl)s
        ORDER BY finished_at LIMIT %(prune)s FOR UPDATE SKIP LOCKED
    ))
),
receipts_pruned AS (
    DELETE FROM {schema}.claims c WHERE c.request = ANY(ARRAY(
        SELECT request FROM {schema}.claims WHERE expires <= (SELECT ms FROM now)
        ORDER BY expires LIMIT %(prune)s FOR UPDATE SKIP LOCKED
    ))
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
    FROM (SELECT DISTINCT queue FROM (SELECT queue FROM promoted) woken) q
)
SELECT (SELECT count(*) FROM promoted), (SELECT count(*) FROM notified);

-- name: next_due --
-- Milliseconds until the earliest DEFERRED task falls due (negative once due);
-- NULL when none is DEFERRED. One read of the ``tasks_due`` index. A due time
-- out of any datetime's range (a corrupt row) counts as due now, as in
-- promote_due.
SELECT CASE WHEN first NOT BETWEEN -62135596800000 AND 253402300799999 THEN 0
            ELSE first - {schema}.now_ms() END
FROM (
    SELECT (SELECT t.run_after FROM {schema}.tasks t WHERE t.status = 'DEFERRED'
            ORDER BY t.run_after LIMIT 1) AS first
) earliest;

-- name: has_work --
-- Whether a task is READY, or DEFERRED and due, in any of the queues: the look
-- `wait_for_tasks` takes when it cannot tell from wake-ups alone.
--
-- Params: queues.
SELECT EXISTS (
    SELECT 1 FROM {schema}.tasks t WHERE t.status = 'READY' AND t.queue = ANY(%(queues)s::text[])
) OR EXISTS (
    SELECT 1 FROM {schema}.tasks t WHERE t.status = 'DEFERRED' AND t.queue = ANY(%(queues)s::text[])
        AND t.run_after <= {schema}.now_ms()
);
