"""A seeded job proposes the same candidates in the same order, run after run.

The job searches the small copy workload's wide space (seed 3, 24 trials,
the standard starts first), built and measured by a stand-in whose times are
a hash of each candidate's layouts and knobs (a microsecond for each
conversion), so the sampler is told the same values every run and what it
proposes next depends only on the loop: which trial it asks for when, what
it tells the study, what it skips.

The recorded order is that of :class:`_Greedy`, a sampler that learns from
what it is told in exact arithmetic (a coin from a seeded ``RandomState``
picks between the best complete trial's value and a random choice), so the
order is the same on every host. TPE's order is not: its categorical
densities go through ``numpy.log`` and ``numpy.exp``, whose AVX-512 loops
round differently from the scalar ones, and candidates whose acquisition is
equal in exact arithmetic then fall in a different order (an order recorded
on an AVX-512 Xeon diverged on an AVX2 EPYC at the first TPE-guided batch).
For TPE the test asserts what holds on any one host: two runs agree.

Candidates are compared by their layouts and the knobs of :data:`KNOBS`, so
that a knob added to the space with a single value for a copy (and the
kernel text it changes) leaves the order as it is; a change to what the
sampler can draw is a change of order, to record again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pytest

import laytune
from laytune.records import open_database
from laytune.runners import (
    BaseBuilder,
    BaseRunner,
    BuildResult,
    ConversionTiming,
    Device,
    RunInput,
    RunResult,
    default_device,
)
from laytune.search import STRATEGIES, TuneOptions
from laytune.space import Candidate, SearchSpace
from tests.search import worker

#: the knobs the copy's wide space varies
KNOBS = ("block.i", "block.j", "group.i", "group.j", "order", "store", "subgroup", "vector")
KNOBS += ("vector_axis", "vector_transpose")
#: where the hash of the times starts: one whose best has a layout reference
#: left to measure after the search, so the job's last batch runs too
SALT = "d"


def _text(candidate: Candidate) -> str:
    knobs = candidate.knob_map
    parts = [f"{name}: {layout.describe()}" for name, layout in candidate.layouts]
    return "; ".join(parts + [f"{k}={knobs[k]}" for k in KNOBS if k in knobs])


class _Greedy(optuna.samplers.BaseSampler):
    """Each parameter takes the best complete trial's value or a random
    choice, by a coin: a sampler that learns from what it is told (which
    trials are complete when it is asked, and their values) and draws only
    integers, so its proposals are the same on every host."""

    def __init__(self, seed: int) -> None:
        self._rng = np.random.RandomState(seed)

    def infer_relative_search_space(self, study: Any, trial: Any) -> dict[str, Any]:
        return {}

    def sample_relative(self, study: Any, trial: Any, search_space: Any) -> dict[str, Any]:
        return {}

    def sample_independent(self, study: Any, trial: Any, name: str, distribution: Any) -> Any:
        choices = list(distribution.choices)
        complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
        best = min(complete, key=lambda t: (t.value, t.number), default=None)
        if best is not None and best.params.get(name) in choices and self._rng.randint(2):
            return best.params[name]
        return choices[self._rng.randint(len(choices))]


#: (trial number, candidate) of every record in the order written: 24 searched
#: (the trials missing proposed candidates already recorded), then the best's
#: layout reference
EXPECTED = [
    (
        0,
        "X: identity(); Y: identity(); block.i=1; block.j=1; group.i=0; group.j=0; order=logical; store=plain; subgroup=0; vector=1; vector_axis=; vector_transpose=",
    ),
    (
        1,
        "X: identity(); Y: identity(); block.i=1; block.j=4; group.i=0; group.j=0; order=logical; store=plain; subgroup=0; vector=1; vector_axis=; vector_transpose=",
    ),
    (
        2,
        "X: identity(); Y: identity(); block.i=1; block.j=4; group.i=0; group.j=0; order=logical; store=plain; subgroup=0; vector=4; vector_axis=j; vector_transpose=",
    ),
    (
        3,
        "X: permute(order=(1, 0)); Y: identity(); block.i=1; block.j=4; group.i=0; group.j=0; order=logical; store=plain; subgroup=0; vector=1; vector_axis=; vector_transpose=",
    ),
    (
        4,
        "X: permute(order=(1, 0)); Y: identity(); block.i=4; block.j=4; group.i=0; group.j=0; order=logical; store=plain; subgroup=0; vector=4; vector_axis=j; vector_transpose=i",
    ),
    (
        5,
        "X: identity(); Y: permute(order=(1, 0)); block.i=1; block.j=4; group.i=0; group.j=0; order=logical; store=plain; subgroup=0; vector=1; vector_axis=; vector_transpose=",
    ),
    (
        6,
        "X: identity(); Y: identity(); block.i=4; block.j=4; group.i=2; group.j=8; order=logical; store=plain; subgroup=0; vector=4; vector_axis=i; vector_transpose=j",
    ),
    (
        7,
        "X: identity(); Y: identity(); block.i=4; block.j=4; group.i=8; group.j=2; order=logical; store=plain; subgroup=0; vector=4; vector_axis=i; vector_transpose=j",
    ),
    (
        8,
        "X: permute(order=(1, 0)); Y: permute(order=(1, 0)); block.i=1; block.j=1; group.i=4; group.j=4; order=X; store=plain; subgroup=0; vector=1; vector_axis=; vector_transpose=",
    ),
    (
        9,
        "X: permute(order=(1, 0)); Y: identity(); block.i=4; block.j=1; group.i=8; group.j=2; order=logical; store=plain; subgroup=0; vector=1; vector_axis=; vector_transpose=",
    ),
    (
        10,
        "X: identity(); Y: identity(); block.i=4; block.j=4; group.i=8; group.j=4; order=logical; store=plain; subgroup=0; vector=4; vector_axis=i; vector_transpose=j",
    ),
    (
        11,
        "X: identity(); Y: identity(); block.i=4; block.j=1; group.i=2; group.j=8; order=logical; store=plain; subgroup=8; vector=1; vector_axis=; vector_transpose=",
    ),
    (
        12,
        "X: permute(order=(1, 0)); Y: identity(); block.i=4; block.j=4; group.i=2; group.j=4; order=logical; store=plain; subgroup=0; vector=4; vector_axis=i; vector_transpose=",
    ),
    (
        13,
        "X: permute(order=(1, 0)); Y: identity(); block.i=1; block.j=1; group.i=0; group.j=0; order=X; store=plain; subgroup=0; vector=1; vector_axis=; vector_transpose=",
    ),
    (
        14,
        "X: permute(order=(1, 0)); Y: permute(order=(1, 0)); block.i=4; block.j=1; group.i=4; group.j=4; order=logical; store=plain; subgroup=0; vector=4; vector_axis=i; vector_transpose=",
    ),
    (
        15,
        "X: permute(order=(1, 0)); Y: permute(order=(1, 0)); block.i=1; block.j=1; group.i=0; group.j=0; order=Y; store=plain; subgroup=0; vector=1; vector_axis=; vector_transpose=",
    ),
    (
        18,
        "X: permute(order=(1, 0)); Y: permute(order=(1, 0)); block.i=1; block.j=1; group.i=0; group.j=0; order=X; store=plain; subgroup=0; vector=1; vector_axis=; vector_transpose=",
    ),
    (
        19,
        "X: permute(order=(1, 0)); Y: identity(); block.i=4; block.j=1; group.i=0; group.j=0; order=logical; store=plain; subgroup=0; vector=1; vector_axis=; vector_transpose=",
    ),
    (
        20,
        "X: permute(order=(1, 0)); Y: identity(); block.i=4; block.j=4; group.i=0; group.j=0; order=logical; store=plain; subgroup=0; vector=1; vector_axis=; vector_transpose=",
    ),
    (
        21,
        "X: identity(); Y: identity(); block.i=1; block.j=4; group.i=8; group.j=2; order=logical; store=plain; subgroup=0; vector=4; vector_axis=j; vector_transpose=",
    ),
    (
        22,
        "X: identity(); Y: identity(); block.i=1; block.j=4; group.i=2; group.j=4; order=logical; store=plain; subgroup=0; vector=1; vector_axis=; vector_transpose=",
    ),
    (
        26,
        "X: identity(); Y: identity(); block.i=4; block.j=1; group.i=0; group.j=0; order=logical; store=plain; subgroup=0; vector=1; vector_axis=; vector_transpose=",
    ),
    (
        27,
        "X: identity(); Y: permute(order=(1, 0)); block.i=4; block.j=4; group.i=0; group.j=0; order=logical; store=plain; subgroup=0; vector=4; vector_axis=i; vector_transpose=j",
    ),
    (
        31,
        "X: permute(order=(1, 0)); Y: identity(); block.i=1; block.j=4; group.i=8; group.j=2; order=logical; store=plain; subgroup=0; vector=1; vector_axis=; vector_transpose=",
    ),
    (
        32,
        "X: identity(); Y: identity(); block.i=1; block.j=1; group.i=4; group.j=4; order=logical; store=plain; subgroup=0; vector=1; vector_axis=; vector_transpose=",
    ),
]


class _HashTimes(BaseBuilder, BaseRunner):
    """Builds nothing and times each candidate by a hash of its :func:`_text`,
    so every run, and every version of the kernel text, sees the same times.
    A program is known by its name, which carries its candidate's key."""

    def __init__(self, device: Device) -> None:
        self._device = device
        space = SearchSpace(worker.WORKLOAD, device.info, worker.WIDE)
        self.texts = {c.key[:10]: _text(c) for c in space.enumerate()}

    @property
    def device(self) -> Device:
        return self._device

    def build(self, batch: Sequence[Any]) -> list[BuildResult]:
        return [BuildResult(program, self._device.key, b"stand-in") for program in batch]

    def run(
        self, batch: Sequence[RunInput], *, abandon_above_s: float | None = None
    ) -> list[RunResult]:
        results = []
        for item in batch:
            program = item.build.program
            text = self.texts[program.name.rsplit("_", 1)[1]]
            digest = hashlib.sha256((SALT + text).encode()).hexdigest()
            seconds = 1e-4 * (1 + int(digest[:8], 16) / 2**32)  # 0.1 to 0.2 ms
            results.append(
                RunResult(
                    program.name,
                    "stand-in",
                    item.workload.key,
                    self._device.key,
                    value_s=seconds,
                    event_times_s=(seconds,),
                    pack_times=self._conversions(program, "input", "pack"),
                    unpack_times=self._conversions(program, "output", "unpack"),
                )
            )
        return results

    @staticmethod
    def _conversions(program: Any, role: str, kernel: str) -> tuple[ConversionTiming, ...]:
        """A microsecond for each of the candidate's own conversions."""
        buffers = program.to_json()["buffers"]
        names = [str(b["name"]) for b in buffers if b["role"] == role]
        return tuple(ConversionTiming(n, f"{n}_{kernel}", (1e-6,), (), 1e-6) for n in names)


