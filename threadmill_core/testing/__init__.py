"""The conformance kit: a model of the protocol and the tests every backend must pass."""

from threadmill_core.testing.harness import Harness, HarnessFactory

__all__ = ["Harness", "HarnessFactory"]
