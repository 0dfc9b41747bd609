"""The ``threadmill`` pytest plugin: the conformance kit for any backend, in one subclass.

Installed with threadmill as the ``threadmill`` entry point of the
``pytest11`` group, so every pytest session of a threadmill install loads
it. That is why this module imports nothing but pytest: the kit (and
Hypothesis) load only when a test module opts in, and a project that does
not opt in gets no tests from it. To opt in, define a fixture named
``threadmill_harness_factory`` that returns a `HarnessFactory` for your
backend, and subclass `threadmill_core.testing.ConformanceSuite` in a test
module::

    # conftest.py
    import pytest
    from threadmill_core.testing import HarnessFactory, on_fake_clock

    @pytest.fixture
    def threadmill_harness_factory() -> HarnessFactory:
        return on_fake_clock(lambda clock: MyBackend(clock=clock))

    # test_conformance.py
    from threadmill_core.testing import ConformanceSuite

    class TestConformance(ConformanceSuite):
        pass

The plugin provides:

- the ``threadmill_harness`` fixture: one fresh harness from the factory,
  closed after the test;
- a stand-in ``threadmill_harness_factory`` that fails with instructions,
  for a suite whose author has not defined the real one yet;
- the ``threadmill_conformance`` marker, which every kit test carries
  (``-m "not threadmill_conformance"`` leaves the kit out);
- short failure reports: a `ProtocolViolation` is reported with its rule,
  the step, and Hypothesis's failing steps, without the kit's own frames
  (``--full-trace`` shows them).

Without the entry point (threadmill installed without it, or
``PYTEST_DISABLE_PLUGIN_AUTOLOAD`` set), load it with
``-p threadmill_core.testing.pytest_plugin``; with the entry point, that
same flag would register it twice, so use ``-p threadmill`` instead.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from threadmill_core.testing.harness import Harness, HarnessFactory

MARKER = "threadmill_conformance"
#: The kit's own source files; their frames are left out of a violation's report.
KIT = Path(__file__).resolve().parent
#: Functions of the kit that only build a violation's message.
REPORTERS = frozenset({"fail", "expect"})


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}: a test of threadmill's conformance kit "
        "(threadmill_core.testing.ConformanceSuite)",
    )


@pytest.fixture
def threadmill_harness_factory() -> HarnessFactory:
    """Stand-in: a backend's tests must define this fixture to use the conformance kit."""
    pytest.fail(
        "the threadmill conformance kit needs a fixture named threadmill_harness_factory "
        "that returns a HarnessFactory for your backend (define it in your conftest.py; "
        "threadmill_core.testing.on_fake_clock builds one for a backend that takes a clock; "
        "see docs/writing-a-backend.md)",
        pytrace=False,
    )


@pytest.fixture
def threadmill_harness(threadmill_harness_factory: HarnessFactory) -> Iterator[Harness]:
    """One fresh, empty backend from ``threadmill_harness_factory``, closed afterwards."""
    harness = threadmill_harness_factory()
    try:
        yield harness
    finally:
        harness.close()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> None:
    """Trim a `ProtocolViolation`'s traceback to the test's own frames and the failing check.

    The message already names the broken rule and the step, and Hypothesis
    adds the steps that led there; the frames of the kit in between (the
    machine's rules, Hypothesis's runner) teach nothing. The last frame of
    the kit that is not a message builder stays, shortened, so the report
    still points at the check that failed. Nothing else is touched.
    """
    excinfo = call.excinfo
    if excinfo is None or item.config.getoption("fulltrace", False):
        return
    model = sys.modules.get("threadmill_core.testing.model")
    if model is None or not excinfo.errisinstance(model.ProtocolViolation):
        return
    traceback = excinfo.traceback
    roots = [str(KIT), str(Path(__file__).parent)]
    if (hypothesis := sys.modules.get("hypothesis")) and hypothesis.__file__:
        roots.append(str(Path(hypothesis.__file__).parent))
    in_kit = [str(entry.path).startswith(tuple(roots)) for entry in traceback]
    checks = [
        index
        for index, entry in enumerate(traceback)
        if in_kit[index] and entry.name not in REPORTERS
    ]
    last_check = checks[-1] if checks else len(traceback) - 1
    kept = [
        entry.with_repr_style("short") if index == last_check else entry
        for index, entry in enumerate(traceback)
        if not in_kit[index] or index == last_check
    ]
    excinfo.traceback = type(traceback)(kept)
