"""The PostgreSQL backend's plugin: found through the ``threadmill`` entry point ``postgres``."""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from typing import Any

from threadmill_core.backend import Backend
from threadmill_core.hookspecs import BackendScheme, hookimpl

_DESCRIPTION = "PostgreSQL, one statement and one commit per state change, LISTEN for idle workers"
SCHEMES = ("postgresql", "postgres")


@hookimpl
def threadmill_backend_schemes() -> list[BackendScheme]:
    # Offered only with the drivers installed, so connect() can name the extra instead.
    if not all(importlib.util.find_spec(name) for name in ("psycopg", "psycopg_pool")):
        return []
    return [BackendScheme(scheme, _DESCRIPTION) for scheme in SCHEMES]


@hookimpl
def threadmill_backend_for_url(
    url: str, scheme: str, options: Mapping[str, Any], create: bool
) -> Backend | None:
    if scheme not in SCHEMES:
        return None
    from threadmill_postgres.backend import PostgresBackend

    return PostgresBackend.from_url(url, create_schema=create, **options)
