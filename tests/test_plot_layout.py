"""Figures survive real databases: on a records database of four workloads,
each plot kind renders without a layout warning, no two pieces of text
overlap or leave the figure, legends stay off the data, log axes carry
labelled ticks, and each workload and the device are named once."""

from __future__ import annotations

import functools
import itertools
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from unittest import mock

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.legend import Legend
from matplotlib.text import Text

from laytune import ops, plots
from laytune.layout import block, identity, pad_rows, permute, row_xor, swizzle, tile
from laytune.records import Record, open_database
from laytune.space import Candidate, baseline_knobs

#: every figure drawn and measured, seconds each: once, by the module's
#: fixture, on one worker (every test reads the same drawings)
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("plot_layout")]

DEVICE_KEY = "5c3a9d7e1f2b4c6d"
DEVICE_NAME = "Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz (Intel(R) OpenCL)"
WORKLOADS = (
    ops.matmul(256, 256, 256),
    ops.conv2d(1, 32, 28, 28, 32, 3, 1, 1),
    ops.transpose((512, 512), (1, 0)),
    ops.copy((128, 128)),
)
FAILED = ("rejected", "build", "wrong_result", "timeout")


@functools.cache  # each layout validates its map on construction: once per shape
def _choices(shape: tuple[int, ...]) -> tuple:
    if len(shape) == 2:
        return (
            identity(shape),
            permute(shape, (1, 0)),
            pad_rows(shape, 1),
            row_xor(shape, 8),
            swizzle(shape, 3, 0, 5),
            tile(shape, (16, 16)),
        )
    return (identity(shape), permute(shape, (0, 2, 3, 1)), block(shape, 1, 4))


def _records(workload, rng: np.random.Generator, start: float) -> Iterator[Record]:
    """Two studies, the first resumed an hour later (two runs); a local tile
    staged once; a few failures."""
    shapes = {b.name: tuple(b.shape) for b in workload.buffers}
    clock = start
    for study, strategy, runs in (("tpe", "tpe", ("r1", "r2")), ("random", "random", ("r3",))):
        name = f"{workload.key}@{DEVICE_KEY}/{study}"
        trial = itertools.count()
        for run in runs:
            clock += 3600.0
            for k in range(12):
                first = k == 0 and run in ("r1", "r3")
                layouts = {
                    n: identity(s) if first else _choices(s)[rng.integers(len(_choices(s)))]
                    for n, s in shapes.items()
                }
                knobs = baseline_knobs(workload)
                if not first:
                    inner = workload.axes[workload.spatial_axes[-1]].name
                    knobs[f"block.{inner}"] = int(rng.choice([1, 2, 4]))
                if workload.name == "matmul" and k == 5 and run == "r1":
                    knobs["local_stage"] = True
                    layouts["A.local"] = identity((16, 16))
                status = FAILED[k % len(FAILED)] if k % 5 == 4 else "ok"
                value = float(rng.uniform(0.02, 0.3)) * (2.0 if first else 1.0)
                times = tuple(value * (1 + rng.uniform(0, 0.05)) for _ in range(7))
                started = clock
                clock += float(rng.uniform(0.5, 2.0))
                yield Record(
                    workload.key,
                    DEVICE_KEY,
                    Candidate.make(layouts, knobs),
                    status,
                    value_s=float(np.median(times)) / 1e3 if status == "ok" else None,
                    event_times_s=tuple(t / 1e3 for t in times) if status == "ok" else (),
                    device_name=DEVICE_NAME,
                    study=name,
                    trial=next(trial),
                    strategy=strategy,
                    run=run,
                    started_at=started if status != "rejected" else None,
                    created_at=clock,
                )


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory):
    db = open_database(tmp_path_factory.mktemp("plots") / "four.db")
    rng = np.random.default_rng(7)
    for workload in WORKLOADS:
        for record in _records(workload, rng, 1_700_000_000.0):
            db.add(record)
    return db


