"""The examples of docs/django.md run as written."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "django.md"


def section_code(heading: str) -> str:
    """The first python block under `heading` in docs/django.md."""
    text = DOC.read_text()
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    found = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert found is not None, f"no python block under {heading!r}"
    return found.group(1)


def test_the_testing_example_runs() -> None:
    """'Testing your tasks': its module defines a task and a test, and the test passes."""
    name = "tests.django.docs_testing_example"
    module = types.ModuleType(name)
    sys.modules[name] = module
    try:
        exec(compile(section_code("Testing your tasks"), str(DOC), "exec"), module.__dict__)
        module.test_upload_is_retried()
    finally:
        del sys.modules[name]
