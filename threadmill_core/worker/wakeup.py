"""`Wakeup`: a flag that one thread waits on and a signal handler may set.

`threading.Event` will not do for that: its `set` takes a lock that its
`wait` holds for a moment, and a signal handler runs in the main thread,
between two bytecodes of whatever it was doing. A handler that calls
`Event.set` while the main thread is inside `Event.wait` deadlocks the
process (the main thread waits for itself), so a SIGTERM landing at that
moment would leave the supervisor hung for good. `Wakeup.set` takes no
lock: it sets the flag and writes a byte to a pipe, which `wait` watches.
"""

from __future__ import annotations

import contextlib
import math
import os
import select
import time
import weakref


class Wakeup:
    """A flag with `set`, `clear`, `is_set` and `wait`, safe to set from a signal handler.

    Meant for one waiting thread (the main one); `set` may be called from
    a signal handler or any thread. Its pipe is closed when the `Wakeup`
    is garbage-collected.
    """

    def __init__(self) -> None:
        self._flag = False
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)
        self._poll = select.poll()  # not select(): any file descriptor number will do
        self._poll.register(self._read, select.POLLIN)
        weakref.finalize(self, _close, self._read, self._write)

    def set(self) -> None:
        """Set the flag and wake the waiting thread."""
        self._flag = True
        # A full pipe already holds a wake-up for the waiter.
        with contextlib.suppress(BlockingIOError):
            os.write(self._write, b"\0")

    def clear(self) -> None:
        """Clear the flag."""
        self._flag = False

    def is_set(self) -> bool:
        return self._flag

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the flag is set or `timeout` seconds passed; whether it is set."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._flag:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                break
            # After a signal handler that did not set the flag, poll() goes on
            # waiting for the time left (PEP 475).
            self._poll.poll(None if left is None else math.ceil(left * 1000))
            # The flag is what counts: a byte an earlier set() left only woke us early.
            with contextlib.suppress(BlockingIOError):
                os.read(self._read, 4096)
        return self._flag


def _close(*fds: int) -> None:
    for fd in fds:
        os.close(fd)
