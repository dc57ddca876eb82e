"""Where the frozen layouts of layout-critical operators come from.

A *layout source* answers, for one operator's workload on one device, the
candidate whose layouts the planner freezes. Two kinds are accepted:

* a ``Mapping[str, Candidate]`` keyed by :attr:`laytune.ops.Workload.key`
  (layouts a user chose, or fixed known-good ones); the device is not part of
  the key;
* any object with ``best_candidate(workload_key, device_key)`` returning a
  :class:`~laytune.space.Candidate` or ``None`` (:class:`LayoutSource`); the
  records database has exactly this method, and ``device_key`` is
  :attr:`laytune.DeviceInfo.key`.

The planner only reads a source; it never writes to it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from laytune.exceptions import ArgumentTypeError
from laytune.space import Candidate

__all__ = ["LayoutSource", "SourceLike", "lookup_candidate"]


@runtime_checkable
class LayoutSource(Protocol):
    """Anything that knows the best candidate of a workload on a device.

    Contract: ``best_candidate`` returns the candidate to freeze for the
    workload whose :attr:`~laytune.ops.Workload.key` is ``workload_key`` on
    the device whose :attr:`~laytune.DeviceInfo.key` is ``device_key``, or
    ``None`` when it knows none (the operator is then not layout-critical
    and its layouts are planned). It must not mutate the candidate later;
    the planner may call it several times for one key.
    """

    def best_candidate(self, workload_key: str, device_key: str) -> Candidate | None: ...


SourceLike = LayoutSource | Mapping[str, Candidate]


def lookup_candidate(source: SourceLike, workload_key: str, device_key: str) -> Candidate | None:
    """The candidate ``source`` holds for a workload (mapping: by key alone)."""
    if isinstance(source, Mapping):
        found = source.get(workload_key)
    elif isinstance(source, LayoutSource):
        found = source.best_candidate(workload_key, device_key)
    else:
        raise ArgumentTypeError(
            "a layout source is a Mapping[str, Candidate] keyed by workload key or an object "
            f"with best_candidate(workload_key, device_key); got {type(source).__name__}"
        )
    if found is not None and not isinstance(found, Candidate):
        raise ArgumentTypeError(
            f"the layout source gave a {type(found).__name__} for {workload_key!r}, not a Candidate"
        )
    return found
