"""Django connections added while tests run (DATABASES is fixed once Django is set up)."""

from __future__ import annotations

from django.db import connections
from psycopg.conninfo import conninfo_to_dict


def add_connection(alias: str, url: str) -> None:
    """Put a PostgreSQL connection `alias` to the database of `url` in Django's connections,
    with Django's defaults, as if DATABASES had it; nothing connects yet."""
    given = conninfo_to_dict(url)
    fields = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": given["dbname"],
        "HOST": given.get("host", ""),
        "PORT": given.get("port", ""),
        "USER": given.get("user", ""),
    }
    configured = connections.configure_settings(
        {"default": connections.settings["default"], alias: fields}
    )
    connections.settings[alias] = configured[alias]


def drop_connection(alias: str) -> None:
    """Close and forget the connection `add_connection` added."""
    connections[alias].close()
    del connections[alias]
    del connections.settings[alias]
