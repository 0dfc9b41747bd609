"""What a queued task costs on disk in PostgreSQL (issue 38): bytes per task, per relation.

A backlog of `n` tasks is enqueued with no worker running, as fast as the
system allows (`Peer.fill`: threadmill ``enqueue_many`` and Procrastinate
``batch_defer`` in slices of 10,000, django-tasks-db's single enqueues in
one transaction); the system's tables (`PostgresPeer.schema` and
``.tables``) are then vacuumed and analyzed, as autovacuum would leave
them, and measured with ``pg_total_relation_size`` (heap, TOAST and every
index, all forks: free space and visibility maps too). The same is measured
of the empty tables just before, and the figure is the difference over `n`.

Each table is split into its heap (``pg_table_size`` less its TOAST), its
TOAST (the TOAST table and its index) and each of its indexes, so the split
adds up to the total exactly.
"""

from __future__ import annotations

from typing import Any

import psycopg

from benchmarks import measure
from benchmarks.postgres.peers import PostgresPeer, pg_url

#: Every ordinary table of the schema whose name is LIKE the pattern, in name order.
TABLES = """
SELECT c.oid, c.relname FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_namespace s ON s.oid = c.relnamespace
WHERE s.nspname = %s AND c.relname LIKE %s AND c.relkind = 'r'
ORDER BY c.relname
"""

#: One table's parts: (name, bytes), the heap first, then its TOAST, then its indexes.
PARTS = """
SELECT %(name)s::text, pg_table_size(c.oid) - coalesce(pg_total_relation_size(t.oid), 0), 0
FROM pg_catalog.pg_class c LEFT JOIN pg_catalog.pg_class t ON t.oid = c.reltoastrelid
WHERE c.oid = %(oid)s::oid
UNION ALL
SELECT %(name)s::text || ' (TOAST)', pg_total_relation_size(c.reltoastrelid), 1
FROM pg_catalog.pg_class c WHERE c.oid = %(oid)s::oid AND c.reltoastrelid <> 0
UNION ALL
SELECT x.relname::text, pg_total_relation_size(x.oid), 2
FROM pg_catalog.pg_index i JOIN pg_catalog.pg_class x ON x.oid = i.indexrelid
WHERE i.indrelid = %(oid)s::oid
ORDER BY 3, 1
"""


def sizes(peer: PostgresPeer) -> tuple[int, dict[str, int]]:
    """VACUUM ANALYZE the peer's tables; their pg_total_relation_size summed, and the split."""
    with psycopg.connect(pg_url(), autocommit=True) as conn:
        tables = conn.execute(TABLES, (peer.schema, peer.tables)).fetchall()
        if not tables:
            raise RuntimeError(f"{peer.name}: no table in {peer.schema!r} LIKE {peer.tables!r}")
        names = ", ".join(f"{_quote(peer.schema)}.{_quote(name)}" for _oid, name in tables)
        conn.execute(f"VACUUM ANALYZE {names}")
        total, parts = 0, {}
        for oid, name in tables:
            row = conn.execute("SELECT pg_total_relation_size(%s::oid)", (oid,)).fetchone()
            total += int(row[0]) if row else 0
            for part, size, _kind in conn.execute(PARTS, {"name": name, "oid": oid}):
                parts[part] = int(size)
    if sum(parts.values()) != total:
        raise RuntimeError(f"{peer.name}: the parts add up to {sum(parts.values())}, not {total}")
    return total, parts


def footprint(bench: measure.Bench, peer: PostgresPeer, n: int) -> dict[str, Any]:
    """Bytes per task of a backlog of `n` (``pg_bytes``) and of each relation (``relations``)."""
    bench.flush()
    peer.reset()
    try:
        with measure.producing(peer):  # setup creates the tables (schema, migrate)
            empty, empty_parts = sizes(peer)
            peer.fill(n)
        full, full_parts = sizes(peer)
    finally:
        peer.reset()  # no backlog of n left beside the next measurements
    relations = {part: (size - empty_parts.get(part, 0)) / n for part, size in full_parts.items()}
    return {"pg_bytes": (full - empty) / n, "relations": relations}


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
