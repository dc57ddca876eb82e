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
import os
import re
import textwrap
import warnings
from collections.abc import Callable, Hashable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.backend_bases import FigureCanvasBase
from matplotlib.colors import BoundaryNorm, ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from matplotlib.ticker import (
    EngFormatter,
    FixedLocator,
    FuncFormatter,
    LogLocator,
    MaxNLocator,
    NullFormatter,
)

from laytune._files import check_writable, write_atomically
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
    "layout_gallery",
    "pareto",
    "pareto_front",
    "plot",
    "records_frame",
    "save",
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
    titles: Sequence[str], ncols: int, width: float, height: float, per_row: int = 1
) -> tuple[Figure, list[np.ndarray]]:
    """A figure with one row of ``ncols`` panels per title, each row a
    subfigure titled once; ``per_row`` such rows side by side (a figure of
    one panel per title would otherwise be a tall column)."""
    across = min(per_row, len(titles))
    down = math.ceil(len(titles) / across)
    fig = Figure(
        figsize=((width * ncols + 1.5) * across, height * down + 0.6), layout="constrained"
    )
    subfigures = np.atleast_1d(fig.subfigures(down, across)).ravel()
    rows = []
    for subfigure, title in zip(subfigures, titles, strict=False):
        subfigure.suptitle(title, fontsize=10, x=0.02, ha="left")
        rows.append(np.atleast_1d(subfigure.subplots(1, ncols, squeeze=False)[0]))
    return fig, rows


def _legend_outside(
    ax: Axes, only: str | None = None, merge: Iterable[Axes] = (), extra: Iterable[Any] = ()
) -> None:
    """The panel's legend right of it, outside the data (``only``: just the
    entry of that label): the entries of ``ax`` and of the panels ``merge``
    (each label once), then the ``extra`` handles (kept whatever ``only`` says)."""
    handles, labels = ax.get_legend_handles_labels()
    for other in merge:
        for handle, label in zip(*other.get_legend_handles_labels(), strict=True):
            if label not in labels:
                handles.append(handle)
                labels.append(label)
    if only is not None:
        kept = [(h, label) for h, label in zip(handles, labels, strict=True) if label == only]
        handles, labels = [h for h, _ in kept], [label for _, label in kept]
    for handle in extra:
        handles.append(handle)
        labels.append(handle.get_label())
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
    """Labelled ticks for a log axis whose data runs from ``low`` to
    ``high``, spanning it: from the last tick at or below ``low`` to the
    first at or above ``high``, on the multiples of the powers of ``base``
    (of :data:`_LOG_SUBS`) that give the most ticks up to six, at least
    three (thinned, the two ends kept, where even the fewest give more);
    for a range too narrow for any of them, ``low`` and ``high`` rounded out
    to three significant digits and two ticks evenly spaced in log between."""
    spans = []
    for subs in _LOG_SUBS[base]:
        ticks = LogLocator(base=base, subs=subs, numticks=200).tick_values(low / base, high * base)
        ticks = sorted(float(t) for t in ticks)
        below = [t for t in ticks if t <= low * (1 + 1e-9)]
        above = [t for t in ticks if t >= high * (1 - 1e-9)]
        if below and above:
            spans.append([t for t in ticks if below[-1] <= t <= above[0]])
    fitting = [ticks for ticks in spans if 3 <= len(ticks) <= 6]
    if fitting:
        return max(fitting, key=len)
    if spans and len(spans[0]) > 6:
        ticks = spans[0]
        step = math.ceil((len(ticks) - 1) / 5)
        return sorted({*ticks[::step], ticks[-1]})
    bottom, top = _round_sig(low, math.floor), _round_sig(high, math.ceil)
    if bottom == top:
        bottom, top = _round_sig(low * 0.99, math.floor), _round_sig(high * 1.01, math.ceil)
    even = [float(f"{t:.3g}") for t in np.geomspace(bottom, top, 4)[1:-1]]
    return sorted({bottom, *even, top})


def _round_sig(value: float, rounding: Callable[[float], float]) -> float:
    """``value`` rounded (down with ``math.floor``, up with ``math.ceil``) to
    three significant digits."""
    scale = 10.0 ** (math.floor(math.log10(value)) - 2)
    return float(f"{rounding(value / scale) * scale:.3g}")


