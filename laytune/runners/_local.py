"""The builder and runner a job on this machine uses when it is given none."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from laytune.runners._builder import Builder
from laytune.runners._cache import build_cache_dir
from laytune.runners._config import MeasureConfig
from laytune.runners._devices import Device
from laytune.runners._runner import Runner

__all__ = ["local_workers"]


@contextlib.contextmanager
def local_workers(
    device: Device, measure: MeasureConfig | None = None
) -> Iterator[tuple[Builder, Runner]]:
    """A :class:`Builder` keeping its binaries in :func:`build_cache_dir` and
    a :class:`Runner` measuring under ``measure``, both for ``device`` and
    closed on exit: jobs given them in turn start their workers once (each
    starts its processes at its first use)."""
    with Builder(device, cache_dir=build_cache_dir()) as builder, Runner(device, measure) as runner:
        yield builder, runner
