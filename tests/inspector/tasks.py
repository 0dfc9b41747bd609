"""Tasks the inspector tests run, so that failures carry real tracebacks."""

from __future__ import annotations

from threadmill_core import task


@task(queue="emails")
def send_email(to: str) -> str:
    return f"sent to {to}"


@task(queue="reports")
def parse_report(text: str) -> int:
    """Fail for anything that is not a number, with a ValueError (and no retries)."""
    return int(text)
