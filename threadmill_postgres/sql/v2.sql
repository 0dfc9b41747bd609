-- threadmill_postgres schema, version 2: the schedules' pause states.
--
-- One row per schedule ever paused or resumed (`Backend.set_schedule_paused`):
-- whether it is paused, and since when (the database's clock, milliseconds).
-- It only adds a table, so code of version 1 goes on working beside it.

CREATE TABLE {schema}.schedules (
    name   text COLLATE "C" PRIMARY KEY,
    paused boolean NOT NULL,
    since  bigint NOT NULL
);
