-- threadmill_postgres, live workers: the table ``live_workers`` of schema version 3
-- (PostgresBackend.register_worker, unregister_worker, workers). Each query first
-- deletes the entries whose time is up.
-- Every query of this file is documented by the comment lines under its name;
-- queries.py says how the files are read and the conventions they keep.

-- name: register_worker --
-- Store a worker's entry, lapsing ``ttl`` ms from now. The row being written is
-- left out of the pruning: one statement must not change a row twice.
-- Params: id, entry, ttl. Row: when it was seen (now).
WITH clock AS (SELECT {schema}.now_ms() AS ms),
pruned AS (
    DELETE FROM {schema}.live_workers
    WHERE expires <= (SELECT ms FROM clock) AND id <> %(id)s
)
INSERT INTO {schema}.live_workers AS known (id, entry, last_seen, expires)
SELECT %(id)s, %(entry)s, ms, ms + %(ttl)s FROM clock
ON CONFLICT (id) DO UPDATE
    SET entry = EXCLUDED.entry, last_seen = EXCLUDED.last_seen, expires = EXCLUDED.expires
RETURNING last_seen;

-- name: unregister_worker --
-- Delete a worker's entry. Params: id. Row: 1 if it was there and live, else 0.
WITH clock AS (SELECT {schema}.now_ms() AS ms),
pruned AS (
    DELETE FROM {schema}.live_workers
    WHERE expires <= (SELECT ms FROM clock) AND id <> %(id)s
),
gone AS (DELETE FROM {schema}.live_workers WHERE id = %(id)s RETURNING expires)
SELECT count(*) FROM gone WHERE expires > (SELECT ms FROM clock);

-- name: workers --
-- The live entries, by id. The SELECT sees the table as it was before the
-- DELETE: its own filter leaves the dead out. Rows: entry, last_seen.
WITH clock AS (SELECT {schema}.now_ms() AS ms),
pruned AS (DELETE FROM {schema}.live_workers WHERE expires <= (SELECT ms FROM clock))
SELECT entry, last_seen FROM {schema}.live_workers
WHERE expires > (SELECT ms FROM clock)
ORDER BY id;
