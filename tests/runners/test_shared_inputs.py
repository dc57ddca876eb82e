"""An input's logical view in the measuring process is a read-only device
buffer over the prepared workload's host array (one per workload and input,
kept by the session), not a second allocation holding a copy: packing reads
it, nothing writes it, and every candidate still verifies."""

from __future__ import annotations

import numpy as np
import pytest

from laytune import layout as L
from laytune import ops
from laytune.codegen import ArgRef, BufferSpec, KernelProgram, Launch, lower
from laytune.runners import Builder, ErrorKind, MeasureConfig
from laytune.runners._measure import DeviceSession, PreparedWorkload, measure_candidate
from laytune.runners._memory import allocation_bytes
from laytune.runners._workload import INPUT_ALIGNMENT, aligned
from laytune.space import Candidate

pytestmark = pytest.mark.xdist_group("runners")

WORKLOAD = ops.matmul(24, 40, 32)  # C (24 x 40) = A (24 x 32) @ B (32 x 40)
CONFIG = MeasureConfig(warmup=0, repeats=1, min_total_time_s=0.0, measure_conversions=False)


def _program(**layouts: L.Layout) -> KernelProgram:
    candidate = Candidate.make(
        {b.name: layouts.get(b.name, L.identity(b.shape)) for b in WORKLOAD.buffers}
    )
    return lower(WORKLOAD, candidate)


def _prepared(key: str = WORKLOAD.key) -> PreparedWorkload:
    inputs = {name: aligned(array) for name, array in WORKLOAD.make_inputs(3).items()}
    return PreparedWorkload(key, inputs, dict(WORKLOAD.reference(inputs)))


def _measure(
    session: DeviceSession, builder: Builder, program: KernelProgram, workload: PreparedWorkload
):
    (build,) = builder.build([program])
    assert build.ok and build.binary is not None, build.error_message
    return measure_candidate(session, program, build.binary, workload, CONFIG)


def test_aligned_inputs_start_on_a_page_and_keep_their_values() -> None:
    array = np.arange(1000, dtype=np.float32).reshape(40, 25)
    shifted = np.frombuffer(np.empty(4004, np.uint8).data, np.uint8)[4:].view(np.float32)
    if shifted.ctypes.data % INPUT_ALIGNMENT == 0:  # make it start off a page
        shifted = np.frombuffer(np.empty(4008, np.uint8).data, np.uint8)[8:].view(np.float32)
    shifted = shifted.reshape(40, 25)
    shifted[...] = array
    assert shifted.ctypes.data % INPUT_ALIGNMENT != 0
    moved = aligned(shifted)
    assert moved.ctypes.data % INPUT_ALIGNMENT == 0
    assert moved.dtype == array.dtype and moved.shape == array.shape
    np.testing.assert_array_equal(moved, array)
    assert aligned(moved) is moved  # already aligned: kept as it is
    transposed = aligned(moved.T)
    assert transposed.flags.c_contiguous and transposed.ctypes.data % INPUT_ALIGNMENT == 0
    np.testing.assert_array_equal(transposed, array.T)


def test_packed_candidates_in_a_row_verify_and_leave_their_host_inputs_unchanged(
    session: DeviceSession, builder: Builder
) -> None:
    workload = _prepared()
    before = {name: array.copy() for name, array in workload.inputs.items()}
    programs = [
        _program(A=L.permute((24, 32), (1, 0))),
        _program(A=L.pad_rows((24, 32), 3), B=L.pad_rows((32, 40), 5)),  # both padded
    ]
    padded = next(spec for spec in programs[1].buffers if spec.name == "A")
    assert np.prod(padded.physical_shape) > np.prod(padded.shape)
    builds = builder.build(programs)  # one batch: the builds overlap
    a_spec = padded
    over_a = []
    for program, build in zip([*programs, programs[0]], [*builds, builds[0]], strict=True):
        assert build.ok and build.binary is not None, build.error_message
        result = measure_candidate(session, program, build.binary, workload, CONFIG)
        assert result.ok, result.error_message
        assert result.max_error is not None and result.max_error < 1e-4
        for name, array in workload.inputs.items():
            np.testing.assert_array_equal(array, before[name])
        over_a.append(session.shared_input(workload, a_spec))
    # one buffer over each packed input, made once and kept for the workload
    assert over_a[0] is not None and all(buffer is over_a[0] for buffer in over_a)
    assert session.shared_inputs() == {WORKLOAD.key: ("A", "B")}
    session.drop_workload(WORKLOAD.key)
    assert session.shared_inputs() == {}


