"""The Lua scripts: loaded from ``lua/``, includes resolved, run by SHA.

A script names its fixed keys once, in its header (``--   KEYS[1]  payload
...``); a line ``--@keys`` becomes ``local K = { payload = KEYS[1], ... }``
built from that header, so Python (`Script.key_names`) and Lua read the
same list. A script pulls shared functions in with a line
``--@include "lib/NAME"``.
Each library file is inlined where it is first included (library files
include what they use, so definitions come before use) and skipped after
that; a cycle is an error naming the chain. Scripts run with EVALSHA; on
NOSCRIPT (a restarted or flushed server) the source is loaded and the call
repeated, which is safe because NOSCRIPT means the script never ran.
`evalsha_held` and `evalsha_many_held` do the same on the backend's held
connections (see `threadmill_redis.connection.HeldConnections`); a pipeline
also loads, ahead of their first call, the scripts those connections have
not seen the server run, so a long batch is not sent twice.

The header of each script names its keys as ``--   KEYS[i]  name``; callers
pass keys by those names (see `Script.key_names`), so Python and Lua cannot
disagree on the order.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Callable, Iterator, Sequence
from importlib import resources
from typing import Any, overload

import attrs
import redis

from threadmill_redis.connection import Client, HeldConnections
from threadmill_redis.errors import ScriptIncludeError

INCLUDE = re.compile(r'^--@include\s+"([^"]+)"\s*$')
HEADER_KEY = re.compile(r"^--\s+KEYS\[(\d+)\]\s+(\w+)")
KEYS_DIRECTIVE = re.compile(r"^--@keys$", re.MULTILINE)

#: Arguments of one script call: its keys, then its ARGV.
Call = tuple["Script", Sequence[str], Sequence[str | bytes | int]]


def resolve(name: str, read: Callable[[str], str]) -> str:
    """The source of script `name` with every include inlined once.

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

    return expand(name, (name,)) + "\n"


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


def evalsha(client: Client, script: Script, keys: Sequence[str], args: Sequence[Any]) -> Any:
    """Run `script` once, loading it first if the server does not know it."""
    try:
        return client.evalsha(script.sha, len(keys), *keys, *args)
    except redis.exceptions.NoScriptError:
        client.script_load(script.source)
        return client.evalsha(script.sha, len(keys), *keys, *args)


def evalsha_many(client: Client, calls: Sequence[Call]) -> list[Any]:
    """Run several independent scripts in one round trip (one pipeline, no transaction).

    Each call is atomic on its own. Calls the server answered NOSCRIPT never
    ran; they are repeated after loading their scripts. Any other error raises.
    A cluster client does not pipeline scripts, so there they run one by one.
    """
    if isinstance(client, redis.RedisCluster):
        return [evalsha(client, script, keys, args) for script, keys, args in calls]
    results: list[Any] = [None] * len(calls)
    pending = list(range(len(calls)))
    for attempt in range(2):
        pipe = client.pipeline(transaction=False)
        for index in pending:
            script, keys, args = calls[index]
            pipe.evalsha(script.sha, len(keys), *keys, *args)
        replies = pipe.execute(raise_on_error=False)
        missing: list[int] = []
        for index, reply in zip(pending, replies, strict=True):
            if isinstance(reply, redis.exceptions.NoScriptError) and attempt == 0:
                missing.append(index)
            elif isinstance(reply, Exception):
                raise reply
            else:
                results[index] = reply
        if not missing:
            break
        for script in {calls[index][0] for index in missing}:
            client.script_load(script.source)
        pending = missing
    return results


def evalsha_held(
    held: HeldConnections,
    script: Script,
    keys: Sequence[str],
    args: Sequence[Any],
    *,
    keys_repeat: bool = True,
) -> Any:
    """`evalsha` on a held connection.

    Where the same `keys` come again in later calls (`keys_repeat`), the
    command's head (EVALSHA, SHA and keys) is packed once and kept (see
    `HeldConnections.execute_headed`); a call with a key of its own (a
    claim's receipt) is packed whole.
    """
    head = ("EVALSHA", script.sha, len(keys), *keys)

    def send() -> Any:
        if keys_repeat:
            return held.execute_headed(head, args)
        return held.execute((*head, *args))

    try:
        return send()
    except redis.exceptions.NoScriptError:
        held.execute(("SCRIPT", "LOAD", script.source))
        return send()