def _drawn_texts(fig: Figure) -> list[tuple[Text, object]]:
    """Every piece of text the figure draws, with its box on the canvas."""
    drawn: list[Text] = []
    draw = Text.draw

    def recording(self: Text, renderer: object) -> None:
        if self.get_visible() and self.get_text().strip():
            drawn.append(self)
        return draw(self, renderer)

    canvas = FigureCanvasAgg(fig)
    with mock.patch.object(Text, "draw", recording):
        canvas.draw()
    renderer = canvas.get_renderer()
    return [(text, text.get_window_extent(renderer)) for text in drawn]


def _meet(boxes: list, others: list) -> np.ndarray:
    """Whether each box of ``boxes`` (a row) shares more than half a pixel
    each way with each of ``others`` (a column): every pair at once, as an
    address map with its numbers draws some 600 texts, 180 000 pairs."""
    a, b = (
        np.array([[x.x0, x.y0, x.x1, x.y1] for x in xs]).reshape(-1, 4).T for xs in (boxes, others)
    )
    width = np.minimum.outer(a[2], b[2]) - np.maximum.outer(a[0], b[0])
    height = np.minimum.outer(a[3], b[3]) - np.maximum.outer(a[1], b[1])
    return (width > 0.5) & (height > 0.5)


def _overlaps(fig: Figure, texts: list[tuple[Text, object]] | None = None) -> list[str]:
    """What overlaps in ``fig``: ``texts`` are its :func:`_drawn_texts`,
    drawn now when not given."""
    texts = _drawn_texts(fig) if texts is None else texts
    boxes = [box for _, box in texts]
    first, second = np.nonzero(np.triu(_meet(boxes, boxes), 1))
    clashes = [
        f"{texts[i][0].get_text()!r} overlaps {texts[j][0].get_text()!r}"
        for i, j in zip(first, second, strict=True)
    ]
    edge = fig.bbox
    clashes += [
        f"{text.get_text()!r} is cut off by the figure's edge"
        for text, box in texts
        if box.x0 < edge.x0 - 1
        or box.x1 > edge.x1 + 1
        or box.y0 < edge.y0 - 1
        or box.y1 > edge.y1 + 1
    ]
    panels = [ax.get_window_extent() for ax in fig.axes]
    for legend in fig.findobj(Legend):
        (covered,) = _meet([legend.get_window_extent()], panels)
        clashes += [
            f"a legend covers the panel {ax.get_title() or ax.get_label()!r}"
            for ax, hit in zip(fig.axes, covered, strict=True)
            if hit
        ]
    return clashes


def _texts(fig: Figure) -> list[str]:
    return _strings(_drawn_texts(fig))


def _strings(texts: list[tuple[Text, object]]) -> list[str]:
    return [text.get_text() for text, _ in texts]


def _address_map_of_a_record(db) -> Figure:
    best = db.best(WORKLOADS[3], DEVICE_KEY)
    return plots.address_map(best.candidate.layout("X"), axis=0)


FIGURES = {
    "convergence": lambda db: plots.convergence(db),
    "convergence by strategy": lambda db: plots.convergence(db, by="strategy", x="time"),
    "families": lambda db: plots.families(db),
    "speedup": lambda db: plots.speedup(db),
    "pareto": lambda db: plots.pareto(db),
    "pareto bytes": lambda db: plots.pareto(db, memory="physical_bytes"),
    "address map 128x128": _address_map_of_a_record,
    "address map with numbers": lambda db: plots.address_map(row_xor((24, 24), 8), axis=0),
    "address map 4-D": lambda db: plots.address_map(block((1, 32, 28, 28), 1, 4), axis=1),
}


@dataclass
class Drawn:
    figure: Figure
    texts: list[tuple[Text, object]]  # :func:`_drawn_texts`
    warned: list[str]  # warnings while it was made and drawn


