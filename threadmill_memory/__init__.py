"""threadmill's in-memory backend: the reference implementation and the unit-test broker.

`MemoryBackend` is imported on first use, so loading the plugin that the
``threadmill`` entry point names (which every `connect` does, whatever its
scheme) does not import the backend itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from threadmill_memory.backend import MemoryBackend

__all__ = ["MemoryBackend"]


def __getattr__(name: str) -> Any:
    if name == "MemoryBackend":
        from threadmill_memory.backend import MemoryBackend

        return MemoryBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
