"""Exceptions of the SQLite backend; `sqlite3` errors become these at one boundary.

That boundary is `threadmill_sqlite._database.Database.transaction` (and the
connection setup beside it): no `sqlite3.Error` reaches a caller of the
backend, and each of these keeps the driver's exception as its `__cause__`.
"""

from __future__ import annotations

from threadmill_core.errors import ThreadmillError


class SQLiteBackendError(ThreadmillError):
    """SQLite refused or failed a statement, or the database file is not a threadmill one."""


class DatabaseLocked(SQLiteBackendError, TimeoutError):
    """Another connection held the write lock for longer than the backend's `busy_timeout`.

    Nothing was changed: the operation's transaction never began, or was
    rolled back. The caller may try again.
    """
