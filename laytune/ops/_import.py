"""A user's own module of operators, imported by name or by path.

``laytune --import MODULE`` (and ``LAYTUNE_IMPORT``) import such a module
before a command runs: the constructors it registers with
:func:`laytune.ops.register` and the workloads it defines with
:meth:`Workload.define` then resolve from their keys like the library's
(:func:`laytune.ops.from_key`), so tuning, records, freezing, exporting with
reference data and figures know them.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import sys
from pathlib import Path
from types import ModuleType

from laytune.exceptions import ModuleImportError

__all__ = ["import_workloads"]

_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def import_workloads(module: str) -> ModuleType:
    """Import ``module``: a dotted module name, importable from the current
    directory (which joins ``sys.path`` as ``python -m`` would put it), or
    the path of a ``.py`` file (imported under its file name, its folder
    joining ``sys.path`` as ``python file.py`` would put it, so that it
    imports its neighbours).

    A module imported already is not run again. Raises
    :class:`ModuleImportError` naming the module and the error when it
    cannot be found or its code raises (a syntax error, a constructor that
    :func:`laytune.ops.register` refuses, ...).
    """
    text = module.strip()
    if text.endswith(".py") or os.sep in text or "/" in text:
        return _import_file(module, Path(text))
    if not _DOTTED.match(text):
        raise ModuleImportError(
            f"cannot import {module!r}: not a module name (such as my_ops or pkg.my_ops) "
            "nor the path of a .py file"
        )
    _on_path(Path.cwd())
    importlib.invalidate_caches()  # a module written since the interpreter started
    try:
        return importlib.import_module(text)
    except (Exception, SystemExit) as err:
        raise ModuleImportError(_failed(module, err)) from err


def _import_file(module: str, path: Path) -> ModuleType:
    if not path.is_file():
        raise ModuleImportError(f"cannot import {module!r}: no such file")
    path = path.resolve()
    name = path.stem
    loaded = sys.modules.get(name)
    if loaded is not None:
        where = getattr(loaded, "__file__", None)
        if where is not None and Path(where).resolve() == path:
            return loaded
        raise ModuleImportError(
            f"cannot import {module!r}: a module named {name!r} is imported already "
            f"(from {where or 'the interpreter'}); rename the file"
        )
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ModuleImportError(f"cannot import {module!r}: not a Python source file")
    loaded = importlib.util.module_from_spec(spec)
    _on_path(path.parent)
    sys.modules[name] = loaded  # before it runs, as an import would: dataclasses look it up
    try:
        spec.loader.exec_module(loaded)
    except (Exception, SystemExit) as err:
        sys.modules.pop(name, None)
        raise ModuleImportError(_failed(module, err)) from err
    return loaded


def _on_path(folder: Path) -> None:
    """``folder`` first on ``sys.path`` unless it is there already."""
    resolved = folder.resolve()
    for entry in sys.path:
        try:
            if Path(entry or os.curdir).resolve() == resolved:
                return
        except OSError:
            continue
    sys.path.insert(0, str(resolved))


def _failed(module: str, err: BaseException) -> str:
    """One line: the module, the kind of error and its message."""
    message = " ".join(str(err).split())
    kind = type(err).__name__
    return (
        f"cannot import {module!r}: {kind}: {message}"
        if message
        else f"cannot import {module!r}: {kind}"
    )
