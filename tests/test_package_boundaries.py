"""No laytune package reaches into another one's private modules or names:
each uses the public surface (``__all__``) of the others."""

from __future__ import annotations

import ast
from pathlib import Path

import laytune

ROOT = Path(laytune.__file__).parent


def _package(relative: str) -> str:
    parts = relative.split("/")
    return parts[0] if len(parts) > 1 else ""


def _private_imports(source: str, relative: str) -> list[str]:
    """``relative:line from module import ...`` for each import in ``source``
    (the file ``relative`` under the package root) of a private module or
    name of another laytune package."""
    own = _package(relative)
    found = []
    for node in ast.walk(ast.parse(source, relative)):
        if not isinstance(node, ast.ImportFrom) or not (node.module or "").startswith("laytune."):
            continue
        parts = node.module.split(".")  # type: ignore[union-attr]
        if parts[1] == own:
            continue
        private_module = any(p.startswith("_") for p in parts[2:])
        private_names = [a.name for a in node.names if a.name.startswith("_")]
        if private_module or private_names:
            found.append(f"{relative}:{node.lineno} from {node.module} import ...")
    return found


def test_no_package_imports_the_private_parts_of_another() -> None:
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        found += _private_imports(path.read_text(), path.relative_to(ROOT).as_posix())
    assert found == []


def test_the_check_sees_private_modules_and_names_but_not_its_own_package() -> None:
    source = (
        "from laytune.space._space import layout_keys\n"
        "from laytune.layout import _private\n"
        "from laytune.codegen._nest import Nest\n"
        "from laytune.ops import matmul\n"
    )
    found = _private_imports(source, "codegen/_lower.py")
    assert [line.split(" ", 1)[1] for line in found] == [
        "from laytune.space._space import ...",
        "from laytune.layout import ...",
    ]
