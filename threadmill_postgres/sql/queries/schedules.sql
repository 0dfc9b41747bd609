-- threadmill_postgres, schedules: their pause states, in the table ``schedules``
-- of schema version 2 (PostgresBackend.set_schedule_paused, schedule_pauses).
-- Every query of this file is documented by the comment lines under its name;
-- queries.py says how the files are read and the conventions they keep.

-- name: set_schedule_paused --
-- Pause or resume a schedule: an upsert that changes the row only when its
-- flag changes. Params: name, paused. Row: the flag and since when, as they
-- stand after it.
WITH changed AS (
    INSERT INTO {schema}.schedules AS known (name, paused, since)
    VALUES (%(name)s, %(paused)s, {schema}.now_ms())
    ON CONFLICT (name) DO UPDATE SET paused = EXCLUDED.paused, since = EXCLUDED.since
        WHERE known.paused IS DISTINCT FROM EXCLUDED.paused
    RETURNING paused, since
)
SELECT paused, since FROM changed
UNION ALL
SELECT paused, since FROM {schema}.schedules
WHERE name = %(name)s AND NOT EXISTS (SELECT 1 FROM changed);

-- name: schedule_pauses --
-- Every schedule's state. Rows: name, paused, since.
SELECT name, paused, since FROM {schema}.schedules;
