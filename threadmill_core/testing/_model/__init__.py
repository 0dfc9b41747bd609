"""The parts of `threadmill_core.testing.model`, the kit's naive model of the protocol."""
