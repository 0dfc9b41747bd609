"""psycopg_pool's log records about threadmill's pools: out of the application's log.

psycopg_pool logs a warning, several lines long, for each failed attempt to
make one of its connections, each connection it discards and each thread it
could not stop: 30 to 80 of them in an outage of a minute. threadmill
reports an outage itself, once each way (`threadmill_core.worker.outage.Outage`: a
warning when it starts, a line when it ends). So `PoolLog`, a filter on the
``psycopg.pool`` logger, takes out the records about threadmill's own pools
(named ``threadmill:<namespace>``): each is logged again, at DEBUG, on
``threadmill_postgres``. Records about any other pool pass untouched.

A record is threadmill's when it names one of its pools, when a thread of
such a pool logs it, or when `Database` code logs it (`ours`). The last
connection error of each pool is kept (`failing`): the outage report says
why the pool has no connection ("Connection refused"), and calls wait for
one only briefly while its attempts fail, so an outage is reported in
seconds, not after every call's full wait.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager

log = logging.getLogger("threadmill_postgres")

#: How threadmill's pool names start (`connection.Database` names them).
POOL_PREFIX = "threadmill:"

#: A pool thread's name is the pool's, then one of these (psycopg_pool's names).
_THREAD_SUFFIX = re.compile(r"-(?:worker-\d+|scheduler)$")


def first_line(error: object) -> str:
    """The first line of an error's text (libpq's messages go on with hints)."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


class PoolLog(logging.Filter):
    """The filter on ``psycopg.pool`` (see the module doc); one per process, `POOL_LOG`."""

    def __init__(self) -> None:
        super().__init__()
        self._local = threading.local()
        #: The last connection error of each pool whose attempts fail now.
        self._errors: dict[str, str] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        pool = self._pool_of(record)
        if pool is None:
            return True
        text = record.getMessage()
        said = f"error connecting in {pool!r}: "  # psycopg_pool's words, formatted or not
        if text.startswith(said):
            self._errors[pool] = first_line(text[len(said) :])
        log.debug("psycopg.pool %s: %s", record.levelname, text)
        return False

    def _pool_of(self, record: logging.LogRecord) -> str | None:
        args = record.args if isinstance(record.args, tuple) else ()
        for arg in args:
            if isinstance(arg, str) and arg.startswith(POOL_PREFIX):
                return _THREAD_SUFFIX.sub("", arg)
        if record.threadName and record.threadName.startswith(POOL_PREFIX):
            return _THREAD_SUFFIX.sub("", record.threadName)
        current: str | None = getattr(self._local, "pool", None)
        return current

    @contextmanager
    def ours(self, pool: str) -> Iterator[None]:
        """Within the block, this thread's records about pools are about `pool`."""
        before = getattr(self._local, "pool", None)
        self._local.pool = pool
        try:
            yield
        finally:
            self._local.pool = before

    def failing(self, pool: str) -> str | None:
        """The last connection error of `pool`, if its attempts fail since it last gave one."""
        return self._errors.get(pool)

    def reached(self, pool: str) -> None:
        """`pool` gave a connection: its attempts no longer fail."""
        if pool in self._errors:
            self._errors.pop(pool, None)


#: The one filter of the process, on the ``psycopg.pool`` logger from the first import.
POOL_LOG = PoolLog()
logging.getLogger("psycopg.pool").addFilter(POOL_LOG)
