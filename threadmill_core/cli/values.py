"""The command line's value types: each turns one option's text into its value, or refuses
it with `argparse.ArgumentTypeError`, which argparse reports with the usage line and exit
code 2, before any backend is touched."""

from __future__ import annotations

import argparse

from threadmill_core.checks import MAX_COUNT, check_limit, check_offset
from threadmill_core.models import TaskResultStatus


def status(text: str) -> TaskResultStatus:
    try:
        return TaskResultStatus[text.upper()]
    except KeyError:
        names = ", ".join(s.value for s in TaskResultStatus)
        raise argparse.ArgumentTypeError(f"{text!r} is not a status; one of {names}") from None


def purgeable_status(text: str) -> TaskResultStatus:
    named = status(text)
    if named is TaskResultStatus.RUNNING:
        raise argparse.ArgumentTypeError(
            "RUNNING cannot be purged: a running task belongs to its lease holder "
            "(stop the workers, or let the reaper fail it, then purge FAILED)"
        )
    return named


def non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value


def limit(text: str) -> int:
    try:
        return check_limit(int(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be from 1 to {MAX_COUNT:,}, got {text}") from None


def offset(text: str) -> int:
    try:
        return check_offset(int(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be from 0 to {MAX_COUNT:,}, got {text}") from None


def positive_seconds(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    return value


def port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is a number from 1 to 65535, got {text!r}")
    return value


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {text}")
    return value
