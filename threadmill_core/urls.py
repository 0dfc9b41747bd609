"""Backend addresses shown to people: `redact` hides the credentials in them.

One helper for every address threadmill shows (a broker's or a backend's
``repr``, an error message, a log line, the command line's and the TUI's
headers): a URL (``redis://user:secret@host/0``, ``...?password=secret``)
or a libpq connection string (``host=db password=secret``).
"""

from __future__ import annotations

import re
from urllib.parse import SplitResult, parse_qsl, urlencode, urlsplit, urlunsplit

#: Query parameters and libpq keywords that carry a secret (redis-py and libpq read these).
SECRET_PARAMETERS = frozenset({"password", "passwd", "pass", "sslpassword", "sentinel_password"})

#: What `redact` shows instead of a secret.
MASK = "***"

#: One ``keyword = value`` of a libpq connection string; a value is a single-quoted
#: string (with backslash escapes) or runs to the next whitespace.
_CONNINFO_PAIR = re.compile(
    r"(?P<key>[A-Za-z_]\w*)(?P<eq>\s*=\s*)(?P<value>'(?:[^'\\]|\\.)*'?|\S*)"
)

#: How a URL starts: its scheme and ``://``.
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


def redact(address: str) -> str:
    """`address` with every password replaced by ``***``; the rest as given.

    A URL's password (after the user name, or in the query string) and a
    libpq connection string's ``password=...`` (quoted or not) are hidden.
    A URL that does not parse is shown as ``<a malformed URL>``: it may hold
    a secret where no rule finds it.
    """
    if _SCHEME.match(address) is None:
        return _redact_conninfo(address) if "=" in address else address
    return _redact_url(address)


def _redact_conninfo(conninfo: str) -> str:
    """A libpq ``key=value`` string with the values of `SECRET_PARAMETERS` hidden."""

    def hide(match: re.Match[str]) -> str:
        if match["key"].lower() not in SECRET_PARAMETERS:
            return match[0]
        return f"{match['key']}{match['eq']}{MASK}"

    return _CONNINFO_PAIR.sub(hide, conninfo)


def _redact_url(url: str) -> str:
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return "<a malformed URL>"
    if password is None and "@" in url and _cut_short(parts):
        # A password holding a "/", "?" or "#" that is not percent-encoded ends
        # the URL's address early (``redis://user:pa/ss@host``): what parses
        # as a port, a path or a query holds the secret. Hide everything from
        # the user name to the last "@".
        scheme, _, after = url.partition("://")
        userinfo, _, rest = after.rpartition("@")
        cut = f"{scheme}://{userinfo.split(':', 1)[0]}:{MASK}@{rest}"
        if "@" not in urlsplit(cut).netloc:  # still no address: nothing to show safely
            return "<a malformed URL>"
        return _redact_url(cut)
    query = parse_qsl(parts.query, keep_blank_values=True)
    secret_query = any(key.lower() in SECRET_PARAMETERS for key, _ in query)
    if password is None and not secret_query:
        return url  # as given: urlunsplit would write memory:// as memory:
    if password is not None:
        user, host = parts.netloc.rsplit("@", 1)
        parts = parts._replace(netloc=f"{user.split(':', 1)[0]}:{MASK}@{host}")
    if secret_query:
        hidden = [(k, MASK if k.lower() in SECRET_PARAMETERS else v) for k, v in query]
        parts = parts._replace(query=urlencode(hidden, safe="*"))
    shown = urlunsplit(parts)
    if not parts.netloc and url.startswith(f"{parts.scheme}://"):  # unix:///path stays so
        shown = shown.replace(":", "://", 1)
    return shown


def _cut_short(parts: SplitResult) -> bool:
    """Whether a URL with an "@" after its address (`parts`) has a password cut short there.

    So it has when the address reads ``user:secret`` as a host and a port
    that is no number (`_broken_userinfo`), or is a port alone (``:123``),
    or when the "@" sits in the path or the fragment, or in the query
    before its first "=" or "&" (no parameter's name holds one): a password
    of digits then a "/", "?" or "#" (``bob:2024/more@host``) reads as a
    host and a port. An "@" in a query parameter's value (``?email=a@b``)
    is taken as given.
    """
    netloc = parts.netloc
    if not netloc or "@" in netloc:  # no address (unix:///a@b.sock), or a whole one
        return False
    if _broken_userinfo(netloc) or netloc.startswith(":"):
        return True
    if "@" in parts.path or "@" in parts.fragment:
        return True
    name = parts.query.split("&", 1)[0].split("=", 1)[0]
    return "@" in name


def _broken_userinfo(netloc: str) -> bool:
    """Whether `netloc` (without an "@") reads ``user:secret`` as a host and a port that is no
    number: the start of a password cut short by a "/", "?" or "#" in it."""
    if "@" in netloc:
        return False
    host_end = netloc.rfind("]")  # an IPv6 address's colons are not a port's
    _, colon, port = netloc[host_end + 1 :].rpartition(":")
    return bool(colon) and not (port.isascii() and port.isdigit())
