"""The database a Redis URL names: a whole number the server has, or a clear refusal at connect."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import RedisServer
from threadmill_core import connect
from threadmill_core.errors import InvalidOption

#: The console script pip installed beside this interpreter: what a user types.
THREADMILL = str(Path(sys.executable).with_name("threadmill"))


@pytest.mark.parametrize(
    ("path", "shown"),
    [("abc", "'abc'"), ("0/x", "'0/x'"), ("-1", "'-1'"), ("1.5", "'1.5'"), ("%31", "'%31'")],
)
def test_a_database_that_is_not_a_whole_number_is_refused(path: str, shown: str) -> None:
    """redis://host/abc is an InvalidOption naming the database, not database 0 in silence."""
    with pytest.raises(InvalidOption, match=f"must be a whole number such as 0, got {shown}"):
        connect(f"redis://:hunter2@127.0.0.1:1/{path}")


def test_the_refusal_hides_the_password() -> None:
    """The refused URL is shown with its password masked."""
    with pytest.raises(InvalidOption) as refused:
        connect("redis://:hunter2@127.0.0.1:1/abc")
    assert "redis://:***@127.0.0.1:1/abc" in str(refused.value)
    assert "hunter2" not in str(refused.value)


def test_a_cluster_database_other_than_0_is_refused() -> None:
    """A Redis Cluster URL naming database 1 is refused before any node is asked."""
    with pytest.raises(InvalidOption, match="a Redis Cluster has database 0 only, not 1"):
        connect("redis+cluster://127.0.0.1:1/1")


@pytest.mark.redis
@pytest.mark.parametrize("path", ["", "/", "/0", "/3"])
def test_a_whole_number_database_or_none_connects(redis_server: RedisServer, path: str) -> None:
    """An empty path, a bare slash and a whole number each connect, to the database named."""
    with connect(f"redis://127.0.0.1:{redis_server.port}{path}") as broker:
        assert broker.counts() == {}
        assert broker.backend.where.endswith(f"/{path.strip('/') or 0}")  # type: ignore[attr-defined]


@pytest.mark.redis
def test_a_database_the_server_does_not_have_is_refused_at_connect(
    redis_server: RedisServer,
) -> None:
    """redis://host/99 on a server of 16 databases fails at connect, not at the first call."""
    with pytest.raises(InvalidOption, match=r"Redis has no such database .*/99.*out of range"):
        connect(f"redis://127.0.0.1:{redis_server.port}/99")


@pytest.mark.redis
def test_the_command_line_refuses_a_bad_database(redis_server: RedisServer) -> None:
    """`threadmill stats --broker redis://host/abc` names the problem and exits non-zero."""
    ran = subprocess.run(
        [THREADMILL, "stats", "--broker", f"redis://:hunter2@127.0.0.1:{redis_server.port}/abc"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert ran.returncode == 2, ran
    assert "must be a whole number such as 0, got 'abc'" in ran.stderr
    assert "hunter2" not in ran.stderr + ran.stdout
    assert ran.stdout == ""
