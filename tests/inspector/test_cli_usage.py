"""The command line's manners, run as a user runs it (the console script, in a subprocess):
help, version, closed pipes, and an unreachable server."""

from __future__ import annotations

import subprocess
import sys
import time
from importlib.metadata import version
from pathlib import Path

from tests.conftest import free_port

#: The console script pip installed beside this interpreter: what a user types.
THREADMILL = str(Path(sys.executable).with_name("threadmill"))


def threadmill(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [THREADMILL, *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_bare_threadmill_prints_the_help_and_exits_2() -> None:
    """No command is a usage error (exit 2, as argparse's), answered with the whole help."""
    ran = threadmill()
    assert ran.returncode == 2
    assert ran.stdout == ""
    assert ran.stderr.startswith("usage: threadmill")
    assert "worker    run worker processes and the maintenance loop" in ran.stderr
    assert "'threadmill COMMAND --help' shows a command's options" in ran.stderr


def test_version_prints_the_installed_version() -> None:
    """--version prints the installed distribution's version and exits 0."""
    ran = threadmill("--version")
    assert (ran.returncode, ran.stdout, ran.stderr) == (
        0,
        f"threadmill {version('threadmill')}\n",
        "",
    )


def test_a_reader_that_goes_away_gets_no_traceback() -> None:
    """`threadmill ... | head -1`: once the reader closes the pipe, the command exits quietly."""
    process = subprocess.Popen(
        [THREADMILL, "stats", "--watch", "--json", "--interval", "0.01", "--broker", "memory://"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    assert process.stderr is not None
    assert process.stdout.readline().startswith('{"taken_at"')
    process.stdout.close()  # what head does after its line
    _, err = process.communicate(timeout=60)
    assert err == ""
    assert process.returncode == 1


def test_an_unreachable_redis_is_named_with_the_cause_and_the_operation() -> None:
    """The error says where Redis was looked for (no credentials), why it failed, and when."""
    port = free_port()
    ran = threadmill("stats", "--broker", f"redis://:hunter2@127.0.0.1:{port}/0")
    assert ran.returncode == 2
    assert ran.stderr == (
        f"threadmill: Redis unavailable at redis://127.0.0.1:{port}/0 (connection refused) "
        "during the clock read (TIME)\n"
    )


def test_a_worker_that_cannot_reach_redis_says_where_it_is_trying(tmp_path: Path) -> None:
    """While it retries, the worker's log names the backend's URL, credentials hidden."""
    (tmp_path / "nothing_here.py").write_text(
        "from threadmill_core import task\n\n@task\ndef f(): ...\n"
    )
    port = free_port()
    process = subprocess.Popen(
        [THREADMILL, "worker", "nothing_here", "-p", "1", "--broker",
         f"redis://:hunter2@127.0.0.1:{port}/0"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    assert process.stdout is not None
    lines = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        lines.append(line)
        if "retrying with backoff" in line or not line:
            break
    process.terminate()
    rest, _ = process.communicate(timeout=60)
    out = "".join(lines) + rest
    assert f"backend redis://:***@127.0.0.1:{port}/0" in lines[0], out
    assert f"Redis unavailable at redis://127.0.0.1:{port}/0 (connection refused)" in lines[-1], out
    assert "hunter2" not in out
