"""The conversion space as optuna sees it: one study holds every candidate."""

from __future__ import annotations

import optuna
import pytest

from laytune.layout import block, identity, permute
from laytune.search import params_of
from laytune.space import ConversionSpace, ConversionWorkload
from tests.space.conftest import make_device

CONV2D_X = (1, 16, 14, 14)  # conv2d's input, channels blocked by 8 (NCHW8c)


@pytest.mark.parametrize("nontemporal", [False, True])
@pytest.mark.parametrize(
    "conversion",
    [
        ConversionWorkload(block(CONV2D_X, 1, 8), identity(CONV2D_X)),  # unpacking Y
        ConversionWorkload(identity(CONV2D_X), block(CONV2D_X, 1, 8)),  # packing X
        ConversionWorkload(identity((16, 24)), permute((16, 24), (1, 0))),
        ConversionWorkload(identity((1, 8, 2, 2)), block((1, 8, 2, 2), 1, 4)),
    ],
    ids=["nchw8c-to-nchw", "nchw-to-nchw8c", "transpose", "tiny-nchw4c"],
)
def test_every_candidate_is_suggested_in_one_study(
    conversion: ConversionWorkload, nontemporal: bool
) -> None:
    """Optuna keeps one choice list per parameter name in a study: a knob
    that offers one value under one kernel kind and another under another
    (conv2d's unpack: ``items`` 2 for every tile kernel, 1 for a gather of
    vectors of 2) must not ask both under one name."""
    builtins = ("nontemporal_store",) if nontemporal else ()
    space = ConversionSpace(conversion, make_device(device_type="CPU", builtins=builtins))
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for candidate in space.enumerate():
        found = params_of(space, candidate)
        assert found is not None
        study.enqueue_trial(found[0])
        trial = study.ask()
        assert space.suggest(trial) == candidate
        study.tell(trial, 1.0)
    assert len(study.trials) == len(space)
    assert {c.knob("kernel") for c in space} >= {None, "gather", "tile"}
