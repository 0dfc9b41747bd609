"""The one place that owns the pluggy `PluginManager`.

Bundled backends are found through their entry points exactly like
third-party ones. Nothing else in threadmill touches ``pm.hook``.
"""

from __future__ import annotations

import functools
import importlib.metadata
import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import attrs
import pluggy

from threadmill_core import hookspecs
from threadmill_core.errors import BackendConflict, InvalidOption, UnknownBackend
from threadmill_core.urls import redact

if TYPE_CHECKING:
    from threadmill_core.backend import Backend

log = logging.getLogger(__name__)

#: Schemes threadmill knows of, and the extra that installs them, for the
#: message `connect` gives when one is missing.
KNOWN_EXTRAS: Mapping[str, str] = {
    "redis": "redis",
    "rediss": "redis",
    "unix": "redis",
    "redis+cluster": "redis",
    "redis+sentinel": "redis",
    "rediss+sentinel": "redis",
    "postgresql": "postgres",
    "postgres": "postgres",
}


@attrs.frozen
class InstalledBackend:
    """One scheme, the plugin that serves it and where that plugin comes from."""

    scheme: str
    description: str
    plugin: str
    source: str


#: The distribution each entry-point plugin came from (None: not known), by plugin name.
#: Its name and version are read only when asked for (`plugin_source`): that parses the
#: distribution's metadata file, which `connect` never needs.
_DISTRIBUTIONS: dict[str, importlib.metadata.Distribution | None] = {}

#: Entry points that failed to load, with the reason, for `threadmill backends`.
BROKEN_PLUGINS: dict[str, str] = {}


@functools.cache
def plugin_manager() -> pluggy.PluginManager:
    """The process-wide plugin manager, with the ``threadmill`` entry points loaded.

    A plugin that fails to import is logged and skipped (and listed in
    `BROKEN_PLUGINS`), so one broken third-party package cannot take every
    other backend down with it.
    """
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    for entry in importlib.metadata.entry_points(group=hookspecs.PROJECT):
        if pm.get_plugin(entry.name) is not None or pm.is_blocked(entry.name):
            continue
        try:
            plugin = entry.load()
        except Exception as exc:
            dist = _describe(entry.dist)
            BROKEN_PLUGINS[entry.name] = f"{dist}: {type(exc).__name__}: {exc}"
            log.warning("threadmill plugin %r (%s) failed to load: %s", entry.name, dist, exc)
            continue
        pm.register(plugin, name=entry.name)
        _DISTRIBUTIONS[entry.name] = entry.dist
    return pm


def _describe(dist: importlib.metadata.Distribution | None) -> str:
    return f"{dist.name} {dist.version}" if dist is not None else "unknown"


def plugin_source(name: str) -> str:
    """Where plugin `name` comes from: its distribution and version, as ``threadmill 0.1.0``
    (``unknown`` if its entry point names none), or ``registered in-process``."""
    if name not in _DISTRIBUTIONS:
        return "registered in-process"
    return _describe(_DISTRIBUTIONS[name])


def installed_backends() -> list[InstalledBackend]:
    """Every scheme some plugin serves; raises `BackendConflict` if two claim one."""
    found = [
        InstalledBackend(entry.scheme, entry.description, plugin, plugin_source(plugin))
        for entry, plugin in _served_schemes().values()
    ]
    return sorted(found, key=lambda b: b.scheme)


def _served_schemes() -> dict[str, tuple[hookspecs.BackendScheme, str]]:
    """Each scheme some plugin serves, with that plugin's name; `BackendConflict` if two do."""
    found: dict[str, tuple[hookspecs.BackendScheme, str]] = {}
    for impl in plugin_manager().hook.threadmill_backend_schemes.get_hookimpls():
        schemes: list[hookspecs.BackendScheme] = impl.function() or []  # type: ignore[assignment]  # pluggy types results as object
        for entry in schemes:
            if entry.scheme in found:
                first = found[entry.scheme][1]
                raise BackendConflict(
                    entry.scheme,
                    f"{first} ({plugin_source(first)})",
                    f"{impl.plugin_name} ({plugin_source(impl.plugin_name)})",
                )
            found[entry.scheme] = (entry, impl.plugin_name)
    return found


def backend_for_url(url: str, options: Mapping[str, Any], *, create: bool = True) -> Backend:
    """Build the backend the URL's scheme selects, or raise `UnknownBackend`.

    `create` False: the backend must not make its storage if it is missing
    (see `hookspecs.threadmill_backend_for_url`).
    """
    if not isinstance(url, str) or "://" not in url:
        shown = redact(url) if isinstance(url, str) else url  # a conninfo string's password too
        raise InvalidOption(
            f"a backend URL looks like 'memory://' or 'redis://host'; got {shown!r}"
        )
    scheme = urlsplit(url).scheme.lower()
    installed = set(_served_schemes())
    if scheme not in installed:
        extra = KNOWN_EXTRAS.get(scheme)
        hint = f"install it with: pip install 'threadmill[{extra}]'" if extra else None
        raise UnknownBackend(url, scheme, installed, hint)
    backend = plugin_manager().hook.threadmill_backend_for_url(
        url=url, scheme=scheme, options=dict(options), create=create
    )
    if backend is None:  # a plugin listed the scheme but built nothing: its bug, say so
        raise UnknownBackend(url, scheme, installed, "its plugin returned no backend")
    return backend  # type: ignore[no-any-return]


def register_plugin(plugin: object, name: str) -> None:
    """Register an in-process plugin: an observer that a framework integration installs.

    Entry points suit plugins that every process with the package installed
    should load; an integration that observes only the processes it runs in
    (threadmill_django sends Django's signals from the lifecycle hooks)
    registers itself at start-up instead. Registering the same object under
    the same name again does nothing, so start-up code may run twice; another
    plugin under a name already taken is a `ValueError` naming both.
    """
    pm = plugin_manager()
    current = pm.get_plugin(name)
    if current is plugin:
        return
    if current is not None:
        raise ValueError(f"a threadmill plugin named {name!r} is registered already: {current!r}")
    pm.register(plugin, name=name)


def unregister_plugin(name: str) -> object | None:
    """Remove the plugin registered under `name`; return it, or None if there was none."""
    pm = plugin_manager()
    plugin: object | None = pm.get_plugin(name)
    if plugin is not None:
        pm.unregister(name=name)
    return plugin


def notify(hook_name: str, **kwargs: Any) -> None:
    """Call a lifecycle hook if, and only if, some plugin implements it.

    Observers must not break the queue: an exception from one is logged and
    swallowed.
    """
    caller = getattr(plugin_manager().hook, hook_name)
    if not caller.get_hookimpls():
        return
    try:
        caller(**kwargs)
    except Exception:
        log.exception("a threadmill plugin failed in %s; the task goes on", hook_name)


def notify_each(hook_name: str, argument: str, values: Iterable[Any]) -> None:
    """`notify(hook_name, **{argument: value})` for each of `values`, in order.

    Whether some plugin implements the hook is asked once, not per value: a
    batch of a thousand tasks costs nothing when nobody listens.
    """
    caller = getattr(plugin_manager().hook, hook_name)
    if not caller.get_hookimpls():
        return
    for value in values:
        try:
            caller(**{argument: value})
        except Exception:
            log.exception("a threadmill plugin failed in %s; the task goes on", hook_name)
