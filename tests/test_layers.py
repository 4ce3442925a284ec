"""The layers of docs/design.md, read from the sources: which module may
import which."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

import aioring

# What the sources import does not depend on the backend: checked once.
pytestmark = pytest.mark.backends("io_uring")

ROOT = Path(aioring.__file__).parent
BINDING_C = "aioring._liburing"


def _source(name: str) -> Path | None:
    path = ROOT.joinpath(*name.split(".")[1:])
    for candidate in (path / "__init__.py", path.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def _modules() -> Iterator[str]:
    """Every module of the package written in Python, by its dotted name."""
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        yield ".".join(("aioring", *parts))


def _imports(name: str) -> set[str]:
    """What module `name` of the package imports (see _imports_of)."""
    path = _source(name)
    assert path is not None, name
    return _imports_of(path, name if path.name == "__init__.py" else name.rpartition(".")[0])


def _imports_of(path: Path, package: str) -> set[str]:
    """What the source at `path`, a module of `package`, imports, at any level
    of its code: each imported module, and each name taken from one as if it
    were a module (``from . import _liburing`` imports aioring._liburing),
    relative imports resolved; and the constant names given to
    importlib.import_module or __import__."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            base = ".".join(part for part in (base, node.module) if part)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if called in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                found.add(node.args[0].value)
    return found


def _reaches_binding_c(imports: set[str]) -> bool:
    return any(name == BINDING_C or name.startswith(BINDING_C + ".") for name in imports)


def _package_imports(module: str) -> set[str]:
    """The aioring modules written in Python that `module` imports, and
    theirs, transitively: its own dependencies, so the package's __init__
    (which any submodule's import runs first) is left out."""
    seen: set[str] = set()
    todo = [module]
    while todo:
        name = todo.pop()
        if name in seen or name == "aioring" or _source(name) is None:
            continue
        seen.add(name)
        todo.extend(_imports(name))
    return seen - {module}


def test_only_the_binding_imports_its_c_module():
    """ffi and lib stay in the binding: of the package's modules only
    aioring._binding imports aioring._liburing."""
    importers = {name for name in _modules() if _reaches_binding_c(_imports(name))}
    assert importers == {"aioring._binding"}, "import from aioring._binding instead"


@pytest.mark.parametrize("package, source, reaches", [
    ("aioring", "from ._liburing import ffi, lib", True),
    ("aioring", "from . import _core, _liburing", True),
    ("aioring.shutil", "def f():\n    from .. import _liburing as c", True),
    ("aioring.shutil", "from .._liburing.lib import aior_setup", True),
    ("aioring", "import aioring._liburing", True),
    ("aioring", "from aioring._liburing import lib", True),
    ("aioring", "importlib.import_module('aioring._liburing')", True),
    ("aioring", "from ._binding import prep_rw", False),
    ("aioring.shutil", "from ._liburing import lib", False),  # (aioring.shutil._liburing)
])
def test_every_spelling_of_the_import_is_seen(tmp_path, package, source, reaches):
    path = tmp_path / "module.py"
    path.write_text(source + "\n", encoding="utf-8")
    assert _reaches_binding_c(_imports_of(path, package)) is reaches


def test_neither_backend_imports_the_other():
    """The io_uring ring and the threads backend are two implementations of
    one interface: neither module reaches the other, however indirectly (the
    registry in _loops picks one)."""
    ring = _package_imports("aioring._ring")
    threads = _package_imports("aioring._threads")
    assert "aioring._threads" not in ring, sorted(ring)
    assert "aioring._ring" not in threads, sorted(threads)
    assert {"aioring._ringbase", "aioring._workers"} <= ring & threads
    assert {"aioring._ring", "aioring._threads"} <= _package_imports("aioring._loops")
