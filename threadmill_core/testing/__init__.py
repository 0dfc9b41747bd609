"""The conformance kit: a model of the protocol and the tests every backend must pass.

A backend author writes one `HarnessFactory` (a fresh, empty backend and a
way to move its clock; `on_fake_clock` builds one for a backend that takes
an injected clock), returns it from a pytest fixture named
``threadmill_harness_factory``, and subclasses `ConformanceSuite` in a test
module; the ``threadmill`` pytest plugin does the rest (see
`threadmill_core.testing.pytest_plugin` and docs/writing-a-backend.md).

The parts are public for use outside pytest too: `run_machine(factory)` (the
state machine that compares the backend with `ProtocolModel` step by step),
the named race scenarios in `SCENARIOS`, `check_payload_round_trip` for every
value in `PAYLOAD_CASES`, `run_payload_fuzz(factory)` for generated values,
and the cases in `BAD_INPUT_CASES` and `ARGUMENT_CASES`. Hypothesis
strategies for payloads and names are in `threadmill_core.testing.strategies`.

The kit needs Hypothesis (the ``test`` extra). Names are imported when first
used, so that the pytest plugin, which every pytest session of a threadmill
install loads, imports neither Hypothesis nor the kit unless a test uses it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from threadmill_core.testing.argument_cases import ARGUMENT_CASES
    from threadmill_core.testing.harness import Harness, HarnessFactory, on_fake_clock
    from threadmill_core.testing.machine import BackendMachine, make_machine, run_machine
    from threadmill_core.testing.model import ProtocolModel, ProtocolViolation, same_value
    from threadmill_core.testing.scenarios import (
        BAD_INPUT_CASES,
        PAYLOAD_CASES,
        SCENARIOS,
        check_payload_round_trip,
    )
    from threadmill_core.testing.suite import ConformanceSuite, run_payload_fuzz

#: Where each public name lives.
_HOMES = {
    "ARGUMENT_CASES": "argument_cases",
    "BAD_INPUT_CASES": "scenarios",
    "PAYLOAD_CASES": "scenarios",
    "SCENARIOS": "scenarios",
    "BackendMachine": "machine",
    "ConformanceSuite": "suite",
    "Harness": "harness",
    "HarnessFactory": "harness",
    "ProtocolModel": "model",
    "ProtocolViolation": "model",
    "check_payload_round_trip": "scenarios",
    "make_machine": "machine",
    "on_fake_clock": "harness",
    "run_machine": "machine",
    "run_payload_fuzz": "suite",
    "same_value": "model",
}

__all__ = [
    "ARGUMENT_CASES",
    "BAD_INPUT_CASES",
    "PAYLOAD_CASES",
    "SCENARIOS",
    "BackendMachine",
    "ConformanceSuite",
    "Harness",
    "HarnessFactory",
    "ProtocolModel",
    "ProtocolViolation",
    "check_payload_round_trip",
    "make_machine",
    "on_fake_clock",
    "run_machine",
    "run_payload_fuzz",
    "same_value",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        module = importlib.import_module(f"{__name__}.{home}")
    except ModuleNotFoundError as exc:
        if exc.name != "hypothesis" and not (exc.name or "").startswith("hypothesis."):
            raise
        raise ModuleNotFoundError(
            f"threadmill's conformance kit ({name}) needs Hypothesis: "
            "pip install 'threadmill[test]'",
            name=exc.name,
        ) from exc
    value = getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