def _log_y(ax: Axes, base: int = 10) -> None:
    """A log y axis labelled in plain numbers whose labelled ticks span the
    data: the lowest at or below its least value (the final best of a
    convergence line), the highest at or above its greatest, however narrow
    the range (see :func:`_log_ticks`); call it after the data is drawn."""
    ax.set_yscale("log", base=base)
    data = ax.dataLim  # what was drawn: lines, scatters and bands alike
    low, high = sorted((float(data.y0), float(data.y1)))
    if not (np.isfinite(low) and np.isfinite(high) and low > 0):
        ax.autoscale_view()
        low, high = ax.get_ylim()
    ticks = _log_ticks(low, high, base)
    ax.yaxis.set_major_locator(FixedLocator(ticks))
    ax.yaxis.set_major_formatter(FuncFormatter(_plain))
    ax.yaxis.set_minor_formatter(NullFormatter())
    margin = (ticks[-1] / ticks[0]) ** 0.03
    ax.set_ylim(ticks[0] / margin, ticks[-1] * margin)


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


#: ``<workload key>@<device key>/<strategy>[/<boundary tag>]``: how ``tune``
#: names a study (:func:`laytune.search.study_name_for`).
_TUNE_STUDY = re.compile(r"^.+@[^/@]+/(?P<strategy>[^/]+)(?:/(?P<tag>.+))?$")


def _boundary_words(tag: str) -> str:
    """A study name's boundary tag as words: ``free=X,Y;constant=W`` ->
    ``X,Y free; W constant``; ``fixed@<layout>=X`` -> ``X fixed as <layout>``."""
    parts = []
    for group in tag.split(";"):
        kind, _, names = group.partition("=")
        kind = kind.replace("fixed@", "fixed as ")
        parts.append(f"{names} {kind}" if names else group)
    return "; ".join(parts)


def _study_label(study: str, strategy: str) -> str:
    """A study as a legend says it: for the names ``tune`` gives, its
    strategy and the boundary when it is not the default (``model, A
    free``); else its name and strategy."""
    match = _TUNE_STUDY.match(study)
    if match and match["strategy"] == strategy:
        tag = match["tag"]
        return strategy if not tag else f"{strategy}, {_boundary_words(tag)}"
    return f"{study} ({strategy})"


def _convergence_lines(rows: pd.DataFrame, by: str, x: str) -> list[_Line]:
    """(key, label, x, best-so-far ms, band low, band high) per line; with
    ``x == "trial"`` x counts the study's records in trial order from 1
    (trial numbers skip the optuna trials that wrote no record)."""
    per_study = []
    for study, records in rows.groupby("study", sort=False):
        records = records.sort_values(["trial", "created_at"] if "created_at" in rows else "trial")
        if x == "trial":
            xs = np.arange(1, len(records) + 1, dtype=float)
        else:
            xs = records[x].to_numpy(dtype=float)
        order = np.argsort(xs, kind="stable")
        best = _best_so_far(_times(records).to_numpy(dtype=float)[order]) * _MS
        strategy = str(records["strategy"].iloc[0])
        per_study.append((str(study), _study_label(str(study), strategy), xs[order], best))
    if by == "study":
        return [(s, label, xs, best, None, None) for s, label, xs, best in per_study]
    lines = []
    # a study of another boundary has another objective: its own line
    groups = list(dict.fromkeys(_strategy_label(label) for _, label, _, _ in per_study))
    for group in groups:
        runs = [(xs, best) for _, label, xs, best in per_study if _strategy_label(label) == group]
        if len(runs) == 1:
            xs, best = runs[0]
            lines.append((group, group, xs, best, None, None))
            continue
        grid = np.unique(np.concatenate([xs for xs, _ in runs]))
        stack = np.vstack([_step_at(xs, best, grid) for xs, best in runs])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns stay NaN
            median = np.nanmedian(stack, axis=0)
            low, high = np.nanmin(stack, axis=0), np.nanmax(stack, axis=0)
        label = f"{group} (median of {len(runs)} studies)"
        lines.append((group, label, grid, median, low, high))
    return lines


def _strategy_label(label: str) -> str:
    """A study's label without the name of a study ``tune`` did not name."""
    return label.rsplit(" (", 1)[1].rstrip(")") if label.endswith(")") else label


