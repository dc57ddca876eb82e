"""freeze(..., boundaries=): the best for the caller a workload has."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import laytune
from laytune import ops
from laytune.exceptions import BoundaryError
from laytune.layout import pack
from laytune.records import freeze, load_frozen, open_database
from laytune.space import SpaceOptions

WORKLOAD = ops.transpose((16, 24), (1, 0))
HELD = {"X": "lambda i, j: [j, i]"}  # the caller holds X transposed: Y = X.T is a copy of it
SMALL = SpaceOptions(
    families=("identity", "permute", "pad_rows"),
    vectors=(1, 4),
    blocks=(1, 4),
    groups=(0,),
    unrolls=(1,),
)


def test_a_boundary_naming_a_buffer_the_workload_lacks_is_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    open_database(url)
    with pytest.raises(BoundaryError, match=r"'A'.*buffers: X, Y"):
        freeze(url, tmp_path / "f.json", boundaries={WORKLOAD: {"A": "free"}})


@pytest.mark.slow
def test_the_entry_is_the_best_for_the_caller_it_is_frozen_for(
    tmp_path: Path, laytune_device, cl_context
) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    options = laytune.TuneOptions(trials=6, batch=3, space=SMALL, seed=1, boundary=HELD)
    result = laytune.tune(WORKLOAD, laytune_device, options=options, database=url, progress=False)
    assert str(result.best.candidate.layout("X").index_map) == HELD["X"]

    held = load_frozen(freeze(url, tmp_path / "held.json", boundaries={WORKLOAD.key: HELD}))
    entry = held.entry(WORKLOAD, cl_context)
    assert entry.record_id == result.best.id
    assert entry.layouts["X"] == HELD["X"]
    assert "X fixed as lambda i, j: [j, i]" in entry.boundary
    assert entry.time_s == pytest.approx(result.best.value_s)
    assert entry.layout_speedup == pytest.approx(result.layout_speedup)
    # the caller's own array is X's physical buffer, as held
    x = WORKLOAD.make_inputs(5)["X"]
    assert np.array_equal(pack(x, result.best.candidate.layout("X").index_map, 0.0), x.T)
    np.testing.assert_array_equal(held.kernel(WORKLOAD, cl_context)(x), x.T)

    plain = load_frozen(freeze(url, tmp_path / "plain.json")).entry(WORKLOAD, cl_context)
    assert plain.boundary == "X fixed, Y fixed"  # priced for a caller with X row-major
    # priced for that caller: X's pack is a real transpose where the entry keeps X as the
    # held caller had it, and nothing where it keeps X row-major (the two kernels' times
    # themselves are a few microseconds apart here, noise: no test compares them)
    pack_x = dict(((b, v), how) for b, v, how in plain.conversions)[("X", "pack")]
    held_x = plain.layouts["X"] == HELD["X"]
    assert pack_x == ("generated" if held_x else "none (aliased)")
