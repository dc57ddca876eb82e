"""Figures of tuning results: convergence, layout families, speed-up, Pareto, address maps.

Every function returns a :class:`matplotlib.figure.Figure` built without
pyplot, so nothing here opens a window or leaves global state behind: save it
with ``fig.savefig("out.png")``, or let a notebook display it.

The records figures (:func:`convergence`, :func:`families`, :func:`speedup`,
:func:`pareto`) take a records DataFrame (the columns of
``laytune.records.Database.to_dataframe()``) or anything with a
``to_dataframe()`` method, such as a records database. They draw one row of
panels per (workload, device) pair found, after the optional ``workload`` and
``device`` filters, titled once with the workload's operator and shape
(``matmul 256x256x256``, :func:`laytune.ops.short_key`); the device is named
once in the figure's title (in each row's title when there are several).
Only records with status ``"ok"`` contribute times: a failed candidate
counts as a trial in :func:`convergence` and nowhere else. A panel that
would hold fewer than two points is left out. Times are drawn in
milliseconds; log axes carry at least two labelled ticks; legends sit
outside the data, right of the panels.

:func:`address_map` takes a :class:`~laytune.layout.Layout` (or an index map
and a logical shape) and shows where each logical element lies in memory and
in which local-memory bank, for one access pattern.

``plot(kind, source, **options)`` is what ``laytune plot KIND`` calls; the
kinds are the keys of :data:`KINDS`.
"""

from __future__ import annotations

import inspect
import math
import textwrap
import warnings
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.colors import BoundaryNorm, ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from matplotlib.ticker import (
    EngFormatter,
    FixedLocator,
    FuncFormatter,
    LogLocator,
    NullFormatter,
)

from laytune.device_info import DeviceInfo
from laytune.exceptions import PlotError
from laytune.layout import IndexMap, Layout, custom
from laytune.ops import short_key
from laytune.space import BankConflicts

__all__ = [
    "DEFAULT_BANKS",
    "DEFAULT_BANK_BYTES",
    "FAMILY_ORDER",
    "KINDS",
    "PlotError",
    "address_map",
    "convergence",
    "families",
    "pareto",
    "pareto_front",
    "plot",
    "records_frame",
    "speedup",
]

DEFAULT_BANKS = 32
"""Local-memory banks assumed when neither the caller nor the device says."""
DEFAULT_BANK_BYTES = 4
"""Width of one bank word in bytes, assumed likewise."""

FAMILY_ORDER = (
    "identity",
    "permute",
    "pad_rows",
    "pad_every",
    "row_xor",
    "swizzle",
    "block",
    "tile",
    "texture",
)
"""Order of the layout families on the x axis; others (compositions such as
``permute+block``, ``custom``) follow alphabetically."""

OK = "ok"
_MS = 1e3


# -- records ------------------------------------------------------------------


def records_frame(source: Any) -> pd.DataFrame:
    """The records DataFrame of ``source``: a DataFrame as is, or the result
    of ``source.to_dataframe()``. Raises :class:`PlotError` for anything else
    and for an empty frame."""
    if isinstance(source, pd.DataFrame):
        frame = source
    elif callable(getattr(source, "to_dataframe", None)):
        frame = source.to_dataframe()
        if not isinstance(frame, pd.DataFrame):
            raise PlotError(
                f"{type(source).__name__}.to_dataframe() returned a {type(frame).__name__}, "
                f"not a pandas DataFrame"
            )
    else:
        raise PlotError(
            f"records figures take a pandas DataFrame or an object with to_dataframe() "
            f"(a records database), got {type(source).__name__}"
        )
    if frame.empty:
        raise PlotError("the records DataFrame is empty: there is nothing to plot")
    return frame


def _require(frame: pd.DataFrame, columns: Iterable[str], figure: str) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise PlotError(
            f"the {figure} figure needs the records columns {missing}, which this DataFrame "
            f"lacks (it has {list(frame.columns)[:12]}{' ...' if frame.shape[1] > 12 else ''})"
        )


def _select(frame: pd.DataFrame, workload: str | None, device: str | None) -> pd.DataFrame:
    """Rows whose workload key equals or contains ``workload`` and whose device
    key equals, or device name contains, ``device``."""
    if workload is not None:
        keys = frame["workload_key"].astype(str)
        frame = frame[(keys == workload) | keys.str.contains(workload, regex=False)]
        if frame.empty:
            raise PlotError(f"no record has a workload key matching {workload!r}")
    if device is not None:
        by_key = frame["device_key"].astype(str) == device
        if "device_name" in frame.columns:
            by_key |= frame["device_name"].astype(str).str.contains(device, regex=False)
        frame = frame[by_key]
        if frame.empty:
            raise PlotError(f"no record has a device key or name matching {device!r}")
    return frame


def _times(frame: pd.DataFrame) -> pd.Series:
    """``time_s`` where the status is ok, NaN elsewhere (whatever a failed row holds)."""
    ok = frame["status"] == OK
    return frame["time_s"].astype(float).where(ok)


