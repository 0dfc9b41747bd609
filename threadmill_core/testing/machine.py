"""The conformance state machine: a backend under test, run step for step beside the model.

Every backend, bundled or third-party, runs it through `ConformanceSuite`;
outside pytest, or to pass settings of its own::

    from threadmill_core.testing import run_machine

    def test_my_backend_matches_the_model():
        run_machine(make_my_harness)

`make_machine(factory)` builds a Hypothesis `RuleBasedStateMachine` whose every
test case starts from `factory()` (a fresh, empty backend) and closes it at
the end. Each rule makes one call on the backend and the same call on
`ProtocolModel`, and compares the answers; after every rule an invariant
compares `counts()` and the segments the rule may have changed (contents,
order, records), and every segment of every queue every few rules and at
the end. Leases that lost their token stay in the `leases` bundle, so later
rules use them and the backend must refuse them.

A disagreement raises `ProtocolViolation` (an `AssertionError`) whose first
line names the broken rule in words ("complete() accepted a stale token (a
reaper claim replaced it)", "claim() returned tasks out of order: ... by
priority (higher first)", "a reaper claim counted as an attempt",
"claim_expired() charged task ..., whose expired claim never recorded a
start", "release() accepted a lease whose start was recorded"), followed
by the step and the expected and actual values.

Time. Durations are whole hours; every advance is whole hours plus one
minute. So any two moments the kit compares (a deadline and "now", two due
times) are either equal by construction or at least a minute apart, and a
backend on a server clock (`Harness.exact_clock` False), whose time also
creeps forward in real time while the test runs, still sees the same side
of every boundary as the model. Such a backend is checked for timestamps'
presence and order, not their values, and ties (two calls at one model
instant) may come out in either order. On an exact clock everything is
compared exactly, and one more rule stops the clock exactly on the next due
time or lease deadline, since both "due" and "expired" include that moment.
"""

from __future__ import annotations

import hypothesis
from hypothesis.stateful import run_state_machine_as_test

from threadmill_core.testing._machine.checks import same_segment
from threadmill_core.testing._machine.operator_rules import OperatorRules
from threadmill_core.testing._machine.upkeep_rules import UpkeepRules
from threadmill_core.testing._machine.values import (
    ADVANCES,
    BACKEND_FIELDS,
    CLAIM_TTLS,
    DEFERRED,
    FAILED,
    FULL_CHECK_EVERY,
    HOUR,
    LEASE_TTLS,
    MAX_ADVANCES,
    MINUTE,
    PHASE,
    READY,
    REAPER_HINTS,
    RESULT_TTL_MARGIN,
    RETRY_DELAYS,
    RUN_AFTER_OFFSETS,
    RUNNING,
    SUCCESSFUL,
    VERDICTS,
    LeaseRef,
    SentDecision,
    TaskSpec,
    Verdict,
    task_specs,
)
from threadmill_core.testing._machine.work_rules import WorkRules
from threadmill_core.testing.harness import HarnessFactory

#: The machine, and the names the rules share (importable here as before the split).
__all__ = [
    "ADVANCES",
    "BACKEND_FIELDS",
    "CLAIM_TTLS",
    "DEFERRED",
    "FAILED",
    "FULL_CHECK_EVERY",
    "HOUR",
    "LEASE_TTLS",
    "MAX_ADVANCES",
    "MINUTE",
    "PHASE",
    "READY",
    "REAPER_HINTS",
    "RESULT_TTL_MARGIN",
    "RETRY_DELAYS",
    "RUNNING",
    "RUN_AFTER_OFFSETS",
    "SUCCESSFUL",
    "VERDICTS",
    "BackendMachine",
    "LeaseRef",
    "SentDecision",
    "TaskSpec",
    "Verdict",
    "make_machine",
    "run_machine",
    "same_segment",
    "task_specs",
]


class BackendMachine(WorkRules, UpkeepRules, OperatorRules):
    """Rules over the whole storage interface; `make_machine` sets `harness_factory`.

    The rules come from `WorkRules` (enqueue, claim, renew, mark started,
    decide, release), `UpkeepRules` (time, the reaper, the mover) and
    `OperatorRules` (get, peek, requeue, cancel, purge, a made-up lease);
    the checks and the invariant from their base, `CheckingMachine`.
    """


def make_machine(factory: HarnessFactory) -> type[BackendMachine]:
    """A state machine class that tests the backends `factory` builds (one per test case)."""
    name = getattr(factory, "__name__", type(factory).__name__)
    return type(
        f"BackendMachine[{name}]", (BackendMachine,), {"harness_factory": staticmethod(factory)}
    )


def run_machine(factory: HarnessFactory, settings: hypothesis.settings | None = None) -> None:
    """Run the conformance state machine on `factory`'s backends; raise on the first violation.

    `settings` defaults to the active Hypothesis profile. Hypothesis's explain
    phase is left out: on this machine it takes longer than finding and
    shrinking the failure together, and the failure message already names
    the rule broken.
    """
    chosen = settings if settings is not None else hypothesis.settings()
    phases = [phase for phase in chosen.phases if phase is not hypothesis.Phase.explain]
    run_state_machine_as_test(
        make_machine(factory), settings=hypothesis.settings(chosen, phases=phases)
    )
