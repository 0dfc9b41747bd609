"""The interpreter can run threadmill_django: Python 3.12+, Django within the extra's range."""

from __future__ import annotations

import pytest

from tests.django import django_missing


def test_django_is_installed_within_the_declared_range() -> None:
    """The Django found is one the `django` extra admits (>=6.0, <6.2)."""
    missing = django_missing()
    if missing is not None:
        pytest.skip(missing)
    import django

    assert (6, 0) <= django.VERSION[:2] < (6, 2), django.get_version()
