"""Functions registered with `register_task` by the registration tests (not by @task)."""

from __future__ import annotations

from typing import Any

from threadmill_core import TaskContext


class Wrapper:
    """A callable object of the kind an integration registers: it prepares, then calls."""

    def __init__(self, seen: list[Any]) -> None:
        self.seen = seen

    def __call__(self, context: TaskContext, *args: Any, **kwargs: Any) -> Any:
        self.seen.append((context.attempt, context.token is not None, args, kwargs))
        return sum(args)


def plain(a: int, b: int) -> int:
    return a + b


def with_context(context: TaskContext, a: int) -> int:
    return a * 10 + context.attempt
