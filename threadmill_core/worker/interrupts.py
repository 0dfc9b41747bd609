"""Stopping a running attempt from outside it: time limits and cancel requests.

An attempt is stopped for one of two reasons (`Stop`): it ran past its
time limit, or an operator asked to cancel it (`Backend.request_cancel`,
which the heartbeat learns from `Lease.cancel_requested`). Either way the
worker's heartbeat thread raises the reason's exception inside the task:

- a task running in a thread gets `TimeLimitExceeded` or `TaskCancelled`
  as an asynchronous exception (``PyThreadState_SetAsyncExc``, as Dramatiq
  does): it is raised at the next bytecode that thread runs, so ``finally``
  blocks and context managers run, but not while the thread is blocked in
  C code (``time.sleep(600)``, a socket read without a timeout);
- an ``async`` task is cancelled on its loop, and the `CancelledError` that
  ends it is recorded as the reason's exception.

The soft stop is the exception; what the attempt then records is
`threadmill_core.worker.execution.call`'s business. A task still running
`Attempt.grace` after it was told (`HARD_LIMIT_GRACE` by default) is beyond
reach: the heartbeat thread records its outcome itself (FAILED, or retried,
with `TimeLimitExceeded` through the retry policy; CANCELLED for a cancel),
abandons its thread, and the worker stops (see `Worker.stuck_threads`): a
thread cannot be killed, so only a fresh process gets it back.

The exception is only ever sent while the thread is inside the task's own
code: `Watch.enter` and `Watch.leave` bracket it under the same lock the
sender takes, and `leave` withdraws an exception sent but not yet raised, so
it never lands in the worker's code past `leave`. One sent as the task
returns, while its thread waits for that lock, is either withdrawn (the
task's outcome stands) or lands inside `leave` itself: the attempt is then
recorded as stopped (it did run past its limit), and `leave` is finished
from `call`'s handler, so the attempt is never left watched as if stuck.
"""

from __future__ import annotations

import contextlib
import ctypes
import enum
import threading
import time
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from threadmill_core.errors import TaskCancelled, ThreadmillError, TimeLimitExceeded

if TYPE_CHECKING:
    import asyncio

    from threadmill_core.worker.held import HeldTask

#: How long a task told to stop (its time limit passed, or a cancel was requested)
#: may take to do so before it is recorded as stopped and its worker process replaced.
HARD_LIMIT_GRACE = timedelta(seconds=5)


class Stop(enum.Enum):
    """Why an attempt is stopped, and the exception raised in it."""

    TIME_LIMIT = TimeLimitExceeded
    CANCELLED = TaskCancelled

    @property
    def error(self) -> type[ThreadmillError]:
        exc: type[ThreadmillError] = self.value
        return exc


class Attempt:
    """The part of one running attempt that another thread may stop.

    Made by the task thread as the attempt starts; its fields are changed
    under `Watch`'s lock only.
    """

    __slots__ = (
        "abandoned",
        "deadline",
        "grace",
        "held",
        "in_task",
        "limit",
        "loop",
        "main",
        "pending",
        "returned",
        "sent",
        "sent_at",
        "thread",
    )

    def __init__(self, held: HeldTask, limit: timedelta | None, grace: float) -> None:
        #: The held task this attempt runs.
        self.held = held
        #: The attempt's time limit, and when it falls (`time.monotonic()`; inf: none).
        self.limit = limit
        self.deadline = float("inf")
        #: Seconds from the stop to the hard limit.
        self.grace = grace
        #: The thread running the task (None until it enters the task's code), and
        #: (an async task) its loop and main task.
        self.thread: threading.Thread | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.main: asyncio.Task[Any] | None = None
        #: True while the thread is inside the task's own code.
        self.in_task = False
        #: A stop asked for before the task's code began: raised as it begins.
        self.pending: Stop | None = None
        #: The stop sent to the task, and when (`time.monotonic()`).
        self.sent: Stop | None = None
        self.sent_at = 0.0
        #: The hard limit passed: the worker recorded the outcome and gave up the thread.
        self.abandoned = False
        #: The thread of an abandoned attempt came back (set under the worker's lock).
        self.returned = False


def _set_async_exc(thread_id: int, exc: type[BaseException] | None) -> int:
    """Raise `exc` in the thread `thread_id` at its next bytecode; None withdraws one pending."""
    target = ctypes.c_ulong(thread_id)
    # None goes as NULL (withdraw), a class as the object itself.
    sent = None if exc is None else ctypes.py_object(exc)
    return int(ctypes.pythonapi.PyThreadState_SetAsyncExc(target, sent))


