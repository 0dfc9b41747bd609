"""Task ids: UUIDv7 strings, strictly increasing within a process, so sorting ids sorts tasks.

An id is 48 bits of Unix milliseconds, the version, a 12-bit counter, the
variant and 62 random bits (RFC 9562's layout). The counter starts at a
random value in each new millisecond and counts up within it; when it
overflows, the next id borrows the following millisecond, so ids made by one
process never repeat or go backwards, however fast they are made. Random
bits come from `os.urandom`, read for many ids at once; a forked child
never reuses the bytes its parent read ahead.
"""

from __future__ import annotations

import binascii
import functools
import os
import threading
import time

_id_lock = threading.Lock()
_last_ms = 0
_counter = 0
#: Random bytes read from the OS ahead, 9 per id (8 for its random bits, one to
#: start the counter at in a new millisecond): one read per this many ids, not
#: per id, nor per millisecond.
_RANDOM_IDS = 256
_ID_BYTES = 9
_random = b""
_random_at = 0
#: The 62 random bits of an id (``rand_b``).
_RAND_B = (1 << 62) - 1


def _forget_random() -> None:
    """In a forked child: the parent's unread random bytes must not make the child's ids."""
    global _random, _random_at
    _random, _random_at = b"", 0


os.register_at_fork(after_in_child=_forget_random)


def _take(count: int) -> bytes:
    """`count` random bytes, from those read ahead; call it holding `_id_lock`."""
    global _random, _random_at
    at = _random_at
    if at + count > len(_random):
        if count > _ID_BYTES * _RANDOM_IDS:
            return os.urandom(count)
        _random, at = os.urandom(_ID_BYTES * _RANDOM_IDS), 0
    _random_at = at + count
    return _random[at : at + count]


def _advance(now: int, ms: int, counter: int, seed: int) -> tuple[int, int]:
    """The millisecond and counter of the next id, after one made at `ms` and `counter`.

    A new millisecond starts the counter at `seed`, a random byte.
    """
    if now > ms:
        return now, seed
    if counter + 1 >= 1 << 12:  # the counter is full: borrow the next millisecond
        return ms + 1, 0
    return ms, counter + 1


def _version_bits(ms: int, counter: int) -> int:
    """An id's 128 bits but its 62 random ones: time, version 7, counter, variant."""
    return (ms << 80) | (0x7 << 76) | (counter << 64) | (0b10 << 62)


def _uuid_text(value: int) -> str:
    hex_ = value.to_bytes(16).hex()
    return f"{hex_[:8]}-{hex_[8:12]}-{hex_[12:16]}-{hex_[16:20]}-{hex_[20:]}"


def new_task_id() -> str:
    """A UUIDv7 string: 48 bits of Unix milliseconds, then a counter, then random bits.

    Ids made by one process are strictly increasing, also within one millisecond
    (the 12-bit ``rand_a`` field counts from a random start, and the millisecond
    is borrowed forward if it overflows), so sorting ids sorts tasks by
    creation. The 62 random bits and the counter's start come from
    `os.urandom`, read for many ids at once.
    """
    global _last_ms, _counter
    with _id_lock:
        block = _take(_ID_BYTES)
        _last_ms, _counter = _advance(time.time_ns() // 1_000_000, _last_ms, _counter, block[8])
        ms, counter = _last_ms, _counter
    random = int.from_bytes(block[:8])
    return _uuid_text(_version_bits(ms, counter) | (random & _RAND_B))


def new_task_ids(count: int) -> list[str]:
    """`count` ids, as `count` calls of `new_task_id` would make them, for much less time.

    The clock is read and the lock taken once, and the random bits of every
    id are read from the OS in one call (or from what `new_task_id` read
    ahead). After the first id, each counts one up, so the ids' time and
    counter fields follow from the first's.

    Fast path: the text is made in runs that share a millisecond, column by
    column (`_texts`), not id by id (0.18 against 1.34 us an id, about a tenth
    of a batched enqueue; see docs/hot-paths.md).
    """
    global _last_ms, _counter
    if count <= 1:  # one id costs less the plain way
        return [new_task_id()] if count == 1 else []
    with _id_lock:
        block = _take(8 * count + 1)  # the last byte starts the counter in a new millisecond
        ms, counter = _advance(time.time_ns() // 1_000_000, _last_ms, _counter, block[-1])
        # Id k is `counter + k` counts after (ms, 0): the counter's 12 bits, with
        # every overflow borrowing the next millisecond (see `_advance`).
        last = counter + count - 1
        _last_ms, _counter = ms + (last >> 12), last & 0xFFF
    random = bytearray(block[:-1])
    random[0::8] = random[0::8].translate(_VARIANT_BYTE)  # the top byte of each id's 64 bits
    tails = binascii.hexlify(random)
    ids: list[str] = []
    made = 0
    while made < count:
        run = min(count - made, 4096 - counter)  # ids left in this millisecond
        ids += _texts(ms, counter, tails[16 * made : 16 * (made + run)], run)
        made += run
        ms, counter = ms + 1, 0
    return ids


def _texts(ms: int, counter: int, tails: bytes, run: int) -> list[str]:
    """The text of `run` ids of millisecond `ms`, counters from `counter` on, each id's
    random bits the next 16 hex digits of `tails`.

    Made column by column: the text of all `run` ids is one buffer, in which each
    character of an id that is not the same in every id (the counter's three, the
    random bits' sixteen) is written for all of them at once, as an extended
    slice; the buffer is then cut into ids.
    """
    stamp = f"{ms:012x}"
    text = bytearray(f"{stamp[:8]}-{stamp[8:]}-7xxx-xxxx-xxxxxxxxxxxx".encode() * run)
    counters = _counters()[3 * counter : 3 * (counter + run)]
    for digit in range(3):
        text[15 + digit :: 36] = counters[digit::3]
    for digit in range(16):  # 4 of them before the dash at 23, 12 after it
        text[(19 if digit < 4 else 20) + digit :: 36] = tails[digit::16]
    whole = text.decode()
    return [whole[at : at + 36] for at in range(0, 36 * run, 36)]


#: Each value of a byte with its top two bits set to the variant, 0b10.
_VARIANT_BYTE = bytes((byte & 0x3F) | 0x80 for byte in range(256))


@functools.cache
def _counters() -> bytes:
    """The counter's 4,096 values as 3-digit hex, one after another.

    Made on the first batch, not at import: a worker, which makes no ids,
    would wait for it at start for nothing.
    """
    return b"".join(b"%03x" % counter for counter in range(1 << 12))
