"""The PostgreSQL backend's options, from keyword arguments or a URL's query string.

``postgresql://app@db/jobs?namespace=emails&result_ttl=86400`` and
``PostgresBackend.from_url("postgresql://app@db/jobs", namespace="emails",
result_ttl=timedelta(days=1))`` say the same thing. Durations in a URL are
seconds. Query parameters that are not ours go to libpq, which must know
them (``sslmode``, ``connect_timeout``, ``application_name``, ...); anything
else is an `InvalidOption` naming it.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import attrs
import psycopg
from psycopg.conninfo import conninfo_to_dict

from threadmill_core.errors import InvalidOption
from threadmill_core.options import OptionParser, duration, parse_options, positive_int
from threadmill_core.urls import redact

#: The URL schemes served, both as libpq reads them.
SCHEMES = ("postgresql", "postgres")

#: libpq parameters the backend sets unless the URL does: a name that shows in
#: ``pg_stat_activity`` (and that an operator can select connections by), and
#: a bound on how long connecting may hang, so an outage is noticed, not waited out.
LIBPQ_DEFAULTS = {"application_name": "threadmill", "connect_timeout": "10"}

#: The most bytes PostgreSQL keeps of an identifier (NAMEDATALEN - 1).
MAX_IDENTIFIER_BYTES = 63


def check_namespace(namespace: object) -> str:
    """`namespace` if it can name the schema, else `InvalidOption`.

    The schema is the namespace itself, quoted, so any text will do but for
    three limits of PostgreSQL's: at most 63 bytes of UTF-8, no NUL, and no
    ``pg_`` prefix (reserved for the system's schemas).
    """
    if not isinstance(namespace, str) or not namespace:
        raise InvalidOption(f"namespace must be a non-empty str, got {namespace!r}")
    if (
        "\x00" in namespace
        or len(namespace.encode("utf-8", "surrogatepass")) > MAX_IDENTIFIER_BYTES
    ):
        raise InvalidOption(
            f"namespace {namespace!r} cannot name a PostgreSQL schema: it must be at most "
            f"{MAX_IDENTIFIER_BYTES} bytes of UTF-8, without NUL"
        )
    if namespace.lower().startswith("pg_"):
        raise InvalidOption(f"namespace {namespace!r} cannot start with pg_ (PostgreSQL's own)")
    try:
        namespace.encode()
    except UnicodeEncodeError:
        raise InvalidOption(f"namespace {namespace!r} is not valid Unicode text") from None
    return namespace


@attrs.frozen(kw_only=True)
class PostgresOptions:
    """Everything a `PostgresBackend` can be told; build it with `from_mapping`, which validates."""

    #: The schema holding the namespace's tables; backends on one namespace share its tasks.
    namespace: str = "threadmill"
    #: How long SUCCESSFUL, FAILED and CANCELLED tasks stay after `finished_at`.
    result_ttl: timedelta = timedelta(days=7)
    #: Most connections the backend's pool opens (it opens one, and more as calls overlap).
    pool_size: int = 8
    #: How long a call waits for a connection (a free one, or a new one) before
    #: raising `PostgresUnavailable`.
    pool_timeout: timedelta = timedelta(seconds=10)
    #: Most expired results (and old receipts) one statement deletes.
    prune_batch: int = 100
    #: Most tasks one purge statement deletes; `purge` repeats until done.
    purge_batch: int = 1000
    #: Most records one enqueue statement stores; larger batches take several, in one
    #: transaction (all or none of a batch is stored).
    enqueue_batch: int = 1000

    @classmethod
    def from_mapping(cls, options: Mapping[str, object]) -> PostgresOptions:
        """Validate keywords or query values; unknown or malformed ones are `InvalidOption`."""
        parsed = parse_options(_PARSERS, options, backend="PostgreSQL")
        return cls(**parsed)


_PARSERS: dict[str, OptionParser] = {
    "namespace": lambda _name, value: check_namespace(value),
    "result_ttl": duration,
    "pool_size": positive_int,
    "pool_timeout": duration,
    "prune_batch": positive_int,
    "purge_batch": positive_int,
    "enqueue_batch": positive_int,
}

#: The names of our options, as they may appear in a URL's query.
OPTION_NAMES = frozenset(_PARSERS)


def split_url(url: str, keywords: Mapping[str, Any]) -> tuple[dict[str, object], str]:
    """Our options (the query's merged with `keywords`) and the URL libpq is given.

    The libpq URL keeps everything but our options, plus `LIBPQ_DEFAULTS`
    where the URL says nothing, and is checked by libpq's own parser: a
    parameter libpq does not know, or a malformed URL, is an `InvalidOption`.
    An option given twice (in the query and as a keyword, or twice in the
    query) is an `InvalidOption` too.
    """
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise InvalidOption(f"{redact(url)!r} is not a valid URL: {exc}") from None
    if parts.scheme.lower() not in SCHEMES:
        raise InvalidOption(
            f"not a PostgreSQL URL (schemes: {', '.join(SCHEMES)}): {redact(url)!r}"
        )
    if parts.fragment:
        raise InvalidOption(f"{redact(url)!r} has a fragment (#...); PostgreSQL URLs take none")
    ours: dict[str, object] = dict(keywords)
    driver: list[tuple[str, str]] = []
    seen: set[str] = set()
    try:
        pairs = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError as exc:
        raise InvalidOption(f"malformed URL query {parts.query!r}: {exc}") from None
    for name, value in pairs:
        if name in seen or name in keywords:
            raise InvalidOption(f"option {name!r} is given twice")
        seen.add(name)
        if name in OPTION_NAMES:
            ours[name] = value
        else:
            driver.append((name, value))
    driver += [(name, value) for name, value in LIBPQ_DEFAULTS.items() if name not in seen]
    # quote, not quote_plus: libpq reads a "+" as itself, not as a space.
    libpq_url = urlunsplit(parts._replace(query=urlencode(driver, quote_via=quote)))
    if not parts.netloc:  # urlunsplit writes "postgresql:/db"; libpq reads only "postgresql:///db"
        libpq_url = libpq_url.replace(":", "://", 1)
    try:
        conninfo_to_dict(libpq_url)
    except psycopg.ProgrammingError as exc:
        raise InvalidOption(
            f"libpq cannot use {redact(url)!r}: {exc} (threadmill's own options: "
            f"{', '.join(sorted(OPTION_NAMES))})"
        ) from None
    return ours, libpq_url


def place(conninfo: str) -> str:
    """Where `conninfo` leads, for messages: ``database 'app' at db.internal:5432``.

    Host, port and database only: no user, no password, no other parameter.
    """
    try:
        given = conninfo_to_dict(conninfo)
    except psycopg.Error:  # a message must not fail: libpq's parser refused it
        return "<a malformed connection string>"
    host = str(given.get("host") or given.get("hostaddr") or "localhost")
    port = str(given.get("port") or "5432")
    where = f"[{host}]:{port}" if ":" in host and "," not in host else f"{host}:{port}"
    database = given.get("dbname")
    return f"database {database!r} at {where}" if database else where
