"""The examples of README.md and docs/*.md, run as tests (Sybil).

Every fenced ``python`` and ``sh`` block of those files is a test, run in
order, a document's blocks sharing one namespace and one working directory
(a fresh temporary one). A block that cannot run says so in the markdown,
just above it, with the reason: ``<!-- skip: next "needs a Redis Cluster" -->``
(Sybil's skip directive, shown as the test's skip reason).

How a block runs:

- **Python** is executed in the document's namespace, whose ``__name__`` is
  a module name of its own, so ``@task`` functions defined in a block are
  module-level tasks. Its ``test_*`` functions are then called, as pytest
  would, so a block that shows a test runs that test.
- **A Python file**: a block whose first line is a comment naming a
  relative path, ``# myapp/tasks.py``, is written there in the working
  directory (which is on ``sys.path`` while the document runs) and
  imported, its ``test_*`` functions called; later blocks import from it as
  a user's code would.
- **Shell** runs under ``bash -e -o pipefail`` in the working directory,
  with this interpreter's scripts (``threadmill``, ``python``) first on
  ``PATH``, and must exit 0 within `SHELL_TIMEOUT`. Output is not compared:
  log lines and tables are free to change.
- ``<!-- run: background -->`` above a shell block of one command starts
  it in the background and leaves it running (a worker, say) until the
  document ends; it must still be up then, and exit 0 on SIGTERM (sent to
  it, as ``kill PID`` does).
- ``<!-- run: in-clone -->`` runs the next shell block in a copy of this
  repository's files (as a fresh clone), for commands such as ``pip install .``.

The documents' Redis URL, ``redis://localhost:6379/0``, is rewritten to a
redis-server of the test session's own (`DocsRedis`), in Python and shell
blocks alike, so the examples read as a user would type them. Examples
about the API itself use ``memory://``.

docs/django.md needs Django 6 (Python 3.12+): where Django is not
installed its examples skip saying so; .ci/run runs them in its Django
venvs. There the document's blocks see Django configured with the TASKS
alias its settings example shows, on ``memory://``, and ``DJANGO_6_1``
for the skip directives of examples that need Django 6.1.
"""

from __future__ import annotations

import importlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import unittest
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sybil import Document, Example, Region, Sybil
from sybil.parsers.markdown import CodeBlockParser, SkipParser
from sybil.parsers.markdown.lexers import DirectiveInHTMLCommentLexer

if TYPE_CHECKING:
    from tests.conftest import RedisServer

ROOT = Path(__file__).resolve().parents[2]
#: The documents whose examples are tests, relative to `ROOT`.
PATTERNS = ["README.md", "docs/*.md"]
#: The Redis URL the documents use; the tests substitute their own server's.
DOCUMENTED_REDIS_URL = "redis://localhost:6379/0"
#: How long a shell block may take (a fresh venv and `pip install .` included).
SHELL_TIMEOUT = 300.0
#: How long a background block must stay up after it starts, to count as started.
BACKGROUND_GRACE = 1.0
#: A Python block that is a file: its first line names a relative path.
FILE_COMMENT = re.compile(r"#\s*([A-Za-z_][\w/]*\.py)\s*\n")

# Keys of a document's namespace that the harness keeps (never an example's names).
WORKDIR = "__docs_workdir__"
PENDING_RUN = "__docs_next_run__"
BACKGROUND = "__docs_background__"
SKIP_REASON = "__docs_skip_reason__"
DOCUMENT = "__docs_document__"
REDIS = "docs_redis"


class DocsRedis:
    """A redis-server for the documents' examples, started when one first needs it."""

    def __init__(self) -> None:
        self._server: RedisServer | None = None

    @property
    def url(self) -> str:
        if self._server is None:
            from tests.conftest import RedisServer  # skips (fails in CI) without redis-server

            self._server = RedisServer()
        return self._server.url

    def flush(self) -> None:
        """Forget what the last document stored, so each starts on an empty server."""
        if self._server is not None:
            import redis

            with redis.Redis.from_url(self._server.url) as client:
                client.flushall()

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None


def localize(text: str, namespace: dict[str, Any]) -> str:
    """`text` with the documented Redis URL pointing at the session's server."""
    if DOCUMENTED_REDIS_URL not in text:
        return text
    return text.replace(DOCUMENTED_REDIS_URL, namespace[REDIS].url)


def check_not_skipped(namespace: dict[str, Any]) -> None:
    reason = namespace.get(SKIP_REASON)
    if reason:
        raise unittest.SkipTest(reason)


