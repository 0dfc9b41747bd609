"""``"database"``: on PostgreSQL, an enqueue inside a transaction is written in it.

With ``"OPTIONS": {"url": "postgresql://...", "database": "default"}`` (the
threadmill URL on the same PostgreSQL database as that Django connection),
`TaskBackend.enqueue` called inside ``transaction.atomic(using="default")``
writes the task through that connection
(`threadmill_postgres.PostgresBackend.enqueue_on`): the task commits or
rolls back with the application's writes, in the same transaction. So a
worker never runs it before the rows it needs are committed, never for rows
that were rolled back, and no crash between the two loses it: there is
nothing between them. Until the commit no worker can claim it and
``get_result`` of its id raises ``TaskResultDoesNotExist``; the wake-up of
idle workers (PostgreSQL's NOTIFY) is delivered at the commit. A nested
block or savepoint that rolls back takes its tasks with it. Django's
``task_enqueued`` is sent at the commit. Outside an atomic block, enqueue
stores at once through threadmill's own connections, as without the option.

The call is checked before anything is written (its signature,
``max_payload_bytes``); a refused call raises and writes nothing. An error
of the write itself (the server refused it, the connection dropped) leaves
the transaction aborted, as any failed statement in it does: let it leave
the block, or wrap the enqueue in a nested ``atomic()``.

`problem` is the system check (``threadmill_django.E004``): the option must
name a Django connection on PostgreSQL, through psycopg 3, to the same
host, port and database as the URL. It compares settings and connects to
nothing, so two names of one server (a DNS name and its address) are
refused as different; loopback names (``localhost``, ``127.0.0.1``,
``::1``, a Unix socket) count as one. The write checks it again on the
connection itself (`PostgresBackend.enqueue_on`: once per connection).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.db import connections, transaction
from django.tasks.exceptions import InvalidTaskBackend
from django.tasks.signals import task_enqueued
from django.utils.connection import ConnectionDoesNotExist

from threadmill_core import payload_limit, tracing
from threadmill_core.backend import call_record
from threadmill_core.ids import new_task_id
from threadmill_core.plugins import notify
from threadmill_django.options import BackendOptions, where
from threadmill_django.results import django_result

if TYPE_CHECKING:
    from collections.abc import Sequence

    from threadmill_core.broker import Broker
    from threadmill_core.models import TaskCall, TaskResult
    from threadmill_core.task import Task as CoreTask
    from threadmill_django._typing import AnyResult, AnyTask

#: Host names that all mean this machine (an empty host: libpq's Unix socket).
LOOPBACK = frozenset({"", "localhost", "127.0.0.1", "::1"})


def writing(options: BackendOptions) -> bool:
    """Whether an enqueue now is written in a transaction: the option is set and one is open."""
    return (
        options.database is not None
        and transaction.get_connection(options.database).in_atomic_block
    )


def enqueue_in_transaction(
    broker: Broker,
    prepared: CoreTask[Any, Any],
    task: AnyTask,
    options: BackendOptions,
    sender: type[Any],
    args: list[Any],
    kwargs: dict[str, Any],
) -> AnyResult:
    """Check the call, write it in the open transaction; the stored result (see the module doc)."""
    database = options.database
    assert database is not None
    enqueue_on = getattr(broker.backend, "enqueue_on", None)
    if enqueue_on is None:
        raise InvalidTaskBackend(
            f"{where(options.alias, 'database')}: the backend of {options.scheme}:// cannot "
            "write in a Django transaction (only threadmill_postgres can)"
        )
    path = prepared.template.task_path
    if prepared.call_check is not None:
        prepared.call_check.check(path, args, kwargs)
    payload_limit.check_call(path, args, kwargs, broker.max_payload_bytes)
    connection = transaction.get_connection(database)
    connection.ensure_connection()

    def write(template: TaskResult, calls: Sequence[TaskCall]) -> list[TaskResult]:
        records = [call_record(template, call) for call in calls]
        return list(enqueue_on(connection.connection, records))

    calls: list[TaskCall] = [(new_task_id(), args, kwargs)]
    if tracing.tracer is None:
        [stored] = write(prepared.template, calls)
    else:  # a PRODUCER span, its context kept in the record's headers, as Broker.enqueue does
        [stored] = tracing.enqueue_traced(write, prepared.template, calls)
    transaction.on_commit(_announce(stored, task, options.alias, sender), using=database)
    return django_result(stored, task, options.alias)


def _announce(stored: TaskResult, task: AnyTask, alias: str, sender: type[Any]) -> Any:
    def send() -> None:
        notify("threadmill_task_enqueued", record=stored)
        task_enqueued.send(sender, task_result=django_result(stored, task, alias))

    return send


def problem(options: BackendOptions) -> str | None:
    """Why ``"database"`` cannot work with the URL, or None (see the module doc); connects to
    nothing."""
    alias = options.database
    if alias is None:
        return None
    place = where(options.alias, "database")
    if options.enqueue_on_commit:
        return (
            f"{place} and {where(options.alias, 'enqueue_on_commit')} exclude each other: "
            "a task is either written in the transaction or stored after it"
        )
    try:
        connection = connections[alias]
    except ConnectionDoesNotExist:
        return f"{place} names {alias!r}, which is not a connection in DATABASES"
    if connection.vendor != "postgresql":
        return (
            f"{place} names {alias!r}, a {connection.vendor} connection: a task can be "
            "written in a Django transaction only on PostgreSQL"
        )
    from django.db.backends.postgresql.psycopg_any import is_psycopg3

    if not is_psycopg3:
        return f"{place}: Django's connection {alias!r} uses psycopg2; install psycopg 3"
    if options.scheme not in ("postgresql", "postgres"):
        return (
            f"{place} is set, but {where(options.alias, 'url')} is {options.scheme}://: "
            "tasks are written in a Django transaction only on postgresql://"
        )
    ours = _threadmill_target(options.url)
    if isinstance(ours, str):
        return f"{where(options.alias, 'url')}: {ours}"
    theirs = _django_target(connection.settings_dict)
    if ours != theirs:
        return (
            f"{place} names {alias!r}, which is database {theirs[2]!r} at "
            f"{theirs[0] or 'localhost'}:{theirs[1]}, but the url is database {ours[2]!r} "
            f"at {ours[0] or 'localhost'}:{ours[1]}: a task can be written only in a "
            "transaction on the database threadmill uses"
        )
    return None


Target = tuple[str, str, str]


def _host(host: object) -> str:
    text = str(host or "")
    return "" if text in LOOPBACK or text.startswith("/") else text.lower()


def _threadmill_target(url: str) -> Target | str:
    """Host, port and database the threadmill URL leads to, or why it cannot be read."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    from threadmill_core.errors import InvalidOption
    from threadmill_postgres.options import split_url

    try:
        _ours, conninfo = split_url(url, {})
        given = conninfo_to_dict(conninfo)
    except (InvalidOption, psycopg.Error, ValueError) as exc:
        return str(exc)
    host = given.get("host") or given.get("hostaddr")
    return _host(host), str(given.get("port") or 5432), str(given.get("dbname") or "")


def _django_target(settings: dict[str, Any]) -> Target:
    return _host(settings.get("HOST")), str(settings.get("PORT") or 5432), str(settings["NAME"])
