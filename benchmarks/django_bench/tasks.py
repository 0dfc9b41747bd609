"""The benchmark's tasks as Django tasks: each peer runs them through its own alias."""

from django.tasks import task

from benchmarks.peers import _common as common


@task
def incr() -> None:
    common.incr()


@task
def started(sent: float) -> None:
    common.started(sent)
