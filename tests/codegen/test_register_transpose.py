"""In-register transposes: the shuffle network's law, the ``vector_transpose``
knob's rules, and kernels that read an input across the vector axis and
transpose it in registers, against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from laytune import layout as L
from laytune import ops
from laytune.codegen import lower
from laytune.codegen._shuffle import transpose_lines
from laytune.search._starts import standard_candidates
from laytune.space import Candidate, SearchSpace, SpaceOptions, baseline_knobs, check_candidate
from tests.codegen.harness import (
    Env,
    RandomTrial,
    build,
    build_in_series,
    cpu_form,
    run,
    run_one_item,
)

_ELEMENTS = {"float": np.float32, "ushort": np.uint16, "half": np.float16}


@pytest.mark.parametrize("ctype", sorted(_ELEMENTS))
@pytest.mark.parametrize("n", [2, 4, 8, 16])
def test_the_shuffle_network_transposes(env: Env, n: int, ctype: str) -> None:
    """For rows r[0..n): t[a].s[b] == r[b].s[a], on the device, for each
    element type (the shuffles' masks are as wide as the elements)."""
    if ctype == "half" and not env.info.supports_fp16:
        pytest.skip(f"{env.info.name} has no cl_khr_fp16")
    rows = [f"r{b}" for b in range(n)]
    lines, columns = transpose_lines(rows, ctype, "t")
    assert len(lines) == n * (n.bit_length() - 1)  # log2(n) rounds of n shuffles
    body = [f"const {ctype}{n} r{b} = vload{n}({b}, src);" for b in range(n)]
    body += lines + [f"vstore{n}({c}, {a}, dst);" for a, c in enumerate(columns)]
    pragma = "#pragma OPENCL EXTENSION cl_khr_fp16 : enable\n" if ctype == "half" else ""
    source = (
        f"{pragma}__kernel void t(__global const {ctype}* restrict src, "
        f"__global {ctype}* restrict dst) {{\n" + "\n".join(body) + "\n}"
    )
    data = np.arange(n * n).astype(_ELEMENTS[ctype])
    out = run_one_item(env, source, data)
    np.testing.assert_array_equal(out.reshape(n, n), data.reshape(n, n).T)


def test_a_width_the_network_does_not_take_is_refused() -> None:
    with pytest.raises(ValueError, match="3"):
        transpose_lines(["a", "b", "c"], "float", "t")


def _identity_transpose(n: int, block: int, shape=(64, 48)) -> tuple[ops.Workload, Candidate]:
    workload = ops.transpose(shape)
    layouts = {b.name: L.identity(b.shape) for b in workload.buffers}
    knobs = {
        **baseline_knobs(workload),
        "vector_axis": "j",
        "vector": n,
        "vector_transpose": "i",
        "block.i": block,
        "block.j": block,
    }
    return workload, Candidate.make(layouts, knobs)


def test_an_identity_transpose_reads_rows_and_shuffles(env: Env) -> None:
    """Y[i, j] = X[j, i] with both row-major: vectors along j for Y, so X is
    read in float8 rows along i (8 of them per 8 x 8 chunk) and transposed
    by 24 shuffles; no scalar load of X is left."""
    workload, candidate = _identity_transpose(8, 8)
    program = lower(workload, candidate, env.info)
    kernel = program.source[program.source.index("_compute(") :].split("\n}")[0]
    assert kernel.count("vload8(0, X") == 8
    assert kernel.count("shuffle2(") == 24
    assert "X[" not in kernel
    assert kernel.count("vstore8(") == 8
    inputs = workload.make_inputs(1)
    outputs, _ = run(env, program, inputs, build(env, program))
    np.testing.assert_array_equal(outputs["Y"], inputs["X"].T)


@pytest.mark.parametrize(
    "n, block, shape", [(4, 8, (36, 20)), (16, 16, (64, 48)), (2, 6, (30, 20))]
)
def test_blocks_of_several_chunks_and_tails(env: Env, n: int, block: int, shape) -> None:
    """Blocks of several n x n chunks, and blocks that overshoot the output
    (36 and 20 are not multiples of 8, 20 not of 6): the chunks past the end
    read zero and are not stored."""
    workload, candidate = _identity_transpose(n, block, shape)
    if not check_candidate(workload, candidate, env.info).ok:
        pytest.fail(str(check_candidate(workload, candidate, env.info).reasons))
    program = lower(workload, candidate, env.info)
    inputs = workload.make_inputs(2)
    outputs, _ = run(env, program, inputs, build(env, program))
    np.testing.assert_array_equal(outputs["Y"], inputs["X"].T)


def test_a_block_of_chunks_stores_each_chunk_before_reading_the_next(env: Env) -> None:
    """16 rows by 64 columns of the output: four 16 x 16 chunks side by side
    along j. Each chunk's 16 stores follow its loads and shuffles, before the
    next chunk's loads, so one chunk's vectors are live at a time (stored
    after every load, the four chunks' 64 vectors spilled); the block is in
    the space (the register budget counts one chunk), and the result exact,
    tails included."""
    for shape in ((128, 64), (80, 48)):  # 80 rows: the second block overshoots by 48
        workload, candidate = _identity_transpose(16, 16, shape)
        candidate = Candidate.make(candidate.layout_map, {**candidate.knob_map, "block.j": 64})
        assert check_candidate(workload, candidate, env.info).ok
        program = lower(workload, candidate, env.info)
        kernel = program.source[program.source.index("_compute(") :].split("\n}")[0]
        lines = kernel.splitlines()
        loads = [k for k, line in enumerate(lines) if "vload16(0, X" in line]
        stores = [k for k, line in enumerate(lines) if "vstore16(" in line]
        assert len(loads) == len(stores) == 64
        for chunk in range(3):  # its stores between its last load and the next chunk's first
            mine = stores[16 * chunk : 16 * chunk + 16]
            assert loads[16 * chunk + 15] < min(mine) and max(mine) < loads[16 * chunk + 16]
        inputs = workload.make_inputs(3)
        outputs, _ = run(env, program, inputs, build(env, program))
        np.testing.assert_array_equal(outputs["Y"], inputs["X"].T)


class TransposeTrial(RandomTrial):
    """A random trial steered to a vector axis and an in-register transpose
    wherever they are offered."""

    def suggest_categorical(self, name, choices):
        choices = list(choices)
        if name.split("|")[0] in ("vector_axis", "vector_transpose"):
            axes = [c for c in choices if c]
            if axes:
                return self.rng.choice(axes)
        return super().suggest_categorical(name, choices)


@pytest.mark.parametrize(
    "workload",
    [
        ops.transpose((8, 12, 16), (2, 0, 1)),
        ops.transpose((30, 20)),
        ops.bias_add((2, 8, 4, 8), axis=1),
        ops.sum((16, 16, 8), (2,)),
    ],
    ids=lambda w: w.key,
)
def test_random_transposed_candidates_match_numpy(env: Env, workload: ops.Workload) -> None:
    space = SearchSpace(workload, env.info, SpaceOptions(max_block_points=64))
    drawn = {space.suggest(TransposeTrial(seed)) for seed in range(40)}
    transposed = [c for c in drawn if c.knob("vector_transpose")]
    assert transposed
    inputs = workload.make_inputs(5)
    expected = workload.reference(inputs)
    for index, candidate in enumerate(transposed):
        program = lower(workload, candidate, env.info)
        outputs, _ = run(env, program, inputs, build_in_series(env, program, index))
        for name, want in expected.items():
            np.testing.assert_allclose(
                outputs[name], want, rtol=1e-5, atol=1e-5, err_msg=candidate.describe()
            )


def test_the_rules_offer_a_transpose_only_where_some_input_needs_it(env: Env) -> None:
    workload, candidate = _identity_transpose(8, 8)
    assert check_candidate(workload, candidate, env.info).ok
    knobs = candidate.knob_map
    # without the transpose, X cannot serve vectors along j
    plain = Candidate.make(candidate.layout_map, {**knobs, "vector_transpose": ""})
    assert any("vector_access" in r or "VectorAccess" in r for r in _reasons(workload, plain, env))
    # X transposed serves them directly: nothing to transpose
    direct = Candidate.make({**candidate.layout_map, "X": L.permute((64, 48), (1, 0))}, knobs)
    assert any("nothing to transpose" in r for r in _reasons(workload, direct, env))
    # a reduce axis is read across, never the vector axis itself
    across = _panel(workload, vector=16, vector_axis="k", vector_transpose="")
    assert any("vector_axis 'k' is not one of" in r for r in _reasons(workload, across, env))
    # the block along the transpose axis holds whole chunks
    ragged = Candidate.make(candidate.layout_map, {**knobs, "block.i": 4})
    assert any("not a multiple of the vector 8" in r for r in _reasons(workload, ragged, env))
    space = SearchSpace(workload, env.info, SpaceOptions(groups=(0, 4), unrolls=(1,), splits=(1,)))
    names = {r.constraint for r in space.rejections() if r.removed}
    assert "vector_transpose" in names


def _reasons(workload, candidate, env: Env) -> list[str]:
    verdict = check_candidate(workload, candidate, env.info)
    assert not verdict.ok
    return list(verdict.reasons)


def test_a_staged_kernel_does_not_transpose(env: Env) -> None:
    workload = ops.matmul(32, 48, 32)
    layouts = {b.name: L.identity(b.shape) for b in workload.buffers}
    layouts["B"] = L.permute((32, 48), (1, 0))
    knobs = {
        **baseline_knobs(workload),
        "vector_axis": "j",
        "vector": 4,
        "vector_transpose": "i",
        "block.i": 4,
        "block.j": 4,
    }
    # B[k, j] under [j, k] is not contiguous along j, and not indexed by i:
    # no input can be read across the vector along i
    reasons = _reasons(workload, Candidate.make(layouts, knobs), env)
    assert any("vector_transpose" in r for r in reasons)


def test_the_standard_starts_hold_the_identity_register_transpose(env: Env) -> None:
    space = SearchSpace(ops.transpose((512, 512)), env.info)
    starts = standard_candidates(space, 8)
    transposed = [c for c in starts if c.knob("vector_transpose")]
    assert transposed, [c.describe() for c in starts]
    assert all(layout.is_identity for _, layout in transposed[0].layouts)


# -- a panel: transposed along a reduce axis into private memory, rows walked ----------


def _scores(b: int, i: int, j: int, k: int) -> ops.Workload:
    return ops.Workload.define(
        "scores",
        "S[b, i, j] += Q[b, i, k] * K[b, j, k]",
        {"b": b, "i": i, "j": j, "k": k},
        {"Q": (b, i, k), "K": (b, j, k)},
    )


def _panel(workload: ops.Workload, layouts: dict | None = None, **knobs) -> Candidate:
    base = {b.name: L.identity(b.shape) for b in workload.buffers}
    return Candidate.make(
        {**base, **(layouts or {})},
        {**baseline_knobs(workload), "vector_axis": "j", "vector_transpose": "k", **knobs},
    )


@pytest.mark.parametrize(
    ("shape", "knobs"),
    [
        ((2, 16, 32, 32), {"vector": 16, "block.j": 32, "block.i": 8}),
        # tails along the rows walked (9 by 4) and the columns (40 by 16)
        ((2, 9, 40, 16), {"vector": 8, "block.j": 16, "block.i": 4}),
        # a panel of two heads, the reduce loop unrolled, work-groups
        ((3, 12, 32, 32), {"vector": 8, "block.j": 8, "block.i": 3, "block.b": 2, "unroll": 2}),
        (
            (2, 12, 32, 32),
            {"vector": 4, "block.j": 8, "block.i": 4, "group.j": 2, "group.i": 1, "group.b": 1},
        ),
    ],
)
def test_a_panel_along_the_reduce_axis_computes_attention_scores(
    env: Env, shape: tuple[int, ...], knobs: dict
) -> None:
    """``K[b, j, k]`` holds runs along ``k`` only: each work-item reads its
    block of ``K`` in vectors along ``k``, transposes them in registers into
    a private panel, then walks every block of rows ``i`` over it, one
    launch, nothing packed."""
    workload = _scores(*shape)
    candidate = _panel(workload, **knobs)
    assert SearchSpace(workload, env.info).check(candidate).ok
    program = lower(workload, candidate, env.info)
    assert program.pack == () or all(launch.name.startswith(("Q", "K")) for launch in program.pack)
    source = program.source
    assert "PK[" in source and "shuffle2" in source and "for (int i_w = 0;" in source
    compute = program.compute[0]
    assert compute.global_size[1] == 1  # one work-item along the walked rows
    inputs = workload.make_inputs(3)
    outputs, _ = run(env, program, inputs, build(env, program))
    np.testing.assert_allclose(outputs["S"], workload.reference(inputs)["S"], rtol=1e-5, atol=1e-4)


def test_a_matmul_reads_a_transposed_right_operand_through_a_panel(env: Env) -> None:
    """``B[k, j]`` laid out as ``[j, k]``: the panel holds a block of its
    columns over all of ``k``, and the work-item walks the rows of ``C``."""
    workload = ops.matmul(20, 48, 32)
    candidate = _panel(
        workload, {"B": L.permute((32, 48), (1, 0))}, vector=16, **{"block.j": 16, "block.i": 8}
    )
    assert check_candidate(workload, candidate, env.info).ok
    program = lower(workload, candidate, env.info)
    inputs = workload.make_inputs(4)
    outputs, _ = run(env, program, inputs, build(env, program))
    np.testing.assert_allclose(outputs["C"], workload.reference(inputs)["C"], rtol=1e-5, atol=1e-4)


def test_the_rules_bound_a_panel_and_keep_it_to_inputs_without_runs(env: Env) -> None:
    # a panel of 32 columns over 256 values of k (32 KiB) is over the budget
    big = _scores(1, 8, 32, 256)
    over = _reasons(big, _panel(big, vector=16, **{"block.j": 32, "block.i": 8}), env)
    assert any("a private panel of 32768 bytes, over the budget of 16384" in r for r in over)
    assert check_candidate(big, _panel(big, vector=16, **{"block.j": 16, "block.i": 8}), env.info)
    # K laid out as [b, k, j] serves the vector directly: nothing to transpose
    workload = _scores(2, 8, 32, 16)
    direct = _panel(
        workload, {"K": L.permute((2, 32, 16), (0, 2, 1))}, vector=16, **{"block.j": 16}
    )
    assert any("nothing to transpose" in r for r in _reasons(workload, direct, env))
    # a reduce axis is read across, never the vector axis itself
    across = _panel(workload, vector=16, vector_axis="k", vector_transpose="")
    assert any("vector_axis 'k' is not one of" in r for r in _reasons(workload, across, env))
    # without the panel (or a pack), identity layouts serve no vector along j
    plain = Candidate.make(
        direct.layout_map | {"K": L.identity((2, 32, 16))},
        {**direct.knob_map, "vector_transpose": ""},
    )
    assert any("vector_access" in r or "VectorAccess" in r for r in _reasons(workload, plain, env))


def test_attention_scores_start_from_a_panel_with_nothing_packed(env: Env) -> None:
    """The third start of ``S = Q K^T`` (after the packed one and its twin
    that packs ``K`` alone) keeps every layout and holds ``K`` in a panel."""
    info = cpu_form(env.info)  # the start's CPU form (a GPU's: test_lockstep_starts)
    workload = _scores(2, 16, 64, 32)
    starts = standard_candidates(SearchSpace(workload, info), 3)
    panel = starts[2]
    assert panel.knob("vector_transpose") == "k"
    assert all(layout.is_identity for _, layout in panel.layouts)
    assert not starts[0].knob("vector_transpose") and not starts[1].knob("vector_transpose")
    program = lower(workload, panel, info)
    inputs = workload.make_inputs(6)
    outputs, _ = run(env, program, inputs, build(env, program))
    np.testing.assert_allclose(outputs["S"], workload.reference(inputs)["S"], rtol=1e-5, atol=1e-4)
