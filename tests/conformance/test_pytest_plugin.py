"""The ``threadmill`` pytest plugin, in pytest sessions of projects like a backend author's.

Each test writes a small project and runs pytest on it in a subprocess, with
plugin autoloading off and the plugin named with ``-p``, so the test means
the same whether or not threadmill's ``pytest11`` entry point is installed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.memory

#: A conftest.py whose backend is MemoryBackend with complete() blind to the token.
BROKEN_BACKEND_CONFTEST = """
    from datetime import timedelta

    import pytest
    from hypothesis import Phase, settings

    from threadmill_core.models import Lease
    from threadmill_core.testing import HarnessFactory, on_fake_clock
    from threadmill_memory import MemoryBackend

    settings.register_profile(
        "quick",
        max_examples=2000,
        stateful_step_count=20,
        phases=[Phase.generate],
        derandomize=True,
        database=None,
        deadline=None,
    )
    settings.load_profile("quick")
    TTL = timedelta(days=7)


    class TokenBlindBackend(MemoryBackend):
        def __init__(self, **options):
            super().__init__(**options)
            self.newest = {}

        def claim(self, queues, **options):
            leases = super().claim(queues, **options)
            self.newest.update((lease.task_id, lease.token) for lease in leases)
            return leases

        def claim_expired(self, **options):
            leases = super().claim_expired(**options)
            self.newest.update((lease.task_id, lease.token) for lease in leases)
            return leases

        def complete(self, lease, record):
            token = self.newest.get(lease.task_id, lease.token)
            forged = Lease(token=token, deadline=lease.deadline, record=lease.record)
            return super().complete(forged, record)


    def blind(clock):
        return TokenBlindBackend(clock=clock, result_ttl=TTL)


    @pytest.fixture
    def threadmill_harness_factory() -> HarnessFactory:
        return on_fake_clock(blind, result_ttl=TTL)
"""

OPTED_IN_MODULE = """
    from threadmill_core.testing import ConformanceSuite


    class TestConformance(ConformanceSuite):
        pass
"""


def run_pytest(
    project: Path, files: dict[str, str], *args: str
) -> subprocess.CompletedProcess[str]:
    """Write `files` into `project`, run pytest there with the plugin, and return the run."""
    for name, text in files.items():
        (project / name).write_text(textwrap.dedent(text), encoding="utf-8")
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "COLUMNS": "200"}
    env.pop("HYPOTHESIS_PROFILE", None)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "threadmill_core.testing.pytest_plugin",
            "-p",
            "no:cacheprovider",
            "-q",
            *args,
        ],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_a_project_that_does_not_opt_in_gets_no_tests_and_no_hypothesis(tmp_path: Path) -> None:
    """Loading the plugin adds no tests and imports neither Hypothesis nor the kit."""
    run = run_pytest(
        tmp_path,
        {
            "test_plain.py": """
                import sys


                def test_plain():
                    assert "hypothesis" not in sys.modules
                    assert "threadmill_core.testing.machine" not in sys.modules
            """
        },
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed" in run.stdout, run.stdout


def test_a_suite_without_the_fixture_says_how_to_opt_in(tmp_path: Path) -> None:
    """A ConformanceSuite subclass with no threadmill_harness_factory fixture names the fixture."""
    run = run_pytest(
        tmp_path, {"test_conformance.py": OPTED_IN_MODULE}, "-k", "test_scenario and late"
    )
    assert run.returncode == 1, run.stdout + run.stderr
    assert "needs a fixture named threadmill_harness_factory" in run.stdout, run.stdout


def test_a_broken_backend_fails_with_the_rule_and_the_steps(tmp_path: Path) -> None:
    """The report of a backend that ignores the token names the rule and lists the steps."""
    run = run_pytest(
        tmp_path,
        {"conftest.py": BROKEN_BACKEND_CONFTEST, "test_conformance.py": OPTED_IN_MODULE},
        "-k",
        "matches_the_model or late_acknowledgement",
        "-rf",
    )
    output = run.stdout
    assert run.returncode == 1, output + run.stderr
    assert "2 failed" in output, output
    # The machine's search stops at its first failure; which of complete()'s rules
    # it breaks first (a stale token, one never issued) depends on the search.
    machine = "test_backend_matches_the_model - threadmill_core.testing.model.ProtocolViolation"
    assert f"{machine}: complete() accepted a" in output, output
    assert "ProtocolViolation: complete() accepted a stale token while the reaper held" in output
    assert "state.claim(" in output, output  # Hypothesis's steps
    assert "in run_machine" not in output, output  # the kit's own frames are left out
