"""The conformance kit: a model of the protocol and the tests every backend must pass.

A backend author writes one `HarnessFactory` (a fresh, empty backend and a
way to move its clock) and runs, against it, `run_machine(factory)` (the
state machine that compares the backend with `ProtocolModel` step by step),
every scenario in `SCENARIOS`, `check_payload_round_trip` for every value in
`PAYLOAD_CASES`, and every case in `BAD_INPUT_CASES`. Hypothesis strategies
for payloads and names are in `threadmill_core.testing.strategies`. The kit
needs Hypothesis (the ``test`` extra).
"""

from threadmill_core.testing.harness import Harness, HarnessFactory
from threadmill_core.testing.machine import BackendMachine, make_machine, run_machine
from threadmill_core.testing.model import ProtocolModel, ProtocolViolation, same_value
from threadmill_core.testing.scenarios import (
    BAD_INPUT_CASES,
    PAYLOAD_CASES,
    SCENARIOS,
    check_payload_round_trip,
)

__all__ = [
    "BAD_INPUT_CASES",
    "PAYLOAD_CASES",
    "SCENARIOS",
    "BackendMachine",
    "Harness",
    "HarnessFactory",
    "ProtocolModel",
    "ProtocolViolation",
    "check_payload_round_trip",
    "make_machine",
    "run_machine",
    "same_value",
]
