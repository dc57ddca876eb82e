"""Every registered dtype and matrix intrinsic, walked through the space, the
constraints and the emitter: a small workload's source is generated for
each, run where the device here has what it needs, and checked otherwise."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import laytune
from laytune import layout as layout_registry
from laytune.codegen import _matrix as codegen_matrix
from laytune.codegen import lower
from laytune.codegen._shuffle import transpose_lines
from laytune.device_info import DeviceInfo
from laytune.dtypes import DTYPES, KERNEL_DTYPES
from laytune.exceptions import LayoutError, LayoutRejectedError, StatementError
from laytune.layout import (
    FAMILIES,
    Layout,
    compose,
    identity,
    pad_rows,
    permute,
    row_xor,
    texture,
)
from laytune.ops import DTYPES as OPS_DTYPES
from laytune.ops import matmul, transpose
from laytune.plots import FAMILY_ORDER
from laytune.runners import Tolerance
from laytune.space import (
    GLOBAL_FAMILIES,
    IMAGE_DTYPES,
    LAYOUT_FAMILIES,
    LOCAL_FAMILIES,
    MATRIX_INTRINSICS,
    MATRIX_VARIANTS,
    SCOPES,
    STORAGE_HALF_VARIANTS,
    Buffer,
    Image2DRead,
    MatrixTileLoad,
    SearchSpace,
    SpaceOptions,
    check_candidate,
    constraint_from_json,
    dtype_bytes,
    matrix_capability,
    matrix_intrinsic,
)
from laytune.space import _generate as space_generate
from laytune.space._conversion import layout_token
from laytune.space._generate import (
    OPTIONAL_LOCAL_FAMILIES,
    global_layouts,
    local_layouts,
    same_layout_offsets,
)
from laytune.space._rules import subgroup_extensions
from tests.codegen.harness import Env, run
from tests.codegen.test_matrix import INTEL, NVIDIA

# -- dtypes ----------------------------------------------------------------------

IMAGES = DeviceInfo(
    "Hand",
    "Image GPU",
    extensions=("cl_khr_fp16",),
    image_support=True,
    image2d_max_width=16384,
    image2d_max_height=16384,
)


@pytest.mark.parametrize("name", list(DTYPES))
def test_every_dtype_sizes_a_buffer_and_says_whether_an_image_holds_it(name: str) -> None:
    dtype = DTYPES[name]
    assert dtype_bytes(name) == dtype.bytes
    if name in ("float32", "float16", "float64", "int32", "int8", "uint8"):
        assert dtype.bytes == np.dtype(name).itemsize
    Buffer("X", (4, 8), dtype=name)  # a buffer may carry every registered dtype
    layout = texture((4, 8), 1)
    verdict = Image2DRead().check(layout, (4, 8), name, IMAGES)
    if dtype.image is None:
        assert name not in IMAGE_DTYPES
        assert f"dtype {name} has no image channel type" in " ".join(verdict.reasons)
    else:
        assert IMAGE_DTYPES[name] == dtype.image
        assert verdict.ok, verdict.reasons


@pytest.mark.parametrize("name", list(DTYPES))
def test_sub_group_block_access_asks_for_short_block_reads_by_element_width(name: str) -> None:
    # the emitter picks the _us block functions by width (2 bytes), so the rules do too
    needed = subgroup_extensions(name, staged=False)
    assert ("cl_intel_subgroups_short" in needed) == (DTYPES[name].bytes == 2)


def test_an_unknown_dtype_is_named_with_the_known_ones() -> None:
    with pytest.raises(LayoutError, match=r"dtype 'float8' is not one of .*'bfloat16'"):
        dtype_bytes("float8")
    with pytest.raises(StatementError, match="dtype 'bfloat16' is not supported"):
        transpose((8, 8), dtype="bfloat16")


def test_a_workload_computes_in_exactly_the_dtypes_an_emitter_writes() -> None:
    assert OPS_DTYPES == KERNEL_DTYPES == ("float32", "float16")
    assert all(DTYPES[n].ctype and DTYPES[n].storage_ctype for n in KERNEL_DTYPES)


@pytest.mark.parametrize("name", KERNEL_DTYPES)
def test_every_kernel_dtype_runs_a_matmul_through_space_and_emitter(env: Env, name: str) -> None:
    dtype = DTYPES[name]
    workload = matmul(16, 8, 32, dtype=name)
    info = env.info
    if dtype.extension and not info.has_extension(dtype.extension):
        # a device without the extension refuses the space by name (NVIDIA's
        # OpenCL has no cl_khr_fp16); the source is checked for one that has it
        with pytest.raises(LayoutRejectedError, match=dtype.extension):
            SearchSpace(workload, info)
        info = dataclasses.replace(info, extensions=(*info.extensions, dtype.extension))
    space = SearchSpace(workload, info)
    candidate = space.identity()
    assert check_candidate(workload, candidate, info).ok
    program = lower(workload, candidate, info)
    assert f"__global {dtype.ctype}" in program.source
    pragma = f"#pragma OPENCL EXTENSION {dtype.extension} : enable"
    assert (pragma in program.source) == bool(dtype.extension)
    if dtype.extension and not env.info.has_extension(dtype.extension):
        return  # the source is all this device can check
    rng = np.random.default_rng(1)
    inputs = {b.name: rng.uniform(-1, 1, b.shape).astype(name) for b in workload.inputs}
    outputs, _ = run(env, program, inputs)
    want = inputs["A"].astype(np.float64) @ inputs["B"].astype(np.float64)
    tolerance = Tolerance.for_dtype(name, 32)
    assert dtype.tolerance is not None
    assert tolerance.rtol == pytest.approx(dtype.tolerance[0] * math.sqrt(32))
    scale = max(1.0, float(np.abs(want).max()))
    error = np.abs(outputs["C"].astype(np.float64) - want)
    assert (error <= tolerance.atol * scale + tolerance.rtol * np.abs(want)).all()


@pytest.mark.parametrize("name", KERNEL_DTYPES)
def test_every_kernel_dtype_shuffles_with_masks_as_wide_as_its_elements(name: str) -> None:
    dtype = DTYPES[name]
    unsigned = {1: "uchar", 2: "ushort", 4: "uint", 8: "ulong"}[dtype.bytes]
    for ctype in (dtype.ctype, dtype.storage_ctype):
        assert ctype is not None
        lines, _ = transpose_lines([f"r{k}" for k in range(4)], ctype, "t")
        assert all(f", ({unsigned}4)(" in line for line in lines), lines


def test_a_dtype_no_emitter_writes_has_no_matrix_intrinsic_and_no_tolerance() -> None:
    assert not DTYPES["bfloat16"].emitted
    assert all("bfloat16" not in i.dtypes for i in MATRIX_INTRINSICS.values())
    assert Tolerance.for_dtype("int32") == Tolerance(0.0, 0.0)
    assert Tolerance.for_dtype("float64") == Tolerance(1e-9, 1e-12)


# -- matrix intrinsics -------------------------------------------------------------

CAPABLE = {"intel_dpas": INTEL, "nv_wmma": NVIDIA, "nv_mma": NVIDIA}
"""A hand-written device for each intrinsic (a new intrinsic needs one here)."""

OPTIONS = SpaceOptions(
    families=("identity",),
    blocks=(1,),
    groups=(0, 16),
    splits=(1,),
    unrolls=(1,),
    vectors=(1,),
    local_families=("identity", "pad_rows", "pad_every"),
    local_pad_amounts=(4, 8),
    pad_every_rows=(2,),
)


def test_the_matrix_knob_offers_every_intrinsic_once_by_one_name() -> None:
    assert ("none", *MATRIX_INTRINSICS) == MATRIX_VARIANTS
    assert set(CAPABLE) == set(MATRIX_INTRINSICS)
    for name, intrinsic in MATRIX_INTRINSICS.items():
        assert matrix_intrinsic(name) is intrinsic
        for alias in intrinsic.aliases:
            assert matrix_intrinsic(alias) is intrinsic
    # a constraint written under the Intel instruction's older name still loads, as itself
    old = constraint_from_json({"kind": "MatrixTileLoad", "intrinsic": "intel_mad", "operand": "a"})
    assert old == MatrixTileLoad("intel_dpas", "a")
    with pytest.raises(LayoutError, match="intrinsic 'wmma' is not one of"):
        matrix_intrinsic("wmma")


def _plain_device() -> DeviceInfo:
    return DeviceInfo("Hand", "Plain GPU", extensions=("cl_khr_fp16",))


@pytest.mark.parametrize("name", list(MATRIX_INTRINSICS))
def test_every_intrinsic_walks_through_space_constraints_and_emitter(name: str) -> None:
    intrinsic = MATRIX_INTRINSICS[name]
    device = CAPABLE[name]
    assert name in matrix_capability(device)[0]
    assert name not in matrix_capability(_plain_device())[0]
    workload = matmul(32, 48, 64, dtype=intrinsic.dtypes[0])
    space = SearchSpace(workload, device, OPTIONS)
    chosen = [c for c in space.enumerate() if c.knob("matrix") == name]
    assert chosen, f"the space offers no {name} candidate"
    seen_tiles = set()
    for candidate in chosen:
        assert check_candidate(workload, candidate, device).ok
        for operand, buffer in zip(("a", "b"), ("A.local", "B.local"), strict=True):
            tile = candidate.layout(buffer)
            seen_tiles.add(tile)
            load = MatrixTileLoad(name, operand)
            assert load.check(tile, tile.shape, intrinsic.dtypes[0], device).ok
        program = lower(workload, candidate, device)
        assert intrinsic.instruction in program.source
        assert program.compute[0].local_size == (intrinsic.lanes, 1)
        assert ("cl_khr_fp16 : enable" in program.source) != intrinsic.storage_only
        assert (name in STORAGE_HALF_VARIANTS) == intrinsic.storage_only
    # the fragment load refuses rows that break its alignment, and a dtype it does not multiply
    shape = (16, 16)
    for operand in ("a", "b"):
        load = MatrixTileLoad(name, operand)
        assert not load.check(pad_rows(shape, 1), shape, intrinsic.dtypes[0], device).ok
        assert not load.check(identity(shape), shape, "float32", device).ok


def _keys_in_code(path: Path) -> set[str]:
    """The string constants of a module's code, docstrings aside."""
    tree = ast.parse(path.read_text(), str(path))
    docstrings = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    return {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        if id(node) not in docstrings
    }


