"""Records whose candidates lack knobs: written before a knob existed, or by a
user's own candidates (``bench.plan_network``'s fixed conv2d candidates name
only ``block.ow``). They are read with each missing knob at its default, as
the code generator reads them, and the model strategy learns from them
instead of falling back to random sampling."""

from __future__ import annotations

import itertools
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest

from laytune import ops
from laytune.exceptions import ModelFallbackWarning
from laytune.layout import identity
from laytune.records import Boundary, Record, open_database
from laytune.search import candidate_features, params_of
from laytune.search._model_search import ModelProposals
from laytune.search._pricing import JobPricing
from laytune.space import KNOB_SPECS, Candidate, SearchSpace, SpaceOptions, is_default

CONV = ops.conv2d(1, 8, 6, 6, 8, 3, padding=1)
SMALL = SpaceOptions(  # 96 candidates: the model's pool is the whole space
    families=("identity",),
    vectors=(1, 4),
    blocks=(1, 4),
    groups=(0,),
    splits=(1,),
    unrolls=(1,),
    local_families=("identity",),
)
IDENTITY = {b.name: identity(b.shape) for b in CONV.buffers}


def _as_old(candidate: Candidate) -> Candidate:
    """``candidate`` as a record that predates its default-valued knobs holds it."""
    knobs = {k: v for k, v in candidate.knobs if not is_default(k, v)}
    return Candidate.make(candidate.layout_map, knobs, dict(candidate.pad_values))


def _old_candidates(device, count: int) -> list[tuple[Candidate, Candidate]]:
    """(complete, old) pairs of ``count`` candidates of CONV's identity layouts
    that each lack some knob, ``local_stage`` among them."""
    space = SearchSpace(CONV, device.info, SMALL)
    found = []
    for candidate in space.candidates_with(IDENTITY):
        old = _as_old(candidate)
        if "local_stage" not in old.knob_map and old.knobs:
            found.append((candidate, old))
        if len(found) == count:
            break
    return found


def test_a_candidate_without_a_knob_is_read_at_the_default(device) -> None:
    """Its features are those of the kernel it lowers to, and the space finds
    it (a forced start, a warm start, the parent of the model's neighbours)."""
    ((complete, old),) = _old_candidates(device, 1)
    missing = set(complete.knob_map) - set(old.knob_map)
    assert "local_stage" in missing
    assert {spec.name for spec in KNOB_SPECS} >= {name.split(".")[0] for name in missing}
    assert candidate_features(CONV, device.info, old) == candidate_features(
        CONV, device.info, complete
    )
    found = params_of(SearchSpace(CONV, device.info, SMALL), old)
    assert found is not None and found[1] == complete


def test_the_model_strategy_builds_its_cost_model_from_old_records(tmp_path: Path, device) -> None:
    pairs = _old_candidates(device, 8)
    db = open_database(f"sqlite:///{tmp_path / 'old.db'}")
    for k, (_, old) in enumerate(pairs):
        db.add(Record(CONV.key, device.key, old, "ok", value_s=1e-4 * (k + 1)))
    job = SimpleNamespace(
        database=db,
        workload=CONV,
        device=device,
        space=SearchSpace(CONV, device.info, SMALL),
        pricing=JobPricing(db, device, CONV, Boundary.default(CONV)),
        trials=16,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", ModelFallbackWarning)
        proposals = ModelProposals(job, seed=0, batch=4)
        batch = list(itertools.islice(proposals, 4))
    assert proposals.search is not None and proposals.search.model.ready
    observed = [seconds for _, seconds in proposals.search.observed.values()]
    assert sorted(observed) == pytest.approx([1e-4 * (k + 1) for k in range(len(pairs))])
    assert len(batch) == 4
    assert not {c.key for c in batch} & {old.key for _, old in pairs}
