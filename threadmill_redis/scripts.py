"""The Lua scripts: loaded from ``lua/``, includes resolved, run by SHA.

A script names its fixed keys once, in its header (``--   KEYS[1]  payload
...``); a line ``--@keys`` becomes ``local K = { payload = KEYS[1], ... }``
built from that header, so Python (`Script.key_names`) and Lua read the
same list. A script pulls shared functions in with a line
``--@include "lib/NAME"``. A line ``--@layout`` (in ``lib/layout``, which
the functions that read or write a packed state or a segment member
include) becomes the layouts `threadmill_redis.keys` declares, as Lua
locals (see `layout`), so the scripts and `threadmill_redis.replies` read
one declaration; a line ``--@pack_task`` (in ``lib/pack_task``) becomes the
packer of that layout (see `pack_task`).
Each library file is inlined where it is first included (library files
include what they use, so definitions come before use) and skipped after
that; a cycle is an error naming the chain. Scripts run with EVALSHA
through redis-py's public API (`evalsha` for one, `evalsha_each` for the
calls of a long batch); on NOSCRIPT (a first call, a restarted or flushed
server) the source is loaded and the call repeated, which is safe because
NOSCRIPT means the script never ran. The caller runs these inside
`threadmill_redis.boundary.call`, which translates the driver's errors.

The header of each script names its keys as ``--   KEYS[i]  name``; callers
pass keys by those names (see `Script.key_names`), so Python and Lua cannot
disagree on the order.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from importlib import resources
from typing import Any

import attrs
import redis

from threadmill_redis import keys
from threadmill_redis.connections import ThreadConnections
from threadmill_redis.errors import ScriptIncludeError

INCLUDE = re.compile(r'^--@include\s+"([^"]+)"\s*$')
HEADER_KEY = re.compile(r"^--\s+KEYS\[(\d+)\]\s+(\w+)")
KEYS_DIRECTIVE = re.compile(r"^--@keys$", re.MULTILINE)
LAYOUT_DIRECTIVE = re.compile(r"^--@layout$", re.MULTILINE)
PACK_DIRECTIVE = re.compile(r"^--@pack_task$", re.MULTILINE)

#: Arguments of one script call: its keys, then its ARGV.
Call = tuple["Script", Sequence[str], Sequence[str | bytes | int]]


def layout() -> str:
    """The Lua that ``--@layout`` becomes: the layouts of `threadmill_redis.keys` as locals.

    ``STATE_PATTERN`` matches a packed state whole, one capture a field, each
    of its shape; ``STATE_FIELDS`` names the fields in order; ``STATE`` maps
    each name to its place (from 1). ``QUEUE_LENGTH_DIGITS``,
    ``SORT_KEY_DIGITS``, ``QUEUE_LENGTH_FORMAT``, ``SORT_KEY_FORMAT``,
    ``READY_PRIORITY_FORMAT`` (100 - priority) and ``READY_SEQUENCE_FORMAT``
    (the entered-READY sequence, the rest of a READY member's sort key) make
    and cut segment members.
    """
    pattern = "^" + "|".join(f"({shape})" for _, shape in keys.STATE_LAYOUT) + "$"
    names = ", ".join(f"'{name}'" for name in keys.STATE_FIELDS)
    places = ", ".join(f"{name} = {at}" for at, name in enumerate(keys.STATE_FIELDS, 1))
    sequence_digits = keys.SORT_KEY_DIGITS - keys.PRIORITY_DIGITS
    return "\n".join(
        [
            "-- Written by threadmill_redis.scripts from threadmill_redis.keys.",
            f"local STATE_PATTERN = '{pattern}'",
            f"local STATE_FIELDS = {{ {names} }}",
            f"local STATE = {{ {places} }}",
            f"local QUEUE_LENGTH_DIGITS = {keys.QUEUE_LENGTH_DIGITS}",
            f"local SORT_KEY_DIGITS = {keys.SORT_KEY_DIGITS}",
            f"local QUEUE_LENGTH_FORMAT = '%0{keys.QUEUE_LENGTH_DIGITS}x'",
            f"local SORT_KEY_FORMAT = '%0{keys.SORT_KEY_DIGITS}d'",
            f"local READY_PRIORITY_FORMAT = '%0{keys.PRIORITY_DIGITS}d'",
            f"local READY_SEQUENCE_FORMAT = '%0{sequence_digits}d'",
        ]
    )


def pack_task() -> str:
    """The Lua that ``--@pack_task`` (in ``lib/pack_task``) becomes: ``pack_task(t)``.

    One concatenation of task `t`'s fields in `STATE_LAYOUT` order, joined by
    ``|``: a numeric field (its shape has ``%d``) through ``pack_number``, nil
    as ``''``; a text field as it is, nil as ``''``. Written out from the
    layout, so the layout is still spelled once, without the loop and the
    table a generic packer would make for every task stored.
    """
    parts = [
        f"pack_number(t.{name})" if "%d" in shape else f"(t.{name} or '')"
        for name, shape in keys.STATE_LAYOUT
    ]
    body = " .. '|'\n    .. ".join(parts)
    return "\n".join(
        [
            "-- Written by threadmill_redis.scripts from threadmill_redis.keys.",
            "local function pack_task(t)",
            f"  t.saved = {body}",
            "  return t.saved",
            "end",
        ]
    )


def resolve(name: str, read: Callable[[str], str]) -> str:
    """The source of script `name` with every include inlined once, and the layouts written in.

    `read(name)` returns a file's text (``claim`` or ``lib/load_task``);
    `FileNotFoundError` from it becomes a `ScriptIncludeError` naming who
    included the missing file.
    """
    inlined: set[str] = set()

    def expand(current: str, chain: tuple[str, ...]) -> str:
        try:
            text = read(current)
        except FileNotFoundError:
            raise ScriptIncludeError(chain, "missing script") from None
        lines = []
        for line in text.splitlines():
            match = INCLUDE.match(line)
            if match is None:
                lines.append(line)
                continue
            target = match.group(1)
            if target in chain:
                raise ScriptIncludeError((*chain, target), "include cycle")
            if target not in inlined:
                inlined.add(target)
                lines.append(expand(target, (*chain, target)))
        return "\n".join(lines)

    source = expand(name, (name,)) + "\n"
    source = LAYOUT_DIRECTIVE.sub(lambda _: layout(), source, count=1)
    return PACK_DIRECTIVE.sub(lambda _: pack_task(), source, count=1)


def read_packaged(name: str) -> str:
    """A file of ``threadmill_redis/lua`` by name without ``.lua``."""
    path = resources.files("threadmill_redis").joinpath("lua", *f"{name}.lua".split("/"))
    return path.read_text(encoding="utf-8")


@attrs.frozen
class Script:
    """One resolved script, its SHA1 and the names of its fixed keys in KEYS order."""

    name: str
    source: str
    sha: str
    key_names: tuple[str, ...]

    @classmethod
    def from_source(cls, name: str, source: str) -> Script:
        declared = {
            int(m.group(1)): m.group(2)
            for m in map(HEADER_KEY.match, source.splitlines())
            if m is not None
        }
        if sorted(declared) != list(range(1, len(declared) + 1)):
            raise ValueError(f"{name}.lua: its header must name KEYS[1] to KEYS[n] in order")
        key_names = tuple(declared[i] for i in sorted(declared))
        aliases = "".join(f"  {key} = KEYS[{i}],\n" for i, key in enumerate(key_names, 1))
        source = KEYS_DIRECTIVE.sub(lambda _: f"local K = {{\n{aliases}}}", source, count=1)
        sha = hashlib.sha1(source.encode(), usedforsecurity=False).hexdigest()
        return cls(name, source, sha, key_names)


@functools.cache
def load(name: str) -> Script:
    """The packaged script `name` (``claim``, ``lib`` files are only included)."""
    return Script.from_source(name, resolve(name, read_packaged))


def evalsha(
    execute: Callable[..., Any], script: Script, keys: Sequence[str], args: Sequence[Any]
) -> Any:
    """Run `script` once (EVALSHA), loading it first if the server does not know it.

    `execute` sends one command and returns its reply: a client's
    ``execute_command``, or `ThreadConnections.execute`.
    """
    try:
        return execute("EVALSHA", script.sha, len(keys), *keys, *args)
    except redis.exceptions.NoScriptError:
        execute("SCRIPT", "LOAD", script.source)
        return execute("EVALSHA", script.sha, len(keys), *keys, *args)


def evalsha_each(
    connections: ThreadConnections | None,
    execute: Callable[..., Any],
    calls: Iterable[Call],
    answer: Callable[[int, Any], None],
) -> None:
    """Run independent script calls one after another, each atomic on its own; `answer` each reply.

    `calls` may make each call as it is asked for the next. On a single
    server (`connections`), each call is sent while the server runs the one
    before (`ThreadConnections.execute_each`); calls the server answered
    NOSCRIPT never ran, so their scripts are loaded and they are sent again,
    after the others, and answered then. Any other error reply raises, once
    every reply was read and every other call answered. On a cluster
    (`connections` None) the calls go one by one through `execute`, a
    client's ``execute_command``.
    """
    if connections is None:
        for index, (script, keys, args) in enumerate(calls):
            answer(index, evalsha(execute, script, keys, args))
        return
    made: list[Call] = []
    missing: list[int] = []
    error: Exception | None = None

    def commands() -> Iterator[tuple[Any, ...]]:
        for script, keys, args in calls:
            made.append((script, keys, args))
            yield ("EVALSHA", script.sha, len(keys), *keys, *args)

    def received(index: int, reply: Any) -> None:
        nonlocal error
        if isinstance(reply, redis.exceptions.NoScriptError):
            missing.append(index)
        elif isinstance(reply, Exception):
            error = error or reply
        else:  # answered even after an error: what a call stored is known
            answer(index, reply)

    connections.execute_each(commands(), received)
    if error is not None:
        raise error
    for index in missing:
        script, keys, args = made[index]
        answer(index, evalsha(connections.execute, script, keys, args))
