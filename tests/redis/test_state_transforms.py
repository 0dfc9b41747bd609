"""State changes the scripts make on the packed string, checked against the table they replace.

A claim (and a completion) runs for every task of a batch, so its scripts
rewrite the packed state string directly instead of going through a table
from ``lib/parse_task`` and back through ``lib/pack_task``. Each test here
spells out the change on that table, the plain way, and checks that the
string function gives the same bytes for any state a task can have.
"""

from __future__ import annotations

from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from threadmill_redis import scripts

#: claimed_state's answer, and the claim made the plain way (lib/parse_task,
#: the claim's changes on the table, lib/pack_task).
CLAIM_CHECK = """
--@include "lib/claimed_state"
--@include "lib/pack_task"
--@include "lib/parse_task"
local raw, now, lease_ms, token = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local t = parse_task('id', raw)
t.status = 'RUNNING'
t.token = token
t.deadline = now + lease_ms
t.sort = t.deadline
t.attempts = t.attempts + 1
t.last_attempted_at = now
if t.started_at == nil then
  t.started_at = now
end
local state, queue = claimed_state(raw, ARGV[2], string.format('%d', now + lease_ms), token)
return { state, queue, pack_task(t), t.queue }
"""

#: finished_state's answer, and the plain way: lib/decision_refused's verdict
#: on the parsed table, then lib/mark_finished and lib/pack_task if it applies.
FINISH_CHECK = """
--@include "lib/decision_refused"
--@include "lib/finished_state"
--@include "lib/mark_finished"
--@include "lib/pack_task"
--@include "lib/parse_task"
local raw, token, status, now = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local state, sort, queue = finished_state(raw, token, status, ARGV[4])
local t = parse_task('id', raw)
local refused = decision_refused(t, token, 'SUCCESSFUL', 'FAILED')
if refused ~= nil then
  return { state or false, refused }
end
local running_sort = t.sort
mark_finished(t, status, now)
local running = string.format('%d', running_sort)
return { state or false, false, pack_task(t), sort, running, queue, t.queue }
"""

#: A batch's run makes what its READY tasks share once (lib/new_state_ends,
#: lib/ready_member_head) and its sequence numbers' text in pieces
#: (lib/sequence_texts); a lone enqueue makes each whole (lib/new_state,
#: lib/ready_member). Both ways, for `count` tasks numbered from `seq` in one
#: call, as a batch's run numbers them.
BATCH_PIECES_CHECK = """
--@include "lib/new_state"
--@include "lib/new_state_ends"
--@include "lib/ready_member"
--@include "lib/ready_member_head"
--@include "lib/sequence_texts"
local priority_text, first, count, now_text, run_after_text, queue, id =
  ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4], ARGV[5], ARGV[6], ARGV[7]
local priority = tonumber(priority_text)
local head, tail = new_state_ends('READY', priority_text, now_text, run_after_text, queue)
local member_head = ready_member_head(queue, priority)
local from_pieces, whole = {}, {}
for seq = first, first + count - 1 do
  local seq_head, seq_tail, padded_head, padded_tail = sequence_texts(seq)
  from_pieces[#from_pieces + 1] = head .. seq_head .. seq_tail .. tail
  from_pieces[#from_pieces + 1] = member_head .. padded_head .. padded_tail .. id
  whole[#whole + 1] =
    new_state('READY', priority_text, string.format('%d', seq), now_text, run_after_text, queue)
  whole[#whole + 1] = ready_member(queue, priority, seq, id)
end
return { from_pieces, whole }
"""

ms = st.integers(1_600_000_000_000, 2_000_000_000_000)
maybe_ms = st.one_of(st.just(""), ms.map(str))
#: Queue names as the API lets them be: any text, '|' and braces included.
queues = st.text(min_size=1, max_size=12).filter(lambda q: "\x00" not in q)


@st.composite
def ready_states(draw: st.DrawFn) -> str:
    """A READY task's packed state: fields as lib/pack_task writes them."""
    fields = [
        "READY",
        str(draw(st.integers(-100, 100))),
        str(draw(st.integers(0, 50))),  # attempts
        str(draw(st.integers(1, 10**12))),  # the entered-READY sequence
        str(draw(ms)),  # enqueued_at
        draw(maybe_ms),  # run_after
        draw(maybe_ms),  # started_at (set by an earlier attempt)
        draw(maybe_ms),  # last_attempted_at
        "",  # finished_at
        "",  # deadline
        draw(st.one_of(st.just(""), st.integers(1, 10**9).map(str))),  # an old token
        draw(queues),
    ]
    return "|".join(fields)


