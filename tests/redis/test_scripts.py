"""The Lua scripts: include resolution, headers, status codes, and that each one loads."""

from __future__ import annotations

import re
from collections.abc import Callable
from importlib import resources

import pytest
import redis

from threadmill_redis import replies, scripts
from threadmill_redis.connections import ThreadConnections
from threadmill_redis.errors import ScriptIncludeError
from threadmill_redis.replies import Status

LUA = resources.files("threadmill_redis").joinpath("lua")
OPERATIONS = sorted(p.name.removesuffix(".lua") for p in LUA.iterdir() if p.name.endswith(".lua"))
LIBRARY = sorted(
    p.name.removesuffix(".lua") for p in LUA.joinpath("lib").iterdir() if p.name.endswith(".lua")
)


def reader(files: dict[str, str]) -> Callable[[str], str]:
    def read(name: str) -> str:
        if name not in files:
            raise FileNotFoundError(name)
        return files[name]

    return read


def test_an_include_shared_by_two_libraries_is_inlined_once_before_its_users() -> None:
    """A diamond of includes inlines the shared file once, ahead of everything that uses it."""
    files = {
        "main": '--@include "lib/b"\n--@include "lib/c"\nmain()',
        "lib/b": '--@include "lib/d"\nlocal function b() end',
        "lib/c": '--@include "lib/d"\nlocal function c() end',
        "lib/d": "local function d() end",
    }
    source = scripts.resolve("main", reader(files))
    assert source.count("local function d()") == 1
    assert source.index("function d") < source.index("function b") < source.index("function c")
    assert "@include" not in source


def test_an_include_cycle_is_an_error_naming_the_chain() -> None:
    """A cycle of includes raises ScriptIncludeError with the whole chain, in order."""
    files = {
        "main": '--@include "lib/a"',
        "lib/a": '--@include "lib/b"',
        "lib/b": '--@include "lib/a"',
    }
    with pytest.raises(ScriptIncludeError, match=r"main -> lib/a -> lib/b -> lib/a") as info:
        scripts.resolve("main", reader(files))
    assert info.value.chain == ("main", "lib/a", "lib/b", "lib/a")


def test_a_missing_include_names_who_included_it() -> None:
    """An include of a file that does not exist names the chain that led to it."""
    with pytest.raises(ScriptIncludeError, match=r"main -> lib/nope"):
        scripts.resolve("main", reader({"main": '--@include "lib/nope"'}))


@pytest.mark.parametrize("name", [name for name in LIBRARY if name != "layout"])
def test_each_library_file_is_one_local_function_of_its_name(name: str) -> None:
    """lib/NAME.lua defines exactly one function, `local function NAME`, and no globals
    (lib/pack_task once scripts.py has written it from the layout)."""
    text = LUA.joinpath("lib", f"{name}.lua").read_text()
    text = scripts.PACK_DIRECTIVE.sub(lambda _: scripts.pack_task(), text)
    top_level = re.findall(r"^(local function \w+|function \w+|\w+\s*=)", text, re.MULTILINE)
    assert top_level == [f"local function {name}"]


def test_the_layout_file_is_the_layout_directive_alone() -> None:
    """lib/layout.lua is comments and ``--@layout``, which becomes locals only (no globals)."""
    text = LUA.joinpath("lib", "layout.lua").read_text()
    code = [line for line in text.splitlines() if not line.startswith("-- ")]
    assert code == ["--@layout"]
    expanded = [line for line in scripts.layout().splitlines() if not line.startswith("--")]
    assert all(line.startswith("local ") for line in expanded)


def test_every_script_has_a_documented_reply_shape() -> None:
    """`replies.REPLIES` names the reply of every script in lua/, and no other."""
    names = {path.name.removesuffix(".lua") for path in LUA.iterdir() if path.name.endswith(".lua")}
    assert set(replies.REPLIES) == names


def test_the_keys_directive_becomes_the_aliases_the_header_names() -> None:
    """``--@keys`` turns into ``local K = {...}``, in header order, and nothing else changes."""
    source = "--   KEYS[1]  state  HASH x\n--   KEYS[2]  ready  ZSET y\n--@keys\nreturn K.ready\n"
    script = scripts.Script.from_source("t", source)
    assert script.key_names == ("state", "ready")
    assert (
        "local K = {\n  state = KEYS[1],\n  ready = KEYS[2],\n}\nreturn K.ready\n" in script.source
    )
    assert "--@keys" not in script.source


@pytest.mark.parametrize("name", OPERATIONS)
def test_each_script_header_names_the_keys_it_aliases(name: str) -> None:
    """The header's KEYS[i] names match the script's aliases, so Python passes keys by name."""
    script = scripts.load(name)
    aliases = re.findall(r"^\s+(\w+) = KEYS\[(\d+)\],$", script.source, re.MULTILINE)
    assert [n for n, _ in aliases] == list(script.key_names[: len(aliases)])
    assert "K." not in script.source or aliases, "a script that uses K. needs --@keys"
    assert [int(i) for _, i in aliases] == list(range(1, len(aliases) + 1))
    header = script.source.split("\n\n", 1)[0]
    assert "ARGV[1]" in header or "ARGV" not in script.source
    assert "Reply" in script.source.split("--@include", 1)[0]


def test_the_status_codes_in_lua_match_the_python_enum() -> None:
    """lib/code.lua and replies.Status give every status the same number."""
    table = LUA.joinpath("lib", "code.lua").read_text()
    in_lua = {name: int(n) for name, n in re.findall(r"(\w+) = (\d+)", table)}
    assert in_lua == {status.name: status.value for status in Status}


@pytest.mark.redis
@pytest.mark.parametrize("name", OPERATIONS)
def test_each_script_compiles_on_a_real_server(name: str, real_client: redis.Redis) -> None:
    """SCRIPT LOAD accepts every resolved script, under the SHA computed in Python."""
    script = scripts.load(name)
    assert real_client.script_load(script.source) == script.sha


@pytest.mark.redis
def test_a_flushed_script_cache_is_reloaded_transparently(real_client: redis.Redis) -> None:
    """After SCRIPT FLUSH, the next call loads the script again and succeeds (NOSCRIPT)."""
    script = scripts.load("counts")
    keys = ["{t-flush}:" + name for name in script.key_names]
    real_client.script_flush()
    assert scripts.evalsha(real_client.execute_command, script, keys, [1000]) == []
    real_client.script_flush()
    answers: dict[int, object] = {}
    connections = ThreadConnections(real_client)
    try:
        scripts.evalsha_each(
            connections, connections.execute, [(script, keys, [1000])] * 3, answers.__setitem__
        )
    finally:
        connections.close()
    assert answers == {0: [], 1: [], 2: []}
