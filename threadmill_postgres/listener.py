"""Wake-ups for idle workers: one LISTEN connection per backend, read by a thread of its own.

Statements that make a task READY (or store one) send a NOTIFY on the
namespace's channel with the queue's name as the payload (see
`threadmill_postgres.queries`). `Listener` holds one connection, outside
the pool, that LISTENs on that channel, and a daemon thread that reads it
all the time, so notifications never pile up on the server while the
process is busy (a listener that stops reading holds the server's whole
notification queue back). For each notification it records the moment
(`seq`, a count of notifications received) at which that queue was last
woken; waiters sleep on a condition variable until a queue of theirs is
woken, the connection is lost or made again, or their time runs out.

Nothing in this polls the server: an idle process costs no statement at
all. The thread wakes once a second to notice `close` (which also sends an
empty notification, so that it need not wait for that), and the kernel's
TCP keepalives (set on this connection) notice a server that went away
silently.

Missing nothing. A wait must not sleep through a task that arrived between
the caller's last (empty) claim and the wait. So `mark` is taken at the
start of every claim (see `PostgresBackend.claim`), and a wait counts every
wake-up of its queues since its thread's last mark: one that came after that
claim began ends the wait at once. While the connection is down, or when
the last mark is from before it was made (the first wait of a thread, or
after a reconnect), wake-ups may have been missed, so the wait instead
takes one look at the table (`look`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

import attrs
import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from threadmill_postgres.schema import quote_ident

log = logging.getLogger("threadmill_postgres")

#: Notifications carry at most this many characters of the queue name (the
#: payload limit is 8000 bytes); two queues that share them only wake each
#: other's workers for nothing.
PAYLOAD_CHARS = 1000

#: How long the thread waits for a notification before it checks whether the
#: backend was closed (seconds).
TICK = 1.0

#: Waits between attempts to connect again after the connection was lost (seconds).
RECONNECT_BACKOFF = (0.1, 0.25, 0.5, 1.0, 2.0)

#: TCP keepalives on the listening connection, unless the URL sets them: a
#: server that vanished without closing the connection is noticed in about a minute.
KEEPALIVES = {"keepalives": "1", "keepalives_idle": "30", "keepalives_interval": "10",
              "keepalives_count": "3"}  # fmt: skip

#: The most queue names whose last wake-up is remembered; past it the record
#: is cleared and every waiter looks at the table once.
MAX_QUEUES = 10_000


def key(queue: str) -> str:
    """What a notification says for `queue`: its first `PAYLOAD_CHARS` characters."""
    return queue[:PAYLOAD_CHARS]


@attrs.frozen
class Mark:
    """A moment of a listener's life: its `epoch` (connection) and `seq` (wake-ups so far)."""

    epoch: int
    seq: int


