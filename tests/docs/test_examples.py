"""The documents' examples are collected and run: a rotten one fails, a marked one skips."""

from __future__ import annotations

import re
import unittest
from pathlib import Path

import pytest
from sybil import Document

from tests.docs.examples import (
    PATTERNS,
    ROOT,
    documents,
    evaluate_python,
    evaluate_shell,
    setup,
    teardown,
)

FENCE = re.compile(r"^[ \t]*```(\S*)", re.MULTILINE)
SKIP = re.compile(r"<!--\s*skip:\s*(\w+)(.*?)-->", re.DOTALL)
DOCUMENTS = sorted(path for pattern in PATTERNS for path in ROOT.glob(pattern))


def opening_fences(text: str) -> list[str]:
    """The language of each fenced block's opening line, in order ('' for none)."""
    return FENCE.findall(text)[::2]


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda path: str(path.relative_to(ROOT)))
def test_every_python_and_shell_block_is_an_example(path: Path) -> None:
    """Each fenced block names its language, and each python or sh one is collected."""
    text = path.read_text()
    languages = opening_fences(text)
    assert "" not in languages, f"{path.name}: a fenced block without a language"
    document = documents().parse(path)
    fenced = [
        example
        for example in document.examples()
        if example.region.evaluator in (evaluate_python, evaluate_shell)
        and text[example.region.start :].lstrip().startswith("```")
    ]
    wanted = sum(language in {"python", "sh"} for language in languages)
    assert len(fenced) == wanted, f"{path.name}: {len(fenced)} of {wanted} blocks collected"


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda path: str(path.relative_to(ROOT)))
def test_every_skip_says_why(path: Path) -> None:
    """A ``<!-- skip: next -->`` carries its reason."""
    for action, arguments in SKIP.findall(path.read_text()):
        assert action == "next", f"{path.name}: use one 'skip: next' per block"
        assert re.search(r"[\"'].+[\"']", arguments), f"{path.name}: a skip without a reason"


def run_document(tmp_path: Path, text: str) -> list[BaseException | None]:
    """Each example's outcome (None for success), as the collection runs them."""
    (tmp_path / "doc.md").write_text(text)
    document: Document = documents(tmp_path, ["doc.md"]).parse(tmp_path / "doc.md")
    setup(document.namespace)
    outcomes: list[BaseException | None] = []
    try:
        for example in document.examples():
            try:
                example.evaluate()
            except (Exception, unittest.SkipTest) as exc:
                outcomes.append(exc)
            else:
                outcomes.append(None)
    finally:
        teardown(document.namespace)
    return outcomes


GOOD = """\
```python
# pkg/tasks.py
from threadmill_core import task


@task
def double(x: int) -> int:
    return 2 * x
```

```python
from pkg.tasks import double
from threadmill_core import Broker, Worker
from threadmill_memory import MemoryBackend

broker = Broker(MemoryBackend())
record = double.using(broker=broker).enqueue(21)
Worker(broker).run(burst=True)
assert broker.get_result(record.id).return_value == 42
```

```sh
test -f pkg/tasks.py && threadmill backends
```
"""


def test_examples_that_work_pass(tmp_path: Path) -> None:
    """A file block is importable by later blocks, and shell runs beside it."""
    assert run_document(tmp_path, GOOD) == [None, None, None]


@pytest.mark.parametrize(
    ("block", "error"),
    [
        ("```python\nsend_welcome(42)\n```\n", NameError),
        ("```python\ndef test_it():\n    assert 1 == 2\n```\n", AssertionError),
        ("```python\n# pkg/broken.py\nimport no_such_module\n```\n", ImportError),
        ("```sh\nthreadmill no-such-command\n```\n", AssertionError),
    ],
    ids=["undefined name", "a test it defines", "a file that does not import", "a shell error"],
)
def test_a_rotten_example_fails(tmp_path: Path, block: str, error: type[Exception]) -> None:
    """An undefined name, a failing test, an unimportable file or a failing command fail."""
    (outcome,) = run_document(tmp_path, block)
    assert isinstance(outcome, error)


def test_a_marked_example_skips_with_its_reason(tmp_path: Path) -> None:
    """``<!-- skip: next "why" -->`` skips the next block only, saying why."""
    text = '<!-- skip: next "long-running" -->\n```sh\nexit 1\n```\n\n```sh\ntrue\n```\n'
    _, skipped, ran = run_document(tmp_path, text)
    assert isinstance(skipped, unittest.SkipTest)
    assert str(skipped) == "long-running"
    assert ran is None
