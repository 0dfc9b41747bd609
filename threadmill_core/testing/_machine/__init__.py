"""The parts of `threadmill_core.testing.machine`, one job each."""
