"""The inspecting commands on a namespace that does not exist: said so, and nothing created."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable

import pytest

from tests.conftest import PostgresDatabase
from tests.postgres.conftest import admin
from threadmill_postgres import NamespaceNotFound, PostgresBackend
from threadmill_postgres.testing import new_namespace

pytestmark = pytest.mark.postgres


def schema_exists(database: PostgresDatabase, name: str) -> bool:
    found = admin(database, "SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = %s", (name,))
    return bool(found)


@pytest.mark.parametrize(
    "command",
    [
        ["stats"],
        ["workers", "--json"],
        ["ls", "emails", "--status", "ready"],
        ["show", "01a2-no-such-task"],
        ["requeue", "--failed", "emails"],
        ["health"],
    ],
    ids=["stats", "workers", "ls", "show", "requeue", "health"],
)
def test_a_command_on_a_misspelt_namespace_says_so_and_creates_nothing(
    database: PostgresDatabase,
    make_backend: Callable[..., PostgresBackend],
    command: list[str],
) -> None:
    """`threadmill stats` (and workers, ls, show, requeue, health) on `jbos`: an error naming
    those that exist."""
    existing = make_backend()  # a namespace that does exist, made by first use
    existing.now()
    misspelt = new_namespace("jbos")
    url = f"{database.url}?namespace={misspelt}"
    env = {k: v for k, v in os.environ.items() if k != "THREADMILL_URL"}
    ran = subprocess.run(
        [sys.executable, "-m", "threadmill_core.cli", *command, "--broker", url],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )
    assert ran.returncode == 2, (ran.stdout, ran.stderr)
    assert ran.stdout == ""
    [line] = ran.stderr.splitlines()
    assert f"namespace {misspelt!r} does not exist in database {database.name!r}" in line
    assert existing.namespace in line, "the namespaces that do exist are listed"
    assert not schema_exists(database, misspelt)


def test_producers_still_create_the_namespace_on_first_use(
    database: PostgresDatabase, make_backend: Callable[..., PostgresBackend]
) -> None:
    """A backend built as producers and workers build it makes the schema; told not to, raises."""
    name = new_namespace()
    with pytest.raises(NamespaceNotFound) as raised:
        make_backend(namespace=name, create_schema=False)
    assert raised.value.namespace == name
    assert not schema_exists(database, name)
    make_backend(namespace=name).now()
    assert schema_exists(database, name)
    assert make_backend(namespace=name, create_schema=False).counts() == {}