def _job(url: str, strategy: str) -> tuple[list[tuple[int, str]], Any]:
    device = default_device()
    stand_in = _HashTimes(device)
    result = laytune.tune(
        worker.WORKLOAD,
        device,
        database=url,
        options=TuneOptions(trials=24, strategy=strategy, seed=3, space=worker.WIDE, warm_start=0),
        progress=False,
        builder=stand_in,
        runner=stand_in,
    )
    records = [(r.trial, _text(r.candidate)) for r in open_database(url).records()]
    return records, result


@pytest.mark.slow
def test_a_seeded_job_proposes_the_recorded_candidates_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(STRATEGIES, "greedy", _Greedy)
    records, result = _job(f"sqlite:///{tmp_path / 'order.db'}", "greedy")
    assert records == EXPECTED
    assert (result.measured, result.references, result.cached) == (24, 1, 8)
    assert result.stop_reason == "trial budget (24) spent"
    assert result.reference is not None
    assert _text(result.reference.candidate) == EXPECTED[-1][1]


@pytest.mark.slow
def test_a_seeded_tpe_job_proposes_the_same_candidates_twice(tmp_path: Path) -> None:
    first, result = _job(f"sqlite:///{tmp_path / 'first.db'}", "tpe")
    second, _ = _job(f"sqlite:///{tmp_path / 'second.db'}", "tpe")
    assert first == second
    assert result.stop_reason == "trial budget (24) spent"
    assert len({text for _, text in first}) == len(first)  # nothing measured twice
