"""threadmill's in-memory backend: the reference implementation and the unit-test broker."""

from threadmill_memory.backend import MemoryBackend

__all__ = ["MemoryBackend"]
