"""The model strategy: deterministic features, a cost model trained on real
records, batches with exploration, transfer from other shapes, and the
fallback to random sampling when the model cannot be built."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import laytune
from laytune import ops
from laytune.exceptions import ModelFallbackWarning, TuningError
from laytune.records import open_database
from laytune.runners import default_device
from laytune.search import (
    STRATEGIES,
    CostModel,
    ModelSearch,
    Observation,
    TuneOptions,
    candidate_features,
    pool_for,
    spearman,
    transfer_observations,
)
from laytune.search._model import OTHER_OPERATOR, OTHER_SHAPE
from laytune.search._model_search import ModelProposals, _Draw, _ordered
from laytune.search._strategies import _replayed
from laytune.space import SearchSpace, SpaceOptions
from tests.search import worker

MATMUL = ops.matmul(32, 32, 32)
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


#: one worker runs the module's tests, so its module fixture is built once
#: (tests of one module spread over both workers built it once each, or more)
pytestmark = pytest.mark.xdist_group("model")


@pytest.fixture(scope="module")
def device():
    return default_device()


@pytest.fixture(scope="module")
def space(device) -> SearchSpace:
    return SearchSpace(MATMUL, device.info, SMALL)


@pytest.fixture(scope="module")
def measured_url(tmp_path_factory: pytest.TempPathFactory, device) -> str:
    """A records database holding a dozen measured candidates of the 32^3 matmul."""
    url = f"sqlite:///{tmp_path_factory.mktemp('model') / 'r.db'}"
    options = TuneOptions(trials=12, batch=6, strategy="random", space=SMALL, warm_start=0)
    laytune.tune(MATMUL, device, options=options, database=url, progress=False)
    return url


def _synthetic(search: ModelSearch, count: int) -> None:
    """``count`` observations whose time falls with the register tile."""
    for _ in range(count):
        candidate = search.draw()
        features = search.features(candidate)
        assert features is not None
        search.observe(candidate, 1e-3 * 2.0 ** -features["tile"] * (1 + features["in0.padding"]))


def test_features_are_deterministic_and_see_the_layouts(space: SearchSpace, device) -> None:
    candidates = list(space.enumerate())
    first = [candidate_features(MATMUL, device.info, c) for c in candidates[:40]]
    again = [candidate_features(MATMUL, device.info, c) for c in candidates[:40]]
    assert first == again
    assert all(all(math.isfinite(v) for v in row.values()) for row in first)
    identity = candidate_features(MATMUL, device.info, space.identity())
    # matmul A[i, k]: along the reduce loop k, one element apart in row-major A
    assert identity["in0.reduce_stride"] == 0.0  # log2(1)
    assert identity["in0.reduce_contiguous"] == 1.0
    transposed = next(
        c
        for c in candidates
        if not c.layout("A").is_identity and c.knob_map == dict(space.identity().knobs)
    )
    moved = candidate_features(MATMUL, device.info, transposed)
    assert moved["in0.reduce_stride"] == math.log2(32)  # [k, i]: a row of 32 apart
    assert moved["in0.reduce_contiguous"] == 0.0


def test_spearman_ranks_and_ties() -> None:
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 2, 2, 3], [1, 2, 2, 3]) == pytest.approx(1.0)
    assert math.isnan(spearman([1, 1, 1], [1, 2, 3]))
    with pytest.raises(TuningError):
        spearman([1, 2], [1])


def test_failures_teach_the_model_they_are_slow() -> None:
    rows = [Observation({"x": float(k)}, 1e-3 * (k + 1), 1.0, "own") for k in range(8)]
    rows.append(Observation({"x": 20.0}, None, 1.0, "own"))
    model = CostModel()
    assert model.fit(rows)
    slowest_measured, failed = model.predict([{"x": 7.0}, {"x": 20.0}])
    assert failed > slowest_measured - 0.1
    assert not CostModel().fit(rows[:3])  # too few measured rows to learn from


@pytest.mark.slow
def test_the_model_trains_on_real_records(measured_url: str, space: SearchSpace, device) -> None:
    database = open_database(measured_url)
    records = database.records(workload=MATMUL, device=device)
    assert len(records) >= 10
    search = ModelSearch(space, seed=0, pool=64)
    for record in records:
        search.observe(record.candidate, record.value_s if record.ok else None)
    assert search.train()
    measured = [r for r in records if r.ok]
    predicted = search.model.predict([search.features(r.candidate) for r in measured])
    # on what it was trained on, it ranks the times right
    assert spearman(predicted, [r.value_s for r in measured]) > 0.5
    batch = search.propose(8, exclude=set())
    assert len(batch) == 8
    assert not {c.key for c in batch} & {r.candidate.key for r in records}


def test_batches_are_the_best_predicted_plus_exploration(space: SearchSpace) -> None:
    search = ModelSearch(space, seed=1, pool=96)
    untrained = search.propose(8)
    assert search.explored == untrained  # no model yet: every pick is a random draw
    _synthetic(search, 24)
    batch = search.propose(8)
    assert len(batch) == 8 and len({c.key for c in batch}) == 8
    assert len(search.explored) == 1 and search.explored[0] == batch[-1]
    exploited = batch[:-1]
    tiles = [search.features(c)["tile"] for c in exploited]
    assert min(tiles) >= 2.0  # the model learned that larger register tiles are faster


def test_an_untrained_batch_draws_only_what_it_proposes(space: SearchSpace) -> None:
    """Without a model a pool ranks nothing: the first batch of a job draws
    its candidates alone (at most two tries each), not a pool of hundreds."""
    calls = []

    class Counting:
        def __init__(self, inner: SearchSpace) -> None:
            self.inner = inner

        def __getattr__(self, name: str):
            return getattr(self.inner, name)

        def suggest(self, trial):
            calls.append(1)
            return self.inner.suggest(trial)

        def size_up_to(self, cap: int) -> int:
            return cap  # more than four pools: drawn, not enumerated

    search = ModelSearch(Counting(space), seed=3, pool=96)
    batch = search.propose(8)
    assert len(batch) == 8 and len({c.key for c in batch}) == 8
    assert search.explored == batch
    assert 8 <= len(calls) <= 16
    _synthetic(search, 24)
    calls.clear()
    search.propose(8)
    assert len(calls) >= 96 - 8  # trained: a whole pool is drawn and ranked


def _asked(space: SearchSpace, candidate) -> tuple[dict, dict]:
    """The params ``space.suggest`` asks to give ``candidate``, and their choices."""
    replayed = _replayed(space, candidate)
    assert replayed is not None
    return replayed[0].params, replayed[0].choices


def test_a_step_moves_one_size_to_a_value_beside_its_own(space: SearchSpace) -> None:
    search = ModelSearch(space, seed=0, pool=64)
    parent = next(c for c in (search.draw() for _ in range(200)) if c.knob("block.j") == 2)
    params, choices = _asked(space, parent)
    steps = search.steps(parent)
    assert steps and len({c.key for c in steps}) == len(steps)
    moved = set()
    for step in steps:
        other, _ = _asked(space, step)
        changed = [name for name in params if other.get(name) != params[name]]
        assert len(changed) == 1, changed
        (name,) = changed
        assert _ordered(choices[name])
        assert abs(choices[name].index(other[name]) - choices[name].index(params[name])) == 1
        moved.add((name.split("|")[0], other[name]))
    assert ("block.j", 1) in moved and ("block.j", 4) in moved  # both sides of 2


def test_a_neighbour_of_a_size_is_often_the_value_beside_it(space: SearchSpace) -> None:
    """A re-drawn size takes a value beside the parent's half the time (and a
    uniform draw otherwise); a choice of names stays a uniform draw."""
    rng = np.random.default_rng(0)
    sizes = [1, 2, 4, 8, 16, 32]
    beside = sum(
        _Draw(rng, {"block.j": 4}, change=0).suggest_categorical("block.j", sizes) in (2, 8)
        for _ in range(400)
    )
    assert 0.5 < beside / 400 < 0.75  # 1/2 stepped, plus 1/3 of the uniform half
    names = ["a", "b", "c", "d"]
    drawn = {_Draw(rng, {"o": "b"}, change=0).suggest_categorical("o", names) for _ in range(64)}
    assert drawn == set(names)
    assert not _ordered([True, False]) and not _ordered([4, 2, 1]) and _ordered([1, 2, 4])


def test_a_first_batch_steps_from_the_first_lead(space: SearchSpace) -> None:
    """Before anything is measured (the starts in flight), a batch is the
    steps of the first start, the best guess, and one uniform draw."""
    probe = ModelSearch(space, seed=0, pool=64)
    lead = next(c for c in (probe.draw() for _ in range(200)) if c.knob("block.j") == 2)
    search = ModelSearch(space, seed=4, pool=96, leads=[lead])
    steps = {c.key for c in search.steps(lead)}
    batch = search.propose(8)
    assert len(batch) == 8 and len({c.key for c in batch}) == 8
    taken = min(7, len(steps))
    assert {c.key for c in batch[:taken]} <= steps
    assert search.explored == batch[taken:]


def test_a_trained_batch_steps_from_the_fastest_measured(space: SearchSpace) -> None:
    search = ModelSearch(space, seed=5, pool=96)
    _synthetic(search, 24)
    incumbent = search.incumbent()
    fastest = min((s, c.key) for c, s in search.observed.values() if s is not None)
    assert incumbent is not None and incumbent.key == fastest[1]
    steps = {c.key for c in search.steps(incumbent)} - set(search.observed)
    batch = search.propose(8)
    stepped = [c for c in batch[:4] if c.key in steps]
    assert len(stepped) == min(4, len(steps))
    assert not {c.key for c in batch} & set(search.observed)


def test_a_short_job_ranks_a_pool_in_proportion_to_its_budget(space: SearchSpace) -> None:
    """A job of a few trials picks a few candidates: its pool is 16 per trial
    of its budget (at least 64), and a job of 32 trials or more ranks the
    whole default pool."""
    nothing = SimpleNamespace(records=lambda **_: [])  # no records to transfer from
    for trials, size in ((2, 64), (8, 128), (16, 256), (32, 512), (500, 512)):
        job = SimpleNamespace(
            space=space, trials=trials, database=nothing, workload=space.workload, device=None
        )
        proposals = ModelProposals(job, seed=0, batch=4)
        assert proposals.search is not None and proposals.search.pool_size == size, trials
    assert pool_for(10**6) == ModelSearch.DEFAULT_POOL


def test_a_pool_keeps_the_draws_no_batch_took(space: SearchSpace) -> None:
    """A job's next pool is last pool's uniform draws less those taken, with
    fresh neighbours of the best and only as many new draws as were taken;
    nothing in it is observed or excluded."""
    size = 8
    search = ModelSearch(space, seed=2, pool=size)
    first = search.pool(set())
    assert search._all == [] and len(first) == size  # the space is more than four pools
    taken, excluded, left = first[:2], {first[2].key}, {c.key for c in first[3:]}
    for k, candidate in enumerate(taken):
        search.observe(candidate, 1e-3 * (k + 1))
    second = search.pool(excluded)
    keys = {c.key for c in second}
    assert len(second) == size and len(keys) == size
    assert not keys & ({c.key for c in taken} | excluded)
    assert left <= keys  # every draw no batch took is kept


@pytest.mark.slow
def test_transfer_learns_from_other_shapes_and_operators(measured_url: str, device) -> None:
    database = open_database(measured_url)
    other_shape = transfer_observations(database, ops.matmul(64, 64, 64), device)
    assert other_shape and {o.weight for o in other_shape} == {OTHER_SHAPE}
    assert {o.group for o in other_shape} == {MATMUL.key}
    other_op = transfer_observations(database, ops.max_pool2d(1, 4, 8, 8, 2, 2), device)
    assert {o.weight for o in other_op} == {OTHER_OPERATOR}
    assert transfer_observations(database, MATMUL, device) == []  # its own records are not transfer
    # a cold start on the new shape: the model is ready before anything of it is measured
    cold = ModelSearch(
        SearchSpace(ops.matmul(64, 64, 64), device.info, SMALL), transfer=other_shape
    )
    assert cold.train()


def test_a_job_that_ends_before_the_model_trains_never_imports_scikit_learn(
    tmp_path: Path,
) -> None:
    """Importing scikit-learn takes about a second; a job whose batches end
    before the model has four measurements to learn from does not pay it.
    Nor does it import pandas (half a second) until its result's trials are
    read: ``laytune tune`` prints a summary and never reads them."""
    script = tmp_path / "short.py"
    script.write_text(
        "import sys\n"
        "import laytune\n"
        "from laytune import ops\n"
        "if __name__ == '__main__':\n"
        "    options = laytune.TuneOptions(trials=2, batch=2, strategy='model', warm_start=0)\n"
        "    result = laytune.tune(ops.copy((16, 16)), options=options,"
        f" database='sqlite:///{tmp_path}/s.db', progress=False)\n"
        "    result.summary()\n"
        "    print('sklearn' in sys.modules, 'pandas' in sys.modules)\n"
        "    read = len(result.trials) == result.measured + result.references\n"
        "    print(read, 'pandas' in sys.modules)\n"
    )
    # workers kept an hour: the script still exits at its end, its kept
    # workers closed before multiprocessing joins its children (it waited
    # for the keep time in that join when multiprocessing's handler ran first)
    environment = {**os.environ, "LAYTUNE_KEEP_WORKERS_S": "3600"}
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=environment
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-2:] == ["False False", "True True"]


@pytest.mark.slow
def test_a_model_that_cannot_be_built_falls_back_to_random_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, device
) -> None:
    monkeypatch.setitem(sys.modules, "sklearn", None)  # the model's library cannot be imported
    options = TuneOptions(
        trials=4, batch=2, strategy="model", space=worker.OPTIONS, warm_start=0, starts=0
    )
    url = f"sqlite:///{tmp_path / 'f.db'}"
    with pytest.warns(ModelFallbackWarning, match="falls back to random sampling"):
        result = laytune.tune(
            worker.WORKLOAD, device, options=options, database=url, progress=False
        )
    assert result.measured == 4  # the random sampler went on
    assert result.stop_reason == "trial budget (4) spent"


@pytest.mark.slow
def test_model_strategy_tunes_a_new_shape_from_the_model_of_another(
    measured_url: str, device
) -> None:
    """Runs last: it adds the new shape's records to the module's database."""
    assert {"model", "tpe-mv"} <= set(STRATEGIES)
    options = TuneOptions(trials=8, batch=4, strategy="model", space=SMALL, warm_start=0, starts=2)
    target = ops.matmul(32, 32, 16)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # the model is built: no fallback
        result = laytune.tune(
            target, device, options=options, database=measured_url, progress=False
        )
    assert result.measured == 8 and result.best is not None
    assert set(result.trials["strategy"]) == {"model"}
