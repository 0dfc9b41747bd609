-- The threadmill_sqlite schema, version 3. Applied by `Database` on every
-- connect, inside one BEGIN IMMEDIATE ... COMMIT, so it is idempotent and two
-- processes opening a new file at once cannot both half-create it. An older
-- file is brought to version 3 in the same transaction (see
-- `_database.MIGRATIONS`): version 1 gains the columns `claim` and
-- `unstarted_expiries`, every RUNNING task reading as a claim never started;
-- version 2 gains `progress` and `cancel_requested_at`, both NULL (no
-- progress stored, no cancel requested).
--
-- A task is one row of threadmill_tasks. `payload` is the record as the
-- codec (threadmill_core.codec) encoded it at enqueue, with every field the
-- backend owns reset; it never changes and is never parsed by SQL. Every
-- field that changes after enqueue is a column beside it, so a claim or a
-- decision rewrites a few integers, never the user's arguments.
--
-- Times are integer milliseconds since the Unix epoch, read from SQLite's
-- clock inside the transaction that writes them (see backend.py).

CREATE TABLE IF NOT EXISTS threadmill_meta (
    name  TEXT PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;

-- schema_version: what this file describes; a different number is refused.
-- ready_seq: the backend-wide "entered READY" sequence (its last value).
INSERT OR IGNORE INTO threadmill_meta (name, value) VALUES ('schema_version', 3);
INSERT OR IGNORE INTO threadmill_meta (name, value) VALUES ('ready_seq', 0);

CREATE TABLE IF NOT EXISTS threadmill_tasks (
    id                TEXT PRIMARY KEY,
    queue             TEXT NOT NULL,
    priority          INTEGER NOT NULL,
    status            TEXT NOT NULL CHECK (status IN
                          ('READY', 'DEFERRED', 'RUNNING', 'SUCCESSFUL', 'FAILED', 'CANCELLED')),
    payload           BLOB NOT NULL,     -- codec bytes of the record as enqueued
    ready_seq         INTEGER,           -- READY: place in the entered-READY sequence
    run_after         INTEGER,           -- the record's run_after; DEFERRED: when it is due
    deadline          INTEGER,           -- RUNNING: the current lease's deadline
    token             TEXT,              -- the current lease's token, kept for repeats
    claim             TEXT NOT NULL DEFAULT 'unstarted' CHECK (claim IN
                          ('unstarted', 'started', 'reaper')),
                                         -- RUNNING: who holds the token: a worker's claim
                                         -- whose start is not recorded (or was never
                                         -- claimed), one whose start is, or the reaper
    unstarted_expiries INTEGER NOT NULL DEFAULT 0,
                                         -- expired unstarted claims given back, ever
    enqueued_at       INTEGER NOT NULL,
    started_at        INTEGER,
    last_attempted_at INTEGER,
    finished_at       INTEGER,           -- set exactly when the status is terminal
    attempts          INTEGER NOT NULL DEFAULT 0,
    worker_ids        BLOB NOT NULL,     -- codec bytes of a list of str
    errors            BLOB NOT NULL,     -- codec bytes of a list of TaskError
    return_value      BLOB,              -- codec bytes of the value; NULL unless SUCCESSFUL
    progress          BLOB,              -- codec bytes of the last Progress stored, or NULL
    cancel_requested_at INTEGER          -- when a cancel was requested while it ran, or NULL
);

-- One index per segment order. They are partial on the status, and every
-- query that walks a segment names its status as a literal, so SQLite can
-- use them. The `queue`-less twins serve the passes over all queues
-- (promote_due, claim_expired, dropping expired results).
CREATE INDEX IF NOT EXISTS threadmill_ready
    ON threadmill_tasks (queue, priority DESC, ready_seq) WHERE status = 'READY';
CREATE INDEX IF NOT EXISTS threadmill_deferred
    ON threadmill_tasks (queue, run_after, id) WHERE status = 'DEFERRED';
CREATE INDEX IF NOT EXISTS threadmill_due
    ON threadmill_tasks (run_after, id) WHERE status = 'DEFERRED';
CREATE INDEX IF NOT EXISTS threadmill_running
    ON threadmill_tasks (queue, deadline, id) WHERE status = 'RUNNING';
CREATE INDEX IF NOT EXISTS threadmill_expired
    ON threadmill_tasks (deadline, id) WHERE status = 'RUNNING';
CREATE INDEX IF NOT EXISTS threadmill_finished
    ON threadmill_tasks (queue, status, finished_at, id) WHERE finished_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS threadmill_expiry
    ON threadmill_tasks (finished_at) WHERE finished_at IS NOT NULL;
-- counts() reads only this one.
CREATE INDEX IF NOT EXISTS threadmill_segments
    ON threadmill_tasks (queue, status);

-- Telemetry for `rates`: per one-second bucket of the database's clock and
-- per queue, the tasks that entered the queue (enqueue, requeue) and those
-- that finished (SUCCESSFUL, FAILED, CANCELLED). Each counter is bumped by
-- the transaction that makes the change it counts, and that transaction
-- deletes buckets older than an hour, so the table holds at most 3,600 rows
-- per queue. The key leads with the bucket so both the trim and the window
-- read are one range of it. Added to version 1 without a bump: a file made
-- before gets the table on its next connect, and code from before ignores it.
CREATE TABLE IF NOT EXISTS threadmill_rates (
    bucket   INTEGER NOT NULL,              -- whole seconds since the Unix epoch
    queue    TEXT NOT NULL,
    entered  INTEGER NOT NULL DEFAULT 0,
    finished INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (bucket, queue)
) WITHOUT ROWID;

-- The schedules' pause states (`Backend.set_schedule_paused`): one row per
-- schedule ever paused or resumed, whether it is paused and since when (the
-- database's clock, milliseconds). Added to version 2 without a bump, as
-- threadmill_rates was to version 1: an older file gets it on its next connect.
CREATE TABLE IF NOT EXISTS threadmill_schedules (
    name   TEXT PRIMARY KEY,
    paused INTEGER NOT NULL,                -- 1 paused, 0 not
    since  INTEGER NOT NULL
) WITHOUT ROWID;

-- The live workers (`Backend.register_worker`): one row per worker process
-- alive, its entry as the worker packed it (JSON text), when it was last
-- seen and when the entry lapses (the database's clock, milliseconds).
-- Added to version 2 without a bump, as threadmill_schedules was.
CREATE TABLE IF NOT EXISTS threadmill_live_workers (
    id        TEXT PRIMARY KEY,
    entry     TEXT NOT NULL,
    last_seen INTEGER NOT NULL,
    expires   INTEGER NOT NULL
) WITHOUT ROWID;
