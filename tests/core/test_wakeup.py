"""`Wakeup`, the supervisor's flag that its signal handler sets while the main thread waits."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from types import FrameType

import pytest

from threadmill_core.worker.wakeup import Wakeup


@pytest.fixture
def timer() -> Iterator[None]:
    """Leaves SIGALRM and its interval timer as they were."""
    before = signal.getsignal(signal.SIGALRM)
    yield
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, before)


def test_a_wait_without_a_set_lasts_its_timeout() -> None:
    wakeup = Wakeup()
    begin = time.monotonic()
    assert wakeup.wait(0.05) is False
    assert time.monotonic() - begin >= 0.05


def test_a_set_flag_ends_every_wait_at_once_until_cleared() -> None:
    wakeup = Wakeup()
    wakeup.set()
    begin = time.monotonic()
    assert (wakeup.wait(30), wakeup.wait(30), wakeup.is_set()) == (True, True, True)
    assert time.monotonic() - begin < 5
    wakeup.clear()
    assert (wakeup.is_set(), wakeup.wait(0.01)) == (False, False)


def test_a_set_from_another_thread_wakes_the_waiter() -> None:
    wakeup = Wakeup()
    setter = threading.Timer(0.05, wakeup.set)
    setter.start()
    begin = time.monotonic()
    try:
        assert wakeup.wait(30) is True
    finally:
        setter.cancel()
    assert time.monotonic() - begin < 5


def test_a_set_from_a_signal_handler_wakes_the_main_thread(timer: None) -> None:
    wakeup = Wakeup()
    signal.signal(signal.SIGALRM, lambda _signum, _frame: wakeup.set())
    signal.setitimer(signal.ITIMER_REAL, 0.05)
    begin = time.monotonic()
    assert wakeup.wait(30) is True
    assert time.monotonic() - begin < 5


def test_a_signal_that_sets_nothing_does_not_end_the_wait(timer: None) -> None:
    wakeup = Wakeup()
    seen: list[int] = []

    def count(signum: int, _frame: FrameType | None) -> None:
        seen.append(signum)

    signal.signal(signal.SIGALRM, count)
    signal.setitimer(signal.ITIMER_REAL, 0.01, 0.01)
    begin = time.monotonic()
    assert wakeup.wait(0.2) is False
    assert time.monotonic() - begin >= 0.2
    assert len(seen) >= 3


#: Sets the flag from a signal handler hundreds of times a second while the main
#: thread waits and clears: with a threading.Event, the handler soon waits for a
#: lock the interrupted wait holds, and the process hangs.
STORM = """
import signal, sys, time
from threadmill_core.worker.wakeup import Wakeup

wakeup = Wakeup()
signal.signal(signal.SIGALRM, lambda _signum, _frame: wakeup.set())
signal.setitimer(signal.ITIMER_REAL, 0.003, 0.003)
end = time.monotonic() + float(sys.argv[1])
woken = 0
while time.monotonic() < end:
    woken += wakeup.wait(0.0001)
    wakeup.clear()
signal.setitimer(signal.ITIMER_REAL, 0)
print(woken)
"""


def test_a_storm_of_signals_that_set_it_never_deadlocks_the_waiter() -> None:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(STORM), "3"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout) > 100  # the handler's sets were seen, not lost
