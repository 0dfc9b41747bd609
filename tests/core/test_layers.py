"""The layers of threadmill_core: the protocol, the worker runtime, the command line.

The top level (the protocol and the producer's API) imports neither
`threadmill_core.worker` nor `threadmill_core.cli`; the runtime does not
import the CLI. Every import statement counts, wherever it is (a function's
lazy import too), except those listed in `ALLOWED` with their reason. The
imports are read with `ast` from the package's files, so the test needs
nothing imported and names the file, line and module of each offence.
"""

from __future__ import annotations

import ast
from pathlib import Path

import threadmill_core

PACKAGE = Path(threadmill_core.__file__).parent

# (importing module, imported module) -> why the layers allow it.
ALLOWED = {
    ("threadmill_core", "threadmill_core.worker"): (
        "the public re-export `from threadmill_core import Worker`"
    ),
    ("threadmill_core.hookspecs", "threadmill_core.worker"): (
        "a type-only import (TYPE_CHECKING): the hook threadmill_worker_ticked is given the Worker"
    ),
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def layer(module: str) -> str:
    """``"testing"``, ``"cli"``, ``"worker"`` or ``"protocol"`` (the top level)."""
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in ("testing", "cli", "worker"):
        return parts[1]
    return "protocol"


# What each layer may not import.
FORBIDDEN = {"protocol": {"worker", "cli"}, "worker": {"cli"}, "cli": set(), "testing": set()}


def imported_modules(path: Path, module: str) -> list[tuple[int, str]]:
    """Each threadmill_core module the file imports, with its line: ``from a import b``
    counts as ``a.b`` when ``b`` may be a submodule, so ``from threadmill_core import cli``
    is seen."""
    is_package = path.name == "__init__.py"
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                if not is_package:
                    base = base[:-1]
                base = base[: len(base) - (node.level - 1)]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            found.append((node.lineno, source))
            found += [(node.lineno, f"{source}.{alias.name}") for alias in node.names]
    return [(line, name) for line, name in found if name.split(".")[0] == "threadmill_core"]


def offences() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = module_name(path)
        importer = layer(module)
        for line, imported in imported_modules(path, module):
            target = ".".join(imported.split(".")[:2])
            if layer(target) not in FORBIDDEN[importer] or (module, target) in ALLOWED:
                continue
            found.append(
                f"{path.relative_to(PACKAGE.parent)}:{line}: {module} ({importer}) imports"
                f" {imported} ({layer(target)})"
            )
    return found


def test_layers_import_only_the_layers_beneath_them() -> None:
    found = offences()
    assert not found, "imports across the layers:\n" + "\n".join(found)


def test_the_check_sees_every_kind_of_import(tmp_path: Path) -> None:
    # The reader itself: absolute, from-package and relative imports are all seen.
    source = tmp_path / "example.py"
    source.write_text(
        "import threadmill_core.cli.tui\n"
        "from threadmill_core import worker\n"
        "def lazy():\n"
        "    from .cli import commands\n"
    )
    names = [name for _, name in imported_modules(source, "threadmill_core.example")]
    assert "threadmill_core.cli.tui" in names
    assert "threadmill_core.worker" in names
    assert "threadmill_core.cli.commands" in names


def test_every_allowed_import_is_still_made() -> None:
    # An exception that no longer happens is removed, so the list stays the truth.
    made = {
        (module_name(path), ".".join(imported.split(".")[:2]))
        for path in PACKAGE.rglob("*.py")
        for _, imported in imported_modules(path, module_name(path))
    }
    assert set(ALLOWED) <= made
