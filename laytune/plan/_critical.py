"""The layout-critical workloads of a graph, as :func:`~laytune.plan.tune_model`
tunes them, and the random inputs a plan is timed on: what tuning a model,
freezing it and timing its plan (:mod:`laytune.plan._measured`) share."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from laytune.plan._fuse import fuse_epilogues
from laytune.plan._graph import Graph

__all__ = [
    "CriticalWorkload",
    "critical_workloads",
    "merged_workloads",
    "random_inputs",
    "tuned_workloads",
]


@dataclass(frozen=True)
class CriticalWorkload:
    """One distinct layout-critical workload of a graph and the operators that run it."""

    workload: Any
    ops: tuple[str, ...]


def critical_workloads(graph: Graph) -> list[CriticalWorkload]:
    """The distinct layout-critical workloads of ``graph`` (those whose
    statement sums a product of two loads: contractions, sliding windows,
    :func:`laytune.search.layout_critical`), largest first by flops, graph
    order among equals. Operators with one key share one entry; a buffer is
    a weight of it only where every one of them reads a constant there."""
    from laytune.search import layout_critical

    return _distinct(graph, [op for op in graph.ops if layout_critical(op.workload)])


def _distinct(graph: Graph, critical: list[Any]) -> list[CriticalWorkload]:
    """The distinct workloads of the operators ``critical`` of ``graph``, as
    :func:`critical_workloads` says."""
    return merged_workloads(CriticalWorkload(op.workload, (op.name,)) for op in critical)


def merged_workloads(items: Iterable[CriticalWorkload]) -> list[CriticalWorkload]:
    """``items`` (of one graph, or of several imports of one model) with each
    key once, its operators joined, a buffer a weight only where every entry
    holds it constant; largest first by flops, first seen first among equals."""
    found: dict[str, CriticalWorkload] = {}
    for item in items:
        seen = found.get(item.workload.key)
        if seen is None:
            found[item.workload.key] = item
            continue
        weights = tuple(w for w in seen.workload.weights if w in item.workload.weights)
        ops = (*seen.ops, *(o for o in item.ops if o not in seen.ops))
        found[item.workload.key] = CriticalWorkload(replace(seen.workload, weights=weights), ops)
    return sorted(found.values(), key=lambda c: -c.workload.flops)


def tuned_workloads(graph: Graph, fuse: bool = True) -> list[CriticalWorkload]:
    """The workloads :func:`tune_model` tunes: :func:`critical_workloads`
    of ``graph``, or with ``fuse`` of ``graph`` with every layout-critical
    operator's element-wise readers folded into it
    (:func:`~laytune.plan.fuse_epilogues`), the kernels a plan made with
    ``fuse=True`` runs: a fused operator's records are then its own, not the
    bare operator's with an epilogue measured by nobody."""
    bare = critical_workloads(graph)
    if not fuse:
        return bare
    critical = {name for c in bare for name in c.ops}
    fused, _ = fuse_epilogues(graph, critical)
    return _distinct(fused, [op for op in fused.ops if op.name in critical])


def random_inputs(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    """Uniform values in [-1, 1) for every graph input (what a plan is timed on)."""
    rng = np.random.default_rng(seed)
    return {
        name: rng.uniform(-1, 1, t.shape).astype(t.dtype)
        for name, t in graph.tensors.items()
        if t.kind == "input"
    }
