"""Replaying search strategies against recorded times (``bench.search_efficiency``).

An :class:`Oracle` answers what a candidate takes: the recorded time when
there is one, else (for spaces too large to measure exhaustively) it builds
and measures the candidate once, keeps the answer, and appends it to its
JSONL file, so that every strategy and seed sees the same value for the same
candidate and a later run measures nothing twice. A replay is the sequence
of distinct candidates' times a strategy evaluates, up to a budget:

* :func:`replay_sampler`: an optuna sampler (``make_sampler``) in an
  in-memory study, the identity candidate first, each trial turned into a
  candidate by ``SearchSpace.suggest`` and answered by the oracle (a
  candidate proposed again is answered without counting, as ``tune``
  answers it from its records; 64 such in a row end the replay);
* :func:`replay_model`: :class:`laytune.search.ModelSearch` in batches of 8
  after the identity candidate.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench._report import host_cpu
from laytune.codegen import lower
from laytune.exceptions import LayoutRejectedError
from laytune.runners import Builder, Device, MeasureConfig, RunInput, Runner
from laytune.search import (
    CostModel,
    ModelSearch,
    Observation,
    make_sampler,
    params_of,
    pool_for,
    spearman,
)
from laytune.space import Candidate, SearchSpace

MISS_LIMIT = 64  # proposals in a row already seen after which tune stops a sampler
MODEL_BATCH = 8


class Oracle:
    """Candidate key -> seconds (inf: failed or refused). With a ``device``,
    a candidate without a recorded time is measured and appended to ``path``
    (each row names the device's key and the host's processor), and only rows
    of that device on this host are read back: "AMD EPYC" names Zen 3 and
    Zen 5 hosts alike, whose times differ 2-5x. Without a device, every row
    is read and a candidate without one counts as failed."""

    def __init__(
        self,
        values: dict[str, float],
        *,
        workload: Any = None,
        device: Device | None = None,
        config: MeasureConfig | None = None,
        path: Path | None = None,
    ) -> None:
        self.values = dict(values)
        self.workload, self.device, self.config, self.path = workload, device, config, path
        self.candidates: dict[str, Candidate] = {}  # those read back or measured
        self.measured = 0  # candidates this oracle measured itself
        self.skipped = 0  # rows of another device or host, not read back
        #: what each row this oracle writes says of where it was measured
        self.origin = None if device is None else {"device": device.key, "host": host_cpu()}
        self._tools: tuple[Builder, Runner] | None = None

    @classmethod
    def load(cls, path: Path, **kwargs: Any) -> Oracle:
        oracle = cls({}, path=path, **kwargs)
        if path.exists():
            for line in path.read_text().splitlines():
                row = json.loads(line)
                origin = {"device": row.get("device"), "host": row.get("host")}
                if oracle.origin is not None and origin != oracle.origin:
                    oracle.skipped += 1
                    continue
                oracle.values[row["key"]] = math.inf if row["value_s"] is None else row["value_s"]
                oracle.candidates[row["key"]] = Candidate.from_json(row["candidate"])
        return oracle

    def __call__(self, candidate: Candidate) -> float:
        return self.many([candidate])[0]

    def many(self, candidates: Sequence[Candidate]) -> list[float]:
        """The seconds of each candidate, in order; the unknown ones are built
        together and measured one after another (with a device)."""
        unknown = list({c.key: c for c in candidates if c.key not in self.values}.values())
        if unknown and self.device is None:
            self.values.update(dict.fromkeys((c.key for c in unknown), math.inf))
        elif unknown:
            self._measure(unknown)
        return [self.values[c.key] for c in candidates]

    def _measure(self, candidates: Sequence[Candidate]) -> None:
        assert self.device is not None and self.workload is not None
        found: dict[str, float] = {}
        programs = []
        for candidate in candidates:
            try:
                programs.append(
                    (candidate, lower(self.workload, candidate, device=self.device.info))
                )
            except LayoutRejectedError:
                found[candidate.key] = math.inf
        if programs:
            if self._tools is None:
                self._tools = (Builder(self.device), Runner(self.device, self.config))
            builder, runner = self._tools
            built = builder.submit([p for _, p in programs]).result()
            finite = [v for v in self.values.values() if math.isfinite(v)]
            # as tune does: a candidate over twice the best known is not timed to the end
            threshold = 2 * min(finite) if finite else None
            inputs = [RunInput(b, self.workload) for b in built]
            results = runner.run(inputs, abandon_above_s=threshold)
            for (candidate, _), result in zip(programs, results, strict=True):
                ok = result.ok and result.value_s
                found[candidate.key] = result.value_s if ok else math.inf
        self.measured += len(candidates)
        self.values.update(found)
        self.candidates.update((c.key, c) for c in candidates)
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a") as out:
                for candidate in candidates:
                    value = found[candidate.key]
                    row = {
                        "key": candidate.key,
                        "value_s": None if math.isinf(value) else value,
                        "candidate": candidate.canonical_json(),
                        **(self.origin or {}),
                    }
                    out.write(json.dumps(row, sort_keys=True) + "\n")

    def close(self) -> None:
        if self._tools is not None:
            for tool in self._tools:
                tool.close()
            self._tools = None


def replay_sampler(
    space: SearchSpace,
    oracle: Oracle,
    strategy: str,
    seed: int,
    budget: int,
    starts: Sequence[Candidate] = (),
) -> list[float]:
    """The times of the distinct candidates ``strategy`` evaluates, in order,
    at most ``budget`` of them (fewer when it runs out): the identity, then
    ``starts`` (as ``laytune.tune`` forces its standard candidates), then the
    sampler's."""
    import optuna

    study = optuna.create_study(sampler=make_sampler(strategy, seed), direction="minimize")
    for candidate in (space.identity(), *starts):
        found = params_of(space, candidate)
        assert found is not None, f"{candidate.describe()} is not in the space"
        study.enqueue_trial(found[0])
    seen: set[str] = set()
    out: list[float] = []
    misses = 0
    while len(out) < budget:
        trial = study.ask()
        candidate = space.suggest(trial)
        value = oracle(candidate)
        study.tell(trial, value)
        if candidate.key in seen:
            misses += 1
            if misses >= MISS_LIMIT:
                break
            continue
        misses = 0
        seen.add(candidate.key)
        out.append(value)
    return out