def test_a_packed_input_takes_no_device_memory_of_the_candidate(
    session: DeviceSession, builder: Builder
) -> None:
    program = _program(A=L.permute((24, 32), (1, 0)))
    sizes = allocation_bytes(program)
    assert "A (logical)" in sizes
    result = _measure(session, builder, program, _prepared())
    assert result.ok, result.error_message
    # everything but A's logical view, which is the host array itself
    assert session.allocated_bytes == sum(sizes.values()) - sizes["A (logical)"]


def _inout_program(n: int = 256) -> KernelProgram:
    """x doubled in place: packed into its physical view, doubled, unpacked."""
    source = """
__kernel void copy(__global const float* src, __global float* dst) {
  size_t i = get_global_id(0); dst[i] = src[i];
}
__kernel void twice(__global float* x) { size_t i = get_global_id(0); x[i] *= 2.0f; }
"""
    return KernelProgram(
        name="twice_in_place",
        source=source,
        buffers=(BufferSpec("x", "float32", (n,), (n,), "inout"),),
        pack=(Launch("copy", (ArgRef("x", "logical"), ArgRef("x", "physical")), (n,)),),
        compute=(Launch("twice", (ArgRef("x", "physical"),), (n,)),),
        unpack=(Launch("copy", (ArgRef("x", "physical"), ArgRef("x", "logical")), (n,)),),
    )


def test_an_inout_buffer_keeps_a_logical_copy_of_its_own(
    session: DeviceSession, builder: Builder
) -> None:
    x = aligned(np.arange(256, dtype=np.float32))
    workload = PreparedWorkload("twice", {"x": x}, {"x": 2 * x})
    # verification runs the program once: twice of the input, which stays as it was
    result = _measure(session, builder, _inout_program(), workload)
    assert result.ok, result.error_message
    np.testing.assert_array_equal(x, np.arange(256, dtype=np.float32))
    assert session.shared_inputs() == {}
    assert session.allocated_bytes == 2 * x.nbytes  # its logical and physical views


def test_a_failed_or_abandoned_candidate_leaves_the_next_one_correct(
    session: DeviceSession, builder: Builder
) -> None:
    workload = _prepared()
    before = workload.inputs["A"].copy()
    program = _program(A=L.permute((24, 32), (1, 0)))
    (build,) = builder.build([program])
    assert build.binary is not None
    # the same inputs with a reference that no candidate matches: a wrong result
    wrong = PreparedWorkload(WORKLOAD.key, workload.inputs, {"C": np.ones((24, 40), np.float32)})
    failed = measure_candidate(session, program, build.binary, wrong, CONFIG)
    assert failed.error_kind is ErrorKind.WRONG_RESULT
    slow = MeasureConfig(warmup=0, repeats=8, early_stop_after=1, min_total_time_s=0.0)
    abandoned = measure_candidate(
        session, program, build.binary, workload, slow, abandon_above_s=0.0
    )
    assert abandoned.ok and abandoned.abandoned
    for _ in range(2):
        result = measure_candidate(session, program, build.binary, workload, CONFIG)
        assert result.ok, result.error_message
        assert result.max_error is not None and result.max_error < 1e-4
    np.testing.assert_array_equal(workload.inputs["A"], before)
