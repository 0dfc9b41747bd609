"""One `Broker` per backend alias per process, made on first use.

Django makes a backend instance per thread (and anew when settings change),
so the broker is not the instance's: every instance of an alias in a process
shares this module's, connected when the first enqueue or read needs it, so
importing a module of tasks opens no connection. A forked child forgets its
parent's brokers (their sockets are the parent's) and connects anew; the
parent's are left open for the parent. A change of the ``TASKS`` setting
(``override_settings`` in tests) closes them all.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from typing import Any

from django.core.signals import setting_changed

from threadmill_core.broker import Broker, connect
from threadmill_django.options import BackendOptions

_lock = threading.Lock()
_brokers: dict[str, Broker] = {}
#: Brokers that `use_broker` put in place of an alias's own, innermost last.
_overrides: dict[str, list[Broker]] = {}


def broker_for(options: BackendOptions) -> Broker:
    """The broker of `options.alias` in this process, connecting on first use."""
    alias = options.alias
    stack = _overrides.get(alias)
    if stack:
        return stack[-1]
    broker = _brokers.get(alias)  # without the lock: the usual case, a dict read
    if broker is not None:
        return broker
    with _lock:
        broker = _brokers.get(alias)
        if broker is None:
            broker = _brokers[alias] = connect(options.broker_url)
        return broker


def close_all() -> None:
    """Close and forget every alias's broker; the next use connects again."""
    with _lock:
        brokers = list(_brokers.values())
        _brokers.clear()
    for broker in brokers:
        broker.close()


@contextlib.contextmanager
def use_broker(alias: str, broker: Broker) -> Iterator[Broker]:
    """Make `broker` the one of `alias` in this process while the block runs.

    For tests: a memory backend on a `FakeClock` lets a test make retries
    due and leases expire without sleeping (see docs/django.md). The alias's
    own broker, if it has one, is left alone and comes back afterwards.
    """
    with _lock:
        _overrides.setdefault(alias, []).append(broker)
    try:
        yield broker
    finally:
        with _lock:
            _overrides[alias].remove(broker)


def _forget_in_child() -> None:
    global _lock
    _lock = threading.Lock()  # the parent's may have been held by another thread
    _brokers.clear()


def _on_setting_changed(*, setting: str, **_kwargs: Any) -> None:
    if setting == "TASKS":
        close_all()


os.register_at_fork(after_in_child=_forget_in_child)
setting_changed.connect(_on_setting_changed, dispatch_uid="threadmill_django.brokers")