class LazyCalls(Sequence[Call]):
    """`count` script calls, each made by `make(index)` when first read, then kept.

    For `evalsha_many_held`, which reads them in order as it sends them: a
    long pipeline's later calls are made while the server runs the first.
    """

    def __init__(self, count: int, make: Callable[[int], Call]) -> None:
        self._made: list[Call | None] = [None] * count
        self._make = make

    def __len__(self) -> int:
        return len(self._made)

    @overload
    def __getitem__(self, index: int) -> Call: ...

    @overload
    def __getitem__(self, index: slice) -> list[Call]: ...

    def __getitem__(self, index: int | slice) -> Call | list[Call]:
        if isinstance(index, slice):
            return [self[i] for i in range(len(self._made))[index]]
        call = self._made[index]
        if call is None:
            call = self._made[index] = self._make(range(len(self._made))[index])
        return call


def evalsha_many_held(
    held: HeldConnections,
    calls: Sequence[Call],
    each: Callable[[int, Any], None] | None = None,
) -> list[Any]:
    """`evalsha_many` on a held connection, one pipeline.

    `each(index, result)`, if given, is called with each call's result as it
    is read (see `HeldConnections.execute_many`); a call repeated after
    NOSCRIPT is answered after the others. A result passed to `each` may
    still be followed by an error raised for another call. `calls` is read
    in order, one call at a time as the pipeline is sent (see `LazyCalls`).

    A script the server has not been seen to know on these connections
    (``held.loaded``) is loaded in the pipeline, ahead of its first call:
    otherwise, on a fresh server, every call would be answered NOSCRIPT and
    sent twice, a batch's records with them.
    """
    results: list[Any] = [None] * len(calls)
    pending = list(range(len(calls)))
    missing = _pipeline(held, calls, pending, results, each, noscript_ok=True)
    if missing:
        for script in {calls[index][0] for index in missing}:
            held.execute(("SCRIPT", "LOAD", script.source))
        _pipeline(held, calls, missing, results, each, noscript_ok=False)
    held.loaded.update(call[0].sha for call in calls)
    return results


def _pipeline(
    held: HeldConnections,
    calls: Sequence[Call],
    pending: list[int],
    results: list[Any],
    each: Callable[[int, Any], None] | None,
    *,
    noscript_ok: bool,
) -> list[int]:
    """Run `calls[i]` for i in `pending` in one pipeline, into `results` (and `each`).

    With `noscript_ok`, a script not in ``held.loaded`` is loaded ahead of
    its first call, in the same pipeline, and the calls answered NOSCRIPT
    anyway (the server forgot a script) are returned. Raises the first other
    error reply once every reply is read.
    """
    what: list[int | None] = []  # per command sent: its call's index, None for a SCRIPT LOAD
    loading: set[str] = set()

    def commands() -> Iterator[tuple[Any, ...]]:
        for index in pending:
            script, keys, args = calls[index]
            if noscript_ok and script.sha not in held.loaded and script.sha not in loading:
                loading.add(script.sha)
                what.append(None)
                yield ("SCRIPT", "LOAD", script.source)
            what.append(index)
            yield ("EVALSHA", script.sha, len(keys), *keys, *args)

    missing: list[int] = []
    errors: list[Exception] = []

    def take(position: int, reply: Any) -> None:
        index = what[position]
        if index is None:
            # A SCRIPT LOAD's reply. An error (say, a user not allowed SCRIPT)
            # is not raised: the calls ran if the server knew the script, and
            # a NOSCRIPT answer sends them to the load and repeat below.
            return
        if isinstance(reply, redis.exceptions.NoScriptError) and noscript_ok:
            missing.append(index)
        elif isinstance(reply, Exception):
            errors.append(reply)
        else:
            results[index] = reply
            if each is not None:
                each(index, reply)

    held.execute_many(commands(), each=take)
    if errors:
        raise errors[0]
    return missing