def replay_model(
    space: SearchSpace,
    oracle: Oracle,
    seed: int,
    budget: int,
    pool: int | None = None,
    starts: Sequence[Candidate] = (),
) -> list[float]:
    """As :func:`replay_sampler`, for the model strategy (with the pool
    ``tune`` draws for ``budget`` trials unless ``pool`` says otherwise)."""
    size = pool_for(budget) if pool is None else pool
    search = ModelSearch(space, seed, pool=size, leads=starts)
    forced = list({c.key: c for c in (space.identity(), *starts)}.values())[:budget]
    out = oracle.many(forced)
    for candidate, value in zip(forced, out, strict=True):
        search.observe(candidate, None if math.isinf(value) else value)
    while len(out) < budget:
        batch = search.propose(min(MODEL_BATCH, budget - len(out)))
        if not batch:
            break
        for candidate, value in zip(batch, oracle.many(batch), strict=True):
            search.observe(candidate, None if math.isinf(value) else value)
            out.append(value)
    return out


def trials_to(values: Sequence[float], target: float) -> int | None:
    """1 + the position of the first value at most ``target``; None if none."""
    return next((k for k, v in enumerate(values, 1) if v <= target), None)


def best_at(values: Sequence[float], trials: int) -> float:
    return min(values[:trials], default=math.inf)


def held_out_spearman(
    space: SearchSpace, values: dict[str, float], candidates: Sequence[Candidate], seed: int = 0
) -> tuple[float, int, int]:
    """Spearman correlation of the model's predictions and the measured times
    on half of ``candidates`` (those measured), the model trained on the
    other half (failures included); with the sizes of both halves."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(candidates))
    half = len(order) // 2
    search = ModelSearch(space, seed)
    train, test = [candidates[k] for k in order[:half]], [candidates[k] for k in order[half:]]
    rows = []
    for candidate in train:
        found = search.features(candidate)
        value = values[candidate.key]
        if found is not None:
            rows.append(
                Observation(found, None if math.isinf(value) else value, search.work, "own")
            )
    model = CostModel(seed)
    if not model.fit(rows):
        return math.nan, len(train), len(test)
    scored = [(c, search.features(c)) for c in test if math.isfinite(values[c.key])]
    scored = [(c, f) for c, f in scored if f is not None]
    predicted = model.predict([f for _, f in scored])
    measured = [values[c.key] for c, _ in scored]
    return spearman(list(predicted), measured), len(train), len(scored)
