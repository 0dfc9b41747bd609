"""The statement behind `PostgresBackend.expire_leases`, kept in the conventions of `statements`.

A supervisor calls it once per dead worker process, so it walks the RUNNING
index (``tasks_running``, by deadline) over the live leases and matches the
worker in each row: no index by worker, which every claim and decision would
have to keep up.
"""

from __future__ import annotations

#: Expire at once the live leases of a dead worker: every RUNNING task whose
#: deadline is later than now, held by a worker's claim (a reaper's token
#: starts with ``r``) by ``worker`` (the last of its ``worker_ids``), gets
#: the deadline now; `claim_expired` decides it at its next pass. The rows
#: are locked in id order, as every statement that names rows locks them,
#: and judged again once locked (a decision in flight moves a task on).
#:
#: Params: worker. Row: how many leases were expired.
EXPIRE_LEASES = """WITH now AS MATERIALIZED (SELECT {s}.now_ms() AS ms),
live AS MATERIALIZED (
    SELECT t.id FROM {s}.tasks t
    WHERE t.status = 'RUNNING' AND t.deadline > (SELECT ms FROM now)
        AND left(t.token, 1) <> 'r'
        AND t.worker_ids[cardinality(t.worker_ids)] = %(worker)s
    ORDER BY t.id
    FOR UPDATE
),
expired AS (
    UPDATE {s}.tasks t SET deadline = now.ms
    FROM now
    WHERE t.id IN (SELECT id FROM live)
    RETURNING t.id
)
SELECT count(*) FROM expired"""
