"""Backend URLs shown to people: `redact` hides the credentials in them."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

#: Query parameters that carry a secret (redis-py and libpq read these).
SECRET_PARAMETERS = frozenset({"password", "passwd", "pass", "sslpassword"})


def redact(url: str) -> str:
    """`url` with its password (in the address or the query string) replaced by ``***``.

    For logs, messages and screens. A URL that does not parse is shown as
    ``<a malformed URL>``: it may hold a secret where no rule finds it.
    """
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return "<a malformed URL>"
    if password is not None:
        user, host = parts.netloc.rsplit("@", 1)[0], parts.netloc.rsplit("@", 1)[1]
        name = user.split(":", 1)[0] if ":" in user else ""
        parts = parts._replace(netloc=f"{name}:***@{host}")
    query = parse_qsl(parts.query, keep_blank_values=True)
    if any(key.lower() in SECRET_PARAMETERS for key, _ in query):
        hidden = [(k, "***" if k.lower() in SECRET_PARAMETERS else v) for k, v in query]
        parts = parts._replace(query=urlencode(hidden, safe="*"))
    return urlunsplit(parts)
