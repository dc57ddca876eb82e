"""Every figure kind, drawn from a database of several workloads and
boundaries (tests/plot_records.py) as a report would draw it, is checked
for what a reader needs: every mark explained by a legend entry, labelled
ticks spanning the data (the final best included), a shape that fits a
page, legends in words rather than keys, a trial axis as long as the study,
and a Pareto front one can see. The PNGs are written under the test's
temporary folder; look at them when changing a figure."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure
from matplotlib.legend import Legend

from laytune import cli, plots
from tests import plot_records

#: slow: each figure drawn and saved, a second or more each; one xdist worker
#: draws them all once (the module's fixtures, 17 s, ran once per worker)
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("plot_report")]


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory):
    return plot_records.build(tmp_path_factory.mktemp("report") / "report.db")


def _conv2d_buffer(db) -> Figure:
    best = db.best(plot_records.CONV2D, plot_records.DEVICE_KEY)
    return plots.address_map(best.candidate.layout("X"))


FIGURES = {
    "convergence": lambda db: plots.convergence(db),
    "convergence by strategy": lambda db: plots.convergence(db, by="strategy"),
    "convergence in time": lambda db: plots.convergence(db, by="strategy", x="time"),
    "families": lambda db: plots.families(db),
    "speedup": lambda db: plots.speedup(db),
    "pareto": lambda db: plots.pareto(db),
    "pareto bytes": lambda db: plots.pareto(db, memory="physical_bytes"),
    "address map of a 4-D buffer": _conv2d_buffer,
}


@pytest.fixture(scope="module")
def drawn(database, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Figure, Path]]:
    folder = tmp_path_factory.mktemp("figures")
    out = {}
    for name, make in FIGURES.items():
        fig = make(database)
        path = folder / f"{name.replace(' ', '_')}.png"
        plots.save(fig, path, dpi=60)  # as `laytune plot` writes it
        out[name] = (fig, path)
    return out


def _panels(fig: Figure) -> list:
    return [ax for ax in fig.axes if ax.get_label() not in ("<colorbar>",)]


def _legend_entries(fig: Figure) -> tuple[set[str], list[tuple[float, ...]]]:
    labels, colours = set(), []
    for legend in fig.findobj(Legend):
        labels |= {text.get_text() for text in legend.get_texts()}
        for handle in legend.legend_handles:
            for getter in ("get_color", "get_edgecolor", "get_facecolor"):
                colour = getattr(handle, getter, lambda: None)()
                if colour is None or (isinstance(colour, str) and colour == "none"):
                    continue
                array = np.atleast_2d(np.asarray(to_rgba_array(colour)))
                colours += [tuple(np.round(c[:3], 3)) for c in array if c[3] > 0]
    return labels, colours


def to_rgba_array(colour):
    from matplotlib.colors import to_rgba_array as convert

    return convert(colour)


def _unexplained(fig: Figure) -> list[str]:
    """Marks drawn in a records panel whose label is in no legend and whose
    colour no legend entry has."""
    labels, colours = _legend_entries(fig)
    missing = []
    for ax in _panels(fig):
        for line in ax.get_lines():
            if len(np.atleast_1d(line.get_xdata())) == 0:
                continue
            colour = tuple(np.round(to_rgba(line.get_color())[:3], 3))
            if line.get_label() not in labels and colour not in colours:
                missing.append(f"line {line.get_label()!r} in {ax.get_title()!r}")
        for collection in ax.collections:
            if len(collection.get_offsets()) == 0 and not collection.get_paths():
                continue
            faces = collection.get_facecolor()
            colour = tuple(np.round(faces[0][:3], 3)) if len(faces) else None
            if collection.get_label() not in labels and colour not in colours:
                missing.append(f"marks {collection.get_label()!r} in {ax.get_title()!r}")
    return missing


RECORDS = [name for name in FIGURES if not name.startswith("address")]


@pytest.mark.parametrize("name", RECORDS)
def test_every_mark_has_a_legend_entry(drawn, name: str) -> None:
    fig, _ = drawn[name]
    assert _unexplained(fig) == []


@pytest.mark.parametrize("name", RECORDS)
def test_labelled_ticks_span_the_data(drawn, name: str) -> None:
    fig, _ = drawn[name]  # drawn when saved
    for ax in _panels(fig):
        low, high = sorted((ax.dataLim.y0, ax.dataLim.y1))
        shown_low, shown_high = ax.get_ylim()
        ticks = [t for t in ax.get_yticks() if shown_low <= t <= shown_high]
        labels = [ax.yaxis.get_major_formatter()(t) for t in ticks]
        assert all(labels) and len(ticks) >= 3, (ax.get_title(), labels)
        # the lowest labelled tick at or below the least value: the final best can be read
        assert min(ticks) <= low * (1 + 1e-9) and max(ticks) >= high * (1 - 1e-9), (
            ax.get_title(),
            ticks,
            (low, high),
        )


@pytest.mark.parametrize("name", FIGURES)
def test_the_figure_fits_a_page(drawn, name: str) -> None:
    from PIL import Image

    _, path = drawn[name]
    width, height = Image.open(path).size
    assert 0.5 <= width / height <= 3.2, (width, height)
    assert width <= 840 and height <= 900  # inches at 60 dpi: under 14 x 15
    if name.startswith("address"):  # the grid fills its panels: not mostly white
        image = np.asarray(Image.open(path).convert("L"))
        assert (image < 250).mean() > 0.45


@pytest.mark.parametrize("name", RECORDS)
def test_no_legend_shows_a_raw_key(drawn, name: str) -> None:
    fig, _ = drawn[name]
    labels, _ = _legend_entries(fig)
    assert labels
    assert not [t for t in labels if "@" in t or "(M=" in t or ";float32" in t], labels


def test_a_free_boundary_study_is_named_by_its_boundary(drawn) -> None:
    fig, _ = drawn["convergence"]
    labels, _ = _legend_entries(fig)
    assert {"tpe", "random", "model, A free"} <= labels


def test_the_trial_axis_spans_the_records_of_the_study(drawn, database) -> None:
    fig, _ = drawn["convergence"]
    frame = database.to_dataframe()
    trial_panels = [ax for ax in _panels(fig) if ax.get_xlabel() == "candidates measured"]
    assert len(trial_panels) == 4
    conversion = trial_panels[-1]
    (line,) = [line for line in conversion.get_lines() if line.get_label() == "tpe"]
    count = int((frame["workload_key"] == plot_records.CONVERSION.key).sum())
    assert count == plot_records.CONVERSION_RECORDS
    assert frame["trial"].max() == plot_records.CONVERSION_LAST_TRIAL
    assert line.get_xdata()[-1] == count
    assert conversion.get_xlim()[1] < 1.2 * count


@pytest.mark.parametrize("name", ["pareto", "pareto bytes"])
def test_the_pareto_front_is_drawn_on_a_real_axis(drawn, name: str) -> None:
    fig, _ = drawn[name]
    for ax in _panels(fig):
        (front,) = [line for line in ax.get_lines() if line.get_label() == "Pareto front"]
        assert front.get_marker() not in ("None", "", None)  # one point still shows
        low, high = ax.get_xlim()
        assert high - low > 0.5
        xs = [c.get_offsets()[:, 0] for c in ax.collections]
        if np.ptp(np.concatenate(xs)) == 0:  # conv2d: every record pads nothing
            assert "for every record" in ax.get_xlabel()
            assert low < np.concatenate(xs)[0] < high


@pytest.mark.parametrize("kind", ["convergence", "address-map"])
def test_laytune_plot_draws_a_records_kind_and_a_layout_kind(
    database, tmp_path: Path, kind: str, capsys
) -> None:
    url = database.url
    out = tmp_path / f"{kind}.png"
    argv = ["plot", kind, "--out", str(out), "--db", url]
    if kind == "address-map":
        best = database.best(plot_records.CONV2D, plot_records.DEVICE_KEY)
        argv += ["--record", str(best.id), "--buffer", "X"]
    assert cli.main(argv) == 0, capsys.readouterr().err
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
