"""threadmill_django's tests: Django's own task suite, unit tests, the example project end to end.

Django 6 needs Python 3.12 or later. Where it is missing, only
`test_requirements` is collected, and it skips saying why; `.ci/run` runs
this folder in venvs of its own on Python 3.12 and 3.13, with Django 6.0
and 6.1.
"""

from __future__ import annotations

import importlib.util
import sys


def django_missing() -> str | None:
    """Why these tests cannot run in this interpreter, or None if they can."""
    if sys.version_info < (3, 12):
        version = ".".join(map(str, sys.version_info[:2]))
        return (
            f"Django 6 needs Python 3.12 or later, this is {version}; .ci/run runs "
            "tests/django in venvs of their own on Python 3.12 and 3.13"
        )
    if importlib.util.find_spec("django") is None:
        return "Django is not installed: pip install -e '.[django,test]' on Python 3.12+"
    import django

    if django.VERSION < (6, 0):
        return f"Django {django.get_version()} has no task framework; 6.0 or later is needed"
    return None
