"""What the inspecting commands exit with, and the table their ``--help`` ends with.

A module of its own, outside `threadmill_core.cli.inspector`, so that building the
command line (`threadmill_core.cli.arguments`) does not import the inspector:
``threadmill worker`` never uses it. `threadmill_core.cli.inspector` re-exports both.
"""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    """What the inspecting commands exit with; `threadmill --help` prints this table."""

    #: Everything asked was done (an empty request, such as requeuing no failed tasks, included).
    DONE = 0
    #: Some of it was done and some refused; each refusal is reported.
    PARTLY_DONE = 1
    #: Bad usage, or the backend could not be used (unknown scheme, unreachable).
    ERROR = 2
    #: Nothing was done: everything was refused, the task is unknown or unreadable,
    #: a purge was not confirmed, or `ls` named a queue that holds no task at all.
    NOTHING_DONE = 3


EXIT_CODES_HELP = """exit codes:
  0  everything asked was done
  1  partly done: some of it was refused (each refusal is reported)
  2  bad usage, or the backend could not be used
  3  nothing was done: all refused, an unknown or unreadable task, a purge not confirmed,
     or (ls) a queue that holds no task in any segment"""
