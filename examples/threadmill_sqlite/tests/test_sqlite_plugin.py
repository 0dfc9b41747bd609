"""The ``sqlite://`` plugin: found through the entry point, its URL forms and its options."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from threadmill_core import InvalidOption, connect
from threadmill_core.cli import main
from threadmill_core.plugins import installed_backends

from threadmill_sqlite import SQLiteBackend, SQLiteBackendError
from threadmill_sqlite.backend import DEFAULT_BUSY_TIMEOUT, DEFAULT_RESULT_TTL


def test_the_scheme_comes_from_this_distribution_s_entry_point() -> None:
    """``sqlite://`` is served by the threadmill-sqlite distribution, not by the core."""
    (found,) = [b for b in installed_backends() if b.scheme == "sqlite"]
    assert found.plugin == "sqlite"
    assert found.source.startswith("threadmill-sqlite ")


def test_threadmill_backends_lists_it(capsys: pytest.CaptureFixture[str]) -> None:
    """``threadmill backends`` shows the sqlite:// scheme and where it comes from."""
    assert main(["backends"]) == 0
    line = next(row for row in capsys.readouterr().out.splitlines() if "sqlite://" in row)
    assert "threadmill-sqlite" in line


def test_connect_builds_a_sqlite_backend_on_an_absolute_path(tmp_path: Path) -> None:
    """``connect("sqlite:///abs/path.db")`` opens (and creates) that file."""
    with connect(f"sqlite://{tmp_path}/queue.db") as broker:
        assert isinstance(broker.backend, SQLiteBackend)
        assert broker.backend.path == str(tmp_path / "queue.db")
        assert broker.backend.result_ttl == DEFAULT_RESULT_TTL
        assert broker.backend.busy_timeout == DEFAULT_BUSY_TIMEOUT
    assert (tmp_path / "queue.db").exists()


@pytest.mark.parametrize(
    ("url", "relative"),
    [("sqlite://queue.db", "queue.db"), ("sqlite://data/q%20ü.db", "data/q ü.db")],
)
def test_a_relative_path_is_fixed_when_connecting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str, relative: str
) -> None:
    """A relative path is resolved against the working directory once, at `connect`."""
    (tmp_path / "data").mkdir()
    monkeypatch.chdir(tmp_path)
    with connect(url) as broker:
        monkeypatch.chdir("/")
        assert isinstance(broker.backend, SQLiteBackend)
        assert broker.backend.path == str(tmp_path / relative)
        assert broker.backend.counts() == {}
    assert (tmp_path / relative).exists()


def test_options_from_the_url_and_from_keywords(tmp_path: Path) -> None:
    """`result_ttl` and `busy_timeout` come in seconds in the URL, or as keywords."""
    with connect(f"sqlite://{tmp_path}/a.db?result_ttl=60&busy_timeout=0.5") as broker:
        backend = broker.backend
        assert isinstance(backend, SQLiteBackend)
        assert (backend.result_ttl, backend.busy_timeout) == (
            timedelta(seconds=60),
            timedelta(milliseconds=500),
        )
    with connect(
        f"sqlite://{tmp_path}/b.db", result_ttl=timedelta(hours=2), busy_timeout=3
    ) as broker:
        backend = broker.backend
        assert isinstance(backend, SQLiteBackend)
        assert (backend.result_ttl, backend.busy_timeout) == (
            timedelta(hours=2),
            timedelta(seconds=3),
        )


@pytest.mark.parametrize(
    ("suffix", "options", "match"),
    [
        ("?colour=blue", {}, "unknown option 'colour'"),
        ("", {"colour": "blue"}, "unknown option 'colour'"),
        ("?result_ttl=1&result_ttl=2", {}, "appears twice"),
        ("?result_ttl=1", {"result_ttl": 2}, "both in the URL and as a keyword"),
        ("?result_ttl", {}, "number of seconds"),
        ("?result_ttl=soon", {}, "number of seconds"),
        ("?result_ttl=0", {}, "positive"),
        ("?busy_timeout=-1", {}, "positive"),
        ("?result_ttl=nan", {}, "finite"),
        ("?busy_timeout=inf", {}, "finite"),
        ("?result_ttl=1e300", {}, "out of range"),
        ("", {"result_ttl": "60"}, "timedelta or seconds"),
        ("", {"busy_timeout": True}, "timedelta or seconds"),
        ("#part", {}, "fragment"),
    ],
)
def test_bad_options_are_refused_and_create_no_file(
    tmp_path: Path, suffix: str, options: dict[str, Any], match: str
) -> None:
    """An unknown or malformed option raises `InvalidOption` naming it, before any file exists."""
    with pytest.raises(InvalidOption, match=match):
        connect(f"sqlite://{tmp_path}/queue.db{suffix}", **options)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "url", ["sqlite://", "sqlite://?result_ttl=1", "sqlite://:memory:", "sqlite://file:q.db"]
)
def test_urls_without_a_shareable_file_are_refused(url: str) -> None:
    """A URL naming no file, or an in-memory database, raises `InvalidOption`."""
    with pytest.raises(InvalidOption, match=r"sqlite:///abs/path\.db"):
        connect(url)


def test_a_missing_folder_is_a_backend_error(tmp_path: Path) -> None:
    """A path whose folder does not exist fails at `connect`, naming the file."""
    with pytest.raises(SQLiteBackendError, match="missing"):
        connect(f"sqlite://{tmp_path}/missing/queue.db")
