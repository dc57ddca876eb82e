"""A buffer held in its identity layout in global memory is aliased: its
physical storage is its logical array, so the program packs and unpacks
only the other buffers, and still computes the reference."""

from __future__ import annotations

import numpy as np
import pytest

from laytune import layout as L
from laytune import ops
from laytune.codegen import BufferSpec, KernelProgram, lower, lower_conversion
from laytune.ops import Workload
from laytune.space import Candidate
from tests.codegen.harness import Env, run


def _candidate(workload: Workload, **layouts: L.Layout) -> Candidate:
    return Candidate.make(
        {b.name: layouts.get(b.name, L.identity(b.shape)) for b in workload.buffers}
    )


def _aliased(program: KernelProgram) -> dict[str, bool]:
    return {spec.name: spec.aliased for spec in program.buffers}


def test_an_identity_matmul_has_no_pack_or_unpack_and_matches_numpy(env: Env) -> None:
    workload = ops.matmul(24, 40, 32)
    program = lower(workload, _candidate(workload), env.info)
    assert program.pack == () and program.unpack == ()
    assert _aliased(program) == {"A": True, "B": True, "C": True}
    assert "_pack(" not in program.source and "_unpack(" not in program.source
    # the harness gives an aliased output one buffer, NaN before the kernel runs
    inputs = workload.make_inputs(0)
    outputs, _ = run(env, program, inputs)
    np.testing.assert_allclose(outputs["C"], workload.reference(inputs)["C"], rtol=1e-5, atol=1e-5)


def test_a_transposed_input_beside_identity_ones_is_the_only_one_packed(env: Env) -> None:
    workload = ops.matmul(24, 40, 32)
    a = L.permute((24, 32), (1, 0))
    program = lower(workload, _candidate(workload, A=a), env.info)
    assert [launch.args[0].buffer for launch in program.pack] == ["A"]
    assert program.unpack == ()
    assert _aliased(program) == {"A": False, "B": True, "C": True}
    inputs = workload.make_inputs(1)
    outputs, physical = run(env, program, inputs)
    np.testing.assert_allclose(outputs["C"], workload.reference(inputs)["C"], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(physical["A"], inputs["A"].T.reshape(-1))


def test_a_transposed_output_is_unpacked_and_its_identity_input_is_not(env: Env) -> None:
    workload = ops.relu((12, 20))
    program = lower(workload, _candidate(workload, Y=L.permute((12, 20), (1, 0))), env.info)
    assert program.pack == ()
    assert [launch.args[0].buffer for launch in program.unpack] == ["Y"]
    inputs = workload.make_inputs(0)
    outputs, _ = run(env, program, inputs)
    np.testing.assert_array_equal(outputs["Y"], workload.reference(inputs)["Y"])


@pytest.mark.parametrize(
    "statement",
    ["Y[i] += X[i, j]", "Y[i] = max(X[i, j])", "Y[i] = min(X[i, j])"],
    ids=["row-sum", "row-max", "row-min"],
)
def test_a_reduction_into_an_aliased_output_initialises_it(env: Env, statement: str) -> None:
    """The output's one buffer starts as NaN: a kernel that added to what
    the buffer held, instead of starting from the reduction's identity,
    would give NaN."""
    workload = Workload.define("rows", statement, {"i": 16, "j": 48}, {"X": (16, 48)})
    program = lower(workload, _candidate(workload), env.info)
    assert program.pack == () and program.unpack == ()
    inputs = workload.make_inputs(0)
    outputs, _ = run(env, program, inputs)
    np.testing.assert_allclose(outputs["Y"], workload.reference(inputs)["Y"], rtol=1e-5, atol=1e-5)


def test_a_padded_layout_and_a_conversion_program_are_not_aliased() -> None:
    workload = ops.copy((8, 12))
    padded = L.pad_rows((8, 12), 4)
    program = lower(workload, _candidate(workload, X=padded))
    assert _aliased(program) == {"X": False, "Y": True}
    assert [launch.args[0].buffer for launch in program.pack] == ["X"]
    conversion = lower_conversion("X", L.identity((8, 12)))  # converting is its whole point
    assert not conversion.buffers[0].aliased and len(conversion.pack) == 1


def test_the_program_json_says_which_buffers_are_aliased_and_old_json_loads() -> None:
    workload = ops.matmul(8, 12, 16)
    program = lower(workload, _candidate(workload, A=L.permute((8, 16), (1, 0))))
    data = program.to_json()
    assert [b["aliased"] for b in data["buffers"]] == [False, True, True]
    assert KernelProgram.from_json(data) == program
    # written before the field existed: nothing is aliased, every launch stays
    old = {
        **data,
        "buffers": [{k: v for k, v in b.items() if k != "aliased"} for b in data["buffers"]],
    }
    loaded = KernelProgram.from_json(old)
    assert not any(spec.aliased for spec in loaded.buffers)
    assert loaded.pack == program.pack and loaded.compute == program.compute
    bad = {**data, "buffers": [{**data["buffers"][1], "aliased": "yes"}, *data["buffers"][:1]]}
    with pytest.raises(ValueError, match="aliased must be true or false, got 'yes'"):
        KernelProgram.from_json(bad)


def test_an_aliased_buffer_that_is_converted_or_not_its_logical_array_is_refused() -> None:
    workload = ops.matmul(8, 12, 16)
    program = lower(workload, _candidate(workload, A=L.permute((8, 16), (1, 0))))
    a = program.buffer("A")
    with pytest.raises(ValueError, match=r"'A_pack' converts buffer 'A', which is aliased"):
        KernelProgram(
            program.name,
            program.source,
            (BufferSpec(a.name, a.dtype, a.shape, a.physical_shape, a.role, aliased=True),),
            program.compute,
            program.pack,
        )
    with pytest.raises(ValueError, match=r"buffer 'X' is aliased.*\(40,\) is not 32 elements"):
        BufferSpec("X", "float32", (4, 8), (40,), "input", aliased=True)
    with pytest.raises(ValueError, match=r"buffer 'X' is aliased.*image2d"):
        BufferSpec("X", "float32", (4, 8), (4, 8), "input", "image2d", aliased=True)
