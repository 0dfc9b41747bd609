"""Whether a call fits its task's signature, checked at enqueue (see `threadmill_core.task`).

`inspect.Signature.bind` decides from a call's shape alone, never from its
values: how many positional arguments it has and which keyword names. So
`CallCheck` binds a shape once and lets later calls of a shape that fitted
through without binding them again; the calls of one `Broker.enqueue_many`
usually share one shape, and so do most calls of one task.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any

from threadmill_core.errors import InvalidCall

#: Shapes remembered per signature: a task called with ever new keyword names
#: (through ``**kwargs``) binds each call, as if nothing were remembered.
MAX_SHAPES = 64


class CallCheck:
    """The calls that fit `signature`: `check` raises `InvalidCall` for any other.

    Made once per task (`Task.call_check`); safe to share between threads
    (two threads may both bind a new shape, and both remember it).
    """

    __slots__ = ("_fits", "signature")

    def __init__(self, signature: inspect.Signature) -> None:
        self.signature = signature
        #: Shapes, ``(number of positional arguments, *keyword names)``, that bound.
        self._fits: set[tuple[object, ...]] = set()

    def check(
        self,
        task_path: str,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        index: int | None = None,
    ) -> None:
        """`InvalidCall` naming `task_path`, the signature and the mismatch (and `index`, the
        call's place in a batch) unless ``(args, kwargs)`` bind to the signature."""
        shape = (len(args), *kwargs)
        if shape in self._fits:
            return
        try:
            self.signature.bind(*args, **kwargs)
        except TypeError as exc:
            # The parameters are what the caller needs; the return annotation is noise here.
            parameters = self.signature.replace(return_annotation=inspect.Signature.empty)
            raise InvalidCall(task_path, str(parameters), str(exc), index) from None
        if len(self._fits) < MAX_SHAPES:
            self._fits.add(shape)

    def check_all(
        self, task_path: str, calls: Sequence[tuple[Sequence[Any], Mapping[str, Any]]]
    ) -> None:
        """`check` each of `calls`, ``(args, kwargs)``, with its index: the first misfit raises."""
        for index, (args, kwargs) in enumerate(calls):
            self.check(task_path, args, kwargs, index)
