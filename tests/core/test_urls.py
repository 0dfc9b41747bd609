"""`redact`: backend URLs as logs and screens show them."""

from __future__ import annotations

import pytest

from threadmill_core.inspector import redact


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:s3cret@h:6379/0", "redis://:***@h:6379/0"),
        ("redis://bob:s3cret@h/0?namespace=q", "redis://bob:***@h/0?namespace=q"),
        ("redis://h/0?password=s3cret&namespace=q", "redis://h/0?password=***&namespace=q"),
        ("unix:///run/redis.sock?password=s3cret", "unix:///run/redis.sock?password=***"),
        ("memory://", "memory://"),
        ("redis://[::1", "<a malformed URL>"),
    ],
)
def test_a_password_in_the_address_or_the_query_is_hidden(url: str, shown: str) -> None:
    """Passwords go, wherever a driver reads them from; everything else is shown as given."""
    assert redact(url) == shown
