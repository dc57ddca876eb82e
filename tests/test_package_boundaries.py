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


def _runtime_imports(tree: ast.AST) -> list[ast.ImportFrom | ast.Import]:
    """Every import statement of a module, at any depth (a late import in a
    function is still an edge), except those under ``if TYPE_CHECKING:``."""
    found: list[ast.ImportFrom | ast.Import] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for orelse in child.orelse:
                    visit(orelse)
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                found.append(child)
            visit(child)

    visit(tree)
    return found


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph() -> dict[str, set[str]]:
    """Module -> the laytune modules it imports at run time (a name imported
    from a package counts as its submodule when it is one)."""
    modules = {_module_name(p): p for p in ROOT.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges: set[str] = set()
        for node in _runtime_imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                if node.level or not (node.module or "").startswith("laytune"):
                    continue
                named = {f"{node.module}.{a.name}" for a in node.names}
                edges |= named
                if not named <= modules.keys():  # a name of the package itself, not a submodule
                    edges.add(node.module)  # type: ignore[arg-type]
            else:
                edges |= {a.name for a in node.names}
        graph[name] = {e for e in edges if e in modules and e != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle_in_the_package() -> None:
    """No module imports, at any depth, one that imports it back: a cycle
    held apart by a late import is still a cycle (imports for annotations
    only, under TYPE_CHECKING, are not edges)."""
    assert _cycles(_import_graph()) == []


def test_the_cycle_check_sees_late_imports_and_skips_annotations() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]
    tree = ast.parse(
        "import laytune.x\n"
        "if TYPE_CHECKING:\n    from laytune.y import Y\n"
        "def f():\n    from laytune.z import Z\n"
    )
    assert [ast.unparse(n) for n in _runtime_imports(tree)] == [
        "import laytune.x",
        "from laytune.z import Z",
    ]
