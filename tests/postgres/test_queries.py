"""The named queries of sql/queries: how they are read, what they spell out, that they paste."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path

import attrs
import psycopg
import pytest

from tests.conftest import PostgresDatabase
from tests.postgres.conftest import LEASE, tasks
from threadmill_postgres import PostgresBackend, queries, rows
from threadmill_postgres.queries import QUERIES, RATE_HISTORY_S, Statements, parse

PACKAGE = Path(queries.__file__).parent

#: The queries that read a whole task, as `rows.record` decodes it.
READ_TASKS = (
    "enqueue", "claim", "claim_found", "claim_expired", "get", "requeue_lock", "cancel_lock",
    *(f"peek_{status}" for status in ("ready", "deferred", "running", "successful", "failed",
                                      "cancelled")),
)  # fmt: skip


def flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def test_a_file_is_read_into_its_queries_without_their_documentation() -> None:
    text = (
        "-- the file's own comments\n\n"
        "-- name: one --\n-- What it does.\n--\n-- Params: x.\nSELECT %(x)s;\n\n"
        "-- name: two --\nSELECT 2\n-- a comment inside stays\nFROM t;\n"
    )
    assert parse(text) == {
        "one": "SELECT %(x)s",
        "two": "SELECT 2\n-- a comment inside stays\nFROM t",
    }
    with pytest.raises(ValueError, match="'one'"):
        parse(text + "-- name: one --\nSELECT 3;\n")
    with pytest.raises(ValueError, match="'empty'"):
        parse("-- name: empty --\n-- only words\n")


def test_every_query_is_an_attribute_with_the_schema_quoted() -> None:
    """Statements.of takes every query of the files (it would raise on one too many or few),
    and fills in the schema as an identifier, quotes doubled."""
    sql = Statements.of('odd"name')
    assert '"odd""name".tasks' in sql.claim
    assert set(sql.peek) == {"READY", "DEFERRED", "RUNNING", "SUCCESSFUL", "FAILED", "CANCELLED"}
    assert set(sql.purge) == set(sql.peek) - {"RUNNING"}
    values = [getattr(sql, field.name) for field in attrs.fields(Statements)]
    texts = [
        text
        for value in values
        for text in (value.values() if isinstance(value, Mapping) else [value])
    ]
    assert len(texts) == len(QUERIES)
    assert not any("{schema}" in text for text in texts)


def test_the_queries_that_read_a_task_select_its_columns_in_the_order_rows_decodes() -> None:
    columns = ", ".join(f"t.{name}" for name in rows.TASK_COLUMNS)
    for name in READ_TASKS:
        assert columns in flat(QUERIES[name]), name


def test_the_literals_in_the_queries_are_the_constants_of_the_code() -> None:
    """The bounds of a datetime's milliseconds and the telemetry kept, written out in the
    files, are those of rows and of the core."""
    everything = flat("\n".join(QUERIES.values()))
    bounds = re.findall(r"BETWEEN (-?\d+) AND (-?\d+)", everything)
    assert bounds
    assert set(bounds) == {(str(rows.MIN_MS), str(rows.MAX_MS))}
    assert set(re.findall(r"run_after > (\d+)", everything)) == {str(rows.MAX_MS)}
    history = re.findall(r"/ 1000 - (\d+)", everything)
    assert history
    assert set(history) == {str(RATE_HISTORY_S)}


def test_the_query_files_are_package_data() -> None:
    """Every .sql file of the package is matched by pyproject's package-data globs, so a
    wheel (not only an editable install) carries it."""
    config = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text(encoding="utf-8"))
    globs = config["tool"]["setuptools"]["package-data"]["threadmill_postgres"]
    files = {path.relative_to(PACKAGE) for path in PACKAGE.rglob("*.sql")}
    covered = {path for path in files if any(path.match(glob) for glob in globs)}
    assert files
    assert covered == files


@pytest.mark.postgres
@pytest.mark.skipif(shutil.which("psql") is None, reason="needs psql")
def test_a_query_with_its_values_bound_pastes_into_psql(
    make_backend: Callable[..., PostgresBackend], database: PostgresDatabase
) -> None:
    """What the docs say to do: bind the values client-side, paste the text into psql and
    EXPLAIN it in a transaction rolled back. Nothing is claimed."""
    backend = make_backend()
    backend.enqueue(tasks(3))
    params = {
        "queues": ["default"], "worker": "w", "ttl": 30_000, "limit": 2,
        "request": "0" * 32, "channel": backend.channel,
    }  # fmt: skip
    with psycopg.connect(database.url) as conn:
        text = psycopg.ClientCursor(conn).mogrify(backend.sql.claim, params)
    script = f"BEGIN;\nEXPLAIN (ANALYZE, COSTS OFF)\n{text};\nROLLBACK;\n"
    done = subprocess.run(
        ["psql", "--no-psqlrc", "-v", "ON_ERROR_STOP=1", "-X", "-q", database.url],
        input=script, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "LockRows" in done.stdout
    assert len(backend.claim(["default"], worker="w", lease_ttl=LEASE, limit=5)) == 3
