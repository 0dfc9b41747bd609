"""How ``threadmill worker`` (and ``manage.py threadmill worker``) logs: one line per event.

`configure_worker_logging` is what the supervisor's process and each
spawned worker process call first: `logging.basicConfig` with `LOG_FORMAT`
on stderr, as before, plus one rule for the handler it adds to the root
logger: a record that a handler of its own logger (or of a parent below
the root) prints to the same terminal is not printed again. A framework
may configure such a handler: Django, with ``DEBUG = True``, prints every
``django`` record (``django.tasks``' "Task id=... state=RUNNING" among
them) to stderr, and the record then propagates to the root, where it
would be printed a second time in threadmill's format. The framework's
configuration wins, since it is what the user set up (or chose to keep);
records no other console handler prints are printed as before.

A process whose root logger has handlers already (an embedding program's)
keeps them as they are: `logging.basicConfig` adds nothing then, and
neither does this.
"""

from __future__ import annotations

import logging
import sys

#: The log line of the supervisor and its worker processes.
LOG_FORMAT = "%(asctime)s %(levelname)-7s %(processName)s %(name)s: %(message)s"


class PrintedElsewhere(logging.Filter):
    """Refuses a record that a console handler below the root prints already.

    A console handler is a `logging.StreamHandler` writing to this process's
    stderr or stdout (a file handler writes elsewhere, so the terminal line
    is no duplicate of it); it prints a record when the record reaches its
    level and passes its filters (Django's ``require_debug_true``, say). The
    walk goes from the record's logger up to the root, stopping at a logger
    that does not propagate: a few attribute reads per record.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        logger: logging.Logger | None = logging.getLogger(record.name)
        root = logging.getLogger()
        while logger is not None and logger is not root:
            for handler in logger.handlers:
                if (
                    isinstance(handler, logging.StreamHandler)
                    and handler.stream in (sys.stderr, sys.stdout)
                    and record.levelno >= handler.level
                    and handler.filter(record)
                ):
                    return False
            if not logger.propagate:
                break
            logger = logger.parent
        return True


def configure_worker_logging(level: str | int) -> None:
    """`logging.basicConfig` at `level` in `LOG_FORMAT` on stderr, printing each event once.

    Only when the root logger has no handler yet (as `logging.basicConfig`);
    the handler it adds gets a `PrintedElsewhere` filter.
    """
    root = logging.getLogger()
    before = list(root.handlers)
    logging.basicConfig(level=level, format=LOG_FORMAT, stream=sys.stderr)
    for handler in root.handlers:
        if handler not in before:
            handler.addFilter(PrintedElsewhere())
