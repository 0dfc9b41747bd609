"""threadmill's PostgreSQL backend: one statement and one commit per state change.

``threadmill_core.connect("postgresql://user@host/db?namespace=jobs")`` finds
it through the ``threadmill`` entry point. `PostgresBackend` is imported on
first use, so the package (and the plugin the entry point loads) imports
without psycopg installed; the plugin then offers no schemes and `connect`
names the extra to install (``threadmill[postgres]``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from threadmill_postgres.errors import (
    NamespaceNotFound,
    PostgresBackendError,
    PostgresUnavailable,
    SchemaVersionError,
)

if TYPE_CHECKING:
    from threadmill_postgres.backend import PostgresBackend

__all__ = [
    "NamespaceNotFound",
    "PostgresBackend",
    "PostgresBackendError",
    "PostgresUnavailable",
    "SchemaVersionError",
]


def __getattr__(name: str) -> Any:
    if name == "PostgresBackend":
        from threadmill_postgres.backend import PostgresBackend

        return PostgresBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
