"""The ``memory://`` plugin: its scheme, its options and their errors, its entry point."""

from __future__ import annotations

import importlib.util
from datetime import timedelta
from importlib.metadata import entry_points
from typing import Any

import pluggy
import pytest

from threadmill_core import hookspecs
from threadmill_core.clock import FakeClock
from threadmill_core.errors import InvalidOption
from threadmill_memory import MemoryBackend, plugin


def test_the_plugin_lists_the_memory_scheme() -> None:
    """The plugin announces exactly the memory scheme, with a description."""
    [scheme] = plugin.threadmill_backend_schemes()
    assert scheme.scheme == "memory"
    assert scheme.description


def test_other_schemes_are_left_to_other_plugins() -> None:
    """For a scheme that is not memory the plugin builds nothing."""
    assert plugin.threadmill_backend_for_url("redis://localhost", "redis", {}) is None


def test_a_bare_url_builds_a_default_backend() -> None:
    """memory:// builds a MemoryBackend that keeps results for a day."""
    backend = plugin.threadmill_backend_for_url("memory://", "memory", {})
    assert isinstance(backend, MemoryBackend)
    assert backend.result_ttl == timedelta(days=1)


@pytest.mark.parametrize(
    ("url", "options", "expected"),
    [
        ("memory://?result_ttl=3600", {}, timedelta(hours=1)),
        ("memory://?result_ttl=0.5", {}, timedelta(milliseconds=500)),
        ("memory://", {"result_ttl": timedelta(minutes=5)}, timedelta(minutes=5)),
        ("memory://", {"result_ttl": 60}, timedelta(minutes=1)),
        ("memory://", {"result_ttl": 1.5}, timedelta(seconds=1.5)),
    ],
)
def test_result_ttl_from_the_url_or_a_keyword(
    url: str, options: dict[str, Any], expected: timedelta
) -> None:
    """result_ttl is seconds in the URL, and a timedelta or seconds as a keyword."""
    backend = plugin.backend_from_url(url, options)
    assert backend.result_ttl == expected


def test_clock_is_a_keyword_option() -> None:
    """A clock given as a keyword is the backend's clock."""
    clock = FakeClock()
    backend = plugin.backend_from_url("memory://", {"clock": clock})
    assert backend.now() == clock.now()
    clock.advance(timedelta(hours=2))
    assert backend.now() == clock.now()


@pytest.mark.parametrize(
    ("url", "options", "named"),
    [
        pytest.param("memory://?colour=blue", {}, "'colour'", id="unknown-in-url"),
        pytest.param("memory://?clock=fake", {}, "'clock'", id="clock-in-url"),
        pytest.param("memory://", {"colour": "blue"}, "'colour'", id="unknown-keyword"),
        pytest.param("memory://?result_ttl=soon", {}, "'result_ttl'", id="not-a-number"),
        pytest.param("memory://?result_ttl", {}, "'result_ttl'", id="no-value"),
        pytest.param("memory://?result_ttl=0", {}, "'result_ttl'", id="zero"),
        pytest.param("memory://?result_ttl=-5", {}, "'result_ttl'", id="negative"),
        pytest.param("memory://?result_ttl=nan", {}, "'result_ttl'", id="nan"),
        pytest.param("memory://?result_ttl=inf", {}, "'result_ttl'", id="infinite"),
        pytest.param("memory://?result_ttl=1e300", {}, "'result_ttl'", id="out-of-range"),
        pytest.param("memory://?result_ttl=1&result_ttl=2", {}, "'result_ttl'", id="twice"),
        pytest.param("memory://", {"result_ttl": "60"}, "'result_ttl'", id="str-keyword"),
        pytest.param("memory://", {"result_ttl": True}, "'result_ttl'", id="bool-keyword"),
        pytest.param(
            "memory://", {"result_ttl": timedelta(0)}, "'result_ttl'", id="zero-timedelta"
        ),
        pytest.param(
            "memory://?result_ttl=60", {"result_ttl": 60}, "'result_ttl'", id="url-and-keyword"
        ),
        pytest.param("memory://", {"clock": "system"}, "'clock'", id="clock-not-a-clock"),
        pytest.param("memory://somehost", {}, "memory://somehost", id="host"),
        pytest.param("memory:///path", {}, "memory:///path", id="path"),
    ],
)
def test_unknown_or_malformed_options_are_refused(
    url: str, options: dict[str, Any], named: str
) -> None:
    """An unknown or malformed option raises InvalidOption naming it and the valid options."""
    with pytest.raises(InvalidOption) as raised:
        plugin.threadmill_backend_for_url(url, "memory", options)
    message = str(raised.value)
    assert named in message
    assert "result_ttl" in message
    assert "clock" in message


def test_the_entry_point_serves_memory_urls() -> None:
    """The threadmill entry point named memory loads this plugin, which builds the backend."""
    [entry] = [ep for ep in entry_points(group=hookspecs.PROJECT) if ep.name == "memory"]
    assert entry.value == "threadmill_memory.plugin"
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    assert pm.load_setuptools_entrypoints(hookspecs.PROJECT, name="memory") == 1
    backend = pm.hook.threadmill_backend_for_url(
        url="memory://", scheme="memory", options={}, create=True
    )
    assert isinstance(backend, MemoryBackend)


@pytest.mark.skipif(
    importlib.util.find_spec("threadmill_redis.plugin") is None,
    reason="the plugin manager loads every entry point, and threadmill_redis.plugin is not there",
)
def test_backend_for_url_finds_memory_through_the_plugin_manager() -> None:
    """threadmill_core.plugins.backend_for_url builds a MemoryBackend for memory:// URLs."""
    from threadmill_core.plugins import backend_for_url

    backend = backend_for_url("memory://?result_ttl=60", {})
    assert isinstance(backend, MemoryBackend)
    assert backend.result_ttl == timedelta(minutes=1)
