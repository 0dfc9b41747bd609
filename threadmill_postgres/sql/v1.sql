-- threadmill_postgres schema, version 1: the tables of one namespace.
--
-- `schema.py` applies this once, when a backend first meets a namespace that
-- has no schema yet, inside one transaction that holds an advisory lock on
-- the namespace's name, so processes starting together create it once.
-- {schema} is the namespace's schema name, quoted as an identifier.
--
-- Times are integer milliseconds since the Unix epoch, always from
-- {schema}.now_ms(): the database's clock, read once per statement.

CREATE SCHEMA IF NOT EXISTS {schema};

-- version: the schema version this namespace is at. oldest_compatible: the
-- oldest code version that may still use it (see schema.py on upgrades).
CREATE TABLE {schema}.meta (
    name  text PRIMARY KEY,
    value integer NOT NULL
);

-- The database's clock in milliseconds: the one clock every statement reads
-- (as `now()`, the start of its transaction; each state change is one).
-- Inlined by the planner, so it costs nothing over now() itself.
CREATE FUNCTION {schema}.now_ms() RETURNS bigint
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$ SELECT floor(extract(epoch FROM now()) * 1000)::bigint $$;

-- The backend-wide "entered READY" order: every task that enters READY
-- (enqueue, promotion, a zero-delay retry, release, requeue) draws the next
-- value, and READY is ordered by priority, then by it. Never reset.
CREATE SEQUENCE {schema}.ready_order AS bigint;

-- A task is one row. `payload` is what the producer gave (codec bytes of the
-- record without its state fields, see threadmill_core.codec.encode_enqueued):
-- written once, never parsed by SQL, never changed. Every field that changes
-- is a column beside it, so a claim or a decision rewrites a few integers,
-- never the user's arguments. `queue` and `priority` repeat the record's (the
-- payload leaves them out at their defaults), so the indexes can order by
-- them. Ids and queues compare byte for byte ("C"),
-- as Python compares str, whatever the database's collation.
CREATE TABLE {schema}.tasks (
    id                 text COLLATE "C" PRIMARY KEY,
    queue              text COLLATE "C" NOT NULL,
    priority           smallint NOT NULL,
    status             text NOT NULL CHECK (status IN
                           ('READY', 'DEFERRED', 'RUNNING', 'SUCCESSFUL', 'FAILED', 'CANCELLED')),
    payload            bytea NOT NULL,
    ready_order        bigint,            -- READY: its place, from {schema}.ready_order
    run_after          bigint,            -- the record's run_after; DEFERRED: when it falls due
    deadline           bigint,            -- RUNNING: the current lease's (or reaper claim's) deadline
    token              text COLLATE "C",  -- the current lease's token, kept after a decision for repeats
    enqueued_at        bigint NOT NULL,
    started_at         bigint,
    last_attempted_at  bigint,
    finished_at        bigint,            -- set exactly while the status is terminal
    attempts           integer NOT NULL DEFAULT 0,
    worker_ids         text[] NOT NULL DEFAULT '{}',
    errors             bytea NOT NULL DEFAULT '\x5b5d'::bytea,  -- codec bytes of the errors ('[]')
    return_value       bytea,             -- codec bytes of the value; NULL unless SUCCESSFUL
    -- Recorded starts (see Backend.mark_started): whether the current claim's
    -- start was recorded (reset by each claim), and how many expired claims
    -- without one the reaper gave back in the task's life. A reaper's claim
    -- is told from a worker's by its token, which starts with 'r'.
    started            boolean NOT NULL DEFAULT false,
    unstarted_expiries integer NOT NULL DEFAULT 0
);

-- One partial index per segment order; every statement that walks a segment
-- names its status as a literal, so the planner uses them. A claim reads only
-- the READY and DEFERRED ones, whose size is the backlog, not the history:
-- however many finished tasks the table holds, a claim costs the same.
CREATE INDEX tasks_ready ON {schema}.tasks (queue, priority DESC, ready_order)
    WHERE status = 'READY';
CREATE INDEX tasks_deferred ON {schema}.tasks (queue, run_after, id)
    WHERE status = 'DEFERRED';
-- DEFERRED over all queues, by due time: promote_due and next_due.
CREATE INDEX tasks_due ON {schema}.tasks (run_after, id)
    WHERE status = 'DEFERRED';
-- RUNNING by lease deadline: claim_expired (and peek, filtering by queue).
CREATE INDEX tasks_running ON {schema}.tasks (deadline, id)
    WHERE status = 'RUNNING';
-- The terminal segments in order (peek), and by finish time alone (expiry).
CREATE INDEX tasks_finished ON {schema}.tasks (queue, status, finished_at, id)
    WHERE finished_at IS NOT NULL;
CREATE INDEX tasks_expiry ON {schema}.tasks (finished_at)
    WHERE finished_at IS NOT NULL;

-- Receipts of claims: one row per claim call that took tasks, written by that
-- claim's statement. A claim whose reply was lost is repeated by first
-- inserting its receipt here: the insert waits for a first send still in
-- flight, and either finds the receipt (the first send committed: its leases
-- are read back) or takes it (so the first send, should it still run, fails
-- on the duplicate and changes nothing). Kept until the claim's lease
-- deadline, then deleted in bounded batches.
CREATE TABLE {schema}.claims (
    request text COLLATE "C" PRIMARY KEY,
    expires bigint NOT NULL
);
CREATE INDEX claims_expiry ON {schema}.claims (expires);

-- Telemetry for `rates`: per second of the database's clock, per queue and
-- per server process (`shard` is pg_backend_pid()), the tasks that entered
-- the queue (enqueue, requeue) and that finished (SUCCESSFUL, FAILED,
-- CANCELLED). Each counter row is bumped by the statement that makes the
-- change it counts; one row per server process means two connections never
-- wait for each other's counter. Rows older than an hour are deleted by the
-- statements that count, a few at a time.
CREATE TABLE {schema}.rates (
    second   bigint NOT NULL,
    queue    text COLLATE "C" NOT NULL,
    shard    integer NOT NULL,
    entered  bigint NOT NULL DEFAULT 0,
    finished bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (second, queue, shard)
);