def _device_name(rows: pd.DataFrame) -> str:
    names = rows["device_name"].dropna().astype(str) if "device_name" in rows else []
    names = [n for n in names if n]
    return names[0] if names else str(rows["device_key"].iloc[0])


def _facets(frame: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """(title, rows) for each (workload, device) pair, in order of appearance:
    the workload in short form, and its device when the frame has several
    (else :func:`_title` names the one device in the figure's title)."""
    several = frame["device_key"].nunique(dropna=False) > 1
    out = []
    for (workload, _), rows in frame.groupby(
        ["workload_key", "device_key"], sort=False, dropna=False
    ):
        title = short_key(str(workload))
        out.append((f"{title} on {_device_name(rows)}" if several else title, rows))
    return out


def _title(fig: Figure, text: str, frame: pd.DataFrame, size: float = 11.0) -> None:
    """The figure's title: ``text``, and the device when every row is of one
    device, wrapped to the figure's width (a character is taken as 0.6 of
    the font size wide)."""
    if frame["device_key"].nunique(dropna=False) == 1:
        text += f" on {_device_name(frame)}"
    width = max(20, int(fig.get_figwidth() * 72 / (0.6 * size)) - 4)
    fig.suptitle("\n".join(textwrap.wrap(text, width)), fontsize=size)


def _ok_rows(frame: pd.DataFrame, figure: str) -> pd.DataFrame:
    ok = frame[frame["status"] == OK]
    ok = ok[np.isfinite(ok["time_s"].astype(float))]
    if ok.empty:
        statuses = frame["status"].value_counts().to_dict()
        raise PlotError(
            f"the {figure} figure needs records with status 'ok' and a time; these "
            f"{len(frame)} records have statuses {statuses}"
        )
    return ok


def _colours(keys: Sequence[Hashable]) -> dict[Hashable, Any]:
    cycle = colormaps["tab10"].colors
    return {key: cycle[k % len(cycle)] for k, key in enumerate(keys)}


def _figure(nrows: int, ncols: int, width: float, height: float) -> tuple[Figure, np.ndarray]:
    fig = Figure(figsize=(width * ncols, height * nrows), layout="constrained")
    axes = np.asarray(fig.subplots(nrows, ncols, squeeze=False))
    return fig, axes


def _rows(
    titles: Sequence[str], ncols: int, width: float, height: float
) -> tuple[Figure, list[np.ndarray]]:
    """A figure with one row of ``ncols`` panels per title, each row a
    subfigure titled once."""
    fig = Figure(figsize=(width * ncols + 1.5, height * len(titles) + 0.6), layout="constrained")
    subfigures = np.atleast_1d(fig.subfigures(len(titles), 1))
    rows = []
    for subfigure, title in zip(subfigures, titles, strict=True):
        subfigure.suptitle(title, fontsize=10, x=0.02, ha="left")
        rows.append(np.atleast_1d(subfigure.subplots(1, ncols, squeeze=False)[0]))
    return fig, rows


def _legend_outside(ax: Axes, only: str | None = None) -> None:
    """The panel's legend right of it, outside the data (``only``: just the
    entry of that label)."""
    handles, labels = ax.get_legend_handles_labels()
    if only is not None:
        kept = [(h, label) for h, label in zip(handles, labels, strict=True) if label == only]
        handles, labels = [h for h, _ in kept], [label for _, label in kept]
    if handles:
        ax.legend(
            handles,
            labels,
            loc="upper left",
            bbox_to_anchor=(1.02, 1.0),
            borderaxespad=0.0,
            fontsize=8,
        )


def _plain(value: float, _: Any = None) -> str:
    return f"{value:g}"


#: Multiples of each power tried for log ticks, fewest first.
_LOG_SUBS = {
    10: ((1.0,), (1.0, 2.0, 5.0), (1.0, 2.0, 3.0, 5.0, 7.0), tuple(float(k) for k in range(1, 10))),
    2: ((1.0,), (1.0, 1.5)),
}


def _log_ticks(low: float, high: float, base: int) -> list[float]:
    """Labelled ticks for a log axis shown from ``low`` to ``high``: the
    fewest-first multiples of the powers of ``base`` that put at least three
    ticks in view (at most eight); for a range too narrow for any of them,
    four ticks evenly spaced in log and rounded to three significant digits."""
    for subs in _LOG_SUBS[base]:
        ticks = LogLocator(base=base, subs=subs).tick_values(low, high)
        ticks = [float(t) for t in ticks if low <= t <= high]
        if len(ticks) > 8:
            ticks = ticks[:: math.ceil(len(ticks) / 8)]
        if len(ticks) >= 3:
            return ticks
    even = np.geomspace(low, high, 6)[1:-1]
    return sorted({float(f"{t:.3g}") for t in even})


def _log_y(ax: Axes, base: int = 10) -> None:
    """A log y axis labelled in plain numbers with at least two labelled
    ticks in view, however narrow the data's range (see :func:`_log_ticks`);
    call it after the data is drawn."""
    ax.set_yscale("log", base=base)
    ax.autoscale_view()
    low, high = ax.get_ylim()
    ax.yaxis.set_major_locator(FixedLocator(_log_ticks(low, high, base)))
    ax.yaxis.set_major_formatter(FuncFormatter(_plain))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_ylim(low, high)


# -- convergence ----------------------------------------------------------------


def _best_so_far(times: np.ndarray) -> np.ndarray:
    """Running minimum that skips NaN (failed trials keep the best before them)."""
    return np.fmin.accumulate(times) if len(times) else times


def _step_at(xs: np.ndarray, values: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """A right-continuous step function through (xs, values) read at ``grid``:
    NaN before the first x and after the last."""
    where = np.searchsorted(xs, grid, side="right") - 1
    out = values[np.clip(where, 0, None)].astype(float)
    out[(where < 0) | (grid > xs[-1])] = np.nan
    return out


_Line = tuple[str, str, np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]


def _study_label(study: str, strategy: str) -> str:
    """A study as a legend says it: its strategy for the names ``tune`` gives
    (``<workload>@<device>/<strategy>``), else its name and strategy."""
    if "@" in study and study.endswith(f"/{strategy}"):
        return strategy
    return f"{study} ({strategy})"


def _convergence_lines(rows: pd.DataFrame, by: str, x: str) -> list[_Line]:
    """(key, label, x, best-so-far ms, band low, band high) per line."""
    per_study = []
    for study, records in rows.groupby("study", sort=False):
        records = records.sort_values(["trial", "created_at"] if "created_at" in rows else "trial")
        xs = records[x].to_numpy(dtype=float)
        order = np.argsort(xs, kind="stable")
        best = _best_so_far(_times(records).to_numpy(dtype=float)[order]) * _MS
        strategy = str(records["strategy"].iloc[0])
        per_study.append((str(study), strategy, xs[order], best))
    if by == "study":
        return [
            (s, _study_label(s, strategy), xs, best, None, None)
            for s, strategy, xs, best in per_study
        ]
    lines = []
    strategies = list(dict.fromkeys(strategy for _, strategy, _, _ in per_study))
    for strategy in strategies:
        runs = [(xs, best) for _, s, xs, best in per_study if s == strategy]
        if len(runs) == 1:
            xs, best = runs[0]
            lines.append((strategy, strategy, xs, best, None, None))
            continue
        grid = np.unique(np.concatenate([xs for xs, _ in runs]))
        stack = np.vstack([_step_at(xs, best, grid) for xs, best in runs])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns stay NaN
            median = np.nanmedian(stack, axis=0)
            low, high = np.nanmin(stack, axis=0), np.nanmax(stack, axis=0)
        label = f"{strategy} (median of {len(runs)} studies)"
        lines.append((strategy, label, grid, median, low, high))
    return lines


def convergence(
    source: Any,
    *,
    by: str = "study",
    x: str = "both",
    workload: str | None = None,
    device: str | None = None,
) -> Figure:
    """Best time so far against trial and against tuning time.

    One line per study (``by="study"``, labelled with its strategy, or with
    its name when ``tune`` did not name it) or per strategy
    (``by="strategy"``: with several studies of one strategy, their median
    best-so-far, with the range between the best and the worst study
    shaded). The best so far at trial t is the least ``time_s`` of the ok
    records up to t; before the first ok record there is no line. ``x`` is
    ``"trial"``, ``"time"`` (``elapsed_s``: seconds of tuning in the study,
    each run counted from its start and the runs laid end to end, so the
    pause between two runs of a resumed study is not drawn; dotted lines
    mark where a later run begins) or ``"both"`` (two panels). A dashed line
    marks the best time of the baseline candidate when one was measured.
    Lines are drawn in the order the studies appear; y is logarithmic. A
    workload with fewer than two ok records gets no row.
    """
    if by not in ("study", "strategy"):
        raise PlotError(f"convergence: by must be 'study' or 'strategy', got {by!r}")
    panels = {"trial": ["trial"], "time": ["elapsed_s"], "both": ["trial", "elapsed_s"]}
    if x not in panels:
        raise PlotError(f"convergence: x must be one of {sorted(panels)}, got {x!r}")
    frame = records_frame(source)
    needed = ["study", "strategy", "trial", "status", "time_s", "workload_key", "device_key"]
    _require(frame, needed + [c for c in panels[x] if c != "trial"], "convergence")
    frame = _select(frame, workload, device)
    _ok_rows(frame, "convergence")
    facets = [(t, rows) for t, rows in _facets(frame) if _times(rows).notna().sum() >= 2]
    if not facets:
        raise PlotError(
            "the convergence figure needs a workload with at least two ok records; "
            "each of these has fewer"
        )
    lines = {
        id(rows): {column: _convergence_lines(rows, by, column) for column in panels[x]}
        for _, rows in facets
    }
    labels = [line[1] for drawn in lines.values() for each in drawn.values() for line in each]
    colours = _colours(list(dict.fromkeys(labels)))  # one colour per label in every row
    fig, rows_of_axes = _rows([t for t, _ in facets], len(panels[x]), 4.6, 3.0)
    for row, (_, rows) in zip(rows_of_axes, facets, strict=True):
        baseline = None
        if "is_identity" in rows.columns:
            identity = _times(rows[rows["is_identity"].astype(bool)]).dropna()
            baseline = identity.min() * _MS if len(identity) else None
        for ax, column in zip(row, panels[x], strict=True):
            for _, label, xs, best, low, high in lines[id(rows)][column]:
                ax.plot(xs, best, drawstyle="steps-post", label=label, color=colours[label])
                if low is not None and high is not None:
                    ax.fill_between(
                        xs, low, high, step="post", alpha=0.2, color=colours[label], linewidth=0
                    )
            if baseline is not None:
                ax.axhline(baseline, color="0.4", linestyle="--", linewidth=1, label="baseline")
            if column == "elapsed_s":
                for start in _run_starts(rows):
                    ax.axvline(start, color="0.6", linestyle=":", linewidth=1)
            _log_y(ax)
            ax.set_xlabel("trial" if column == "trial" else "tuning time (s)")
            ax.set_ylabel("best so far (ms)")
            ax.grid(True, which="major", alpha=0.3)
        _legend_outside(row[-1])
    _title(fig, "Convergence: best verified time so far", frame)
    return fig


def _run_starts(rows: pd.DataFrame) -> list[float]:
    """``elapsed_s`` where each run after a study's first begins (per study)."""
    if "run" not in rows.columns:
        return []
    starts: set[float] = set()
    for _, records in rows.groupby("study", sort=False):
        firsts = records.groupby("run", sort=False)["elapsed_s"].min().sort_values()
        starts.update(float(v) for v in firsts.iloc[1:])
    return sorted(starts)


# -- families and speed-up ----------------------------------------------------------


def _buffers(frame: pd.DataFrame, at_least: int = 1) -> list[str]:
    """Buffers with a family in at least ``at_least`` rows."""
    return [
        c.removeprefix("family.")
        for c in frame.columns
        if c.startswith("family.") and int(frame[c].notna().sum()) >= at_least
    ]


def _family_order(names: Iterable[str]) -> list[str]:
    names = set(names)
    known = [f for f in FAMILY_ORDER if f in names]
    return known + sorted(names - set(known))


def _by_family(
    source: Any, value: str, figure: str, workload: str | None, device: str | None
) -> tuple[Figure, list[tuple[str, pd.DataFrame]], np.ndarray]:
    frame = records_frame(source)
    _require(frame, ["status", "time_s", "workload_key", "device_key", value], figure)
    frame = _select(frame, workload, device)
    if not _buffers(frame):
        raise PlotError(f"the {figure} figure needs family.<buffer> columns; there are none")
    facets = []
    for title, rows in _facets(frame):
        ok = rows[rows["status"] == OK]
        ok = ok[np.isfinite(ok[value].astype(float))]
        if _buffers(ok, 2):  # a panel of one point says nothing
            facets.append((title, ok))
    if not facets:
        what = "a speed-up (an ok baseline record of the same workload and device)"
        raise PlotError(
            f"the {figure} figure needs at least two records with status 'ok' and "
            f"{what if value == 'speedup' else 'a time'} in one workload; these "
            f"{len(frame)} have fewer"
        )
    ncols = max(len(_buffers(rows, 2)) for _, rows in facets)
    fig, axes = _rows([t for t, _ in facets], ncols, 3.4, 3.0)
    for row, (_, rows) in zip(axes, facets, strict=True):
        buffers = _buffers(rows, 2)
        for ax in row[len(buffers) :]:
            ax.remove()
        for ax, buffer in zip(row, buffers, strict=False):
            _strip(ax, rows, buffer, value)
            ax.set_title(f"buffer {buffer}", fontsize=9)
    return fig, facets, axes


def _strip(ax: Axes, rows: pd.DataFrame, buffer: str, value: str) -> None:
    """Box plot and jittered points of ``value`` per family of ``buffer``."""
    column = f"family.{buffer}"
    rows = rows[rows[column].notna()]
    scale = _MS if value == "time_s" else 1.0
    order = _family_order(rows[column].astype(str))
    rng = np.random.default_rng(0)  # the same jitter every time
    colours = _colours(FAMILY_ORDER + tuple(f for f in order if f not in FAMILY_ORDER))
    for k, family in enumerate(order):
        values = rows.loc[rows[column].astype(str) == family, value].to_numpy(float) * scale
        ax.boxplot(
            values,
            positions=[k],
            widths=0.6,
            showfliers=False,
            medianprops={"color": "black"},
            manage_ticks=False,
        )
        jitter = rng.uniform(-0.2, 0.2, size=len(values))
        ax.scatter(k + jitter, values, s=12, alpha=0.7, color=colours[family], label=family)
    ax.set_xticks(range(len(order)), order, rotation=90, fontsize=8)
    ax.set_xlim(-0.6, len(order) - 0.4)
    ax.grid(True, axis="y", alpha=0.3)


def families(source: Any, *, workload: str | None = None, device: str | None = None) -> Figure:
    """Time of the ok records by the layout family of each buffer.

    One panel per buffer (``family.<buffer>`` columns, local buffers
    included), one row of panels per (workload, device). Each family gets a
    box plot (quartiles, whiskers at 1.5 IQR, no outliers drawn) and its
    records as jittered points; the points of family F are the scatter
    labelled F. Every other choice (the other buffers' layouts, the knobs)
    varies within a box, so a box is the spread a family allows, and its
    bottom the best it reached. A dashed line marks the baseline candidate's
    best time when measured. A buffer with fewer than two ok records (a
    local tile staged once, say) gets no panel. Log y, milliseconds.
    """
    fig, facets, axes = _by_family(source, "time_s", "families", workload, device)
    for row, (_, rows) in zip(axes, facets, strict=True):
        identity = rows[rows["is_identity"].astype(bool)] if "is_identity" in rows else rows[:0]
        for ax in row[: len(_buffers(rows, 2))]:
            if not identity.empty:
                ax.axhline(
                    identity["time_s"].min() * _MS,
                    color="0.4",
                    linestyle="--",
                    linewidth=1,
                    label="baseline",
                )
            _log_y(ax)
            ax.set_ylabel("time (ms)")
        if not identity.empty:
            _legend_outside(row[len(_buffers(rows, 2)) - 1], only="baseline")
    frame = pd.concat([rows for _, rows in facets])
    _title(fig, "Time by layout family, per buffer", frame)
    return fig


def speedup(source: Any, *, workload: str | None = None, device: str | None = None) -> Figure:
    """Speed-up over the baseline candidate by the layout family of each buffer.

    As :func:`families` with ``speedup`` (baseline time / time: what the
    whole candidate bought) on a log2 axis instead of the time, and a line
    at 1 (no gain). Rows without a speed-up (failed, or no baseline record
    of their workload and device) are left out; a (workload, device) with
    none gets no row.
    """
    fig, facets, axes = _by_family(source, "speedup", "speedup", workload, device)
    for row, (_, rows) in zip(axes, facets, strict=True):
        buffers = _buffers(rows, 2)
        for ax in row[: len(buffers)]:
            ax.axhline(1.0, color="0.4", linestyle="--", linewidth=1, label="baseline")
            _log_y(ax, base=2)
            ax.set_ylabel("speed-up (x)")
        _legend_outside(row[len(buffers) - 1], only="baseline")
    frame = pd.concat([rows for _, rows in facets])
    _title(fig, "Speed-up over the baseline by layout family, per buffer", frame)
    return fig


# -- Pareto ---------------------------------------------------------------------

_MEMORY = {
    "padding_overhead": ("padding overhead (% of the logical bytes)", 100.0),
    "physical_bytes": ("physical bytes of all buffers", 1.0),
}


def pareto_front(
    frame: pd.DataFrame, x: str = "padding_overhead", y: str = "time_s"
) -> pd.DataFrame:
    """The rows of ``frame`` that no other row dominates, sorted by ``x``.

    Both columns are minimised; row q dominates row p when ``q.x <= p.x``
    and ``q.y <= p.y`` with one of them strict, so rows equal in both are
    kept together. Rows with a NaN in either column are ignored.
    """
    for column in (x, y):
        if column not in frame.columns:
            raise PlotError(f"pareto_front: the DataFrame has no column {column!r}")
    rows = frame[np.isfinite(frame[x].astype(float)) & np.isfinite(frame[y].astype(float))]
    rows = rows.sort_values([x, y], kind="stable")
    xs, ys = rows[x].to_numpy(float), rows[y].to_numpy(float)
    keep = np.zeros(len(rows), dtype=bool)
    best_y, kept = math.inf, None
    for k in range(len(rows)):
        if ys[k] < best_y or (kept is not None and xs[k] == xs[kept] and ys[k] == ys[kept]):
            keep[k] = True
            if ys[k] < best_y:
                best_y, kept = ys[k], k
    return rows[keep]


def _short_candidate(row: pd.Series, buffers: Sequence[str]) -> str:
    parts = [
        f"{b}:{row[f'family.{b}']}"
        for b in buffers
        if isinstance(row.get(f"family.{b}"), str) and row[f"family.{b}"] != "identity"
    ]
    return ", ".join(parts) or "identity layouts"


def pareto(
    source: Any,
    *,
    memory: str = "padding_overhead",
    workload: str | None = None,
    device: str | None = None,
    annotate: int = 8,
) -> Figure:
    """Time against memory, with the Pareto front of the two.

    Every ok record is a grey point at (``memory``, time); the records on
    the Pareto front (:func:`pareto_front`: no other record is both faster
    and smaller) are joined by a step line labelled ``"Pareto front"``, and
    when there are at most ``annotate`` of them each gets its own marker,
    named in the legend by its non-identity buffer families (the legend
    sits outside the data, so labels never cover points or each other).
    ``memory`` is ``"padding_overhead"`` (drawn in percent) or
    ``"physical_bytes"``. One panel per (workload, device) with at least
    two ok records. Log y, milliseconds.
    """
    if memory not in _MEMORY:
        raise PlotError(f"pareto: memory must be one of {sorted(_MEMORY)}, got {memory!r}")
    frame = records_frame(source)
    _require(frame, ["status", "time_s", "workload_key", "device_key", memory], "pareto")
    frame = _select(frame, workload, device)
    _ok_rows(frame, "pareto")
    label, scale = _MEMORY[memory]
    facets = [(t, rows) for t, rows in _facets(frame) if _times(rows).notna().sum() >= 2]
    if not facets:
        raise PlotError(
            "the pareto figure needs a workload with at least two ok records; "
            "each of these has fewer"
        )
    fig, axes = _figure(len(facets), 1, 6.0, 3.4)
    for (ax,), (title, rows) in zip(axes, facets, strict=True):
        ok = _ok_rows(rows, "pareto")
        front = pareto_front(ok, memory, "time_s")
        ax.scatter(
            ok[memory].to_numpy(float) * scale,
            ok["time_s"].to_numpy(float) * _MS,
            s=12,
            color="0.6",
            alpha=0.6,
            label=f"candidates ({len(ok)})",
        )
        fx, fy = front[memory].to_numpy(float) * scale, front["time_s"].to_numpy(float) * _MS
        ax.plot(fx, fy, "-", drawstyle="steps-post", color="tab:red", label="Pareto front")
        if len(front) <= annotate:
            buffers = _buffers(ok)
            markers = "osD^v<>ph*"
            for k, ((_, record), px, py) in enumerate(zip(front.iterrows(), fx, fy, strict=True)):
                ax.plot(
                    [px],
                    [py],
                    markers[k % len(markers)],
                    color=colormaps["tab10"](k % 10),
                    markeredgecolor="black",
                    markeredgewidth=0.5,
                    label=_short_candidate(record, buffers),
                )
        else:
            ax.plot(fx, fy, "o", color="tab:red")
        if memory == "physical_bytes":
            ax.xaxis.set_major_formatter(EngFormatter(unit="B"))
        _log_y(ax)
        ax.set_xlabel(label)
        ax.set_ylabel("time (ms)")
        ax.set_title(title, fontsize=10, loc="left")
        ax.grid(True, alpha=0.3)
        _legend_outside(ax)
    _title(fig, "Time against memory: the Pareto front", frame)
    return fig


# -- address map ------------------------------------------------------------------


def _as_layout(layout: Layout | IndexMap | str, shape: Sequence[int] | None) -> Layout:
    if isinstance(layout, Layout):
        if shape is not None and tuple(int(s) for s in shape) != layout.shape:
            raise PlotError(
                f"address_map: shape {tuple(shape)} differs from the layout's shape {layout.shape}"
            )
        return layout
    if isinstance(layout, (IndexMap, str)):
        if shape is None:
            raise PlotError("address_map: an index map needs the logical shape (shape=...)")
        return custom(tuple(int(s) for s in shape), layout)
    raise PlotError(
        f"address_map takes a Layout, an IndexMap or index-map text, got {type(layout).__name__}"
    )


def _bank_geometry(
    device: DeviceInfo | None, banks: int | None, bank_bytes: int | None
) -> tuple[int, int]:
    """Explicit values first, then the device's, then 32 banks of 4 bytes.

    OpenCL has no query for the bank geometry, so a ``DeviceInfo`` read from
    a device does not carry it; one that has ``local_mem_banks`` and
    ``local_mem_bank_bytes`` attributes (a snapshot extended by hand) is used.
    """
    if banks is None:
        banks = getattr(device, "local_mem_banks", None) or DEFAULT_BANKS
    if bank_bytes is None:
        bank_bytes = getattr(device, "local_mem_bank_bytes", None) or DEFAULT_BANK_BYTES
    return int(banks), int(bank_bytes)


def _grid(values: np.ndarray) -> np.ndarray:
    """Logical values as rows x columns: leading axes flattened into rows."""
    if values.ndim == 1:
        return values.reshape(1, -1)
    return values.reshape(-1, values.shape[-1])


def _cell(index: Sequence[int], shape: Sequence[int]) -> tuple[int, int]:
    if len(shape) == 1:
        return 0, int(index[0])
    return int(np.ravel_multi_index(tuple(index[:-1]), tuple(shape[:-1]))), int(index[-1])


def _bank_cmap(banks: int) -> ListedColormap:
    """Distinct colours for neighbouring banks: tab20 then tab20b, else a hue wheel."""
    base = [*colormaps["tab20"].colors, *colormaps["tab20b"].colors]
    if banks <= len(base):
        return ListedColormap(base[:banks], name=f"banks{banks}")
    return ListedColormap(colormaps["hsv"](np.linspace(0, 1, banks, endpoint=False)))


#: Smallest font (points) worth printing a cell's number in.
_MIN_CELL_FONT = 3.5


def _cell_font(ax: Axes, values: np.ndarray) -> float:
    """The largest font (at most 8 points) whose numbers fit inside a cell of
    ``ax`` as laid out now: a digit is about 0.62 of the font size wide."""
    fig = ax.get_figure()
    box = ax.get_window_extent()
    points = 72.0 / fig.dpi
    rows, cols = values.shape
    cell = min(box.width / cols, box.height / rows) * points
    digits = max(len(str(int(v))) for v in values.flat)
    return min(8.0, 0.7 * cell, 0.8 * cell / (0.62 * digits))


def _cell_numbers(ax: Axes, values: np.ndarray, size: float) -> None:
    """Each cell's value, black on light colours and white on dark ones."""
    image = ax.images[0]
    rgba = image.cmap(image.norm(values))
    light = rgba[..., :3] @ np.array([0.299, 0.587, 0.114]) > 0.5
    for (r, c), v in np.ndenumerate(values):
        colour = "black" if light[r, c] else "white"
        ax.text(c, r, str(int(v)), ha="center", va="center", fontsize=size, color=colour)


def address_map(
    layout: Layout | IndexMap | str,
    *,
    shape: Sequence[int] | None = None,
    dtype: str = "float32",
    axis: int = -1,
    lanes: int | None = None,
    banks: int | None = None,
    bank_bytes: int | None = None,
    device: DeviceInfo | None = None,
    window: tuple[int, int] | None = (64, 64),
    numbers: bool | None = None,
) -> Figure:
    """A layout's address map: the logical grid coloured by physical offset
    (left) and by local-memory bank (right).

    ``layout`` is a :class:`~laytune.layout.Layout`, or an index map (or its
    text) with the logical ``shape``. The access pattern is ``lanes``
    consecutive work-items (default: as many as there are banks, at most the
    extent of ``axis``) reading one element each, lane l at index l along
    logical ``axis`` (``axis=-1``: along a row; ``axis=0`` on a 2-D buffer:
    down a column). Its worst bank-conflict degree is
    :meth:`laytune.space.BankConflicts.degree` of that pattern at every
    translation inside the buffer, and the bank of an element is
    :meth:`~laytune.space.BankConflicts.bank_of` its offset, so these are the
    numbers the search space scores with. ``banks`` and ``bank_bytes`` come
    from the arguments, else from ``device`` when it has ``local_mem_banks``
    and ``local_mem_bank_bytes`` (OpenCL reports neither, so a
    ``DeviceInfo`` read from a device does not), else
    :data:`DEFAULT_BANKS` x :data:`DEFAULT_BANK_BYTES` (32 x 4 bytes).
    ``dtype`` gives the element size.

    The title is the layout's canonical index-map text, its family, and the
    degree ("8-way bank conflict"). The lanes of the worst placement are
    outlined, those in its most loaded bank crossed. Grids of rank above 2
    are drawn with the leading axes flattened into rows; only the top-left
    ``window`` (rows, columns) of a larger grid is drawn, the degree is
    always over the whole buffer, and the offset panel's title states the
    window when it is smaller than the buffer. Cells carry their numbers
    when the drawn grid has at most 24 x 24 cells and the numbers fit their
    cells in a legible font (``numbers`` forces it either way; forced, they
    are drawn as small as they must be to fit).
    """
    layout = _as_layout(layout, shape)
    shape = layout.shape
    banks, bank_bytes = _bank_geometry(device, banks, bank_bytes)
    if not -len(shape) <= axis < len(shape):
        raise PlotError(f"address_map: axis {axis} is out of range for the shape {shape}")
    axis %= len(shape)
    lanes = min(banks, shape[axis]) if lanes is None else int(lanes)
    if not 1 <= lanes <= shape[axis]:
        raise PlotError(
            f"address_map: {lanes} lanes along axis {axis} do not fit its extent {shape[axis]}"
        )
    origin = [0] * len(shape)
    pattern = []
    for lane in range(lanes):
        index = list(origin)
        index[axis] = lane
        pattern.append((tuple(index),))
    access = BankConflicts(tuple(pattern), banks=banks, bank_bytes=bank_bytes, tiled=True)
    degree, shift, worst_bank = access.degree(layout, shape, dtype)
    offsets = layout.index_map.flat_offsets(shape).reshape(shape)
    bank = access.bank_of(offsets, dtype)

    grid_offsets, grid_banks = _grid(offsets), _grid(bank)
    full_rows, full_cols = grid_offsets.shape
    if window is not None:
        rows, cols = (int(w) for w in window)
        grid_offsets, grid_banks = grid_offsets[:rows, :cols], grid_banks[:rows, :cols]
    n_rows, n_cols = grid_offsets.shape
    forced = bool(numbers)
    if numbers is None:
        numbers = n_rows <= 24 and n_cols <= 24

    aspect = n_rows / n_cols
    fig = Figure(figsize=(12.0, max(3.0, min(9.0, 5.0 * aspect + 1.5))), layout="constrained")
    ax_offset, ax_bank = fig.subplots(1, 2)
    image = ax_offset.imshow(grid_offsets, cmap="viridis", interpolation="nearest")
    ax_offset.set_label("offset")
    fig.colorbar(image, ax=ax_offset, label="physical offset (elements)", shrink=0.8)
    norm = BoundaryNorm(np.arange(-0.5, banks), banks)
    image = ax_bank.imshow(grid_banks, cmap=_bank_cmap(banks), norm=norm, interpolation="nearest")
    ax_bank.set_label("bank")
    bar = fig.colorbar(image, ax=ax_bank, label="bank", shrink=0.8)
    bar.set_ticks(range(0, banks, max(1, banks // 8)))

    for ax in (ax_offset, ax_bank):
        ax.set_xlabel(f"logical axis {len(shape) - 1}")
        ylabel = "rows (leading axes flattened)" if len(shape) > 2 else "logical axis 0"
        ax.set_ylabel(ylabel if len(shape) > 1 else "")
        if len(shape) > 2:  # where the flattened leading index steps
            for edge in range(shape[-2], n_rows, shape[-2]):
                ax.axhline(edge - 0.5, color="white", linewidth=1.5)

    shown_worst = 0
    for (index,) in pattern:
        placed = [i + s for i, s in zip(index, shift, strict=True)]
        r, c = _cell(placed, shape)
        if r < n_rows and c < n_cols:
            shown_worst += 1
            ax_bank.add_patch(
                Rectangle((c - 0.5, r - 0.5), 1, 1, fill=False, edgecolor="black", linewidth=1.2)
            )
            if bank.reshape(-1)[np.ravel_multi_index(placed, shape)] == worst_bank:
                ax_bank.plot([c], [r], marker="x", color="black", markersize=6)

    conflict = f"{degree}-way bank conflict" if degree > 1 else "conflict-free (1-way)"
    text = str(layout.index_map)
    fig.suptitle("\n".join(textwrap.wrap(text, 110)), fontsize=10, family="monospace")

    def wrapped(*lines: str) -> str:
        return "\n".join(
            w for line in lines for w in textwrap.wrap(line, 50, break_on_hyphens=False)
        )

    shown = []
    if n_rows < full_rows or n_cols < full_cols:
        shown.append(
            f"window: rows 0-{n_rows - 1} of {full_rows}, columns 0-{n_cols - 1} of {full_cols}"
        )
    ax_offset.set_title(
        wrapped(f"{layout.describe()} on {shape} {dtype}", *shown, "physical offset"),
        fontsize=9,
        loc="left",
    )
    where = "" if shown_worst else " (outside the drawn window)"
    ax_bank.set_title(
        wrapped(
            f"bank ({banks} x {bank_bytes} B), {lanes} lanes along axis {axis}: {conflict}",
            f"worst placement outlined{where}, its bank {worst_bank} crossed",
        ),
        fontsize=9,
        loc="left",
    )
    if numbers:  # sized to the cells as laid out
        fig.draw_without_rendering()
        for ax, values in ((ax_offset, grid_offsets), (ax_bank, grid_banks)):
            size = _cell_font(ax, values)
            if forced or size >= _MIN_CELL_FONT:
                _cell_numbers(ax, values, size)
    return fig


# -- by name --------------------------------------------------------------------

KINDS: dict[str, Callable[..., Figure]] = {
    "convergence": convergence,
    "families": families,
    "speedup": speedup,
    "pareto": pareto,
    "address-map": address_map,
}
"""The figure functions by the name ``laytune plot KIND`` uses."""


def plot(kind: str, source: Any, **options: Any) -> Figure:
    """The figure ``kind`` (a key of :data:`KINDS`) of ``source`` with ``options``.

    ``source`` is a records DataFrame or database, or for ``"address-map"``
    a layout. Raises :class:`PlotError` naming an unknown kind or an option
    the kind does not take.
    """
    func = KINDS.get(kind)
    if func is None:
        raise PlotError(f"unknown plot kind {kind!r}; known: {', '.join(KINDS)}")
    signature = inspect.signature(func)
    accepted = [n for n, p in signature.parameters.items() if p.kind is p.KEYWORD_ONLY]
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise PlotError(
            f"plot kind {kind!r} takes no option {', '.join(map(repr, unknown))}; "
            f"its options: {', '.join(accepted)}"
        )
    return func(source, **options)
