-- threadmill_postgres schema, version 3: the live workers.
--
-- One row per worker process alive (`Backend.register_worker`): its entry as
-- the worker packed it (JSON text, see threadmill_core.live_workers), when it
-- was last seen and when the entry lapses (the database's clock,
-- milliseconds). It only adds a table, so code of versions 1 and 2 goes on
-- working beside it.

CREATE TABLE {schema}.live_workers (
    id        text COLLATE "C" PRIMARY KEY,
    entry     text NOT NULL,
    last_seen bigint NOT NULL,
    expires   bigint NOT NULL
);
