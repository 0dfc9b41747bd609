"""threadmill_sqlite: a threadmill backend on one SQLite database file, for one machine.

Install it and ``threadmill_core.connect("sqlite:///path/to/queue.db")``
finds it through the ``threadmill`` entry point; see `threadmill_sqlite.plugin`
for URL forms and options, and `threadmill_sqlite.backend` for how it works.
"""

from threadmill_sqlite.backend import SQLiteBackend
from threadmill_sqlite.errors import DatabaseLocked, SQLiteBackendError

__all__ = ["DatabaseLocked", "SQLiteBackend", "SQLiteBackendError"]