def run_tests_defined(names: dict[str, Any], before: set[str]) -> None:
    """Call each ``test_*`` function that a block defined, as pytest would."""
    for name, value in list(names.items()):
        if name.startswith("test_") and name not in before and callable(value):
            value()


# --- Python --------------------------------------------------------------------------


def evaluate_python(example: Example) -> None:
    namespace = example.namespace
    check_not_skipped(namespace)
    source = str(example.parsed)
    file = FILE_COMMENT.match(source)
    if file is not None:
        evaluate_python_file(Path(file.group(1)), localize(source, namespace), namespace)
        return
    before = set(namespace)
    # Padded so that a traceback's line numbers are the document's.
    padded = "\n" * (example.line + example.parsed.line_offset) + localize(source, namespace)
    exec(compile(padded, example.path, "exec", dont_inherit=True), namespace)
    namespace.pop("__builtins__", None)
    run_tests_defined(namespace, before)


def evaluate_python_file(relative: Path, source: str, namespace: dict[str, Any]) -> None:
    """Write the block to its path in the working directory and import it."""
    path = Path(namespace[WORKDIR]) / relative
    path.parent.mkdir(parents=True, exist_ok=True)  # a namespace package needs no __init__.py
    path.write_text(source)
    name = ".".join(relative.with_suffix("").parts)
    top = sys.modules.get(name.partition(".")[0])
    if top is not None and not any(
        entry.startswith(namespace[WORKDIR]) for entry in getattr(top, "__path__", [])
    ):
        raise AssertionError(
            f"the block's file {relative} would be imported as {name!r}, which is this "
            "test session's own; skip the block or name another path"
        )
    sys.modules.pop(name, None)
    importlib.invalidate_caches()
    module = importlib.import_module(name)
    run_tests_defined(vars(module), set())


# --- shell ---------------------------------------------------------------------------


