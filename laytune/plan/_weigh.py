"""Which recorded candidate each layout-critical operator runs: the set whose plan is fastest.

Each layout-critical operator offers a few candidates (:class:`Option`: its
fastest kernels and the fastest in logical layouts). :func:`weigh` picks one
per operator so that the predicted time of the whole plan (the operators'
kernels plus the rewrites left after flowing and cancelling, as the caller's
``predict`` says) is least. Every combination is tried while there are at
most :data:`EXHAUSTIVE` of them; beyond that, coordinate descent (one
operator at a time while the prediction improves) from two starts: the
source's first choice of each operator and the fastest kernel of each.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence

from laytune.plan._price import Option

__all__ = ["EXHAUSTIVE", "weigh"]

#: The most combinations :func:`weigh` tries one by one.
EXHAUSTIVE = 256

_ROUNDS = 4

Choice = dict[str, Option]


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.4g} ms"


def _descend(
    options: Mapping[str, Sequence[Option]], start: Choice, predict: Callable[[Choice], float]
) -> tuple[float, Choice]:
    current, best = dict(start), predict(start)
    for _ in range(_ROUNDS):
        improved = False
        for name, found in options.items():
            for option in found:
                if option is current[name]:
                    continue
                trial = {**current, name: option}
                seconds = predict(trial)
                if seconds < best * (1 - 1e-9):
                    current, best, improved = trial, seconds, True
        if not improved:
            break
    return best, current


def weigh(
    options: Mapping[str, Sequence[Option]],
    predict: Callable[[Choice], float],
    log: list[str],
) -> Choice:
    """The option per operator (each list's first: the source's choice) whose
    plan ``predict`` says is fastest; what changed and why goes to ``log``.
    A tie keeps the source's choice."""
    first = {name: found[0] for name, found in options.items()}
    start = predict(first)
    names = list(options)
    count = math.prod(len(options[n]) for n in names)
    if count <= EXHAUSTIVE:
        how = f"all {count} combinations"
        best, chosen = start, first
        for combination in itertools.product(*(options[n] for n in names)):
            choice = dict(zip(names, combination, strict=True))
            seconds = predict(choice)
            if seconds < best * (1 - 1e-9):
                best, chosen = seconds, choice
    else:
        how = "coordinate descent"
        fastest = {
            name: min(found, key=lambda o: math.inf if o.compute_s is None else o.compute_s)
            for name, found in options.items()
        }
        best, chosen = min(
            (_descend(options, s, predict) for s in (first, fastest)), key=lambda r: r[0]
        )
        if best >= start * (1 - 1e-9):
            best, chosen = start, first
    log.append(
        f"weighed the candidates of {', '.join(sorted(options))} ({how}): "
        f"the first choice {start * 1e3:.4g} ms, the chosen {best * 1e3:.4g} ms"
    )
    for name in sorted(options):
        before, after = first[name], chosen[name]
        if after is not before:
            log.append(
                f"  {name}: {after.origin} ({_ms(after.compute_s)} kernel) over "
                f"{before.origin} ({_ms(before.compute_s)} kernel): fewer or cheaper conversions"
            )
    return chosen
