"""A backend alias's settings: ``TASKS[alias]``'s ``OPTIONS`` and ``QUEUES``, checked.

Parsing never connects to anything, so the system checks and a module of
tasks being imported cost no round trip. Every problem is a sentence that
names the alias and the option; `parse` collects all of them, so
``manage.py check`` reports every one at once.

The options (all optional):

==================  ===========================================================
``url``             the backend URL; default ``THREADMILL_URL``, else ``memory://``
``result_ttl``      how long finished results stay readable (seconds or timedelta)
``lease_ttl``       the worker's ``--lease-ttl``: how long a claim lives unrenewed
``processes``       the worker's ``--processes``
``threads``         the worker's ``--threads``
``prefetch``        the worker's ``--prefetch``
``poll_interval``   the worker's ``--poll-interval`` (seconds or timedelta)
``time_limit``      the worker's ``--time-limit``: a task's default (seconds or timedelta)
``time_limit_grace``  the worker's ``--time-limit-grace`` (seconds or timedelta)
``max_tasks``       the worker's ``--max-tasks``
``max_tasks_jitter``  the worker's ``--max-tasks-jitter``
``shutdown_timeout``  the worker's ``--shutdown-timeout`` (seconds or timedelta)
``connect_timeout``   the worker's ``--connect-timeout`` (seconds or timedelta)
``log_level``       the worker's ``--log-level``
``log_format``      the worker's ``--log-format``: ``"text"`` or ``"json"``
``task_modules``    modules of tasks for the worker beyond the apps' ``tasks``
``enqueue_on_commit``  True: an enqueue inside ``transaction.atomic()`` is stored
                    when the transaction commits (`threadmill_django.on_commit`)
``database``        a Django connection on the PostgreSQL database of ``url``: an
                    enqueue inside ``transaction.atomic()`` on it is written in that
                    transaction (`threadmill_django.transactional`)
==================  ===========================================================

A backend's own options (a Redis namespace, a cluster's nodes) go in the
URL's query, as everywhere in threadmill: ``redis://host:6379/0?namespace=app``.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import attrs

from threadmill_core.errors import InvalidOption
from threadmill_core.plugins import KNOWN_EXTRAS, installed_backends
from threadmill_core.task import DEFAULT_QUEUE, validate_queue
from threadmill_core.urls import redact
from threadmill_core.worker.logs import LOG_FORMATS

DEFAULT_URL = "memory://"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
_MODULE = re.compile(r"[^\W\d]\w*(\.[^\W\d]\w*)*")


def _count(least: int) -> Callable[[object], object]:
    def check(value: object) -> object:
        if type(value) is not int or value < least:
            raise ValueError(f"must be an int of at least {least}, got {value!r}")
        return value

    return check


def _seconds(value: object) -> object:
    """A positive duration as float seconds, from a timedelta or a number."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise ValueError(f"must be a timedelta or a number of seconds, got {value!r}")
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"must be a positive duration, got {value!r}")
    return seconds


def _log_level(value: object) -> object:
    if value not in LOG_LEVELS:
        raise ValueError(f"must be one of {', '.join(LOG_LEVELS)}, got {value!r}")
    return value


def _log_format(value: object) -> object:
    if value not in LOG_FORMATS:
        raise ValueError(f"must be one of {', '.join(LOG_FORMATS)}, got {value!r}")
    return value


def _host(value: object) -> object:
    if not isinstance(value, str) or not value:
        raise ValueError(f"must be a host name or address, got {value!r}")
    return value


def _modules(value: object) -> object:
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise ValueError(f"must be a list of module names, got {value!r}")
    for name in value:
        if not isinstance(name, str) or not _MODULE.fullmatch(name):
            raise ValueError(f"must be a list of module names; {name!r} is not one")
    return tuple(value)


def _flag(value: object) -> object:
    if not isinstance(value, bool):
        raise ValueError(f"must be True or False, got {value!r}")
    return value


def _alias(value: object) -> object:
    if not isinstance(value, str) or not value:
        raise ValueError(f"must be the alias of a connection in DATABASES, got {value!r}")
    return value


def _url(value: object) -> object:
    if not isinstance(value, str) or "://" not in value:
        raise ValueError(f"must be a backend URL such as 'redis://host:6379/0', got {value!r}")
    return value


#: The worker's options: OPTIONS name -> (the `threadmill worker` flag, its check).
WORKER_FLAGS: Mapping[str, tuple[str, Callable[[object], object]]] = {
    "lease_ttl": ("--lease-ttl", _seconds),
    "processes": ("--processes", _count(1)),
    "threads": ("--threads", _count(1)),
    "prefetch": ("--prefetch", _count(0)),
    "poll_interval": ("--poll-interval", _seconds),
    "time_limit": ("--time-limit", _seconds),
    "time_limit_grace": ("--time-limit-grace", _seconds),
    "max_tasks": ("--max-tasks", _count(1)),
    "max_tasks_jitter": ("--max-tasks-jitter", _count(0)),
    "shutdown_timeout": ("--shutdown-timeout", _seconds),
    "connect_timeout": ("--connect-timeout", _seconds),
    "log_level": ("--log-level", _log_level),
    "log_format": ("--log-format", _log_format),
    "metrics_port": ("--metrics-port", _count(1)),
    "metrics_host": ("--metrics-host", _host),
}