@st.composite
def any_states(draw: st.DrawFn) -> tuple[str, str]:
    """A packed state of any status, and a token: often the one it holds."""
    held = draw(st.integers(1, 10**9).map(str))
    status = draw(st.sampled_from(["READY", "DEFERRED", "RUNNING", "SUCCESSFUL", "FAILED"]))
    fields = [
        status,
        str(draw(st.integers(-100, 100))),
        str(draw(st.integers(0, 50))),
        str(draw(ms)),  # sort: a deadline, for RUNNING
        str(draw(ms)),
        draw(maybe_ms),
        draw(maybe_ms),
        draw(maybe_ms),
        draw(maybe_ms),  # finished_at
        draw(maybe_ms),  # deadline
        draw(st.sampled_from([held, "", "7"])),
        draw(queues),
    ]
    token = draw(st.sampled_from([held, held, "8", ""]))
    return "|".join(fields), token


def run(client: redis.Redis, check: str, *args: Any) -> list[Any]:
    source = scripts.resolve("check", lambda n: check if n == "check" else scripts.read_packaged(n))
    return client.eval(source, 0, *args)  # type: ignore[no-any-return]  # redis-py leaves eval untyped


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    raw=ready_states(),
    now=ms,
    lease_ms=st.integers(1, 10**8),
    token=st.integers(1, 10**12).map(str),
)
def test_a_claim_rewrites_the_state_as_the_table_would(
    client: redis.Redis, raw: str, now: int, lease_ms: int, token: str
) -> None:
    state, queue, expected, expected_queue = run(client, CLAIM_CHECK, raw, now, lease_ms, token)
    assert state == expected
    assert queue == expected_queue == raw.split("|", 11)[11].encode()


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    priority=st.integers(-100, 100),
    # Small numbers (no hundreds, one digit) and any size the counter reaches.
    seq=st.one_of(st.integers(1, 250), st.integers(1, 10**15)),
    count=st.integers(1, 250),
    now=ms,
    run_after=maybe_ms,
    queue=queues,
    task_id=st.text(min_size=1, max_size=40).filter(lambda i: "\x00" not in i),
)
def test_a_batch_makes_its_ready_tasks_states_and_members_as_a_lone_enqueue_does(
    client: redis.Redis,
    priority: int,
    seq: int,
    count: int,
    now: int,
    run_after: str,
    queue: str,
    task_id: str,
) -> None:
    """enqueue.lua's batch path builds from pieces the same bytes as its one-task path."""
    from_pieces, whole = run(
        client, BATCH_PIECES_CHECK, priority, seq, count, now, run_after, queue, task_id
    )
    assert from_pieces == whole
    assert len(whole) == 2 * count
    assert whole[0].split(b"|")[3] == str(seq).encode()
    assert whole[0].split(b"|", 11)[11] == queue.encode()


@pytest.mark.parametrize("started", ["", "1700000000000"])
def test_a_first_attempt_starts_now_and_a_later_one_keeps_its_start(
    client: redis.Redis, started: str
) -> None:
    """The one branch of claimed_state, shown plainly."""
    raw = f"READY|5|2|7|1600000000000||{started}|||||q|x"
    state, queue, _, _ = run(client, CLAIM_CHECK, raw, 1700000000100, 1000, "42")
    begun = started or "1700000000100"
    assert state.decode() == (
        f"RUNNING|5|3|1700000001100|1600000000000||{begun}|1700000000100||1700000001100|42|q|x"
    )
    assert queue == b"q|x"


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    state_and_token=any_states(),
    status=st.sampled_from(["SUCCESSFUL", "FAILED"]),
    now=ms,
)
def test_a_completion_rewrites_the_state_exactly_when_the_fencing_rule_lets_it(
    client: redis.Redis, state_and_token: tuple[str, str], status: str, now: int
) -> None:
    """finished_state answers only a RUNNING task under its token, as mark_finished would."""
    raw, token = state_and_token
    state, refused, *plain = run(client, FINISH_CHECK, raw, token, status, now)
    if refused:
        assert state is None  # nil: the caller answers from the parsed table
        return
    expected, sort, running_sort, queue, expected_queue = plain
    assert state == expected
    assert (sort, queue) == (running_sort, expected_queue)


def test_a_completion_keeps_the_token_and_clears_the_deadline(client: redis.Redis) -> None:
    raw = "RUNNING|0|1|1700000009000|1600000000000||1700000000000|1700000000000||1700000009000|42|q"
    state, refused, *_ = run(client, FINISH_CHECK, raw, "42", "FAILED", 1700000001000)
    assert not refused
    assert state.decode() == (
        "FAILED|0|1|1700000001000|1600000000000||1700000000000|1700000000000|1700000001000||42|q"
    )
