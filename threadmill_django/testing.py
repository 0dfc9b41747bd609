"""Test support: run an alias's tasks on a broker the test holds.

::

    from threadmill_core import Broker, FakeClock, Worker
    from threadmill_django.testing import use_broker
    from threadmill_memory import MemoryBackend

    def test_report_is_retried():
        clock = FakeClock()
        with use_broker("default", Broker(MemoryBackend(clock=clock))) as broker:
            result = build_report.enqueue(7)
            Worker(broker, queues=["default"]).run(burst=True)   # fails, retry deferred
            clock.advance(timedelta(minutes=1))
            Worker(broker, queues=["default"]).run(burst=True)
            result.refresh()
            assert result.status == TaskResultStatus.SUCCESSFUL
"""

from __future__ import annotations

from threadmill_django.brokers import use_broker

__all__ = ["use_broker"]
