"""The parts of `threadmill_core.testing.scenarios`, one kind of scenario each."""
