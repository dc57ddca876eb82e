"""Strategies: which candidate to try next, as optuna samplers over the space.

Every strategy asks optuna for a trial and lets :meth:`SearchSpace.suggest`
turn it into a candidate, so the study in the database sees every trial the
same way. Candidates chosen outside the sampler (the identity baseline, warm
starts, the exhaustive order) become trials with fixed parameters
(:func:`params_of`), so the sampler learns from them too.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

from laytune.exceptions import TuningError
from laytune.layout import Layout
from laytune.space import (
    Candidate,
    SearchSpace,
    complete_knobs,
    layout_fingerprint,
    layout_keys,
)

__all__ = ["STRATEGIES", "make_sampler", "params_of", "trial_params_of"]


def _tpe(seed: int) -> Any:
    import optuna

    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=8)


def _tpe_multivariate(seed: int) -> Any:
    """TPE over the joint distribution of the parameters, grouped by the
    conditional sub-spaces they appear in (optuna's ``group=True``): the
    baseline the model strategy is measured against."""
    import warnings

    import optuna

    with warnings.catch_warnings():  # multivariate and group are "experimental" in optuna
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.TPESampler(
            seed=seed, n_startup_trials=8, multivariate=True, group=True
        )


def _random(seed: int) -> Any:
    import optuna

    return optuna.samplers.RandomSampler(seed=seed)


def _nsga2(seed: int) -> Any:
    import optuna

    return optuna.samplers.NSGAIISampler(seed=seed, population_size=16)


#: name -> sampler factory. ``exhaustive`` walks ``SearchSpace.enumerate()``
#: in order (for small spaces); ``model`` proposes the best predicted of a
#: cost model (:mod:`laytune.search._model_search`) as trials with fixed
#: parameters, its random sampler only standing in when the model cannot be
#: built; the others are optuna samplers that handle categorical,
#: conditional spaces.
STRATEGIES: dict[str, Callable[[int], Any]] = {
    "tpe": _tpe,
    "tpe-mv": _tpe_multivariate,
    "model": _random,
    "random": _random,
    "exhaustive": _random,  # unused: every trial has fixed parameters
    "nsga2": _nsga2,
}


def make_sampler(strategy: str, seed: int) -> Any:
    if strategy not in STRATEGIES:
        raise TuningError(f"unknown strategy {strategy!r} (known: {', '.join(STRATEGIES)})")
    return STRATEGIES[strategy](seed)


class _NotInSpace(Exception):
    pass


def _index_of(layouts: list[Layout], wanted: Layout) -> int:
    """Where ``layouts`` holds ``wanted``, or a layout that stores every
    element at the same place (the space keeps one of each: blocking the
    input channels of 1 x 1 filters by 16 after their filters by 16 is the
    filters blocked alone)."""
    try:
        return layouts.index(wanted)
    except ValueError:
        pass
    same = [k for k, lay in enumerate(layouts) if lay.flat_shape == wanted.flat_shape]
    if same:
        fingerprint = layout_fingerprint(wanted)
        for k in same:
            if layout_fingerprint(layouts[k]) == fingerprint:
                return k
    raise _NotInSpace


class _Replay:
    """Answers ``suggest_categorical`` so that ``space.suggest`` rebuilds a
    candidate (layouts by equality, knobs by value), recording the params."""

    def __init__(self, space: SearchSpace, candidate: Candidate) -> None:
        self.space = space
        self.candidate = candidate
        self.params: dict[str, Any] = {}
        self.choices: dict[str, list[Any]] = {}  # what each param was asked with
        # a knob the candidate lacks (a record older than the knob, a user's
        # own candidate) is read at its default, as the code generator reads
        # it; a conversion's knobs have none (absent is a value of its own)
        self.knobs = candidate.knob_map
        if isinstance(space, SearchSpace):
            self.knobs = complete_knobs(space.workload, self.knobs)

    def suggest_categorical(self, name: str, choices: Any) -> Any:
        base = name.split("|", 1)[0]
        if base.startswith("layout:"):
            buffer = base[len("layout:") :]
            layouts = self.space.layouts(buffer)
            try:
                wanted = self.candidate.layout(buffer)
            except KeyError:
                raise _NotInSpace from None
            value = layout_keys(layouts)[_index_of(layouts, wanted)]
        else:
            value = self.knobs.get(base)
        choices = list(choices)
        if value not in choices:
            raise _NotInSpace
        self.params[name] = value
        self.choices[name] = choices
        return value


def _replayed(space: SearchSpace, candidate: Candidate) -> tuple[_Replay, Candidate] | None:
    """``candidate`` replayed through ``space.suggest``: what was asked, and
    the candidate the space derives; None when the space does not hold it."""
    replay = _Replay(space, candidate)
    try:
        return replay, space.suggest(replay)
    except _NotInSpace:
        return None


def params_of(space: SearchSpace, candidate: Candidate) -> tuple[dict[str, Any], Candidate] | None:
    """The optuna params under which ``space.suggest`` gives ``candidate`` (its
    layouts and knobs; pad values follow the space), and the candidate the
    space derives; None when the space does not hold it."""
    replayed = _replayed(space, candidate)
    if replayed is None:
        return None
    replay, found = replayed
    return replay.params, found


def trial_params_of(
    space: SearchSpace, candidate: Candidate
) -> tuple[dict[str, Any], dict[str, Any], Candidate] | None:
    """The params and distributions of an optuna trial whose ``space.suggest``
    gives ``candidate`` (as :func:`params_of`), without the params of one
    choice (a trial is never asked those: ``tune``'s trials take a lone
    choice without asking), and the candidate; None when the space does
    not hold it. A trial created with them holds every param it will be
    asked from its first write."""
    import optuna

    replayed = _replayed(space, candidate)
    if replayed is None:
        return None
    replay, found = replayed
    asked = {name: c for name, c in replay.choices.items() if len(c) > 1}
    params = {name: replay.params[name] for name in asked}
    distributions = {
        name: optuna.distributions.CategoricalDistribution(c) for name, c in asked.items()
    }
    return params, distributions, found


def exhaustive_order(space: SearchSpace) -> Iterator[Candidate]:
    """The exhaustive strategy's order: the space's own enumeration."""
    return iter(space.enumerate())


def take(iterator: Iterator[Candidate], count: int) -> list[Candidate]:
    return list(itertools.islice(iterator, count))
