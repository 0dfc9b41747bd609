"""``max_payload_bytes``: a call's arguments over the broker's limit are refused at enqueue, with
the size and the limit, and nothing is stored."""

from __future__ import annotations

import pytest

from tests.conftest import PostgresDatabase, RedisServer
from tests.core import tasks
from threadmill_core import (
    Broker,
    InvalidOption,
    PayloadTooLarge,
    TaskResultStatus,
    ThreadmillError,
    connect,
)
from threadmill_core.payload_limit import DEFAULT_MAX_PAYLOAD_BYTES, call_size
from threadmill_core.testing import Harness

LIMIT = 1_000


def text_of_size(size: int) -> str:
    """A str whose call ``echo(text)`` is exactly `size` bytes of arguments."""
    overhead = call_size([""], {})
    assert overhead is not None
    return "é" * ((size - overhead) // 2) + "x" * ((size - overhead) % 2)


def test_the_default_limit_is_one_mebibyte() -> None:
    """A broker refuses calls over 1 MiB unless told otherwise; a 2 MiB argument is refused."""
    broker = connect("memory://")
    assert broker.max_payload_bytes == DEFAULT_MAX_PAYLOAD_BYTES == 1024 * 1024
    with pytest.raises(PayloadTooLarge) as refused:
        tasks.echo.using(broker=broker).enqueue("x" * (2 * 1024 * 1024))
    assert refused.value.limit == 1024 * 1024
    assert broker.counts() == {}


def test_a_call_at_the_limit_is_stored_and_one_byte_over_is_refused(harness: Harness) -> None:
    """A call of exactly max_payload_bytes is stored and runs; one byte more is a PayloadTooLarge
    (a ValueError) naming the task, the size and the limit, and nothing is stored, on every
    backend."""
    broker = Broker(harness.backend, max_payload_bytes=LIMIT)
    echo = tasks.echo.using(broker=broker)
    at_limit = text_of_size(LIMIT)
    assert call_size([at_limit], {}) == LIMIT
    stored = echo.enqueue(at_limit)
    with pytest.raises(PayloadTooLarge) as refused:
        echo.enqueue(text_of_size(LIMIT + 1))
    error = refused.value
    assert isinstance(error, ThreadmillError)
    assert isinstance(error, ValueError)
    assert (error.task_path, error.size, error.limit, error.index) == (
        "tests.core.tasks:echo", LIMIT + 1, LIMIT, None,
    )  # fmt: skip
    assert f"has {LIMIT + 1:,} bytes of arguments" in str(error)
    assert f"max_payload_bytes of {LIMIT:,}" in str(error)
    with pytest.raises(PayloadTooLarge):
        echo.enqueue(value=text_of_size(LIMIT + 10))  # keyword arguments count too
    [only] = broker.peek("default", TaskResultStatus.READY)
    assert only.id == stored.id
    assert only.args == [at_limit]


def test_a_batch_with_one_call_over_the_limit_stores_none(harness: Harness) -> None:
    """enqueue_many refuses the whole batch for one call over the limit, naming its index, on
    every backend; small calls that together exceed the limit are all stored."""
    broker = Broker(harness.backend, max_payload_bytes=LIMIT)
    small = [((f"call {n}",), {}) for n in range(2_500)]  # about 40 kB together
    for index in (0, 7, 1_999):  # in the first thousand measured together, and in the second
        calls = [*small[:index], ((text_of_size(LIMIT + 1),), {}), *small[index:]]
        with pytest.raises(PayloadTooLarge) as refused:
            broker.enqueue_many(tasks.echo, calls)
        assert (refused.value.index, refused.value.size) == (index, LIMIT + 1)
        assert f"call {index} of the batch" in str(refused.value)
    assert broker.counts() == {}
    assert len(broker.enqueue_many(tasks.echo, small)) == len(small)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_payload_bytes": 0}, "max_payload_bytes must be an int of at least 1"),
        ({"max_payload_bytes": "big"}, "max_payload_bytes must be a whole number"),
        ({"max_payload_bytes": 1.5}, "max_payload_bytes must be (an int|a whole number)"),
    ],
)
def test_a_bad_limit_is_refused(options: dict[str, object], message: str) -> None:
    """A limit that is not a whole number of at least 1 is an InvalidOption naming it."""
    with pytest.raises(InvalidOption, match=message):
        connect("memory://", **options)
    with pytest.raises(InvalidOption, match=message):
        connect(f"memory://?max_payload_bytes={options['max_payload_bytes']}")


def test_a_limit_given_twice_is_refused() -> None:
    """The limit in the URL and as a keyword (or twice in the URL) is an InvalidOption."""
    with pytest.raises(InvalidOption, match="'max_payload_bytes' is given twice"):
        connect("memory://?max_payload_bytes=10", max_payload_bytes=10)
    with pytest.raises(InvalidOption, match="'max_payload_bytes' is given twice"):
        connect("memory://?max_payload_bytes=10&max_payload_bytes=20")


def test_the_limit_comes_from_the_url_or_a_keyword() -> None:
    """``?max_payload_bytes=`` in the URL and the keyword both set the broker's limit."""
    assert connect("memory://?max_payload_bytes=2048").max_payload_bytes == 2048
    assert connect("memory://", max_payload_bytes=4096).max_payload_bytes == 4096


@pytest.mark.redis
def test_a_redis_url_gives_the_limit_and_its_own_options(redis_server: RedisServer) -> None:
    """In a Redis URL the limit is the broker's; the rest of the query is still the backend's."""
    url = f"{redis_server.url}?namespace=limits&max_payload_bytes=500&socket_timeout=5"
    with connect(url) as broker:
        assert broker.max_payload_bytes == 500
        assert broker.backend.options.namespace == "limits"  # type: ignore[attr-defined]
        with pytest.raises(PayloadTooLarge):
            tasks.echo.using(broker=broker).enqueue("x" * 600)
        assert broker.counts() == {}
        assert repr(broker) == f"Broker({url})"


@pytest.mark.postgres
def test_a_postgres_url_gives_the_limit_and_its_own_options(
    postgres_database: PostgresDatabase,
) -> None:
    """In a PostgreSQL URL the limit is the broker's; libpq and the backend get the rest."""
    url = f"{postgres_database.url}?max_payload_bytes=500&namespace=limits&sslmode=disable"
    with connect(url) as broker:
        assert broker.max_payload_bytes == 500
        assert broker.backend.namespace == "limits"  # type: ignore[attr-defined]
        with pytest.raises(PayloadTooLarge):
            tasks.echo.using(broker=broker).enqueue("x" * 600)
        assert broker.counts() == {}