_CHECKS: Mapping[str, Callable[[object], object]] = {
    "url": _url,
    "result_ttl": _seconds,
    "task_modules": _modules,
    "enqueue_on_commit": _flag,
    "database": _alias,
    **{name: check for name, (_flag, check) in WORKER_FLAGS.items()},
}
KNOWN = tuple(sorted(_CHECKS))


@attrs.frozen(kw_only=True)
class BackendOptions:
    """One alias's settings, checked; see the module docstring for what each means."""

    alias: str
    #: Shown with its password hidden (`threadmill_core.urls.redact`) in the ``repr``.
    url: str = attrs.field(repr=redact)
    #: Seconds, or None for the backend's own default.
    result_ttl: float | None = None
    #: The worker's defaults, by OPTIONS name (checked values).
    worker: Mapping[str, object] = attrs.field(factory=dict)
    task_modules: tuple[str, ...] = ()
    #: QUEUES in the order given: the worker claims from them, most preferred first.
    queues: tuple[str, ...] = (DEFAULT_QUEUE,)
    #: Enqueue inside a transaction stores at its commit (`threadmill_django.on_commit`).
    enqueue_on_commit: bool = False
    #: The Django connection an enqueue inside its transaction is written through
    #: (`threadmill_django.transactional`); None: enqueue never writes through Django.
    database: str | None = None

    @property
    def scheme(self) -> str:
        return urlsplit(self.url).scheme.lower()

    @property
    def broker_url(self) -> str:
        """`url` with `result_ttl` in its query, so a worker process connects the same way.

        Worker processes are spawned and connect from a URL alone, so every
        option must travel in it; the bundled backends read ``result_ttl``
        from the query. A URL that names it already is refused by the
        backend as an option given twice.
        """
        if self.result_ttl is None:
            return self.url
        separator = "&" if urlsplit(self.url).query else "?"
        return f"{self.url}{separator}result_ttl={self.result_ttl:g}"

    def worker_flags(self) -> list[str]:
        """The worker options as `threadmill worker` flags, QUEUES as ``--queues``."""
        flags = ["--queues", ",".join(self.queues)]
        for name, value in self.worker.items():
            flags += [
                WORKER_FLAGS[name][0],
                f"{value:g}" if isinstance(value, float) else str(value),
            ]
        return flags


def where(alias: str, name: str | None = None) -> str:
    """How a problem names its place: ``TASKS['default']['OPTIONS']['url']``."""
    place = f"TASKS[{alias!r}]"
    return place if name is None else f"{place}['OPTIONS'][{name!r}]"


def parse(alias: str, params: Mapping[str, Any]) -> tuple[BackendOptions | None, list[str]]:
    """Check an alias's settings; the options (None if any is wrong) and every problem."""
    problems: list[str] = []
    given = params.get("OPTIONS", {})
    if not isinstance(given, Mapping):
        return None, [f"{where(alias)}['OPTIONS'] must be a dict, got {given!r}"]
    checked: dict[str, Any] = {}
    for name, value in given.items():
        check = _CHECKS.get(name)
        if check is None:
            problems.append(
                f"{where(alias, name)}: unknown option; threadmill_django knows "
                f"{', '.join(KNOWN)}. A backend's own options go in the url's query, "
                "as in redis://host:6379/0?namespace=app"
            )
            continue
        try:
            checked[name] = check(value)
        except ValueError as exc:
            problems.append(f"{where(alias, name)} {exc}")
    queues = list(params.get("QUEUES", [DEFAULT_QUEUE])) or [DEFAULT_QUEUE]
    for queue in queues:
        try:
            validate_queue(queue)
        except InvalidOption as exc:
            problems.append(f"{where(alias)}['QUEUES']: {exc}")
    if problems:
        return None, problems
    url = checked.pop("url", None) or os.environ.get("THREADMILL_URL") or DEFAULT_URL
    options = BackendOptions(
        alias=alias,
        url=url,
        result_ttl=checked.pop("result_ttl", None),
        task_modules=checked.pop("task_modules", ()),
        enqueue_on_commit=checked.pop("enqueue_on_commit", False),
        database=checked.pop("database", None),
        worker=checked,
        queues=tuple(dict.fromkeys(queues)),
    )
    return options, []


def scheme_problem(options: BackendOptions) -> str | None:
    """Why no installed backend serves the URL's scheme, or None; connects to nothing."""
    installed = {backend.scheme for backend in installed_backends()}
    if options.scheme in installed:
        return None
    extra = KNOWN_EXTRAS.get(options.scheme)
    hint = f"; install it with: pip install 'threadmill[{extra}]'" if extra else ""
    names = ", ".join(f"{scheme}://" for scheme in sorted(installed))
    return (
        f"{where(options.alias, 'url')}: no installed threadmill backend handles "
        f"{options.scheme}:// (installed: {names}){hint}"
    )