class Listener:
    """The LISTEN connection of one backend and the thread that reads it (see the module doc).

    Started by the first `wait`; `close` stops the thread and closes the
    connection. `look(queues)` is the table check a wait takes when wake-ups
    cannot tell; `wake()` sends an empty notification on the channel, so a
    closing listener's thread need not wait out its `TICK`.
    """

    def __init__(
        self,
        conninfo: str,
        channel: str,
        look: Callable[[Sequence[str]], bool],
        wake: Callable[[], None],
    ) -> None:
        self._conninfo = conninfo
        self._channel = channel
        self._look = look
        self._wake = wake
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False
        #: True while the connection is LISTENing and read.
        self._listening = False
        #: Bumped whenever the connection is made or lost: marks from another epoch are stale.
        self._epoch = 0
        self._seq = 0
        self._woken: dict[str, int] = {}
        #: For tests and operators: how many times the connection was made.
        self.connections = 0

    # --- what claims and waits use -----------------------------------------------------

    def mark(self) -> Mark | None:
        """The moment now, if the listener is listening (None otherwise: nothing to compare)."""
        with self._cond:
            return Mark(self._epoch, self._seq) if self._listening else None

    def wait(self, queues: Sequence[str], since: Mark | None, timeout: float) -> bool:
        """Block until a queue of `queues` is woken after `since`, or `timeout` seconds pass.

        True when woken (or closed, or when a look found work); False only
        when the whole `timeout` passed while the connection listened, no
        wake-up for these queues came, and, if the wait had to look, the
        look found nothing.
        """
        keys = [key(queue) for queue in queues]
        deadline = time.monotonic() + timeout
        self._start()
        with self._cond:
            # Until the connection listens, nobody can tell: wait for it, then look.
            while not self._listening and not self._closed:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return True
                self._cond.wait(remaining)
            if self._closed:
                return True
            current = Mark(self._epoch, self._seq)
        if since is None or since.epoch != current.epoch:
            if self._look(queues):
                return True
            since = current
        with self._cond:
            while True:
                if self._closed or self._epoch != since.epoch or not self._listening:
                    return True
                if any(self._woken.get(k, -1) > since.seq for k in keys):
                    return True
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)

    def close(self) -> None:
        """Stop the thread; it closes the connection on its way out."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread, listening = self._thread, self._listening
        if thread is None or thread is threading.current_thread():
            return
        if listening:
            try:
                self._wake()
            except Exception as exc:  # the thread notices within TICK all the same
                log.debug("could not wake the LISTEN thread (%s)", exc)
        thread.join(timeout=TICK * 3)

    # --- the thread --------------------------------------------------------------------

    def _listen_conninfo(self) -> str:
        return with_keepalives(self._conninfo)

    def _start(self) -> None:
        with self._cond:
            if self._thread is not None or self._closed:
                return
            self._thread = threading.Thread(
                target=self._run, name=f"threadmill-listen-{self._channel[-8:]}", daemon=True
            )
            self._thread.start()

    def _run(self) -> None:
        failures = 0
        while not self._closed:
            try:
                with psycopg.connect(self._listen_conninfo(), autocommit=True) as conn:
                    conn.execute(f"LISTEN {quote_ident(self._channel)}")
                    self.connections += 1
                    failures = 0
                    self._set_listening(True)
                    while not self._closed:
                        for notify in conn.notifies(timeout=TICK):
                            if notify.payload:  # an empty one only wakes this loop
                                self._woke(notify.payload)
            except psycopg.Error as exc:
                was = self._set_listening(False)
                if self._closed:
                    return
                # An outage is reported by the calls that fail (one warning, one line when
                # it ends: threadmill_core.worker.outage); this connection's own life is a detail.
                if was:
                    log.debug("the LISTEN connection was lost (%s); connecting again", exc)
                else:
                    log.debug("could not LISTEN (%s); trying again", exc)
                pause = RECONNECT_BACKOFF[min(failures, len(RECONNECT_BACKOFF) - 1)]
                failures += 1
                with self._cond:
                    self._cond.wait_for(lambda: self._closed, timeout=pause)
            except BaseException:
                self._set_listening(False)
                log.exception("the LISTEN thread stopped")
                raise
        self._set_listening(False)

    def _set_listening(self, listening: bool) -> bool:
        """Record whether the connection listens; returns whether it did before."""
        with self._cond:
            was = self._listening
            if was != listening:
                self._listening = listening
                self._epoch += 1
                self._cond.notify_all()
            return was

    def _woke(self, payload: str) -> None:
        with self._cond:
            self._seq += 1
            if payload not in self._woken and len(self._woken) >= MAX_QUEUES:
                self._woken.clear()
                self._epoch += 1  # every waiter's marks are stale now: they look again
            self._woken[payload] = self._seq
            self._cond.notify_all()


def with_keepalives(conninfo: str) -> str:
    """`conninfo` with `KEEPALIVES` added, but for those it sets itself."""
    given = conninfo_to_dict(conninfo)
    return make_conninfo(conninfo, **{k: v for k, v in KEEPALIVES.items() if k not in given})
