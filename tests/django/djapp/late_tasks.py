"""A module of tasks nothing imports until a result of one of them is read."""

from django.tasks import task


@task
def late(value: int) -> int:
    return value
