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

from threadmill_core.clock import to_ms
from threadmill_core.errors import PayloadError
from threadmill_redis import replies, scripts
from threadmill_redis.keys import STATE_FIELDS

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

#: A new task's state as lib/new_state packs it, and what lib/parse_task reads
#: back from it packed again by lib/pack_task; then the same state as a batch
#: joins it (lib/split_around of the state without its sort, around the sort's
#: text), and a READY member made from its head (lib/ready_member_head) and
#: made whole (lib/ready_member).
NEW_STATE_CHECK = """
--@include "lib/new_state"
--@include "lib/parse_task"
--@include "lib/ready_member"
--@include "lib/split_around"
local status, priority, sort, now = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local run_after, queue = tonumber(ARGV[5]), ARGV[6]
local made = new_state(status, priority, sort, now, run_after, queue)
local head, tail = split_around(new_state(status, priority, nil, now, run_after, queue), 'sort')
local member = ready_member_head(queue, priority) .. string.format(READY_SEQUENCE_FORMAT, sort)
  .. 'id'
return { made, pack_task(parse_task('id', made)), head .. string.format('%d', sort) .. tail,
  member, ready_member(queue, priority, sort, 'id') }
"""

#: What lib/parse_task reads from a packed state, field by field in STATE_FIELDS
#: order ('' for none), or false when it finds the state corrupt.
PARSE_CHECK = """
--@include "lib/parse_task"
local t = parse_task('id', ARGV[1])
if t == nil then
  return false
end
local out = {}
for n, name in ipairs(STATE_FIELDS) do
  local value = t[name]
  out[n] = type(value) == 'number' and string.format('%d', value) or (value or '')
end
return out
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
    status=st.sampled_from(["READY", "DEFERRED"]),
    priority=st.integers(-100, 100),
    sort=st.integers(1, 10**15),
    now=ms,
    run_after=maybe_ms,
    queue=queues,
)
def test_a_new_state_packs_as_parse_task_and_pack_task_read_and_write_it(
    client: redis.Redis,
    status: str,
    priority: int,
    sort: int,
    now: int,
    run_after: str,
    queue: str,
) -> None:
    """lib/new_state writes the layout lib/parse_task reads and lib/pack_task writes; a
    batch's state joined from lib/split_around's pieces, and a member from its head, are
    the bytes lib/new_state and lib/ready_member make whole (enqueue.lua's batches)."""
    made, again, joined, member, member_whole = run(
        client, NEW_STATE_CHECK, status, priority, sort, now, run_after, queue
    )
    assert made == again
    assert made.decode() == f"{status}|{priority}|0|{sort}|{now}|{run_after}||||||{queue}"
    assert joined == made
    assert member == member_whole


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(state_and_token=any_states())
def test_lua_and_python_read_a_packed_state_alike(
    client: redis.Redis, state_and_token: tuple[str, str]
) -> None:
    """lib/parse_task and replies.parse_state read each field of keys.STATE_LAYOUT the same."""
    raw, _ = state_and_token
    fields = dict(
        zip(STATE_FIELDS, (f.decode() for f in run(client, PARSE_CHECK, raw)), strict=True)
    )
    state = replies.parse_state(raw.encode())
    assert state.status.value == fields["status"]
    assert (state.priority, state.attempts) == (int(fields["priority"]), int(fields["attempts"]))
    assert state.queue == fields["queue"]
    assert (state.token or "") == fields["token"]
    for name in ("enqueued_at", "run_after", "started_at", "last_attempted_at", "finished_at"):
        moment = getattr(state, name)
        assert fields[name] == ("" if moment is None else str(to_ms(moment)))
    assert fields["deadline"] == ("" if state.deadline is None else str(to_ms(state.deadline)))


@pytest.mark.parametrize(
    "raw", ["READY|0|x|1|2||||||||q", "READY|0|0|1|2|||||", "WAITING|0|0|1|2||||||||q", "READY|0"]
)
def test_lua_and_python_both_refuse_a_state_off_the_layout(client: redis.Redis, raw: str) -> None:
    """A state lib/parse_task finds corrupt is a PayloadError for replies.parse_state."""
    assert run(client, PARSE_CHECK, raw) is None
    with pytest.raises(PayloadError):
        replies.parse_state(raw.encode())


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
