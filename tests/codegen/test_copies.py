"""The staging copies and sub-group block reads: every ``copy`` variant, and
the unstaged ``subgroup`` knob, on random candidates of the search space,
run on the CPU runtimes against numpy; the instruction is in the source.

Sub-group block reads need ``cl_intel_subgroups`` (Intel's CPU runtime);
their tests are skipped where no device here reports it."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pyopencl as cl
import pytest

from laytune import ops
from laytune.codegen import lower
from laytune.device_info import DeviceInfo
from laytune.layout import identity, pad_every
from laytune.space import Candidate, SearchSpace, SpaceOptions, check_candidate
from tests.codegen.harness import Env, RandomTrial, build_in_series, run

INSTRUCTION = {
    "rows": "async_work_group_copy",
    "async_strided": "async_work_group_strided_copy",
    "async_contiguous": "async_work_group_copy",
    "subgroup_block": "intel_sub_group_block_read",
}

OPTIONS = SpaceOptions(max_block_points=16)


class CopyTrial(RandomTrial):
    """A random trial steered to one knob setting (``force``) and, most of
    the time, to identity or tile layouts (which the copies accept)."""

    def __init__(self, seed: int, force: dict[str, Any]) -> None:
        super().__init__(seed)
        self.force = force
        # one range per footprint: global layouts tiled like the staging tiles
        self.tiled = force.get("copy") == "async_contiguous"

    def suggest_categorical(self, name: str, choices: Any) -> Any:
        choices = list(choices)
        knob = name.split("|")[0]
        if knob in self.force and self.force[knob] in choices:
            return self.force[knob]
        if self.tiled and knob.startswith("layout:") and not knob.endswith(".local"):
            tiled = [c for c in choices if c.startswith("tile") and "(16, 16)" in c]
            if tiled:
                return tiled[0]
        if knob.startswith("layout:") and self.rng.random() < 0.7:
            plain = [c for c in choices if c.startswith(("identity", "tile"))]
            if plain:
                return self.rng.choice(plain)
        return super().suggest_categorical(name, choices)


@pytest.fixture(scope="module")
def intel_env() -> Env:
    for platform in cl.get_platforms():
        for device in platform.get_devices():
            if "cl_intel_subgroups" not in device.extensions.split():
                continue
            context = cl.Context([device])
            info = DeviceInfo.from_cl_device(device)
            if info.sub_group_sizes:
                return Env(device, context, cl.CommandQueue(context), info)
    pytest.skip("no OpenCL device here reports cl_intel_subgroups")


def _drawn(workload: ops.Workload, env: Env, force: dict[str, Any], seeds: int) -> list:
    space = SearchSpace(workload, env.info, OPTIONS)
    out = []
    for seed in range(seeds):
        candidate = space.suggest(CopyTrial(seed, force))
        knobs = candidate.knob_map
        if all(knobs[k] == v for k, v in force.items() if k != "subgroup") and (
            "subgroup" not in force or knobs["subgroup"]
        ):
            out.append(candidate)
    return list(dict.fromkeys(out))


def _verify(env: Env, workload: ops.Workload, candidates: list, needle: str) -> int:
    inputs = workload.make_inputs(3)
    expected = workload.reference(inputs)
    for index, candidate in enumerate(candidates):
        program = lower(workload, candidate, env.info)
        assert needle in program.source, program.source
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            outputs, _ = run(env, program, inputs, build_in_series(env, program, index))
        for name, want in expected.items():
            np.testing.assert_allclose(
                outputs[name], want, rtol=1e-4, atol=1e-4, err_msg=candidate.describe()
            )
    return len(candidates)


MATMUL = ops.matmul(32, 48, 32)


@pytest.mark.parametrize("copy", ["rows", "async_strided", "async_contiguous"])
def test_async_copies_match_the_reference(env: Env, copy: str) -> None:
    force = {"order": "logical", "local_stage": True, "copy": copy}
    candidates = _drawn(MATMUL, env, force, 12)
    assert _verify(env, MATMUL, candidates, INSTRUCTION[copy]) >= 1


def test_only_the_elementwise_copy_fills_a_window_halo(env: Env) -> None:
    """A convolution's window tiles overshoot the input (rows rounded up to
    4 elements): every other copy is refused, naming why."""
    workload = ops.conv2d(1, 3, 12, 20, 4, 3, stride=1, padding=0)
    force = {"order": "logical", "local_stage": True}
    staged = _drawn(workload, env, force, 4)[0]
    for copy in ("rows", "async_strided", "async_contiguous", "subgroup_block"):
        candidate = Candidate.make(staged.layout_map, {**staged.knob_map, "copy": copy})
        verdict = check_candidate(workload, candidate, env.info)
        assert not verdict.ok
        assert "only the elementwise copy fills zeros" in " ".join(verdict.reasons)


def test_subgroup_block_copy_matches_the_reference(intel_env: Env) -> None:
    workload = MATMUL
    force = {"order": "logical", "local_stage": True, "copy": "subgroup_block", "subgroup": 8}
    candidates = _drawn(workload, intel_env, force, 12)
    ran = _verify(intel_env, workload, candidates, "intel_sub_group_block_write")
    assert ran >= 1
    assert all(c.knob_map["subgroup"] in intel_env.info.sub_group_sizes for c in candidates)


@pytest.mark.parametrize(
    "workload",
    [ops.matmul(32, 48, 32), ops.relu((12, 16)), ops.bias_add((2, 8, 4, 16), axis=3)],
    ids=lambda w: w.key,
)
def test_subgroup_block_reads_match_the_reference(intel_env: Env, workload: ops.Workload) -> None:
    force = {"order": "logical", "local_stage": False, "subgroup": 8}
    candidates = _drawn(workload, intel_env, force, 10)
    assert _verify(intel_env, workload, candidates, "intel_sub_group_block_read") >= 1
    for c in candidates:
        assert "intel_reqd_sub_group_size" in lower(workload, c, intel_env.info).source


def _seed_candidate(env: Env, local_a: Any, copy: str) -> tuple[ops.Workload, Candidate]:
    """The auto memory planning seed's example on a matmul whose A tile is
    staged in ``__local`` memory with ``local_a``, copied with ``copy``."""
    workload = ops.matmul(32, 48, 32)
    # guard: the global layouts become identity below, and overcompute needs a padded one
    force = {"order": "logical", "local_stage": True, "copy": "rows", "pad_mode": "guard"}
    base = next(iter(_drawn(workload, env, force, 12)))
    layouts = {
        name: identity(layout.shape) if name != "A.local" else local_a
        for name, layout in base.layouts
    }
    knobs = {**base.knob_map, "copy": copy}
    return workload, Candidate.make(layouts, knobs)


def test_seed_003_pad_four_every_two_rows(env: Env) -> None:
    """Pad 4 elements every 2 rows: no constant row stride, so the strided
    copy refuses the tile, while one copy per row (row pointers) takes it;
    both kernels (the strided one on an identity tile) compute the matmul."""
    padded = pad_every((16, 16), rows=2, pad=4)
    workload, strided = _seed_candidate(env, padded, "async_strided")
    verdict = check_candidate(workload, strided, env.info)
    assert not verdict.ok
    text = " ".join(verdict.reasons)
    assert "StridedTileCopy" in text and "A.local" in text and "stride" in text
    _, rows = _seed_candidate(env, padded, "rows")
    assert check_candidate(workload, rows, env.info).ok
    _, plain = _seed_candidate(env, identity((16, 16)), "async_strided")
    assert _verify(env, workload, [rows], "async_work_group_copy") == 1
    assert _verify(env, workload, [plain], "async_work_group_strided_copy") == 1
