"""laytune reaches optuna through its public API only: a private attribute of a
study, a trial or a storage (``study._storage``, ``trial._trial_id``) can
change in any optuna release without notice."""

from __future__ import annotations

import ast
from pathlib import Path

import laytune

PACKAGE = Path(laytune.__file__).parent

#: names laytune gives optuna's objects
OPTUNA_OBJECTS = {"study", "trial", "frozen", "storage", "sampler"}


def _holder(node: ast.expr) -> str | None:
    """The last name of the object ``node`` reads from: ``job.study`` -> study."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def test_no_private_attribute_of_an_optuna_object_is_read() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Attribute):
                continue
            private = node.attr.startswith("_") and not node.attr.startswith("__")
            if private and _holder(node.value) in OPTUNA_OBJECTS:
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} .{node.attr}")
    assert found == []
