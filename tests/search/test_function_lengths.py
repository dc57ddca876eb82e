"""``tune`` reads at once: it and every function of ``laytune.search`` it
calls, directly or through another, are under 80 lines (issue 25, item 2)."""

from __future__ import annotations

import ast
from pathlib import Path

import laytune.search

SEARCH = Path(laytune.search.__file__).parent
LIMIT = 80


def _definitions(sources: dict[str, str]) -> dict[str, list[tuple[str, ast.AST]]]:
    """Every function and method, by its bare name, with the file it is in."""
    found: dict[str, list[tuple[str, ast.AST]]] = {}
    for path, source in sources.items():
        for node in ast.walk(ast.parse(source, path)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.setdefault(node.name, []).append((path, node))
    return found


def _named(node: ast.AST) -> set[str]:
    """The names a function's body calls or passes on (``f(...)``,
    ``obj.f(...)``, ``map(f, ...)``)."""
    names = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            names.add(n.id)
        elif isinstance(n, ast.Attribute):
            names.add(n.attr)
    return names


def _reached_lengths(sources: dict[str, str], start: str) -> dict[str, int]:
    """``path:line name`` -> length in lines (docstring included) of
    ``start`` and of every function it reaches. A name stands for every
    function of that name, so the walk errs towards measuring more."""
    definitions = _definitions(sources)
    seen: set[str] = set()
    todo = [start]
    lengths = {}
    while todo:
        name = todo.pop()
        if name in seen or name not in definitions:
            continue
        seen.add(name)
        for path, node in definitions[name]:
            assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            lengths[f"{path}:{node.lineno} {name}"] = node.end_lineno - node.lineno + 1  # type: ignore[operator]
            todo += _named(node)
    return lengths


def test_tune_and_every_function_it_calls_are_under_80_lines() -> None:
    sources = {p.name: p.read_text() for p in sorted(SEARCH.glob("*.py"))}
    lengths = _reached_lengths(sources, "tune")
    assert len(lengths) > 10  # the walk reaches the scheduler, the step and the helpers
    assert {k: n for k, n in lengths.items() if n >= LIMIT} == {}


def test_the_walk_follows_calls_methods_and_passed_functions() -> None:
    long_body = "\n".join(f"    x{k} = {k}" for k in range(LIMIT))
    source = (
        "def tune():\n    helper()\n    Thing().step()\n"
        "def helper():\n    return list(map(passed, []))\n"
        "class Thing:\n    def step(self):\n        pass\n"
        f"def passed(x):\n{long_body}\n"
        f"def unrelated():\n{long_body}\n"
    )
    lengths = _reached_lengths({"m.py": source}, "tune")
    assert sorted(k.split(" ")[1] for k in lengths) == ["helper", "passed", "step", "tune"]
    assert lengths["m.py:9 passed"] == LIMIT + 1
