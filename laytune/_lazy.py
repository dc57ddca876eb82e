"""Packages whose names are imported on first use (PEP 562).

A worker process imports what it unpickles: a build worker the function
that compiles and the program it compiles, a measuring worker the runner's
own modules. Were a package's ``__init__`` to import every module it
re-exports, each worker would import the whole pipeline (code generation,
the search space, loky), about a third of a second per worker start, and
every short job starts three. The ``laytune`` program's parser reads one
name of the search (its strategies) and took a second to print ``--help``.
So the pipeline's packages name their exports, module by module, in a
table, and :func:`lazy_exports` imports each on first use. The same
imports stand under ``TYPE_CHECKING`` for type checkers;
``tests/test_import_side_effects.py`` checks that the two agree.
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # not typing's: importing typing would slow every worker's start
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any


def lazy_exports(
    namespace: dict[str, Any], modules: dict[str, tuple[str, ...]]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of the package whose globals are
    ``namespace``: each name of ``modules[m]`` is module ``m``'s attribute of
    that name, imported when first read (``from package import name``
    included) and kept in the package."""
    package = namespace["__name__"]
    home = {name: module for module, names in modules.items() for name in names}

    def __getattr__(name: str) -> Any:
        module = home.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = namespace[name] = getattr(importlib.import_module(module), name)
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(home))

    return __getattr__, __dir__
