"""A user's own module (``laytune --import``): imported by name from the
current directory or by path, once; the operators it registers and the
workloads it defines rebuild from their keys; one that cannot be imported
is a ModuleImportError naming it and the error."""

from __future__ import annotations

import gc
import sys
from pathlib import Path

import numpy as np
import pytest

from laytune import ops
from laytune.exceptions import ModuleImportError, UnknownWorkloadError
from laytune.ops import Workload
from laytune.records import FrozenLayouts, export
from tests.ops.user_modules import (
    BMM_MODULE,
    DEFINED_MODULE,
    isolated_registry,  # noqa: F401  (a fixture)
)
from tests.records.test_export import entry

pytestmark = pytest.mark.usefixtures("isolated_registry")


def test_a_module_named_from_the_current_directory_registers_its_operator(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "my_ops.py").write_text(BMM_MODULE)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UnknownWorkloadError, match="laytune --import MODULE"):
        ops.from_key("bmm(batch=2,M=3,N=4,K=5;float32)")
    module = ops.import_workloads("my_ops")
    assert ops.import_workloads("my_ops") is module  # imported once: no second registration
    workload = ops.from_key("bmm(batch=2,M=3,N=4,K=5;float32)")
    assert workload == module.bmm(2, 3, 4, 5)
    assert [b.shape for b in workload.buffers] == [(2, 3, 5), (2, 5, 4), (2, 3, 4)]
    inputs = workload.make_inputs(0)
    np.testing.assert_allclose(
        workload.reference(inputs)["C"], inputs["A"] @ inputs["B"], rtol=1e-5, atol=1e-5
    )


def test_a_module_given_by_path_is_imported_once_and_may_import_its_neighbours(
    tmp_path: Path,
) -> None:
    (tmp_path / "helpers_for_bmm.py").write_text(BMM_MODULE)
    (tmp_path / "user_bmm.py").write_text("from helpers_for_bmm import bmm\n")
    module = ops.import_workloads(str(tmp_path / "user_bmm.py"))
    assert ops.import_workloads(str(tmp_path / "user_bmm.py")) is module
    assert "bmm" in ops.constructors()
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "user_bmm.py").write_text("")
    with pytest.raises(ModuleImportError, match="a module named 'user_bmm' is imported already"):
        ops.import_workloads(str(other / "user_bmm.py"))


def test_a_workload_made_by_define_alone_rebuilds_from_its_key_while_held(
    tmp_path: Path,
) -> None:
    (tmp_path / "defined.py").write_text(DEFINED_MODULE)
    module = ops.import_workloads(str(tmp_path / "defined.py"))
    workload: Workload = module.SCALE_ADD
    shapes, _, digest = workload.key.partition(")#")
    assert shapes == "scale_add(X[4, 8],Z[4, 8],Y[4, 8];float32" and len(digest) == 8
    assert ops.defined_workloads()[workload.key] is workload
    assert ops.from_key(workload.key) is workload
    # export's reference data, which rebuilds the workload from the key
    export(FrozenLayouts([entry(workload)]), tmp_path / "out", reference=True)
    reference = next((tmp_path / "out").glob("*.Y.ref.bin"))
    inputs = workload.make_inputs(0)
    np.testing.assert_allclose(
        np.fromfile(reference, dtype="<f4").reshape(4, 8), inputs["X"] * 2 + inputs["Z"]
    )
    key = workload.key
    del workload, module
    del sys.modules["defined"]
    gc.collect()
    assert key not in ops.defined_workloads()
    with pytest.raises(UnknownWorkloadError, match=r"Workload\.define"):
        ops.from_key(key)


def test_the_library_operators_are_not_listed_as_defined() -> None:
    held = ops.matmul(4, 4, 4)
    assert held.key not in ops.defined_workloads()


@pytest.mark.parametrize(
    ("source", "name", "message"),
    [
        (None, "no_such_module_here", "ModuleNotFoundError: No module named 'no_such_module_here'"),
        ("def broken(:\n", "broken_ops", "SyntaxError: "),
        ("raise RuntimeError('no GPU in this office')\n", "raising_ops", "RuntimeError: no GPU"),
        ("import sys\nsys.exit(3)\n", "exiting_ops", "SystemExit: 3"),
        (
            "from laytune import ops\n\n@ops.register(example={})\ndef matmul(dtype='float32'):\n"
            "    pass\n",
            "clashing_ops",
            "RegistryError: a workload constructor named 'matmul' is registered already",
        ),
    ],
)
def test_a_module_that_cannot_be_imported_is_named_with_its_error(
    source: str | None, name: str, message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if source is not None:
        (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.chdir(tmp_path)
    for spec in (name, str(tmp_path / f"{name}.py")):
        with pytest.raises(ModuleImportError) as info:
            ops.import_workloads(spec)
        text = str(info.value)
        assert text.startswith(f"cannot import {spec!r}: ") and "\n" not in text
        if source is not None or spec == name:
            assert message in text
        else:
            assert text.endswith("no such file")


def test_a_name_that_is_neither_module_nor_file_is_refused() -> None:
    with pytest.raises(
        ModuleImportError, match=r"not a module name .* nor the path of a \.py file"
    ):
        ops.import_workloads("my-ops")
