"""Running and measuring a program with aliased buffers (held in their
identity layout): one device buffer per aliased buffer, no copy of it, and a
conversion time of 0 for it."""

from __future__ import annotations

import numpy as np
import pyopencl as cl
import pytest

from laytune import layout as L
from laytune import ops
from laytune.codegen import KernelProgram, lower
from laytune.runners import Builder, ProgramExecutor, RunInput, Runner
from laytune.runners._memory import allocation_bytes
from laytune.space import Candidate

pytestmark = pytest.mark.xdist_group("runners")

WORKLOAD = ops.matmul(24, 40, 32)


def _program(**layouts: L.Layout) -> KernelProgram:
    candidate = Candidate.make(
        {b.name: layouts.get(b.name, L.identity(b.shape)) for b in WORKLOAD.buffers}
    )
    return lower(WORKLOAD, candidate)


def test_an_aliased_buffer_is_one_allocation() -> None:
    sizes = allocation_bytes(_program(A=L.permute((24, 32), (1, 0))))
    assert sizes == {
        "A (logical)": 24 * 32 * 4,
        "A (physical)": 24 * 32 * 4,
        "B (physical)": 32 * 40 * 4,
        "C (physical)": 24 * 40 * 4,
    }


def test_measuring_packs_only_the_transposed_input_and_prices_the_others_at_zero(
    builder: Builder, runner: Runner
) -> None:
    (build,) = builder.build([_program(A=L.permute((24, 32), (1, 0)))])
    assert build.ok, build.error_message
    (result,) = runner.run([RunInput(build, WORKLOAD)])
    assert result.ok, result.error_message
    assert result.max_error is not None and result.max_error < 1e-4
    config = runner.config
    assert config.measure_conversions
    # A's pack once to verify, then warm-up and timed; no launch for B or C
    assert result.launches.pack == 1 + config.warmup + config.repeats
    assert result.launches.unpack == 0
    packs = {t.buffer: t for t in result.pack_times}
    assert sorted(packs) == ["A", "B"]
    assert packs["A"].kernel == "A_pack" and packs["A"].value_s > 0
    assert len(packs["A"].event_times_s) == config.repeats
    assert (packs["B"].kernel, packs["B"].event_times_s, packs["B"].value_s) == ("", (), 0.0)
    ((unpacked, c),) = ((t.buffer, t) for t in result.unpack_times)
    assert unpacked == "C" and c.value_s == 0.0 and c.wall_times_s == ()


def test_the_executor_binds_one_buffer_for_both_views_and_computes_the_reference(
    cl_context: cl.Context,
) -> None:
    program = _program(A=L.permute((24, 32), (1, 0)))
    executor = ProgramExecutor(cl_context, program)
    try:
        objects = executor.objects
        for name in ("B", "C"):
            assert objects[(name, "logical")] is objects[(name, "physical")]
        assert objects[("A", "logical")] is not objects[("A", "physical")]
        assert len({id(memory) for memory in objects.values()}) == 4
        for seed in (0, 1):  # a second call reuses the buffers: nothing stale remains
            inputs = WORKLOAD.make_inputs(seed)
            want = WORKLOAD.reference(inputs)["C"]
            np.testing.assert_allclose(executor(**inputs), want, rtol=1e-5, atol=1e-5)
        # an aliased buffer bound by the caller is that buffer's only storage
        inputs = WORKLOAD.make_inputs(2)
        held = cl.Buffer(
            cl_context,
            cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR,
            hostbuf=np.ascontiguousarray(inputs["B"]),
        )
        executor.set_physical("B", held)
        assert executor.physical("B") is held and objects[("B", "logical")] is held
        want = WORKLOAD.reference(inputs)["C"]
        np.testing.assert_allclose(executor(**inputs), want, rtol=1e-5, atol=1e-5)
    finally:
        executor.release()  # each aliased buffer released once
    assert executor.objects == {}
