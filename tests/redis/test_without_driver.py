"""The Redis plugin without redis-py installed: no schemes, and a hint naming the extra."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import sys
sys.modules["redis"] = None  # as if redis-py were not installed
from threadmill_core import UnknownBackend, connect
from threadmill_core.plugins import BROKEN_PLUGINS, installed_backends
assert not BROKEN_PLUGINS, BROKEN_PLUGINS
assert "redis" not in {b.scheme for b in installed_backends()}
try:
    connect("redis://localhost:6379/0")
except UnknownBackend as exc:
    print(exc)
"""


def test_without_redis_py_connect_names_the_extra() -> None:
    """Without redis-py the plugin still loads, offers no schemes, and connect names the extra."""
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "pip install 'threadmill[redis]'" in done.stdout
    assert "failed to load" not in done.stderr
