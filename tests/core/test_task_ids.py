"""Task ids: UUIDv7 strings, increasing within a process, distinct across a fork."""

from __future__ import annotations

import os
import random
import uuid
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from threadmill_core import ids as id_maker
from threadmill_core.ids import new_task_id, new_task_ids


def test_ids_are_uuid7_strings_that_increase_even_within_a_millisecond() -> None:
    """Thousands of ids made at once are canonical UUIDv7 strings, unique and in creation order."""
    ids = [new_task_id() for _ in range(5000)]  # more than one read of random bytes
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)
    for made in ids:
        parsed = uuid.UUID(made)
        assert str(parsed) == made
        assert parsed.version == 7
        assert parsed.variant == uuid.RFC_4122


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_does_not_repeat_its_parents_random_bits() -> None:
    """A child forked between two ids makes its own random bits, not the parent's next ones."""
    new_task_id()  # random bytes are now read ahead in the parent
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report one id and leave without running pytest's teardown
        os.write(write, new_task_id().encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    with os.fdopen(read, "rb") as pipe:
        child = pipe.read().decode()
    parent = new_task_id()
    assert uuid.UUID(child).version == 7
    assert child[-12:] != parent[-12:]


@pytest.mark.parametrize("count", [2, 100, 300, 5000])  # within and beyond the bytes read ahead
def test_ids_made_together_are_ids_as_made_one_by_one(count: int) -> None:
    """`new_task_ids` and `new_task_id` share one order: each id is greater than those before."""
    before = new_task_id()
    together = new_task_ids(count)
    after = new_task_id()
    made = [before, *together, after]
    assert made == sorted(made)
    assert len(set(made)) == len(made)
    assert len(together) == count
    assert {uuid.UUID(made).version for made in together} == {7}
    assert {uuid.UUID(made).variant for made in together} == {uuid.RFC_4122}
    assert [str(uuid.UUID(made)) for made in together] == together  # canonical text
    assert len({made[-16:] for made in together}) == count  # the random bits differ


def test_no_ids_for_a_count_below_one() -> None:
    assert new_task_ids(0) == []
    assert new_task_ids(-1) == []


@given(
    count=st.integers(min_value=2, max_value=9000),
    last_counter=st.integers(min_value=0, max_value=4095),
    clock_ahead=st.booleans(),
    seed=st.integers(min_value=0),
)
@settings(max_examples=60, deadline=None)
def test_ids_made_together_have_the_fields_of_ids_made_one_by_one(
    count: int,
    last_counter: int,
    clock_ahead: bool,
    seed: int,
) -> None:
    """Each id of a batch is the one `_advance` and the random bits give it, across overflows.

    The expected ids are made as `new_task_id` makes each: the clock either
    ahead of the last id's millisecond (the counter restarts at the seed
    byte) or not (it counts on, borrowing milliseconds when it overflows).
    """
    block = random.Random(seed).randbytes(8 * count + 1)  # what the OS gave
    last_ms = 1_750_000_000_000
    now = last_ms + 1 if clock_ahead else last_ms
    expected, ms, counter = [], last_ms, last_counter
    for index in range(count):
        ms, counter = id_maker._advance(now, ms, counter, block[-1])
        bits = int.from_bytes(block[8 * index : 8 * index + 8]) & id_maker._RAND_B
        expected.append(str(uuid.UUID(int=id_maker._version_bits(ms, counter) | bits)))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(id_maker, "_last_ms", last_ms)
        patch.setattr(id_maker, "_counter", last_counter)
        patch.setattr(id_maker, "_take", lambda size: block)
        patch.setattr(id_maker, "time", SimpleNamespace(time_ns=lambda: now * 1_000_000 + 999_999))
        assert new_task_ids(count) == expected
        assert (id_maker._last_ms, id_maker._counter) == (ms, counter)  # the next id follows on