def convergence(
    source: Any,
    *,
    by: str = "study",
    x: str = "both",
    workload: str | None = None,
    device: str | None = None,
) -> Figure:
    """Best time so far against candidates measured and against tuning time.

    One line per study (``by="study"``, labelled with its strategy and, for
    a study of another boundary than the default, that boundary, ``model,
    A free``; or with its name when ``tune`` did not name it) or per
    strategy and boundary (``by="strategy"``: with several studies of one
    strategy, their median best-so-far, with the range between the best
    and the worst study shaded). The best so far after n candidates is the
    least ``time_s`` of the ok records among the study's first n records
    in trial order (failed ones count); before the first ok record there is
    no line. ``x`` is ``"trial"`` (n, from 1 to the study's record count:
    trial numbers themselves skip the trials that found their candidate
    recorded), ``"time"`` (``elapsed_s``: seconds of tuning in the study,
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
    per_row = 2 if len(panels[x]) == 1 and len(facets) > 2 else 1
    fig, rows_of_axes = _rows([t for t, _ in facets], len(panels[x]), 4.6, 3.0, per_row)
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
                for k, start in enumerate(_run_starts(rows)):
                    label = "a resumed run begins" if k == 0 else "_resumed"
                    ax.axvline(start, color="0.6", linestyle=":", linewidth=1, label=label)
            _log_y(ax)
            ax.set_xlabel("candidates measured" if column == "trial" else "tuning time (s)")
            ax.set_ylabel("best so far (ms)")
            ax.grid(True, which="major", alpha=0.3)
        _legend_outside(row[-1], merge=row)
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


#: Panels per row of the family figures: more buffers wrap onto more rows.
_FAMILY_COLUMNS = 3
_POINTS = "tab:blue"


def _by_family(
    source: Any, value: str, figure: str, workload: str | None, device: str | None
) -> tuple[Figure, list[tuple[str, pd.DataFrame]], list[list[Axes]]]:
    """The figure, its facets, and per facet its panels (one per buffer with
    at least two points, :data:`_FAMILY_COLUMNS` to a row)."""
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
    counts = [len(_buffers(rows, 2)) for _, rows in facets]
    grid_rows = [math.ceil(n / _FAMILY_COLUMNS) for n in counts]
    ncols = min(_FAMILY_COLUMNS, max(counts))
    fig = Figure(figsize=(2.9 * ncols + 2.2, 2.9 * sum(grid_rows) + 0.6), layout="constrained")
    subfigures = np.atleast_1d(fig.subfigures(len(facets), 1, height_ratios=grid_rows))
    panels = []
    for subfigure, (title, rows), nrows in zip(subfigures, facets, grid_rows, strict=True):
        subfigure.suptitle(title, fontsize=10, x=0.02, ha="left")
        axes = list(subfigure.subplots(nrows, ncols, squeeze=False).flat)
        buffers = _buffers(rows, 2)
        for ax in axes[len(buffers) :]:
            ax.remove()
        for ax, buffer in zip(axes, buffers, strict=False):
            _strip(ax, rows, buffer, value)
            ax.set_title(f"buffer {buffer}", fontsize=9)
        panels.append(axes[: len(buffers)])
    return fig, facets, panels


def _strip(ax: Axes, rows: pd.DataFrame, buffer: str, value: str) -> None:
    """Box plot and jittered points of ``value`` per family of ``buffer``
    (the points of family F are the scatter labelled F)."""
    column = f"family.{buffer}"
    rows = rows[rows[column].notna()]
    scale = _MS if value == "time_s" else 1.0
    order = _family_order(rows[column].astype(str))
    rng = np.random.default_rng(0)  # the same jitter every time
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
        ax.scatter(k + jitter, values, s=12, alpha=0.7, color=_POINTS, label=family)
    ax.set_xticks(range(len(order)), order, rotation=90, fontsize=8)
    ax.set_xlim(-0.6, len(order) - 0.4)
    ax.grid(True, axis="y", alpha=0.3)


def _family_legend(panels: Sequence[Axes], what: str) -> None:
    """One legend per workload, right of its first row of panels: what a
    point, a box and the dashed line are (the families are the x ticks)."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    extra = [
        Line2D([], [], marker="o", linestyle="", color=_POINTS, alpha=0.7, label=what),
        Patch(
            facecolor="none",
            edgecolor="black",
            label="box: quartiles and median;\nwhiskers: 1.5 IQR",
        ),
    ]
    last = panels[min(len(panels), _FAMILY_COLUMNS) - 1]
    _legend_outside(last, only="baseline", merge=panels, extra=extra)


