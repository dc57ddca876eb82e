"""The base of the rule engine's steps: one knob each (:class:`Step`), what
every step may read (:class:`Setting`), the state they write and the broken
rules they report. :mod:`laytune.space._rules` and
:mod:`laytune.space._matrix_rules` both build on it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from laytune.device_info import DeviceInfo
from laytune.space._knobs import knob_spec
from laytune.space._staging import StagingPlan
from laytune.space._workload import WorkloadLike

__all__ = ["Broken", "Setting", "State", "Step", "strict_in"]

Broken = tuple[str | None, str]
State = dict[str, Any]


def strict_in(value: Any, choices: Sequence[Any]) -> bool:
    """``value in choices`` without ``True == 1`` or ``1 == 1.0``."""
    return any(type(c) is type(value) and c == value for c in choices)


@dataclass(frozen=True)
class Setting:
    """What every step may read besides the state: the workload, the device,
    the knob values the options allow, the staging plan (None: the workload
    cannot be staged), the buffers the ``order`` knob may follow and, per
    staged input whose footprints leave it, why (``outside``)."""

    workload: WorkloadLike
    device: DeviceInfo
    vectors: tuple[int, ...]
    blocks: tuple[int, ...]
    groups: tuple[int, ...]
    splits: tuple[int, ...]
    unrolls: tuple[int, ...]
    max_block_points: int
    staging: StagingPlan | None
    orders: tuple[str, ...]
    copies: tuple[str, ...] = knob_spec("copy").values or ("elementwise",)
    subgroups: tuple[int, ...] = knob_spec("subgroup").values or (0,)
    outside: tuple[tuple[str, str], ...] = ()
    matrices: tuple[str, ...] = knob_spec("matrix").values or ("none",)

    def extent(self, axis: int) -> int:
        return self.workload.axes[axis].extent

    def axis_name(self, axis: int) -> str:
        return self.workload.axes[axis].name


class Step:
    """One knob: ``values`` it may take, the rules a value breaks, and what
    choosing it writes into the state. ``reads``: every state key its rules
    or values read (the engine memoises on them)."""

    name: str = ""
    reads: frozenset[str] = frozenset()

    def __init__(self, setting: Setting) -> None:
        self.s = setting

    def values(self, state: State) -> Sequence[Any]:
        values = knob_spec(self.name).values
        assert values is not None
        return values

    def check(self, state: State, value: Any) -> list[Broken]:
        return []

    def apply(self, state: State, value: Any) -> None:
        state[self.name] = value

    @property
    def writes(self) -> frozenset[str]:
        """State keys besides its own name that :meth:`apply` sets."""
        return frozenset()

    def derived(self, state: State) -> State:
        """State keys this step reads in place of a layout fact, computed once
        from the facts (``state`` before any knob): the part of a fact its
        rules ask about. The engine memoises on what the remaining steps
        read, so a late step that reads a whole fact keys every step before
        it on that fact; reading only its part lets layouts that differ
        elsewhere share the count of every step after the last that reads
        the whole."""
        return {}

    def classes(self, state: State, domain: Sequence[Any]) -> list[tuple[Any, int]] | None:
        """``domain`` as (representative, count) pairs whose values write the
        same state (counting needs one of each when no later step reads the
        value itself); None: every value on its own."""
        return None