def shell_environment(workdir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("THREADMILL_URL", None)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def copy_of_repository(destination: Path) -> Path:
    """This repository's files (tracked and untracked, not ignored), as a fresh clone has them."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():
            target = destination / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return destination


def evaluate_shell(example: Example) -> None:
    namespace = example.namespace
    check_not_skipped(namespace)
    script = localize(str(example.parsed), namespace)
    mode = namespace.pop(PENDING_RUN, None)
    workdir = Path(namespace[WORKDIR])
    if mode == "in-clone":
        workdir = copy_of_repository(Path(tempfile.mkdtemp(prefix="threadmill-clone-")))
    command = ["bash", "-e", "-o", "pipefail", "-c", script]
    env = shell_environment(Path(namespace[WORKDIR]))
    if mode == "background":
        # One command, run by exec so that the SIGTERM at the end reaches it, not a shell.
        command[-1] = f"exec {script}"
        start_background(command, workdir, env, namespace, example)
        return
    try:
        done = subprocess.run(
            command,
            cwd=workdir,
            env=env,
            capture_output=True,
            text=True,
            timeout=SHELL_TIMEOUT,
            check=False,
        )
    finally:
        if mode == "in-clone":
            shutil.rmtree(workdir, ignore_errors=True)
    if done.returncode != 0:
        raise AssertionError(
            f"{example.path}:{example.line}: the shell block exited {done.returncode}\n"
            f"--- stdout\n{done.stdout}--- stderr\n{done.stderr}"
        )


def start_background(
    command: list[str],
    workdir: Path,
    env: dict[str, str],
    namespace: dict[str, Any],
    example: Example,
) -> None:
    # Closed by stop_background, when the document ends.
    log = tempfile.TemporaryFile()  # noqa: SIM115 - it outlives this function
    process = subprocess.Popen(
        command, cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    namespace.setdefault(BACKGROUND, []).append((process, log, f"{example.path}:{example.line}"))
    try:
        process.wait(timeout=BACKGROUND_GRACE)
    except subprocess.TimeoutExpired:
        return  # up, as it should be
    log.seek(0)
    raise AssertionError(
        f"{example.path}:{example.line}: the background block exited {process.returncode} "
        f"at once\n{log.read().decode(errors='replace')}"
    )


def stop_background(namespace: dict[str, Any]) -> list[str]:
    """SIGTERM every background block of the document; the complaints of those that failed."""
    complaints = []
    for process, log, where in namespace.pop(BACKGROUND, []):
        running = process.poll() is None
        if running:
            process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            code = process.wait()
        if not running or code != 0:
            log.seek(0)
            state = "stopped by itself" if not running else "did not stop cleanly"
            complaints.append(
                f"{where}: the background block {state} (exit {code})\n"
                + log.read().decode(errors="replace")
            )
        log.close()
    return complaints


# --- the directives ------------------------------------------------------------------


class RunParser:
    """``<!-- run: background -->``, ``<!-- run: in-clone -->``: how the next shell block runs."""

    MODES = ("background", "in-clone")

    def __init__(self) -> None:
        self.lexer = DirectiveInHTMLCommentLexer(directive="run", arguments=r"[\w-]+")

    def __call__(self, document: Document) -> Iterable[Region]:
        for lexed in self.lexer(document):
            mode = lexed.lexemes["arguments"]
            if mode not in self.MODES:
                raise ValueError(f"{document.path}: unknown run mode {mode!r}; use {self.MODES}")
            yield Region(lexed.start, lexed.end, mode, self.evaluate)

    @staticmethod
    def evaluate(example: Example) -> None:
        example.namespace[PENDING_RUN] = example.parsed


# --- a document's setup and teardown -------------------------------------------------


def django_missing() -> str | None:
    from tests.django import django_missing

    missing: str | None = django_missing()
    return missing


def setup(namespace: dict[str, Any]) -> None:
    document = Path(namespace[DOCUMENT])
    workdir = tempfile.mkdtemp(prefix="threadmill-docs-")
    namespace[WORKDIR] = workdir
    namespace["__name__"] = "docs_example_" + re.sub(r"\W", "_", document.stem)
    sys.path.insert(0, workdir)
    if document.name == "django.md":
        missing = django_missing()
        # For the skip directives of the examples that need Django 6.1's decorator.
        namespace["DJANGO_6_1"] = False
        if missing is not None:
            namespace[SKIP_REASON] = f"{missing}; .ci/run runs docs/django.md in its Django venvs"
        else:
            namespace["__docs_django__"] = configure_django()
            import django

            namespace["DJANGO_6_1"] = django.VERSION >= (6, 1)


def configure_django() -> Any:
    """Django set up with the settings example's TASKS alias, on memory:// (undone by teardown)."""
    import django
    from django.conf import settings
    from django.test.utils import override_settings

    if not settings.configured:
        settings.configure(
            SECRET_KEY="threadmill-docs",
            USE_TZ=True,
            INSTALLED_APPS=["threadmill_django"],
            DATABASES={},
        )
        django.setup()
    override = override_settings(
        TASKS={
            "default": {
                "BACKEND": "threadmill_django.TaskBackend",
                "QUEUES": ["default", "emails"],
                "OPTIONS": {"url": "memory://"},
            }
        },
        SILENCED_SYSTEM_CHECKS=["threadmill_django.W001"],
    )
    override.enable()
    return override


def teardown(namespace: dict[str, Any]) -> None:
    from threadmill_core.task import registered_tasks, unregister_task

    complaints = stop_background(namespace)
    workdir = namespace[WORKDIR]
    if workdir in sys.path:
        sys.path.remove(workdir)
    module_names = {namespace["__name__"]}
    for name, module in list(sys.modules.items()):
        if (getattr(module, "__file__", None) or "").startswith(workdir):
            module_names.add(name)
            del sys.modules[name]
    for path in registered_tasks():
        if path.partition(":")[0] in module_names:
            unregister_task(path)
    if "__docs_django__" in namespace:
        namespace["__docs_django__"].disable()
    if REDIS in namespace:
        namespace[REDIS].flush()
    shutil.rmtree(workdir, ignore_errors=True)
    if complaints:
        raise AssertionError("\n\n".join(complaints))


def documents(path: Path = ROOT, patterns: list[str] = PATTERNS) -> Sybil:
    """The Sybil that collects every example of `patterns` under `path`."""
    return Sybil(
        parsers=[
            SkipParser(),
            RunParser(),
            DocumentPath(),
            CodeBlockParser("python", evaluate_python),
            CodeBlockParser("sh", evaluate_shell),
        ],
        path=str(path),
        patterns=patterns,
        setup=setup,
        teardown=teardown,
        fixtures=[REDIS],
    )


class DocumentPath:
    """Not a parser of examples: it tells `setup` which document the namespace is for."""

    def __call__(self, document: Document) -> Iterator[Region]:
        document.namespace[DOCUMENT] = document.path
        return iter(())