def families(source: Any, *, workload: str | None = None, device: str | None = None) -> Figure:
    """Time of the ok records by the layout family of each buffer.

    One panel per buffer (``family.<buffer>`` columns, local buffers
    included), three panels to a row, a group of rows per (workload,
    device). Each family (an x tick) gets a box plot (quartiles, whiskers at
    1.5 IQR, no outliers drawn) and its records as jittered points, all of
    one colour; the points of family F are the scatter labelled F. Every
    other choice (the other buffers' layouts, the knobs) varies within a
    box, so a box is the spread a family allows, and its bottom the best it
    reached. A dashed line marks the baseline candidate's best time when
    measured. A legend says what a point, a box and the line are. A buffer
    with fewer than two ok records (a local tile staged once, say) gets no
    panel. Log y, milliseconds.
    """
    fig, facets, panels = _by_family(source, "time_s", "families", workload, device)
    for axes, (_, rows) in zip(panels, facets, strict=True):
        identity = rows[rows["is_identity"].astype(bool)] if "is_identity" in rows else rows[:0]
        for ax in axes:
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
        _family_legend(axes, "a record")
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
    fig, facets, panels = _by_family(source, "speedup", "speedup", workload, device)
    for axes in panels:
        for ax in axes:
            ax.axhline(1.0, color="0.4", linestyle="--", linewidth=1, label="baseline")
            _log_y(ax, base=2)
            ax.set_ylabel("speed-up (x)")
        _family_legend(axes, "a record")
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
    if parts:
        return ", ".join(parts)
    if buffers:
        return "identity layouts"
    record_id = row.get("record_id")
    return "the fastest" if record_id is None or pd.isna(record_id) else f"record {int(record_id)}"


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
    Where every record has the same memory (layouts that pad nothing) the
    front is the fastest record alone: the x axis is centred on that one
    value and its label says so. ``memory`` is ``"padding_overhead"``
    (drawn in percent) or ``"physical_bytes"``. One panel per (workload,
    device) with at least two ok records, two panels to a row. Log y,
    milliseconds.
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
    ncols = 1 if len(facets) == 1 else 2
    nrows = math.ceil(len(facets) / ncols)
    fig, axes = _figure(nrows, ncols, 6.2, 3.2)
    for ax in axes.flat[len(facets) :]:
        ax.remove()
    for ax, (title, rows) in zip(axes.flat, facets, strict=False):
        ok = _ok_rows(rows, "pareto")
        front = pareto_front(ok, memory, "time_s")
        xs = ok[memory].to_numpy(float) * scale
        ax.scatter(
            xs,
            ok["time_s"].to_numpy(float) * _MS,
            s=12,
            color="0.6",
            alpha=0.6,
            label=f"candidates ({len(ok)})",
        )
        fx, fy = front[memory].to_numpy(float) * scale, front["time_s"].to_numpy(float) * _MS
        ax.plot(
            fx,
            fy,
            "-o",
            drawstyle="steps-post",
            color="tab:red",
            markersize=3,
            label="Pareto front",
        )
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
        ax.xaxis.set_major_locator(MaxNLocator(4))  # byte counts are wide labels
        if memory == "physical_bytes":
            ax.xaxis.set_major_formatter(EngFormatter(unit="B"))
        xlabel = label
        if float(xs.max() - xs.min()) == 0.0:  # one memory: the front is the fastest record
            ax.set_xlim(xs[0] - max(1.0, abs(xs[0]) * 0.1), xs[0] + max(1.0, abs(xs[0]) * 0.1))
            ax.set_xticks([xs[0]])
            shown = f"{xs[0]:g}" if memory == "padding_overhead" else EngFormatter("B")(xs[0])
            xlabel = f"{label}: {shown} for every record,\nso the front is the fastest record"
        _log_y(ax)
        ax.set_xlabel(xlabel)
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
        # inside its cell: the layout engine need not measure it (half of
        # drawing a 24 x 24 map went to measuring its 576 numbers)
        ax.text(
            c,
            r,
            str(int(v)),
            ha="center",
            va="center",
            fontsize=size,
            color=colour,
            in_layout=False,
        )


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

    # cells square, the panels as large as a page allows: the figure follows the grid's shape
    cell = min(4.6 / n_cols, 6.0 / n_rows)
    panel_w, panel_h = max(3.4, cell * n_cols), max(1.2, cell * n_rows)
    fig = Figure(figsize=(2 * panel_w + 2.8, panel_h + 1.7), layout="constrained")
    # a grid narrower than its panel (few columns, many rows) stretches its cells to fill it
    aspect = "auto" if cell * n_cols < panel_w or cell * n_rows < panel_h else "equal"
    ax_offset, ax_bank = fig.subplots(1, 2)
    image = ax_offset.imshow(grid_offsets, cmap="viridis", interpolation="nearest", aspect=aspect)
    ax_offset.set_label("offset")
    fig.colorbar(image, ax=ax_offset, label="physical offset (elements)", shrink=0.8)
    norm = BoundaryNorm(np.arange(-0.5, banks), banks)
    image = ax_bank.imshow(
        grid_banks, cmap=_bank_cmap(banks), norm=norm, interpolation="nearest", aspect=aspect
    )
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


