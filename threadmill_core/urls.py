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
    query = parse_qsl(parts.query, keep_blank_values=True)
    secret_query = any(key.lower() in SECRET_PARAMETERS for key, _ in query)
    if password is None and not secret_query:
        return url  # as given: urlunsplit would write memory:// as memory:
    if password is not None:
        user, host = parts.netloc.rsplit("@", 1)
        parts = parts._replace(netloc=f"{user.split(':', 1)[0]}:***@{host}")
    if secret_query:
        hidden = [(k, "***" if k.lower() in SECRET_PARAMETERS else v) for k, v in query]
        parts = parts._replace(query=urlencode(hidden, safe="*"))
    shown = urlunsplit(parts)
    if not parts.netloc and url.startswith(f"{parts.scheme}://"):  # unix:///path stays so
        shown = shown.replace(":", "://", 1)
    return shown
