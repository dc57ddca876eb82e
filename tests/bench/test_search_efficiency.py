"""The search-efficiency replays on a small space with synthetic times (no
measurement): every strategy evaluates distinct candidates up to its budget,
and the figures are read off the replays as the report states them."""

from __future__ import annotations

import math

import pytest

from bench._replay import (
    Oracle,
    best_at,
    held_out_spearman,
    replay_model,
    replay_sampler,
    trials_to,
)
from laytune import ops
from laytune.runners import default_device
from laytune.search import candidate_features
from laytune.space import SearchSpace, SpaceOptions

SMALL = SpaceOptions(
    families=("identity", "permute"),
    families_per_buffer={"C": ("identity",)},
    vectors=(1, 4),
    blocks=(1, 2, 4),
    groups=(0,),
    splits=(1,),
    unrolls=(1,),
    local_families=("identity",),
)


@pytest.fixture(scope="module")
def synthetic() -> tuple[SearchSpace, list, dict[str, float]]:
    """A small matmul space whose times fall with the register tile and rise
    with the stride along the reduce loop; a few candidates fail."""
    workload = ops.matmul(32, 32, 32)
    space = SearchSpace(workload, default_device().info, SMALL)
    candidates = list(space.enumerate())
    values = {}
    for k, candidate in enumerate(candidates):
        f = candidate_features(workload, space.device, candidate)
        seconds = 1e-3 * 2.0 ** (f["in0.reduce_stride"] + f["in1.reduce_stride"] - f["tile"])
        values[candidate.key] = math.inf if k % 17 == 5 else seconds
    return space, candidates, values


def test_figures_read_off_a_replay() -> None:
    run = [5.0, 3.0, math.inf, 1.05, 1.0]
    assert trials_to(run, 1.1) == 4
    assert trials_to(run, 0.5) is None
    assert best_at(run, 2) == 3.0 and best_at(run, 32) == 1.0


@pytest.mark.parametrize("strategy", ["random", "tpe-mv", "model"])
def test_replays_evaluate_distinct_candidates_up_to_the_budget(synthetic, strategy: str) -> None:
    space, _, values = synthetic
    oracle = Oracle(values)
    if strategy == "model":
        run = replay_model(space, oracle, seed=0, budget=24, pool=64)
    else:
        run = replay_sampler(space, oracle, strategy, seed=0, budget=24)
    assert len(run) == 24
    assert run[0] == values[space.identity().key]  # the identity first
    assert set(oracle.values) == set(values)  # every answer came from the records


@pytest.mark.parametrize("strategy", ["random", "model"])
def test_replays_take_tunes_standard_starts_right_after_the_identity(
    synthetic, strategy: str
) -> None:
    space, candidates, values = synthetic
    starts = [c for c in candidates if c.key != space.identity().key][-3:]
    oracle = Oracle(values)
    if strategy == "model":
        run = replay_model(space, oracle, seed=1, budget=12, pool=64, starts=starts)
    else:
        run = replay_sampler(space, oracle, strategy, seed=1, budget=12, starts=starts)
    assert len(run) == 12
    assert run[:4] == [values[c.key] for c in (space.identity(), *starts)]


def test_the_model_predicts_held_out_synthetic_times(synthetic) -> None:
    space, candidates, values = synthetic
    rho, trained, tested = held_out_spearman(space, values, candidates)
    assert trained == len(candidates) // 2 and tested > 10
    assert rho > 0.8


def test_an_oracle_reads_back_only_its_device_and_hosts_rows(tmp_path, synthetic) -> None:
    """ "AMD EPYC" names Zen 3 and Zen 5 hosts alike: a reference file's rows
    of another host (or of none named) are not replayed as this one's."""
    import json
    from types import SimpleNamespace

    from bench._report import host_cpu

    candidates = synthetic[1]
    device = SimpleNamespace(key="dev-1")
    rows = [
        {"device": "dev-1", "host": host_cpu()},  # this device on this host
        {"device": "dev-1", "host": f"{host_cpu()} (another)"},  # another host, same device key
        {},  # written before rows named their origin
        {"device": "dev-2", "host": host_cpu()},  # another device
    ]
    path = tmp_path / "ref.jsonl"
    path.write_text(
        "".join(
            json.dumps({"key": c.key, "value_s": 1e-3 * k, "candidate": c.canonical_json(), **o})
            + "\n"
            for k, (c, o) in enumerate(zip(candidates[: len(rows)], rows, strict=True), 1)
        )
    )
    oracle = Oracle.load(path, device=device)
    assert oracle.values == {candidates[0].key: 1e-3} and oracle.skipped == 3
    assert list(oracle.candidates) == [candidates[0].key]
    assert len(Oracle.load(path).values) == 4  # without a device: every row
