"""TuneOptions: checked values, and the old keywords of tune() as a shim."""

from __future__ import annotations

import dataclasses

import pytest

import laytune
from laytune import ops
from laytune.exceptions import ArgumentTypeError, TuningError
from laytune.runners import BaseBuilder, Device, MeasureConfig, default_device
from laytune.search import DEFAULT_MEASURE, TuneOptions
from laytune.search._options import options_from_keywords
from laytune.space import SpaceOptions

SMALL = SpaceOptions(families=("identity",))


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"strategy": "annealing"}, "unknown strategy 'annealing'"),
        ({"trials": 0}, "trials (0) and batch (8) must be positive"),
        ({"batch": 0}, "trials (64) and batch (0) must be positive"),
        ({"timeout": 0.0}, "timeout must be positive seconds, got 0.0"),
        ({"patience": 0}, "patience must be positive or None, got 0"),
        ({"warm_start": -1}, "warm_start (-1) and starts (None) must be >= 0"),
        ({"early_stop": 0.5}, "early_stop must be a factor >= 1 or None, got 0.5"),
        ({"measure": None}, "measure must be a MeasureConfig, got None"),
    ],
)
def test_invalid_options_name_the_value(fields: dict[str, object], message: str) -> None:
    with pytest.raises(TuningError) as caught:
        TuneOptions(**fields)  # type: ignore[arg-type]
    assert message in str(caught.value)


def test_options_are_frozen_values() -> None:
    options = TuneOptions(trials=8, space=SMALL)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.trials = 9  # type: ignore[misc]
    assert options.replace(trials=9) == TuneOptions(trials=9, space=SMALL)
    assert options == TuneOptions(trials=8, space=SMALL) and hash(options) == hash(
        TuneOptions(trials=8, space=SMALL)
    )
    assert TuneOptions().measure == DEFAULT_MEASURE
    with pytest.raises(TuningError, match="trials"):
        options.replace(trials=0)


def test_the_old_keywords_build_the_same_options_and_warn() -> None:
    config = MeasureConfig(repeats=3)
    with pytest.warns(DeprecationWarning, match=r"tune\(trials=, strategy=, measure=\)"):
        built = options_from_keywords(None, {"trials": 5, "strategy": "random", "measure": config})
    assert built == TuneOptions(trials=5, strategy="random", measure=config)
    with pytest.warns(DeprecationWarning, match="TuneOptions"):
        on_top = options_from_keywords(TuneOptions(seed=3), {"batch": 2})
    assert on_top == TuneOptions(seed=3, batch=2)
    with pytest.warns(DeprecationWarning):  # the old options= held the space options
        assert options_from_keywords(SMALL, {"trials": 4}) == TuneOptions(trials=4, space=SMALL)
    with pytest.warns(DeprecationWarning):  # the old default of measure
        assert options_from_keywords(None, {"measure": None}).measure == DEFAULT_MEASURE


def test_tune_takes_the_old_keywords_through_the_shim() -> None:
    workload = ops.copy((8, 8))
    with pytest.warns(DeprecationWarning), pytest.raises(TuningError, match="annealing"):
        laytune.tune(workload, strategy="annealing", progress=False)
    with pytest.raises(ArgumentTypeError, match=r"unexpected keyword arguments \['trails'\]"):
        laytune.tune(workload, trails=3, progress=False)
    with pytest.raises(TuningError, match="options must be a TuneOptions"):
        laytune.tune(workload, options={"trials": 3}, progress=False)  # type: ignore[arg-type]


def test_tune_refuses_a_builder_for_another_device() -> None:
    here = default_device()
    elsewhere = Device(
        here.index,
        here.platform_index,
        here.device_index,
        dataclasses.replace(here.info, device_name="x"),
    )
    assert elsewhere.key != here.key

    class Elsewhere(BaseBuilder):
        device = elsewhere  # type: ignore[assignment]

        def build(self, batch):  # never called
            raise AssertionError

    with pytest.raises(TuningError, match=r"works on x \("):
        laytune.tune(ops.copy((8, 8)), here, builder=Elsewhere(), progress=False)
