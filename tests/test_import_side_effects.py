"""Importing laytune's device-free stages touches neither the environment nor
the file system: OpenCL runtimes are registered when a device is first needed."""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import os
import subprocess
import sys
import textwrap

import pytest

# Runs in a fresh interpreter (-B: no bytecode files): records every audit
# event that writes a file or makes, moves or removes a path while the module
# is imported, and compares os.environ before and after (numpy sets and unsets
# a variable of its own while importing, so events alone would not do).
_PROBE = textwrap.dedent(
    """
    import json, os, sys

    WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
    CHANGES = {"os.mkdir", "os.remove", "os.rename", "os.rmdir", "os.symlink", "os.link",
               "os.truncate", "os.chmod", "os.chown", "os.utime", "shutil.rmtree"}
    seen = []

    def hook(event, args):
        if event == "open":
            path, mode, flags = args
            writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & WRITE_FLAGS
            )
            if writes and path is not None:
                seen.append(f"open {path} {mode!r}")
        elif event in CHANGES:
            seen.append(f"{event} {args[0]!r}")

    before = dict(os.environ)
    sys.addaudithook(hook)
    module = __import__(sys.argv[1], fromlist=["_"])
    if sys.argv[1] != "laytune":  # a stage's names, which it imports on first use
        for name in module.__all__:
            getattr(module, name)
    changed = sorted(k for k in set(before) | set(os.environ) if before.get(k) != os.environ.get(k))
    print(json.dumps({"events": seen, "environ": changed}))
    """
)


@pytest.mark.parametrize(
    "module", ["laytune", "laytune.layout", "laytune.ops", "laytune.space", "laytune.codegen"]
)
def test_importing_a_device_free_stage_changes_nothing(module: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "OCL_ICD_VENDORS"}
    done = subprocess.run(
        [sys.executable, "-B", "-c", _PROBE, module],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found == {"events": [], "environ": []}


LAZY_PACKAGES = ["laytune", "laytune.runners", "laytune.codegen", "laytune.space"]
LAZY_PACKAGES += ["laytune.search", "laytune.plan"]


def _printed(code: str) -> str:
    """What ``code`` prints, run by a fresh interpreter."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return done.stdout.strip()


def test_a_worker_imports_what_it_runs_not_the_pipeline() -> None:
    """A build or measuring worker imports its own modules and the classes it
    unpickles; the pipeline's packages import their names on first use, so
    neither loky (a measuring worker) nor code generation, the search space
    or the search (either worker) comes with them: a third of a second of
    every worker's start, three workers per short job."""
    probe = (
        "import sys, laytune.runners._worker, laytune.runners._compile, "
        "laytune.runners._measure; "
        "print(sorted(m for m in ('loky', 'joblib', 'laytune.codegen._emit', "
        "'laytune.space._space', 'laytune.search', 'laytune.records', 'sqlalchemy', 'optuna') "
        "if m in sys.modules))"
    )
    assert _printed(probe) == "[]"
    # a build worker runs loky's own package, not the copy inside joblib, whose
    # package (parallel, memory, hashing) cost every worker and loky's resource
    # tracker a third of a second to load
    probe = (
        "import sys, loky.backend.popen_loky_posix, loky.backend.resource_tracker, "
        "laytune.runners._compile; print('joblib' in sys.modules)"
    )
    assert _printed(probe) == "False"
    # nor does the laytune program before its command runs (its parser, and
    # no worker kept): `laytune --help` took a second
    probe = (
        "import sys; from laytune.cli import _parser; _parser(); "
        "from laytune.runners import keep_workers; keep_workers(0); "
        "print(sorted(m for m in ('loky', 'laytune.search._tune', 'sqlalchemy', 'optuna', "
        "'pandas', 'pyopencl') if m in sys.modules))"
    )
    assert _printed(probe) == "[]"
    # and every name the lazy packages export resolves
    lazy = ", ".join(LAZY_PACKAGES)
    probe = (
        f"import {lazy}; print(all(getattr(p, n) is not None for p in ({lazy}) for n in p.__all__))"
    )
    assert _printed(probe) == "True"


@pytest.mark.parametrize("package", LAZY_PACKAGES)
def test_a_lazy_package_names_for_type_checkers_what_it_imports(package: str) -> None:
    """A lazy package lists its names twice: in its table (what runs) and in
    imports under ``TYPE_CHECKING`` (what type checkers read). Both name the
    same objects, and every lazy name is exported."""
    module = importlib.import_module(package)
    tree = ast.parse(inspect.getsource(module))
    (block,) = [
        node
        for node in tree.body
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING"
    ]
    declared = {
        alias.name: node.module
        for node in block.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    eager = {  # what the package binds as it runs: its own imports and assignments
        target.id
        for node in tree.body
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    eager |= {a.name for node in tree.body if isinstance(node, ast.ImportFrom) for a in node.names}
    assert set(declared) == set(module.__all__) - eager
    for name, source in declared.items():
        assert getattr(module, name) is getattr(importlib.import_module(source), name), name
    with pytest.raises(AttributeError, match=f"module '{package}' has no attribute 'no_such'"):
        module.no_such  # noqa: B018


def test_listing_devices_registers_the_runtimes_once() -> None:
    """The probe itself can see a change: listing devices sets OCL_ICD_VENDORS
    where a PyPI runtime needs a vendor file."""
    env = {k: v for k, v in os.environ.items() if k != "OCL_ICD_VENDORS"}
    script = textwrap.dedent(
        """
        import os, sys
        from pathlib import Path
        from laytune.runners import list_devices
        needed = (Path(sys.prefix) / "lib" / "libintelocl.so").exists()
        list_devices()
        print(needed, "OCL_ICD_VENDORS" in os.environ)
        """
    )
    done = subprocess.run(
        [sys.executable, "-B", "-c", script], capture_output=True, text=True, env=env, check=True
    )
    needed, registered = done.stdout.split()
    assert registered == needed


def test_the_search_imports_pandas_only_to_make_a_frame() -> None:
    """Every process of a job imports the search (the CLI, its workers'
    parents); pandas is a fifth of a second of that, and a job makes no
    frame until its caller asks for one."""
    probe = (
        "import sys, laytune.search, laytune.records; "
        "print('pandas' in sys.modules); "
        "laytune.records.records_dataframe([]); print('pandas' in sys.modules)"
    )
    assert _printed(probe).split() == ["False", "True"]
