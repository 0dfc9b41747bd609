"""Named scenarios every backend must pass: races, payload fidelity, bad input.

Each scenario is a plain function of a fresh `Harness`. `ConformanceSuite`
runs every one on every backend; outside it, a backend runs them as::

    @pytest.mark.parametrize("name", sorted(SCENARIOS))
    def test_scenario(name):
        SCENARIOS[name](make_my_harness())

`SCENARIOS` holds the races that fencing exists for (a late acknowledgement
after a reap, two reaper passes, a lapsed reaper claim, inspector actions on
running or finished tasks, repeats after a lost reply), the rules of
recorded starts (an unstarted claim that expires goes back uncharged, and
later leases of the task say so; a started one is charged; `release`
refuses a started one; `mark_started` is fenced and idempotent) and the orderings
that are easy to get subtly wrong (queues, priority, FIFO for thousands of
tasks enqueued in one call), corrupt records beside good ones in every
segment (`Harness.corruptions`), and time on the backend's clock (due times,
retry delays, result expiry, and `next_due` where the backend answers it;
one whose `next_due` is None, the default, skips that scenario).
`producing` holds `enqueue_calls` to every promise of `enqueue` (an
override, as the Redis backend's, is not driven by the state machine).
`PAYLOAD_CASES` are values that must come back value for value through
enqueue, claim, complete and get (`check_payload_round_trip`).
`schedules` holds N schedulers storing each tick once (what ``@periodic``
rests on: `enqueue` idempotent on id) and the schedules' pause states.
`live_workers` holds the live workers' entries (registered, refreshed,
removed, gone once their time is up; see `live_worker_model`).
`cancel_requests` holds a RUNNING task's cancel request (stored once, told at
the next renewal, finalized CANCELLED by `complete`, and never sent back by
`retry`, `release` or the reaper); `progress` holds `record_progress` (fenced,
stamped with the backend's clock, kept through retries and after the end).
`rates` holds the telemetry of `Backend.rates` where the backend keeps it
(what entered and finished, and nothing else).
`BAD_INPUT_CASES` each make one call with a bad argument, which must raise
its documented exception and change nothing.

This module is the catalogue; the scenarios live in
`threadmill_core.testing._scenarios` by kind (``fencing``, ``starts``,
``dead_workers``, ``live_workers``, ``ordering``, ``clock``, ``corrupt``,
``corrupt_batches``, ``schedules``, ``payloads``, ``producing``,
``cancel_requests``, ``progress``, ``rates``, ``bad_input``), with the helpers
they share in ``kit`` (re-exported here: `expect`, `new_task`, `claim_one`, `start_one`, ...), and
a backend's own scenarios can join `SCENARIOS` with the `scenario` decorator.

A broken rule raises `ProtocolViolation`, whose first line says which.
Every wait is `Harness.advance`; nothing sleeps. Time steps are whole
minutes, so backends on a server clock (`Harness.exact_clock` False) pass
them too; boundaries that need an exact clock are checked only on one.
"""

from __future__ import annotations

from threadmill_core.testing._scenarios import (
    cancel_requests,
    clock,
    corrupt,
    corrupt_batches,
    dead_workers,
    fencing,
    live_workers,
    ordering,
    payloads,
    producing,
    progress,
    rates,
    schedules,
    starts,
)
from threadmill_core.testing._scenarios.bad_input import BAD_INPUT_CASES, BadCall
from threadmill_core.testing._scenarios.clock import (
    a_release_with_a_delay_defers_the_task_uncharged,
    deferred_tasks_fall_due_on_the_backend_clock,
    finished_tasks_are_kept_for_result_ttl_then_gone,
    next_due_counts_down_to_the_earliest_deferred_task,
    retry_delay_is_measured_on_the_backend_clock,
)
from threadmill_core.testing._scenarios.dead_workers import (
    expire_leases_expires_a_dead_workers_leases_and_nothing_else,
)
from threadmill_core.testing._scenarios.fencing import (
    a_lease_from_before_a_purge_cannot_decide_the_id_enqueued_again,
    cancel_of_a_running_task_is_refused,
    extend_after_a_reap_is_refused,
    late_acknowledgement_after_a_reap_is_refused,
    lease_expiry_leaves_attempts_unchanged,
    repeated_complete_after_a_lost_reply_answers_as_the_first_time,
    repeated_retry_after_a_lost_reply_answers_as_the_first_time,
    requeue_and_cancel_end_the_repeat_window,
    requeue_of_a_running_task_is_refused,
    requeue_of_a_successful_task_is_refused,
    stale_reaper_decision_after_its_claim_lapsed_is_refused,
    two_reaper_passes_at_once_never_claim_one_task,
)
from threadmill_core.testing._scenarios.kit import (
    CANCELLED,
    CLAIM_TTL,
    DEFERRED,
    FAILED,
    LEASE_TTL,
    PAST_A_LEASE,
    READY,
    RUNNING,
    SUCCESSFUL,
    Scenario,
    claim_one,
    expect,
    failed,
    failure,
    lease_timeout,
    mark,
    new_task,
    reap,
    registering,
    snapshot,
    start_one,
    status_of,
    succeeded,
)
from threadmill_core.testing._scenarios.ordering import (
    claim_takes_queues_in_the_order_given,
    enqueue_is_idempotent_on_id,
    fifo_within_a_priority_for_thousands_enqueued_at_once,
    requeue_keeps_id_errors_and_attempts,
)
from threadmill_core.testing._scenarios.payloads import PAYLOAD_CASES, check_payload_round_trip
from threadmill_core.testing._scenarios.starts import (
    a_reaper_pass_gives_back_the_unstarted_claims_it_meets_beyond_its_limit,
    a_started_claim_that_expires_is_charged,
    an_unstarted_claim_is_always_given_back_and_later_leases_count_it,
    an_unstarted_claim_that_expires_goes_back_uncharged,
    mark_started_is_fenced_idempotent_and_changes_nothing_seen,
    release_refuses_a_started_claim_and_a_reaper_lease,
)

