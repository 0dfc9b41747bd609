"""The example's tasks: plain Django tasks that write ORM rows."""

import os
import time

from django.tasks import TaskContext, task

import threadmill_django
from orders.models import Shipment
from threadmill_core import ExponentialBackoff


@threadmill_django.task(
    takes_context=True,
    # Every failure is retried, an expired lease (a worker killed) included.
    retry=ExponentialBackoff(base_delay=0.5, max_delay=5, max_retries=10),
)
def ship_order(context: TaskContext, order: int, seconds: float = 0.0) -> int:
    """Ship an order: take `seconds`, then record the shipment; returns the row's id."""
    time.sleep(seconds)
    row = Shipment.objects.create(order=order, attempt=context.attempt, pid=os.getpid())
    return row.pk


@task
def count_shipments() -> int:
    return Shipment.objects.count()
