"""Which form each convolution of a model runs in: directly or as
Winograd's F(2 x 2, 3 x 3) (:func:`~laytune.plan.winograd_conv`), chosen
from the records' times (:func:`faster_in_records`); the plan's own timing
of the forms is :func:`~laytune.plan.measure_forms`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from laytune.plan._onnx import from_onnx
from laytune.plan._winograd import winograd_steps

__all__ = ["convolutions", "faster_in_records", "tuned_keys"]


def _fastest(source: Any, key: str, device_key: str) -> float | None:
    from laytune.plan._price import lookup_options

    times = [
        o.compute_s for o in lookup_options(source, key, device_key) if o.compute_s is not None
    ]
    return min(times, default=None)


def tuned_keys(graph: Any, fuse: bool) -> dict[str, str]:
    """Operator -> the key of the workload ``tune_model`` tunes for it."""
    from laytune.plan._critical import tuned_workloads

    return {op: c.workload.key for c in tuned_workloads(graph, fuse) for op in c.ops}


def convolutions(direct: Any, winograd: Any) -> Iterator[str]:
    """The convolutions of the direct graph that the other runs in Winograd's form."""
    steps = {op.name for op in winograd.ops}
    for op in direct.ops:
        if all(s in steps for s in winograd_steps(op.name)[:2]):
            yield op.name


def faster_in_records(
    model: Any, source: Any, device_key: str, fuse: bool = True
) -> frozenset[str]:
    """The convolutions of ``model`` (an ONNX path or ``ModelProto``; by
    operator name) whose three Winograd statements ``source`` (records, a
    frozen file) times faster together than the direct convolution, each by
    its fastest kernel as a model meets it
    (:func:`laytune.records.model_seconds`), with the epilogue ``tune_model``
    folds into it. Where only one form has verified records, that one (a
    frozen file holds the form frozen); where Winograd's has none (``source``
    None: none has), the direct one.

    Which form pays depends on the device and the shape, not on the name: on
    2 Zen 5 cores the matmuls of ResNet-18's last stage (16 tiles of 7 x 7,
    512 channels) were bound by their transformed filters, 16.8 MB read from
    memory at each run (0.68 ms against the direct convolution's 0.53),
    while at 14 x 14 Winograd's three kernels took 0.36 ms against 0.50."""
    if source is None:
        return frozenset()
    direct, winograd = from_onnx(model), from_onnx(model, winograd=True)
    direct_keys, winograd_keys = tuned_keys(direct, fuse), tuned_keys(winograd, fuse)
    chosen = set()
    for name in convolutions(direct, winograd):
        mine = _fastest(source, direct_keys[name], device_key)
        theirs = [_fastest(source, winograd_keys[s], device_key) for s in winograd_steps(name)]
        if None not in theirs and (mine is None or sum(theirs) < mine):  # type: ignore[arg-type]
            chosen.add(name)
    return frozenset(chosen)
