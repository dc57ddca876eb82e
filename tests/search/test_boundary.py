"""A tuning job ranks candidates by their price under its boundary policy."""

from __future__ import annotations

import math
from pathlib import Path

import optuna
import pytest

import laytune
from laytune.exceptions import BoundaryError, TuningError
from laytune.records import open_database
from laytune.runners import MeasureConfig
from laytune.search import TuneOptions
from laytune.space import SpaceOptions
from tests.search import worker

#: identity and transposed layouts of X and Y, few knobs: 8 or so candidates
SMALL = SpaceOptions(
    families=("identity", "permute"), vectors=(1,), blocks=(1,), groups=(0,), unrolls=(1,)
)
QUICK = MeasureConfig(warmup=1, repeats=3)
pytestmark = pytest.mark.xdist_group("boundary")  # one worker runs the shared job


def _tune(url: str, boundary=None):
    options = TuneOptions(
        strategy="exhaustive",
        trials=1000,
        space=SMALL,
        measure=QUICK,
        warm_start=0,
        boundary=boundary,
    )
    return laytune.tune(worker.WORKLOAD, options=options, database=url, progress=False)


@pytest.fixture(scope="module")
def fixed(tmp_path_factory: pytest.TempPathFactory):
    """A default (fixed-boundary) exhaustive job: its database URL and result."""
    url = f"sqlite:///{tmp_path_factory.mktemp('boundary') / 'fixed.db'}"
    return url, _tune(url)


def _expected_price(record, free: set[str]) -> float:
    """Compute plus the record's own pack/unpack times of every buffer not in
    its logical layout and not free: what a fixed boundary charges."""
    layouts = record.candidate.layout_map
    charged = 0.0
    for direction in ("pack", "unpack"):
        for timing in record.result[f"{direction}_times"]:
            name = timing["buffer"]
            if name not in free and not layouts[name].is_identity:
                charged += timing["value_s"]
    return record.compute_s + charged


@pytest.mark.slow
def test_a_fixed_boundary_job_ranks_by_pack_compute_and_unpack(fixed) -> None:
    url, result = fixed
    db = open_database(url)
    records = [r for r in db.records(workload=worker.WORKLOAD) if r.ok]
    assert len(records) > 4
    converting = [r for r in records if not all(lay.is_identity for _, lay in r.candidate.layouts)]
    assert converting  # the space holds transposed layouts, whose packs cost time
    for record in records:
        price = record.objective
        assert price is not None and price.boundary == result.boundary
        assert record.value_s == pytest.approx(_expected_price(record, set()))
        assert record.compute_s == record.result["value_s"]
    for record in converting:
        assert record.value_s > record.compute_s  # never ranked by the kernel alone
    # the study was told the price, not the kernel's time
    study = optuna.load_study(study_name=result.study_name, storage=db.optuna_storage())
    by_candidate = {r.candidate.canonical_json(): r for r in records}
    told = [t for t in study.trials if t.state.name == "COMPLETE" and math.isfinite(t.value)]
    assert told
    for trial in told:
        record = by_candidate[trial.user_attrs["candidate"]]
        assert trial.value == pytest.approx(record.value_s)
    cheapest = min(records, key=lambda r: _expected_price(r, set()))
    assert result.best.candidate == cheapest.candidate
    assert "end to end" in result.summary()
    frame = result.trials
    ok = frame[frame["status"] == "ok"]
    assert (ok["time_s"] >= ok["kernel_s"]).all()
    assert (ok["time_s"] - ok["kernel_s"] - ok["conversions_s"]).abs().max() < 1e-12


@pytest.mark.slow
def test_a_free_boundary_job_ranks_by_the_kernel_in_a_study_of_its_own(fixed) -> None:
    url, first = fixed
    free = _tune(url, boundary={"X": "free", "Y": "free"})
    assert free.study_name != first.study_name and "free=X,Y" in free.study_name
    assert free.measured == 0  # the records are shared: nothing is measured twice
    records = [r for r in open_database(url).records(workload=worker.WORKLOAD) if r.ok]
    fastest = min(records, key=lambda r: (r.compute_s, r.id))
    assert free.best.candidate == fastest.candidate
    assert free.best.value_s == fastest.compute_s
    assert free.best.objective.charges == ()
    # one buffer free: only the other one's conversion is charged
    half = _tune(url, boundary={"X": "free"})
    assert half.measured == 0
    cheapest = min(records, key=lambda r: _expected_price(r, {"X"}))
    assert half.best.candidate == cheapest.candidate
    assert half.best.value_s == pytest.approx(_expected_price(cheapest, {"X"}))


def test_a_boundary_that_charges_needs_the_conversions_measured(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}"
    unmeasured = MeasureConfig(warmup=1, repeats=3, measure_conversions=False)
    with pytest.raises(TuningError, match="measure_conversions is off"):
        laytune.tune(
            worker.WORKLOAD, options=TuneOptions(measure=unmeasured), database=url, progress=False
        )
    with pytest.raises(BoundaryError, match="'W', which is not a buffer"):
        laytune.tune(
            worker.WORKLOAD,
            options=TuneOptions(boundary={"W": "free"}),
            database=url,
            progress=False,
        )