def layout_gallery(
    layouts: Sequence[Layout], *, line: int = 16, columns: int = 4, numbers: bool | None = None
) -> Figure:
    """Several layouts of one 2-D shape side by side: each panel is the
    logical grid, each cell coloured by where its element falls within a
    memory line of ``line`` elements (physical offset mod ``line``, on a
    cyclic colour map: 16 float32 make a 64-byte cache line) and, when the
    cells are large enough (``numbers``: force either way), labelled with
    its physical offset. So the identity shows vertical stripes, a
    transpose horizontal ones, padding slants them, a swizzle scrambles
    each row's order, a tile repeats a small block: layouts that store the
    same elements in another order differ at a glance, where colouring by
    the offset itself shades every row-major-like layout alike. One colour
    bar explains the colours; each panel is titled with the layout's family
    and parameters, ``columns`` panels to a row."""
    if not layouts:
        raise PlotError("layout_gallery needs at least one layout")
    shapes = {layout.shape for layout in layouts}
    if len(shapes) != 1 or len(next(iter(shapes))) != 2:
        raise PlotError(
            f"layout_gallery draws layouts of one 2-D shape; got shapes {sorted(shapes)}"
        )
    (rows, cols) = next(iter(shapes))
    ncols = min(columns, len(layouts))
    nrows = math.ceil(len(layouts) / ncols)
    side = 3.0
    fig = Figure(figsize=(side * ncols + 1.2, (side + 0.5) * nrows + 0.6), layout="constrained")
    axes = np.atleast_2d(fig.subplots(nrows, ncols, squeeze=False))
    cmap = colormaps["twilight"].resampled(line)
    norm = BoundaryNorm(np.arange(-0.5, line), line)
    if numbers is None:
        numbers = rows <= 8 and cols <= 8  # three-digit offsets in larger grids are specks
    image = None
    for ax, layout in zip(axes.flat, layouts, strict=False):
        offsets = layout.index_map.flat_offsets(layout.shape).reshape(layout.shape)
        image = ax.imshow(offsets % line, cmap=cmap, norm=norm, interpolation="nearest")
        ax.set_label(layout.describe())
        ax.set_title("\n".join(textwrap.wrap(layout.describe(), 34)), fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
        if numbers:
            shade = cmap(norm(offsets % line))[..., :3] @ np.array([0.299, 0.587, 0.114])
            size = min(6.0, 0.55 * side * 72 / max(rows, cols) / max(1, len(str(offsets.max()))))
            for (r, c), value in np.ndenumerate(offsets):
                colour = "black" if shade[r, c] > 0.5 else "white"
                ax.text(
                    c, r, str(int(value)), ha="center", va="center", fontsize=size, color=colour
                )
    for ax in axes.flat[len(layouts) :]:
        ax.remove()
    bar = fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.8, pad=0.02)
    bar.set_label(f"physical offset mod {line} (place in a line of {line} elements)")
    bar.set_ticks(range(0, line, max(1, line // 8)))
    text = f"Layouts of a {rows} x {cols} buffer: logical (row, column) coloured by memory position"
    if numbers:
        text += ", numbered by physical offset"
    fig.suptitle(text, fontsize=11)
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


def check_image_path(path: str | os.PathLike[str]) -> str:
    """The image format that ``path``'s suffix names, if :func:`save` can
    write a figure there; else :class:`PlotError` naming what is wrong (a
    suffix that is no image format, a folder that does not exist)."""
    formats = FigureCanvasBase.get_supported_filetypes()
    suffix = Path(path).suffix.lower().removeprefix(".")
    if suffix not in formats:
        known = ", ".join(f".{name}" for name in sorted(formats))
        what = f".{suffix} is not an image format" if suffix else "it has no image suffix"
        raise PlotError(f"cannot write a figure to {os.fspath(path)}: {what} (known: {known})")
    check_writable(path, PlotError)
    return suffix


def save(figure: Figure, path: str | os.PathLike[str], *, dpi: int = 120) -> str:
    """Write ``figure`` to ``path`` in the format its suffix names, whole or
    not at all (:class:`PlotError` naming why: see :func:`check_image_path`;
    a full disk leaves no partial image); returns ``path`` as text."""
    image_format = check_image_path(path)
    write_atomically(
        path,
        lambda stream: figure.savefig(stream, format=image_format, dpi=dpi),
        error=PlotError,
    )
    return os.fspath(path)