@pytest.fixture(scope="module")
def drawn(database) -> dict[str, Drawn]:
    """Each figure of :data:`FIGURES`, made and drawn once."""
    out = {}
    for name, make in FIGURES.items():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")  # "constrained_layout not applied" and the like
            fig = make(database)
            texts = _drawn_texts(fig)
        out[name] = Drawn(fig, texts, [f"{w.category.__name__}: {w.message}" for w in caught])
    return out


@pytest.mark.parametrize("name", FIGURES)
def test_no_text_overlaps_and_no_layout_warning(drawn, name: str) -> None:
    assert drawn[name].warned == []
    assert _overlaps(drawn[name].figure, drawn[name].texts) == []


RECORDS_FIGURES = [name for name in FIGURES if not name.startswith("address map")]


@pytest.mark.parametrize("name", RECORDS_FIGURES)
def test_each_workload_and_the_device_are_named_once_in_short_form(drawn, name: str) -> None:
    texts = _strings(drawn[name].texts)
    for workload in WORKLOADS:
        assert sum(t == ops.short_key(workload.key) for t in texts) == 1, texts
        assert not any(workload.key in t for t in texts)
    assert sum(DEVICE_NAME in t.replace("\n", " ") for t in texts) == 1


@pytest.mark.parametrize("name", RECORDS_FIGURES)
def test_log_axes_carry_labelled_ticks_and_no_panel_holds_one_point(drawn, name: str) -> None:
    fig = drawn[name].figure
    for ax in fig.axes:
        assert ax.get_yscale() == "log"
        low, high = ax.get_ylim()
        labelled = [
            label.get_text()
            for tick, label in zip(ax.get_yticks(), ax.get_yticklabels(), strict=True)
            if low <= tick <= high and label.get_text()
        ]
        assert len(labelled) >= 2, (ax.get_title(), labelled)
        points = sum(len(c.get_offsets()) for c in ax.collections)
        assert name.startswith("convergence") or points >= 2
    assert "buffer A.local" not in _strings(drawn[name].texts)  # staged once: one point, no panel


def test_the_convergence_time_axis_leaves_out_the_pause_between_runs(database) -> None:
    fig = plots.convergence(database, x="time")
    longest = max(float(np.nanmax(line.get_xdata())) for ax in fig.axes for line in ax.get_lines())
    assert longest < 120  # three runs of 12 records, an hour apart
    starts = [line for line in fig.axes[0].get_lines() if line.get_linestyle() == ":"]
    assert len(starts) == 1  # the resumed run of the tpe study


def test_an_address_map_states_its_window(database) -> None:
    texts = _texts(_address_map_of_a_record(database))
    assert any(
        "window: rows 0-63 of 128, columns 0-63 of 128" in t.replace("\n", " ") for t in texts
    )
    small = _texts(plots.address_map(row_xor((24, 24), 8), axis=0))
    assert not any("window" in t for t in small)
    assert sum(t.isdigit() for t in small) >= 2 * 24 * 24  # every cell numbered, both panels


def test_the_checks_find_what_they_look_for() -> None:
    fig = Figure()
    ax = fig.subplots()
    ax.text(0.5, 0.5, "matmul 256x256x256", transform=ax.transAxes)
    ax.text(0.52, 0.5, "conv2d 1x32x28x28", transform=ax.transAxes)
    assert _overlaps(fig) == ["'matmul 256x256x256' overlaps 'conv2d 1x32x28x28'"]
    fig = Figure(figsize=(3, 2))
    fig.suptitle("a title far too long to fit a figure three inches wide, cut at both ends")
    assert _overlaps(fig) == [
        "'a title far too long to fit a figure three inches wide, cut at both ends' "
        "is cut off by the figure's edge"
    ]
    fig = Figure()
    ax = fig.subplots()
    ax.plot([0, 1], label="line")
    ax.legend()
    assert _overlaps(fig) == ["a legend covers the panel ''"]
