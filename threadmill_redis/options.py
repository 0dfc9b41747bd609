"""The Redis backend's options, from keyword arguments or a URL's query string.

``redis://host:6379/0?namespace=jobs&result_ttl=86400`` and
``RedisBackend(client, namespace="jobs", result_ttl=timedelta(days=1))``
say the same thing. Durations in a URL are seconds. Query parameters that
are not ours must be ones redis-py understands (``socket_timeout``, ...);
anything else is an `InvalidOption` naming it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qsl, urlencode

import attrs
from redis.connection import URL_QUERY_ARGUMENT_PARSERS

from threadmill_core.errors import InvalidOption
from threadmill_core.options import OptionParser, duration, parse_options, positive_int
from threadmill_redis.keys import check_namespace
from threadmill_redis.sentinel import SENTINEL_QUERY_OPTIONS, SENTINEL_SCHEMES

#: Query parameters passed on to redis-py: those it parses, and the TLS and
#: client-name options it takes as plain strings.
DRIVER_QUERY_OPTIONS = frozenset(URL_QUERY_ARGUMENT_PARSERS) | {
    "client_name",
    "ssl_ca_certs",
    "ssl_ca_path",
    "ssl_certfile",
    "ssl_keyfile",
    "ssl_cert_reqs",
}


@attrs.frozen(kw_only=True)
class RedisOptions:
    """Everything a `RedisBackend` can be told; build it with `from_mapping`, which validates."""

    #: The hash tag of every key; backends on one namespace share its tasks.
    namespace: str = "threadmill"
    #: Defaults for callers that do not choose (the storage interface always passes one).
    lease_ttl: timedelta = timedelta(seconds=30)
    claim_ttl: timedelta = timedelta(seconds=60)
    #: How long SUCCESSFUL, FAILED and CANCELLED tasks stay after `finished_at`.
    result_ttl: timedelta = timedelta(days=7)
    #: Most expired results one script deletes (complete, decide_many, promote_due).
    prune_batch: int = 100
    #: Most tasks one purge script deletes; `purge` repeats until done.
    purge_batch: int = 1000
    #: Most records one enqueue script stores; larger batches are pipelined.
    enqueue_batch: int = 500
    #: Most wake-up tokens a queue's notify list keeps.
    notify_cap: int = 64

    @classmethod
    def from_mapping(cls, options: Mapping[str, object]) -> RedisOptions:
        """Validate keywords or query values; unknown or malformed ones are `InvalidOption`."""
        parsed = parse_options(_PARSERS, options, backend="Redis")
        return cls(**parsed)


_PARSERS: dict[str, OptionParser] = {
    "namespace": lambda _name, value: check_namespace(value),
    "lease_ttl": duration,
    "claim_ttl": duration,
    "result_ttl": duration,
    "prune_batch": positive_int,
    "purge_batch": positive_int,
    "enqueue_batch": positive_int,
    "notify_cap": positive_int,
}


def split_url(
    url: str, keywords: Mapping[str, Any], schemes: Collection[str]
) -> tuple[dict[str, object], str]:
    """`split_query` for a URL of one of `schemes` (else `InvalidOption`); a Sentinel URL's
    query may hold the sentinels' credentials as well (`SENTINEL_QUERY_OPTIONS`)."""
    scheme, _, rest = url.partition("://")
    scheme = scheme.lower()
    if scheme not in schemes or not rest:
        raise InvalidOption(f"not a Redis URL (schemes: {', '.join(schemes)}): {url!r}")
    driver_options = DRIVER_QUERY_OPTIONS
    if scheme in SENTINEL_SCHEMES:
        driver_options |= SENTINEL_QUERY_OPTIONS
    # Not urlsplit: it refuses a Sentinel URL's list of hosts with an IPv6 one among them.
    return split_query(rest.partition("#")[0].partition("?")[2], keywords, driver_options)


def split_query(
    query: str, keywords: Mapping[str, Any], driver_options: frozenset[str] = DRIVER_QUERY_OPTIONS
) -> tuple[dict[str, object], str]:
    """Split a URL query into our options (merged with `keywords`) and the client's.

    Returns the merged options and the query string to hand to the client
    builder: the `driver_options` given (redis-py's, plus the sentinels'
    credentials for a Sentinel URL).
    An option given twice (in the query and as a keyword, or twice in the
    query) is an `InvalidOption`, as is a query parameter nobody knows.
    """
    ours: dict[str, object] = dict(keywords)
    driver: list[tuple[str, str]] = []
    seen: set[str] = set()
    known = set(_PARSERS)
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError as exc:
        raise InvalidOption(f"malformed URL query {query!r}: {exc}") from None
    for name, value in pairs:
        if name in seen or name in keywords:
            raise InvalidOption(f"option {name!r} is given twice")
        seen.add(name)
        if name in known:
            ours[name] = value
        elif name in driver_options:
            driver.append((name, value))
        else:
            raise InvalidOption(
                f"unknown option {name!r} in the URL query; threadmill's: "
                f"{', '.join(sorted(known))}; or a redis-py connection option"
            )
    return ours, urlencode(driver)
