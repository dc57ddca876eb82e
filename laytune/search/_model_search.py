"""The model strategy: each batch is the best predicted of a large pool.

:class:`ModelSearch` keeps what was measured, trains a :class:`CostModel`
on it (and on records of other shapes and operators, for a cold start),
draws a pool of candidates (uniform draws from the space, as optuna's
random sampler draws, and neighbours of the best measured: one parameter
changed) and proposes the pool's best predicted, with one in eight
(``explore``) drawn at random instead, as TVM's XGBoost cost model does.
Before the model can be trained, every proposal is a uniform draw.

:class:`ModelProposals` feeds those batches to ``tune`` as forced
candidates (trials with fixed parameters, so the study sees them like any
other); when the model cannot be built it warns and stops, and ``tune``
goes on with the strategy's sampler, a random one.
"""

from __future__ import annotations

import importlib.util
import itertools
import math
import sys
import warnings
from collections.abc import Collection, Iterator, Sequence
from typing import Any

import numpy as np

from laytune._stop import checkpoint
from laytune.exceptions import LaytuneError, ModelFallbackWarning
from laytune.ops import from_key
from laytune.search._features import candidate_features
from laytune.search._model import OTHER_OPERATOR, OTHER_SHAPE, CostModel, Observation
from laytune.search._strategies import _replayed, params_of
from laytune.space import Candidate, SearchSpace

__all__ = ["ModelProposals", "ModelSearch", "pool_for", "transfer_observations"]

_PARENTS = 8  # best measured candidates whose neighbours join the pool
_TRANSFER_LIMIT = 3000  # most recent records of other workloads learned from


def _ordered(choices: Sequence[Any]) -> bool:
    """Whether ``choices`` are sizes in increasing order (a block, an
    unroll, a vector width), where the value beside one is a small step."""
    numbers = all(isinstance(c, int) and not isinstance(c, bool) for c in choices)
    return numbers and all(a < b for a, b in itertools.pairwise(choices))


def _beside(choices: Sequence[Any], value: Any) -> list[Any]:
    """The one or two of ``choices`` next to ``value`` (one of them)."""
    at = list(choices).index(value)
    return [choices[k] for k in (at - 1, at + 1) if 0 <= k < len(choices)]


class _Draw:
    """A trial that answers each choice uniformly at random, or, given a
    parent's params, keeps the parent's answer except at one position.

    The changed answer of a size (:func:`_ordered`) is, half the time, one
    of the two values beside the parent's: a step, where a uniform draw of a
    block's eleven extents mostly jumps far from the measured best. On
    ResNet-18's conv2d (1, 64, 56, 56) x 64 3 x 3, whose start blocks 6
    columns by 4 vectors of filters, the 4-column block beside it ran 0.46
    ms against 0.50 (2 Zen 5 cores), and a 32-trial job whose neighbours
    were uniform draws measured no other column block of 4 vectors."""

    def __init__(
        self, rng: np.random.Generator, parent: dict[str, Any] | None = None, change: int = -1
    ) -> None:
        self.rng, self.parent, self.change = rng, parent or {}, change
        self.asked = 0

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any:
        choices = list(choices)
        position, self.asked = self.asked, self.asked + 1
        kept = self.parent.get(name, _Draw)
        if kept is _Draw or kept not in choices:
            return choices[int(self.rng.integers(len(choices)))]
        if position != self.change:
            return kept
        if len(choices) > 2 and _ordered(choices) and self.rng.random() < 0.5:
            beside = _beside(choices, kept)
            return beside[int(self.rng.integers(len(beside)))]
        return choices[int(self.rng.integers(len(choices)))]


class _Step:
    """A trial that answers every choice as the parent's params do, except
    ``name``, answered ``value``."""

    def __init__(self, parent: dict[str, Any], name: str, value: Any) -> None:
        self.parent, self.name, self.value = parent, name, value

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any:
        choices = list(choices)
        wanted = self.value if name == self.name else self.parent.get(name, choices[0])
        return wanted if wanted in choices else choices[0]


def pool_for(trials: int) -> int:
    """The pool a job of ``trials`` ranks each batch from: 16 candidates per
    trial of its budget, from 64 up to :attr:`ModelSearch.DEFAULT_POOL`
    (reached at 32 trials). A short job picks a few candidates, which need
    no pool of hundreds to be chosen from, and every draw and its features
    cost milliseconds of host time while the device waits."""
    return max(64, min(ModelSearch.DEFAULT_POOL, 16 * trials))


