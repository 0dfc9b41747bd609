"""The docs that list backend URL schemes name every scheme the bundled backends register."""

from __future__ import annotations

from pathlib import Path

from threadmill_core.plugins import installed_backends

DOCS = Path(__file__).parents[2] / "docs"


def test_the_django_url_option_names_every_bundled_scheme() -> None:
    """docs/django.md's row for the `url` option names each scheme `threadmill backends` lists
    as coming from threadmill itself (``postgresql://`` was once left out)."""
    [row] = [
        line for line in (DOCS / "django.md").read_text().splitlines() if line.startswith("| `url`")
    ]
    bundled = {r.scheme for r in installed_backends() if r.source.startswith("threadmill ")}
    assert {"memory", "redis", "postgresql"} <= bundled
    missing = sorted(scheme for scheme in bundled if f"`{scheme}://`" not in row)
    assert not missing, f"docs/django.md's url row leaves out {missing}: {row}"
