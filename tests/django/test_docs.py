"""The examples of docs/django.md run as written."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "django.md"


def section_code(heading: str) -> str:
    """The first python block under `heading` in docs/django.md."""
    text = DOC.read_text()
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    found = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert found is not None, f"no python block under {heading!r}"
    return found.group(1)


def run_as_module(code: str, name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    sys.modules[name] = module
    exec(compile(code, str(DOC), "exec"), module.__dict__)
    return module


def test_the_tasks_example_defines_tasks_with_threadmills_options() -> None:
    """'Tasks' (Django 6.1's decorator takes retry= and lease_ttl=): both tasks are ours."""
    import django

    from threadmill_django import Task

    if django.VERSION < (6, 1):
        pytest.skip("the example is Django 6.1's decorator; the text says so")
    from django.test import override_settings

    name = "tests.django.docs_tasks_example"
    # The QUEUES of the doc's settings example.
    alias = {"BACKEND": "threadmill_django.TaskBackend", "QUEUES": ["default", "emails"]}
    try:
        with override_settings(TASKS={"default": alias}):
            module = run_as_module(section_code("Tasks"), name)
    finally:
        sys.modules.pop(name, None)
    assert isinstance(module.charge, Task)
    assert module.charge.lease_ttl == 60
    assert module.charge.retry.max_retries == 5
    assert module.send_receipt.queue_name == "emails"


def test_the_testing_example_runs() -> None:
    """'Testing your tasks': its module defines a task and a test, and the test passes."""
    name = "tests.django.docs_testing_example"
    try:
        run_as_module(section_code("Testing your tasks"), name).test_upload_is_retried()
    finally:
        sys.modules.pop(name, None)
