-- threadmill_postgres schema, version 4: progress and cancel requests.
--
-- `progress` holds the last progress a running task reported
-- (`Backend.record_progress`): codec bytes of a `Progress`, its `updated_at`
-- the database's clock when stored; NULL for none. `cancel_requested_at` is
-- when a cancel was requested for the RUNNING task (`Backend.request_cancel`,
-- the database's clock, milliseconds); NULL for none. Both are kept when the
-- task finishes and cleared by requeue. It only adds nullable columns (no
-- table rewrite), so code of versions 1 to 3 goes on working beside it: it
-- neither reads nor writes them, and a claim of this version clears a request
-- an older one left on a task it sent back.

ALTER TABLE {schema}.tasks
    ADD COLUMN progress bytea,
    ADD COLUMN cancel_requested_at bigint;