#: Every named scenario, by name: the fencing races, recorded starts, the orderings, the clock,
#: cancel requests and progress.
SCENARIOS: dict[str, Scenario] = {
    **fencing.SCENARIOS,
    **starts.SCENARIOS,
    **dead_workers.SCENARIOS,
    **ordering.SCENARIOS,
    **clock.SCENARIOS,
    **corrupt.SCENARIOS,
    **corrupt_batches.SCENARIOS,
    **schedules.SCENARIOS,
    **payloads.SCENARIOS,
    **producing.SCENARIOS,
    **live_workers.SCENARIOS,
    **cancel_requests.SCENARIOS,
    **progress.SCENARIOS,
    **rates.SCENARIOS,
}

#: Register a scenario of your own in `SCENARIOS` under its function's name.
scenario = registering(SCENARIOS)

__all__ = [
    "BAD_INPUT_CASES",
    "CANCELLED",
    "CLAIM_TTL",
    "DEFERRED",
    "FAILED",
    "LEASE_TTL",
    "PAST_A_LEASE",
    "PAYLOAD_CASES",
    "READY",
    "RUNNING",
    "SCENARIOS",
    "SUCCESSFUL",
    "BadCall",
    "Scenario",
    "a_lease_from_before_a_purge_cannot_decide_the_id_enqueued_again",
    "a_reaper_pass_gives_back_the_unstarted_claims_it_meets_beyond_its_limit",
    "a_release_with_a_delay_defers_the_task_uncharged",
    "a_started_claim_that_expires_is_charged",
    "an_unstarted_claim_is_always_given_back_and_later_leases_count_it",
    "an_unstarted_claim_that_expires_goes_back_uncharged",
    "cancel_of_a_running_task_is_refused",
    "check_payload_round_trip",
    "claim_one",
    "claim_takes_queues_in_the_order_given",
    "deferred_tasks_fall_due_on_the_backend_clock",
    "enqueue_is_idempotent_on_id",
    "expect",
    "expire_leases_expires_a_dead_workers_leases_and_nothing_else",
    "extend_after_a_reap_is_refused",
    "failed",
    "failure",
    "fifo_within_a_priority_for_thousands_enqueued_at_once",
    "finished_tasks_are_kept_for_result_ttl_then_gone",
    "late_acknowledgement_after_a_reap_is_refused",
    "lease_expiry_leaves_attempts_unchanged",
    "lease_timeout",
    "mark",
    "mark_started_is_fenced_idempotent_and_changes_nothing_seen",
    "new_task",
    "next_due_counts_down_to_the_earliest_deferred_task",
    "reap",
    "release_refuses_a_started_claim_and_a_reaper_lease",
    "repeated_complete_after_a_lost_reply_answers_as_the_first_time",
    "repeated_retry_after_a_lost_reply_answers_as_the_first_time",
    "requeue_and_cancel_end_the_repeat_window",
    "requeue_keeps_id_errors_and_attempts",
    "requeue_of_a_running_task_is_refused",
    "requeue_of_a_successful_task_is_refused",
    "retry_delay_is_measured_on_the_backend_clock",
    "scenario",
    "snapshot",
    "stale_reaper_decision_after_its_claim_lapsed_is_refused",
    "start_one",
    "status_of",
    "succeeded",
    "two_reaper_passes_at_once_never_claim_one_task",
]
