"""A task for the Sentinel failover test: quick, and nothing to record but its result."""

from __future__ import annotations

from datetime import timedelta

from threadmill_core import ExponentialBackoff, task

#: An interrupted attempt (a lease that expired across the failover) is retried soon, always.
RETRY = ExponentialBackoff(base_delay=timedelta(milliseconds=50), max_retries=None, jitter=0)


@task(retry=RETRY)
def square(n: int) -> int:
    return n * n