def _ident(thread: threading.Thread) -> int:
    ident = thread.ident
    assert ident is not None  # a thread that runs has one
    return ident


def _cancel_main(attempt: Attempt) -> None:
    """On the task's loop: cancel its main task, or have it cancelled as it begins."""
    if attempt.main is not None:
        attempt.main.cancel()


class Watch:
    """The running attempts of one worker that may be stopped, for its heartbeat thread.

    `wake` is set when an attempt starts whose deadline comes before the
    heartbeat thread means to look (`look_at`), so a short limit is met on time.
    """

    def __init__(self, wake: threading.Event) -> None:
        self._lock = threading.Lock()
        self._wake = wake
        #: Attempts in their task's code with a deadline or a stop sent, by id.
        self._watched: dict[int, Attempt] = {}
        #: When (`time.monotonic()`) the heartbeat thread looks next, at the latest.
        self.look_at = float("inf")

    # --- the task thread ----------------------------------------------------------------

    def enter(self, attempt: Attempt, *, now: float) -> None:
        """The task thread is about to run the task's code; raises a stop asked for already."""
        if attempt.limit is not None:
            attempt.deadline = now + attempt.limit.total_seconds()
        with self._lock:
            attempt.thread = threading.current_thread()
            attempt.in_task = True
            if attempt.limit is not None:
                self._watched[id(attempt)] = attempt
            pending, attempt.sent = attempt.pending, attempt.pending
        if pending is not None:
            raise pending.error()
        if attempt.deadline < self.look_at:
            self._wake.set()

    def leave(self, attempt: Attempt) -> None:
        """The task's code returned or raised: withdraw a stop sent but not yet raised.

        A stop sent while the thread waited for the lock may land inside
        `leave` itself, before its withdrawal, and end it there. So the
        attempt leaves `_watched` before anything else changes: cut short
        anywhere, `leave` leaves it either as it was (in its task's code,
        watched: as if the stop landed in the task) or unwatched, never out
        of its task's code yet watched, which the heartbeat thread would take
        for a thread stuck past its hard limit. The task thread calls `leave`
        once more whenever a stop was sent, to finish it: it is idempotent,
        and no second stop is ever sent to an attempt.
        """
        with self._lock:
            self._watched.pop(id(attempt), None)
            attempt.in_task = False
            if attempt.sent is not None and attempt.loop is None and attempt.thread is not None:
                _set_async_exc(_ident(attempt.thread), None)

    # --- the heartbeat thread -----------------------------------------------------------

    def stop(self, attempt: Attempt, why: Stop) -> bool:
        """Tell `attempt` to stop for `why` (once; a later reason is ignored); whether sent now.

        One not in its task's code yet gets it as it enters; one that has
        left is not told at all.
        """
        with self._lock:
            if attempt.sent is not None or attempt.pending is not None or attempt.abandoned:
                return False
            if not attempt.in_task:
                if attempt.thread is None:
                    attempt.pending = why  # not begun yet
                return False
            self._send(attempt, why, time.monotonic())
            return True

    def _send(self, attempt: Attempt, why: Stop, now: float) -> None:
        """Send `why` to an attempt in its task's code (under the lock)."""
        attempt.sent, attempt.sent_at = why, now
        self._watched[id(attempt)] = attempt  # for the hard limit, limited or not
        loop = attempt.loop
        if loop is None:
            assert attempt.thread is not None  # in the task's code: see enter
            _set_async_exc(_ident(attempt.thread), why.error)
            return
        with contextlib.suppress(RuntimeError):  # the loop closed: the task is over
            loop.call_soon_threadsafe(_cancel_main, attempt)

    def due(self, now: float) -> tuple[list[Attempt], float]:
        """Send the time limits that passed; the attempts past their hard limit (marked
        abandoned: the caller records their outcomes), and when to look again (inf: never)."""
        hard: list[Attempt] = []
        look_at = float("inf")
        with self._lock:
            if not self._watched:
                self.look_at = look_at
                return hard, look_at
            for attempt in list(self._watched.values()):
                if not attempt.in_task:  # left its task's code: its own thread decides it
                    del self._watched[id(attempt)]  # (a guard: `leave` unwatches it first)
                    continue
                if attempt.sent is None:
                    if attempt.deadline <= now:
                        self._send(attempt, Stop.TIME_LIMIT, now)
                    else:
                        look_at = min(look_at, attempt.deadline)
                        continue
                give_up_at = attempt.sent_at + attempt.grace
                if give_up_at <= now:
                    attempt.abandoned = True
                    del self._watched[id(attempt)]
                    hard.append(attempt)
                else:
                    look_at = min(look_at, give_up_at)
            self.look_at = look_at
        return hard, look_at
