"""The ``threadmill`` command line: parsing, the commands, the demo, the TUI and the inspector.

The entry point is `main` (``threadmill = "threadmill_core.cli:main"``, and
``python -m threadmill_core.cli``). The modules, by job: `commands` (what each
command does), `arguments` (parsing) and `exit_codes`; `demo`; the
inspecting commands' logic in `inspector` (shared with the TUI and the
Django admin), ``threadmill schedules`` in `schedules` and ``threadmill
workers`` in `workers`; the terminal UI in `tui`, `tui_schedules` and
`tui_workers`.

This is the outermost layer: it may import the worker runtime
(`threadmill_core.worker`) and the protocol; neither imports it
(tests/core/test_layers.py).
"""

from threadmill_core.cli.commands import main

__all__ = ["main"]
