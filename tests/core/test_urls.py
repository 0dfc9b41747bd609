"""`redact`: backend URLs as logs and screens show them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from threadmill_core.cli.inspector import redact


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:s3cret@h:6379/0", "redis://:***@h:6379/0"),
        ("redis://bob:s3cret@h/0?namespace=q", "redis://bob:***@h/0?namespace=q"),
        ("redis://h/0?password=s3cret&namespace=q", "redis://h/0?password=***&namespace=q"),
        ("unix:///run/redis.sock?password=s3cret", "unix:///run/redis.sock?password=***"),
        ("memory://", "memory://"),
        ("redis://[::1", "<a malformed URL>"),
        ("redis://:pa/ss@h:6379/0", "redis://:***@h:6379/0"),
        ("redis://bob:pa?ss@h/0", "redis://bob:***@h/0"),
        ("redis://:pa#ss@h/0", "redis://:***@h/0"),
        ("redis://bob:2024/s3cret@h:6379/0", "redis://bob:***@h:6379/0"),
        ("redis://:123?s3cret@h/0", "redis://:***@h/0"),
        ("redis://bob:123#s3cret@h/0", "redis://bob:***@h/0"),
        ("postgresql://bob:9/s3cret@h/jobs", "postgresql://bob:***@h/jobs"),
        ("redis://h:6379/0?email=a@b", "redis://h:6379/0?email=a@b"),
        ("unix:///run/a@b.sock?db=0", "unix:///run/a@b.sock?db=0"),
        ("redis://[::1]:6379/0", "redis://[::1]:6379/0"),
        ("host=db password=s3cret dbname=jobs", "host=db password=*** dbname=jobs"),
        ("host=db password = 'a \\' s3cret' user=x", "host=db password = *** user=x"),
        ("host=db sslpassword=s3cret", "host=db sslpassword=***"),
        ("dbname=jobs", "dbname=jobs"),
    ],
)
def test_a_password_in_the_address_or_the_query_is_hidden(url: str, shown: str) -> None:
    """Passwords go, wherever a driver reads them from; everything else is shown as given."""
    assert redact(url) == shown


#: Passwords as people type them into URLs, unescaped: any printable text but the "@"
#: that would end them, between markers no other part of the URL holds.
_PASSWORDS = st.text(
    st.characters(codec="ascii", categories=["L", "N", "P", "S"], exclude_characters="@"),
    max_size=20,
).map(lambda text: f"SECRET{text}SECRET")


@given(password=_PASSWORDS, user=st.sampled_from(["", "bob"]))
def test_no_url_password_is_ever_shown(password: str, user: str) -> None:
    """Whatever a URL's password holds ("/", "?", "#", ":" unescaped), no part of it is shown."""
    shown = redact(f"redis://{user}:{password}@db.example:6379/0?namespace=q")
    assert "SECRET" not in shown


#: Passwords that start with digits and a "/", "?" or "#": cut short there, what is
#: left of the address reads as a host and a port (``bob:2024``). No "=" or "&" in
#: them: a password ``12?a=b`` reads as a query parameter ``a``, and `redact` keeps
#: a query's "@" in a parameter's value (``?email=a@b``) as given.
_PORT_PASSWORDS = st.tuples(
    st.from_regex(r"[0-9]{1,5}", fullmatch=True),
    st.sampled_from("/?#"),
    _PASSWORDS.filter(lambda text: "=" not in text and "&" not in text),
).map("".join)


@given(password=_PORT_PASSWORDS, user=st.sampled_from(["", "bob"]))
def test_a_password_that_looks_like_a_port_is_not_shown(password: str, user: str) -> None:
    """A password cut short where its digits read as a port is hidden all the same."""
    shown = redact(f"redis://{user}:{password}@db.example:6379/0?namespace=q")
    assert "SECRET" not in shown


@given(password=_PASSWORDS.filter(lambda text: "'" not in text and "\\" not in text))
def test_no_conninfo_password_is_ever_shown(password: str) -> None:
    """A libpq string's password, quoted, is hidden whatever it holds."""
    assert "SECRET" not in redact(f"host=db password='{password}' dbname=jobs")