def work_of(workload: Any) -> float:
    """The scale a time is learned on: operations plus compulsory bytes."""
    return float(getattr(workload, "flops", 0) + getattr(workload, "bytes", 0))


class ModelSearch:
    """Proposes candidates of ``space`` from a cost model over what it was
    told (:meth:`observe`) and the ``transfer`` observations. Deterministic
    for a seed and a sequence of calls."""

    #: Candidates pooled per batch, as ``tune`` runs it.
    DEFAULT_POOL = 512

    def __init__(
        self,
        space: SearchSpace,
        seed: int = 0,
        *,
        pool: int = DEFAULT_POOL,
        explore: float = 0.125,
        transfer: Sequence[Observation] = (),
        leads: Sequence[Candidate] = (),
    ) -> None:
        self.space = space
        self.leads = list(leads)
        self.rng = np.random.default_rng(seed)
        self.model = CostModel(seed)
        self.pool_size = pool
        self.explore = explore
        self.transfer = list(transfer)
        self.work = work_of(space.workload)
        self.observed: dict[str, tuple[Candidate, float | None]] = {}
        self.explored: list[Candidate] = []  # the random picks of the last batch
        self._features: dict[str, dict[str, float] | None] = {}
        self._params: dict[str, dict[str, Any] | None] = {}
        self._all: list[Candidate] | None = None  # the whole space, when it is small
        self._kept: dict[str, Candidate] = {}  # uniform draws no batch took yet

    def features(self, candidate: Candidate) -> dict[str, float] | None:
        """``candidate``'s features (cached); None when its nest cannot be planned."""
        key = candidate.key
        if key not in self._features:
            try:
                found = candidate_features(self.space.workload, self.space.device, candidate)
            except LaytuneError:
                found = None
            self._features[key] = found
        return self._features[key]

    def observe(self, candidate: Candidate, seconds: float | None) -> None:
        """What ``candidate`` took (None: failed or rejected)."""
        self.observed[candidate.key] = (candidate, seconds)

    def observations(self) -> list[Observation]:
        own = []
        for candidate, seconds in self.observed.values():
            found = self.features(candidate)
            if found is not None:
                own.append(Observation(found, seconds, self.work, "own"))
        return own + self.transfer

    def train(self) -> bool:
        """Fit the model on everything observed; False when it cannot learn yet."""
        return self.model.fit(self.observations())

    def draw(self) -> Candidate:
        """One candidate drawn uniformly per parameter, as a random sampler draws."""
        return self.space.suggest(_Draw(self.rng))

    def neighbour(self, parent: Candidate) -> Candidate:
        """``parent`` with one of its parameters drawn again."""
        key = parent.key
        if key not in self._params:
            found = params_of(self.space, parent)
            self._params[key] = None if found is None else found[0]
        params = self._params[key]
        if not params:
            return self.draw()
        change = int(self.rng.integers(len(params)))
        return self.space.suggest(_Draw(self.rng, params, change))

    def steps(self, parent: Candidate) -> list[Candidate]:
        """``parent`` with one size (:func:`_ordered`: a block, an unroll, a
        split, a vector width) moved to a value beside its own, each such
        move once, in the order the space asks its params."""
        replayed = _replayed(self.space, parent)
        if replayed is None:
            return []
        replay, _ = replayed
        found: dict[str, Candidate] = {}
        for name, choices in replay.choices.items():
            if len(choices) < 2 or not _ordered(choices):
                continue
            for value in _beside(choices, replay.params[name]):
                candidate = self.space.suggest(_Step(replay.params, name, value))
                if candidate.key != parent.key:
                    found.setdefault(candidate.key, candidate)
        return list(found.values())

    def measured(self) -> list[Candidate]:
        """The candidates measured with a finite time, fastest first."""
        timed = sorted(
            (s, c.key, c) for c, s in self.observed.values() if s is not None and math.isfinite(s)
        )
        return [c for _, _, c in timed]

    def incumbent(self) -> Candidate | None:
        """The fastest candidate measured (None before any)."""
        return next(iter(self.measured()), None)

    def pool(self, exclude: Collection[str], size: int | None = None) -> list[Candidate]:
        """Up to ``size`` (default: ``pool``) distinct candidates not in
        ``exclude`` nor observed: a quarter neighbours of the best measured,
        the rest uniform draws; in a space of at most four pools, every such
        candidate instead.

        Uniform draws that no batch took are kept for the next pool, which
        draws only as many new ones as were taken: a job's pools cost one
        pool of draws and features, not one per batch."""
        size = self.pool_size if size is None else size
        if self._all is None:
            small = self.space.size_up_to(4 * self.pool_size + 1) <= 4 * self.pool_size
            self._all = list(self.space.enumerate()) if small else []
        if self._all:
            left = [c for c in self._all if c.key not in exclude and c.key not in self.observed]
            if len(left) <= size:
                return left
            return [left[k] for k in sorted(self.rng.choice(len(left), size, False))]

        def fresh(key: str) -> bool:
            return key not in exclude and key not in self.observed

        parents = self.measured()[:_PARENTS]
        found: dict[str, Candidate] = {}
        near = size // 4 if parents else 0
        for attempt in range(near * 2):
            checkpoint()
            if len(found) >= near:
                break
            candidate = self.neighbour(parents[attempt % len(parents)])
            if fresh(candidate.key):
                found.setdefault(candidate.key, candidate)
        kept = {k: c for k, c in self._kept.items() if fresh(k) and k not in found}
        wanted = size - len(found)
        for _ in range(2 * max(0, wanted - len(kept))):
            checkpoint()
            if len(kept) >= wanted:
                break
            candidate = self.draw()
            if fresh(candidate.key) and candidate.key not in found:
                kept.setdefault(candidate.key, candidate)
        self._kept = kept
        for key, candidate in kept.items():
            if len(found) >= size:
                break
            found[key] = candidate
        return list(found.values())

    def _fresh_steps(
        self, parents: Sequence[Candidate], exclude: Collection[str], enough: int
    ) -> list[Candidate]:
        """Up to ``enough`` steps of ``parents`` nothing measured or proposed
        yet, each parent's in a random order, the first parent's first (a
        parent's steps are derived only while more are wanted: each costs a
        candidate built by the space)."""
        found: dict[str, Candidate] = {}
        for parent in parents:
            if len(found) >= enough:
                break
            steps = self.steps(parent)
            for k in self.rng.permutation(len(steps)):
                candidate = steps[k]
                if candidate.key not in exclude and candidate.key not in self.observed:
                    found.setdefault(candidate.key, candidate)
        return list(found.values())[:enough]

    def propose(self, count: int, exclude: Collection[str] = ()) -> list[Candidate]:
        """Up to ``count`` new candidates: up to half of them steps of the
        fastest measured (:meth:`steps`, the best predicted first), then the
        best predicted of a pool, and ``explore`` of them (a share rounded at
        random) drawn from the pool at random.

        While the model cannot be trained (a job's first batch is proposed
        while its starts are measured), the steps of the ``leads`` (the
        job's starts: the best guesses before any time is known) in a
        random order, and the rest drawn at random from a pool of ``count``
        (a pool of hundreds ranks nothing without a model, and its draws
        cost seconds on a job's first batch). A uniform draw from a space of
        layouts and knobs mostly lands on a kernel tens of times slower than
        the starts, measured at that cost: in a fresh 32-trial job on
        ResNet-18's conv2d (1, 64, 56, 56) x 64, the 8 draws of its first
        batch took 9-113 ms where the starts took 0.52-1.07."""
        trained = self.train()
        incumbent = self.incumbent()
        parents = [incumbent] if trained and incumbent is not None else self.leads
        steps = self._fresh_steps(parents, exclude, 4 * count if trained else count - 1)
        taken = {c.key for c in steps}
        pool = self.pool(exclude) if trained else self.pool(exclude, count)
        pool = [c for c in pool if c.key not in taken]
        self.explored = []
        if not pool and not steps:
            return []
        order = self.rng.permutation(len(pool))
        if not trained:  # the first lead's steps first: the leads come best guess first
            stepped = steps[: count - 1]
            picked = [pool[k] for k in order[: count - len(stepped)]]
            self.explored = list(picked)
            return stepped + picked
        if not pool:
            return steps[:count]
        if steps:
            ranked = self.model.predict([self.features(c) or {} for c in steps])
            stepped = [steps[k] for k in np.argsort(ranked, kind="stable")[: count // 2]]
            count -= len(stepped)
        else:
            stepped = []
        share = count * self.explore
        explore = int(share) + int(self.rng.random() < share - int(share))
        explore = min(explore, max(0, len(pool) - 1), count)
        rows = [self.features(c) for c in pool]
        scored = [(i, r) for i, r in enumerate(rows) if r is not None]
        predicted = self.model.predict([r for _, r in scored])
        ranking = [scored[k][0] for k in np.argsort(predicted, kind="stable")]
        best = ranking[: count - explore]
        chosen = set(best)
        rest = [k for k in order if k not in chosen]
        self.explored = [pool[k] for k in rest[:explore]]
        return stepped + [pool[k] for k in best] + self.explored


def transfer_observations(
    database: Any, workload: Any, device: Any, limit: int = _TRANSFER_LIMIT
) -> list[Observation]:
    """Records of other workloads on ``device`` (``device.info`` plans their
    nests), the most recent ``limit``: other shapes of ``workload``'s
    operator at weight 0.5, other operators at 0.2. Records whose workload
    is not a registered operator (a conversion) are left out."""
    records = [r for r in database.records(device=device) if r.workload_key != workload.key]
    workloads: dict[str, Any] = {}
    out = []
    for record in records[-limit:]:
        if record.workload_key not in workloads:
            try:
                workloads[record.workload_key] = from_key(record.workload_key)
            except (LaytuneError, ValueError, TypeError):
                workloads[record.workload_key] = None
        other = workloads[record.workload_key]
        if other is None:
            continue
        try:
            found = candidate_features(other, device.info, record.candidate)
        except (LaytuneError, KeyError):
            continue
        weight = OTHER_SHAPE if other.name == workload.name else OTHER_OPERATOR
        seconds = record.value_s if record.ok else None
        out.append(Observation(found, seconds, work_of(other), record.workload_key, weight))
    return out


def _check_model_library() -> None:
    """Raise ImportError where scikit-learn cannot be imported, without
    importing it: the import takes about a second, and a job whose first
    batch is random (the model has nothing to learn from yet) may end
    before it trains (:meth:`CostModel.fit` imports it then)."""
    if "sklearn" in sys.modules and sys.modules["sklearn"] is None:
        raise ImportError("import of sklearn halted; None in sys.modules")
    if importlib.util.find_spec("sklearn") is None:
        raise ImportError("No module named 'sklearn'")


class ModelProposals(Iterator[Candidate]):
    """The model strategy's candidates for one ``tune`` job, a batch at a
    time; each batch is proposed from the job's records as they stand. Ends
    (with a :class:`~laytune.exceptions.ModelFallbackWarning`) when the
    model cannot be built, so the job goes on with its random sampler."""

    def __init__(self, job: Any, seed: int, batch: int, leads: Sequence[Candidate] = ()) -> None:
        self.job = job
        self.batch = batch
        self.given: set[str] = set()
        self.buffer: list[Candidate] = []
        self.search: ModelSearch | None = None
        try:
            _check_model_library()
            transfer = transfer_observations(job.database, job.workload, job.device)
            self.search = ModelSearch(
                job.space, seed, pool=pool_for(job.trials), transfer=transfer, leads=leads
            )
        except Exception as err:  # anything that stops the model: the job goes on
            self._give_up(err)

    def _give_up(self, err: BaseException) -> None:
        self.search = None
        warnings.warn(
            f"the cost model cannot be built ({type(err).__name__}: {err}); "
            "the model strategy falls back to random sampling",
            ModelFallbackWarning,
            stacklevel=2,
        )

    def __next__(self) -> Candidate:
        if self.search is None:
            raise StopIteration
        if not self.buffer:
            try:
                known = self.job.pricing.known()
                records = self.job.database.records(
                    workload=self.job.workload, device=self.job.device
                )
                for record in records:
                    self.search.observe(record.candidate, known.get(record.candidate.key))
                self.buffer = self.search.propose(self.batch, exclude=set(known) | self.given)
            except Exception as err:
                self._give_up(err)
                raise StopIteration from None
            if not self.buffer:
                raise StopIteration
        candidate = self.buffer.pop(0)
        self.given.add(candidate.key)
        return candidate