def test_an_intrinsic_is_one_module_that_holds_its_descriptor_and_its_emitter() -> None:
    root = Path(laytune.__file__).parent
    keys = {path: _keys_in_code(path) for path in root.rglob("*.py")}
    for name, intrinsic in MATRIX_INTRINSICS.items():
        module = inspect.getmodule(intrinsic.emit)
        assert module is not None and intrinsic in vars(module).values(), name
        # nothing else keys on its names: no table beside the descriptor
        naming = {p for p, k in keys.items() if k & {name, *intrinsic.aliases}}
        assert naming == {Path(module.__file__)}, name


@pytest.mark.parametrize("name", list(MATRIX_INTRINSICS))
def test_lowering_writes_the_kernel_its_intrinsic_emits(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    intrinsic = MATRIX_INTRINSICS[name]

    def marked(tiles: Any, kernel: str) -> str:
        return f"/* emitted by {name} */\n" + intrinsic.emit(tiles, kernel)

    changed = {**MATRIX_INTRINSICS, name: dataclasses.replace(intrinsic, emit=marked)}
    monkeypatch.setattr(codegen_matrix, "MATRIX_INTRINSICS", changed)
    workload = matmul(32, 48, 64, dtype=intrinsic.dtypes[0])
    space = SearchSpace(workload, CAPABLE[name], OPTIONS)
    candidate = next(c for c in space.enumerate() if c.knob("matrix") == name)
    source = lower(workload, candidate, CAPABLE[name]).source
    assert f"/* emitted by {name} */" in source
    assert intrinsic.instruction in source


# -- layout families ----------------------------------------------------------------


def test_every_family_serves_the_scopes_it_names() -> None:
    opts = SpaceOptions(local_families=(*LOCAL_FAMILIES, *OPTIONAL_LOCAL_FAMILIES))
    assert set(GLOBAL_FAMILIES) == {
        n for n, f in LAYOUT_FAMILIES.items() if f.scopes & {"global", "image"}
    }
    assert set(LOCAL_FAMILIES) | set(OPTIONAL_LOCAL_FAMILIES) == {
        n for n, f in LAYOUT_FAMILIES.items() if "local" in f.scopes
    }
    for name, family in LAYOUT_FAMILIES.items():
        assert family.scopes and family.scopes <= set(SCOPES)
        made = [make() for make in family.layouts((64, 64), opts, min(family.scopes))]
        assert made, f"family {name} makes no layout of a 64 x 64 buffer"
        globals_ = global_layouts((64, 64), "float32", (name,), opts)
        locals_ = local_layouts((64, 64), opts)
        for layout in made:
            if family.scopes & {"global", "image"}:
                assert any(same_layout_offsets(layout, g) for g in globals_), name
            if "local" in family.scopes and not layout.has_padding:
                assert any(same_layout_offsets(layout, t) for t in locals_), name
    # an image family serves only dtypes an image holds
    assert not global_layouts((64, 64), "int32", ("texture",), opts)[1:]


def test_a_family_is_one_object_beside_its_maker_and_the_rest_derives_from_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    home = inspect.getmodule(layout_registry.LAYOUT_FAMILIES["identity"].make)
    assert LAYOUT_FAMILIES is layout_registry.LAYOUT_FAMILIES
    for name, family in LAYOUT_FAMILIES.items():
        rebuild = family.rebuild or family.make
        for part in (family.make, family.params, rebuild):
            assert inspect.getmodule(part) is home, name
        assert FAMILIES[name] is rebuild  # a record of it is rebuilt as the descriptor says
    assert (
        tuple(
            n for n, f in LAYOUT_FAMILIES.items() if "local" in f.scopes and not f.local_by_default
        )
        == OPTIONAL_LOCAL_FAMILIES
    )
    # what a tile takes is the descriptor's word: row_xor's padded layouts serve no tile
    opts = SpaceOptions(local_xor_periods=(3,), local_xor_chunks=(1,))
    assert row_xor((6, 6), 3).has_padding
    assert row_xor((6, 6), 3) not in local_layouts((6, 6), opts)
    padding = {
        **LAYOUT_FAMILIES,
        "row_xor": dataclasses.replace(LAYOUT_FAMILIES["row_xor"], pads_tiles=True),
    }
    monkeypatch.setattr(space_generate, "LAYOUT_FAMILIES", padding)
    assert row_xor((6, 6), 3) in local_layouts((6, 6), opts)


@pytest.mark.parametrize("name", [n for n in LAYOUT_FAMILIES if n != "identity"])
def test_every_global_family_runs_a_transpose_through_space_and_emitter(
    env: Env, name: str
) -> None:
    family = LAYOUT_FAMILIES[name]
    image = "global" not in family.scopes
    runs = env.info.image_support or not image
    device = env.info if runs else IMAGES
    workload = transpose((32, 64))
    space = SearchSpace(workload, device, SpaceOptions(families=("identity", name)))
    layouts = [lay for lay in space.layouts("X") if not lay.is_identity]
    assert layouts, f"the space offers X no {name} layout"
    assert layouts[0].family == name
    # the first candidate of the space with X in it (enumerating up to it took 4-11 s)
    chosen = next(space.candidates_with({"X": layouts[0], "Y": space.layouts("Y")[0]}))
    assert check_candidate(workload, chosen, device).ok
    program = lower(workload, chosen, device)
    assert ("read_imagef" in program.source) == image
    if not runs:
        return  # no image here: the source is what this device can check
    data = np.random.default_rng(2).uniform(-1, 1, (32, 64)).astype(np.float32)
    outputs, _ = run(env, program, {"X": data})
    np.testing.assert_array_equal(outputs["Y"], data.T)


def test_row_xor_layouts_are_of_family_row_xor_and_keep_their_recorded_text() -> None:
    layout = row_xor((16, 32), 4, 2)
    assert layout.family == "row_xor" and dict(layout.params) == {"period": 4, "chunk": 2}
    # the text records, candidate keys, optuna choices and conversion keys were written in
    assert layout.describe() == "swizzle(form=rows, period=4, chunk=2)"
    data = layout.to_json()
    assert data["family"] == "swizzle" and data["params"] == {
        "form": "rows",
        "period": 4,
        "chunk": 2,
    }
    assert Layout.from_json(data) == layout
    assert layout_token(layout).startswith("swizzle-")
    both = compose(row_xor((16, 16), 4), permute((16, 16), (1, 0)))
    assert both.family == "permute+row_xor" and both.recorded_family == "permute+swizzle"
    assert Layout.from_json(both.to_json()) == both
    # a frame of records names the family as plots and reports look it up
    assert "row_xor" in FAMILY_ORDER
