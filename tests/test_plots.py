"""Figures of records and layouts: what they draw is the data, computed again here."""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

import matplotlib
import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from laytune import plots
from laytune.exceptions import LaytuneError
from laytune.layout import (
    IndexMap,
    Layout,
    block,
    identity,
    pad_every,
    pad_rows,
    permute,
    row_xor,
    swizzle,
)

SHAPE = (16, 16)
FAILED = ("rejected", "build", "run", "timeout", "wrong_result", "device_lost", "crash")


# -- a records DataFrame in the schema of Database.to_dataframe() ---------------------


def _record(
    record_id: int,
    study: str,
    strategy: str,
    trial: int,
    status: str,
    time_s: float,
    layouts: dict[str, Layout],
    *,
    workload: str = "matmul(M=16,N=16,K=16;float32)",
    device_key: str = "dev0",
    vector: int = 1,
    elapsed_s: float | None = None,
) -> dict[str, object]:
    logical = sum(int(np.prod(lay.shape)) * 4 for lay in layouts.values())
    physical = sum(lay.physical_size * 4 for lay in layouts.values())
    row: dict[str, object] = {
        "record_id": record_id,
        "study": study,
        "strategy": strategy,
        "trial": trial,
        "workload_key": workload,
        "op": workload.split("(")[0],
        "device_key": device_key,
        "device_name": f"Test device {device_key}",
        "status": status,
        "time_s": time_s,
        "statistic": "median",
        "max_error": 0.0 if status == "ok" else np.nan,
        "created_at": pd.Timestamp("2024-01-01", tz="UTC")
        + pd.Timedelta(seconds=elapsed_s if elapsed_s is not None else 2.5 * trial),
        "candidate_key": "|".join(f"{n}:{lay.index_map}" for n, lay in sorted(layouts.items()))
        + f"|v{vector}",
        "is_identity": all(lay.is_identity for lay in layouts.values()) and vector == 1,
        "logical_bytes": logical,
        "physical_bytes": physical,
        "padding_overhead": physical / logical - 1.0,
        "source_hash": f"h{record_id}",
        "knob.vector": vector,
    }
    for name, lay in layouts.items():
        row[f"layout.{name}"] = str(lay.index_map)
        row[f"family.{name}"] = lay.family
        row[f"pad.{name}"] = None
    return row


def _frame(rows: list[dict[str, object]]) -> pd.DataFrame:
    """Add elapsed_s and speedup as the schema defines them."""
    frame = pd.DataFrame(rows)
    first = frame.groupby("study")["created_at"].transform("min")
    frame["elapsed_s"] = (frame["created_at"] - first).dt.total_seconds()
    ok = frame["status"] == "ok"
    base = frame[frame["is_identity"] & ok].groupby(["workload_key", "device_key"])["time_s"].min()
    keys = list(zip(frame["workload_key"], frame["device_key"], strict=True))
    frame["speedup"] = [base.get(k, np.nan) for k in keys] / frame["time_s"].where(ok)
    return frame


LAYOUT_CHOICES = {
    "A": [identity(SHAPE), pad_rows(SHAPE, 1), row_xor(SHAPE, 8), swizzle(SHAPE, 2, 0, 4)],
    "B": [identity(SHAPE), permute(SHAPE, (1, 0)), block(SHAPE, 1, 4), pad_every(SHAPE, 2, 4)],
}


def _study(
    study: str, strategy: str, seed: int, trials: int = 24, start_id: int = 0, **kw: object
) -> list[dict[str, object]]:
    """Random trials over real layouts; every fifth fails with a tiny time that
    must never count; trial 0 is the identity. Results arrive out of trial
    order (as from parallel batches): elapsed_s is not monotonic in trial."""
    rng = np.random.default_rng(seed)
    rows = []
    for trial in range(trials):
        if trial == 0:
            layouts = {"A": identity(SHAPE), "B": identity(SHAPE), "C": identity(SHAPE)}
        else:
            layouts = {
                name: choices[rng.integers(len(choices))]
                for name, choices in LAYOUT_CHOICES.items()
            }
            layouts["C"] = identity(SHAPE)
        failed = trial % 5 == 3
        status = FAILED[trial % len(FAILED)] if failed else "ok"
        time_s = 1e-9 if failed else float(rng.uniform(1e-3, 5e-3))
        vector = 1 if trial == 0 else int(rng.choice([1, 2, 4]))
        elapsed = 2.5 * trial + float(rng.uniform(0.0, 4.0)) if trial else 0.0
        rows.append(
            _record(
                start_id + trial,
                study,
                strategy,
                trial,
                status,
                time_s,
                layouts,
                vector=vector,
                elapsed_s=elapsed,
                **kw,  # type: ignore[arg-type]
            )
        )
    return rows


@pytest.fixture
def records() -> pd.DataFrame:
    return _frame([*_study("job-tpe", "tpe", 1), *_study("job-random", "random", 2, 30, 100)])


def _save(fig: Figure, tmp_path, name: str) -> None:
    path = tmp_path / f"{name}.png"
    fig.savefig(path, dpi=60)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert path.stat().st_size > 2000


def _best_so_far(times: list[float]) -> list[float]:
    best, out = np.nan, []
    for t in times:
        if not np.isnan(t) and (np.isnan(best) or t < best):
            best = t
        out.append(best)
    return out


def _lines(ax) -> dict[str, matplotlib.lines.Line2D]:
    return {line.get_label(): line for line in ax.get_lines()}


def _panels(fig: Figure) -> list:
    return [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]


# -- convergence --------------------------------------------------------------------


def test_convergence_lines_are_the_best_time_so_far(records, tmp_path):
    fig = plots.convergence(records)
    _save(fig, tmp_path, "convergence")
    by_trial, by_time = fig.axes
    assert len(fig.axes) == 2
    for study, strategy in (("job-tpe", "tpe"), ("job-random", "random")):
        for ax, column in ((by_trial, "trial"), (by_time, "elapsed_s")):
            rows = records[records["study"] == study].sort_values(column)
            times = rows["time_s"].where(rows["status"] == "ok").tolist()
            expected = np.array(_best_so_far(times)) * 1e3
            line = _lines(ax)[f"{study} ({strategy})"]
            # by trial: the study's records counted from 1 in trial order
            xs = np.arange(1, len(rows) + 1) if column == "trial" else rows[column]
            np.testing.assert_array_equal(line.get_xdata(), np.asarray(xs, dtype=float))
            np.testing.assert_allclose(line.get_ydata(), expected)
    # failed rows carry 1e-9 s: had they counted, the best would be 1e-6 ms
    assert min(np.nanmin(line.get_ydata()) for line in by_trial.get_lines()) > 0.5


def test_convergence_marks_the_baseline_time(records):
    fig = plots.convergence(records, x="trial")
    (ax,) = fig.axes
    identity_time = records.loc[records["is_identity"] & (records["status"] == "ok"), "time_s"]
    np.testing.assert_allclose(_lines(ax)["baseline"].get_ydata(), [identity_time.min() * 1e3] * 2)


def test_convergence_by_strategy_takes_the_median_over_studies():
    frame = _frame(
        [
            *_study("tpe-0", "tpe", 3, 20),
            *_study("tpe-1", "tpe", 4, 20, 100),
            *_study("random-0", "random", 5, 20, 200),
        ]
    )
    fig = plots.convergence(frame, by="strategy", x="trial")
    (ax,) = fig.axes
    lines = _lines(ax)
    per_study = {}
    for study, rows in frame.groupby("study"):
        rows = rows.sort_values("trial")
        times = rows["time_s"].where(rows["status"] == "ok").tolist()
        per_study[study] = np.array(_best_so_far(times)) * 1e3
    median = lines["tpe (median of 2 studies)"]
    np.testing.assert_array_equal(median.get_xdata(), np.arange(1, 21))
    np.testing.assert_allclose(median.get_ydata(), (per_study["tpe-0"] + per_study["tpe-1"]) / 2)
    np.testing.assert_allclose(lines["random"].get_ydata(), per_study["random-0"])
    assert len(ax.collections) == 1  # the band between the two tpe studies


def test_convergence_draws_one_row_per_workload_and_filters(records):
    other = _frame(_study("job-t", "tpe", 9, 10, 500, workload="transpose(R=16,C=16;float32)"))
    both = pd.concat([records, other], ignore_index=True)
    fig = plots.convergence(both)
    assert len(fig.axes) == 4
    # one title per workload row, in short form; the one device in the figure's title
    assert [sub.get_suptitle() for sub in fig.subfigs] == ["matmul 16x16x16", "transpose 16x16"]
    assert fig.get_suptitle().endswith(" on Test device dev0")
    assert all(ax.get_title() == "" for ax in fig.axes)
    fig = plots.convergence(both, workload="transpose", x="time")
    (ax,) = fig.axes
    assert set(_lines(ax)) == {"job-t (tpe)", "baseline"}


def test_a_study_that_never_succeeds_has_no_line_value(records):
    failing = _frame(_study("broken", "random", 7, 6, 900))
    failing["status"] = "build"
    frame = pd.concat([records, failing], ignore_index=True)
    fig = plots.convergence(frame, x="trial")
    assert np.isnan(_lines(fig.axes[0])["broken (random)"].get_ydata()).all()


# -- families and speed-up --------------------------------------------------------------


def _scatter_values(ax) -> dict[str, np.ndarray]:
    return {c.get_label(): np.sort(c.get_offsets()[:, 1]) for c in ax.collections}


def test_families_draw_every_ok_time_by_family_per_buffer(records, tmp_path):
    fig = plots.families(records)
    _save(fig, tmp_path, "families")
    assert [ax.get_title() for ax in fig.axes] == ["buffer A", "buffer B", "buffer C"]
    assert [sub.get_suptitle() for sub in fig.subfigs] == ["matmul 16x16x16"]
    assert fig.get_suptitle() == "Time by layout family, per buffer on Test device dev0"
    ok = records[records["status"] == "ok"]
    for ax in fig.axes:
        buffer = ax.get_title().removeprefix("buffer ")
        drawn = _scatter_values(ax)
        families = ok[f"family.{buffer}"].unique()
        assert set(drawn) == set(families)
        for family in families:
            expected = np.sort(ok.loc[ok[f"family.{buffer}"] == family, "time_s"] * 1e3)
            np.testing.assert_allclose(drawn[family], expected)
        labels = [t.get_text() for t in ax.get_xticklabels()]
        assert labels[0] == "identity"
        assert labels == [f for f in plots.FAMILY_ORDER if f in families]
    total = sum(len(v) for v in _scatter_values(fig.axes[0]).values())
    assert total == len(ok) < len(records)


def test_speedup_draws_the_speedup_column(records, tmp_path):
    fig = plots.speedup(records)
    _save(fig, tmp_path, "speedup")
    ax_a = fig.axes[0]
    ok = records[records["status"] == "ok"]
    identity_time = ok.loc[ok["is_identity"], "time_s"].min()
    for family, values in _scatter_values(ax_a).items():
        times = ok.loc[ok["family.A"] == family, "time_s"]
        np.testing.assert_allclose(values, np.sort(identity_time / times))
    assert _lines(ax_a)["baseline"].get_ydata()[0] == 1.0


def test_speedup_needs_an_identity_record(records):
    without = records[~records["is_identity"]].copy()
    without["speedup"] = np.nan
    with pytest.raises(plots.PlotError, match="speed-up"):
        plots.speedup(without)


# -- Pareto ---------------------------------------------------------------------------------


def _non_dominated(x: np.ndarray, y: np.ndarray) -> set[int]:
    keep = set()
    for p in range(len(x)):
        if not any(
            x[q] <= x[p] and y[q] <= y[p] and (x[q] < x[p] or y[q] < y[p]) for q in range(len(x))
        ):
            keep.add(p)
    return keep


def test_pareto_front_is_the_non_dominated_set():
    rng = np.random.default_rng(0)
    for _ in range(20):
        n = int(rng.integers(1, 40))
        frame = pd.DataFrame(
            {"padding_overhead": rng.integers(0, 5, n) / 4, "time_s": rng.integers(1, 9, n) / 1e3}
        )
        front = plots.pareto_front(frame)
        expected = _non_dominated(frame["padding_overhead"].to_numpy(), frame["time_s"].to_numpy())
        assert set(front.index) == expected
        assert front["padding_overhead"].is_monotonic_increasing


def test_pareto_figure_draws_the_front_of_the_ok_records(records, tmp_path):
    fig = plots.pareto(records)
    _save(fig, tmp_path, "pareto")
    (ax,) = fig.axes
    ok = records[records["status"] == "ok"].reset_index(drop=True)
    expected = ok.loc[sorted(_non_dominated(ok["padding_overhead"].values, ok["time_s"].values))]
    front = _lines(ax)["Pareto front"]
    drawn = sorted(zip(front.get_xdata(), front.get_ydata(), strict=True))
    want = sorted(zip(expected["padding_overhead"] * 100, expected["time_s"] * 1e3, strict=True))
    np.testing.assert_allclose(drawn, want)
    (points,) = ax.collections
    assert len(points.get_offsets()) == len(ok)
    fig = plots.pareto(records, memory="physical_bytes")
    front = _lines(fig.axes[0])["Pareto front"]
    assert set(front.get_xdata()) <= set(ok["physical_bytes"].astype(float))


# -- address map ---------------------------------------------------------------------


def _panel(fig: Figure, label: str) -> np.ndarray:
    (ax,) = [ax for ax in fig.axes if ax.get_label() == label]
    return np.asarray(ax.images[0].get_array())


def _degree(offsets: np.ndarray, axis: int, lanes: int, itemsize: int, banks=32, width=4) -> int:
    """Worst distinct-words-per-bank over every lane group along ``axis``, by brute force."""
    moved = np.moveaxis(offsets, axis, 0)
    worst = 0
    for start in range(0, moved.shape[0] - lanes + 1, lanes):
        for rest in itertools.product(*(range(s) for s in moved.shape[1:])):
            words = {int(moved[(start + lane, *rest)]) * itemsize // width for lane in range(lanes)}
            per_bank = np.bincount([w % banks for w in words], minlength=banks)
            worst = max(worst, int(per_bank.max()))
    return worst


def _title_degree(fig: Figure) -> int:
    text = next(ax.get_title(loc="left") for ax in fig.axes if ax.get_label() == "bank")
    match = re.search(r"(\d+)-way", text)
    assert match, text
    return int(match.group(1))


def test_address_map_of_a_padded_layout(tmp_path):
    shape = (8, 32)
    fig = plots.address_map(pad_rows(shape, 1), axis=0)
    _save(fig, tmp_path, "address_map_pad_rows")
    assert len(_panels(fig)) == 2 and len(fig.axes) == 4
    i, j = np.indices(shape)
    np.testing.assert_array_equal(_panel(fig, "offset"), i * 33 + j)
    np.testing.assert_array_equal(_panel(fig, "bank"), (i * 33 + j) % 32)
    assert "lambda i, j: [i * 33 + j]" in fig.get_suptitle()
    assert _title_degree(fig) == 1


def test_address_map_of_a_wider_element_counts_words():
    shape = (32, 32)
    layout = pad_rows(shape, 1)
    wide = plots.address_map(layout, dtype="float64", axis=0)
    narrow = plots.address_map(layout, dtype="float32", axis=0)
    i, j = np.indices(shape)
    offsets = i * 33 + j
    np.testing.assert_array_equal(_panel(wide, "bank"), (offsets * 8 // 4) % 32)
    assert _title_degree(wide) == _degree(offsets, 0, 32, 8)
    assert _title_degree(narrow) == _degree(offsets, 0, 32, 4)
    assert _title_degree(wide) > _title_degree(narrow)  # a padding of 1 is half a word pair


@pytest.mark.parametrize(
    "layout",
    [identity((32, 32)), row_xor((32, 32), 32), swizzle((32, 32), 3, 0, 5), pad_rows((32, 32), 1)],
    ids=lambda lay: lay.describe(),
)
def test_address_map_title_is_the_worst_bank_conflict_of_a_column_access(layout):
    fig = plots.address_map(layout, axis=0)
    offsets = layout.index_map.flat_offsets(layout.shape).reshape(layout.shape)
    assert _title_degree(fig) == _degree(offsets, 0, 32, 4)
    assert str(layout.index_map) in fig.get_suptitle().replace("\n", " ")


def test_address_map_shows_what_a_swizzle_changes():
    shape = (32, 32)
    plain = plots.address_map(identity(shape), axis=0)
    mixed = plots.address_map(swizzle(shape, 3, 0, 5), axis=0)
    assert _title_degree(plain) == 32
    assert _title_degree(mixed) < 32
    plain_banks, mixed_banks = _panel(plain, "bank"), _panel(mixed, "bank")
    assert (plain_banks[:, 0] == 0).all()  # a column of the identity is one bank
    assert len(set(mixed_banks[:8, 0])) == 8  # the swizzle spreads it
    assert not np.array_equal(plain_banks, mixed_banks)
    # along a row both are conflict-free
    assert _title_degree(plots.address_map(identity(shape))) == 1


def test_address_map_of_a_block_layout_and_an_index_map(tmp_path):
    shape = (4, 8, 8)
    layout = block(shape, 1, 4)
    fig = plots.address_map(layout, axis=1, lanes=8)
    _save(fig, tmp_path, "address_map_block")
    offsets = layout.index_map.flat_offsets(shape).reshape(shape)
    np.testing.assert_array_equal(_panel(fig, "offset"), offsets.reshape(-1, 8))
    assert _title_degree(fig) == _degree(offsets, 1, 8, 4)
    text = "lambda i, j: [j, i]"
    fig = plots.address_map(IndexMap.parse(text), shape=(4, 6))
    np.testing.assert_array_equal(_panel(fig, "offset"), np.indices((4, 6))[0] + 4 * np.arange(6))
    assert text in fig.get_suptitle()
    fig = plots.address_map(text, shape=(4, 6))
    assert text in fig.get_suptitle()


def test_address_map_reads_the_bank_geometry():
    @dataclass(frozen=True)
    class BankedDevice:
        local_mem_banks: int = 16
        local_mem_bank_bytes: int = 8

    shape = (16, 16)
    i, j = np.indices(shape)
    fig = plots.address_map(identity(shape), device=BankedDevice())  # type: ignore[arg-type]
    np.testing.assert_array_equal(_panel(fig, "bank"), ((i * 16 + j) * 4 // 8) % 16)
    fig = plots.address_map(identity(shape), device=BankedDevice(), banks=4)  # type: ignore[arg-type]
    np.testing.assert_array_equal(_panel(fig, "bank"), ((i * 16 + j) * 4 // 8) % 4)
    fig = plots.address_map(identity(shape))
    np.testing.assert_array_equal(_panel(fig, "bank"), (i * 16 + j) % plots.DEFAULT_BANKS)


def test_address_map_window_limits_the_drawing_not_the_degree():
    layout = identity((128, 32))
    fig = plots.address_map(layout, axis=0, window=(16, 8))
    assert _panel(fig, "bank").shape == (16, 8)
    assert _title_degree(fig) == 32


# -- by name, and bad input ----------------------------------------------------------


def test_plot_by_kind_accepts_a_database(records):
    class Database:
        def to_dataframe(self) -> pd.DataFrame:
            return records

    for kind in ("convergence", "families", "speedup", "pareto"):
        fig = plots.plot(kind, Database())
        assert isinstance(fig, Figure) and fig.axes
    fig = plots.plot("address-map", row_xor((8, 8), 8), axis=0)
    assert _title_degree(fig) == 1
    assert set(plots.KINDS) == {"convergence", "families", "speedup", "pareto", "address-map"}


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda f: plots.plot("histogram", f), "unknown plot kind 'histogram'"),
        (lambda f: plots.plot("pareto", f, colour="red"), "takes no option 'colour'"),
        (lambda f: plots.convergence(f.iloc[:0]), "empty"),
        (lambda f: plots.families(f.iloc[:0]), "empty"),
        (lambda f: plots.pareto([1, 2, 3]), "got list"),
        (lambda f: plots.convergence(f.drop(columns="trial")), r"columns \['trial'\]"),
        (lambda f: plots.convergence(f, by="seed"), "by must be"),
        (lambda f: plots.convergence(f, workload="conv2d"), "'conv2d'"),
        (lambda f: plots.pareto(f, device="GPU 7"), "'GPU 7'"),
        (lambda f: plots.pareto(f, memory="local"), "memory must be"),
        (lambda f: plots.pareto(f.assign(status="timeout")), "status 'ok'"),
        (lambda f: plots.families(f.assign(status="crash")), "status 'ok'"),
        (lambda f: plots.address_map(IndexMap.parse("lambda i: [i]")), "logical shape"),
        (lambda f: plots.address_map(identity((4, 4)), axis=2), "axis 2 is out of range"),
        (lambda f: plots.address_map(identity((4, 4)), lanes=8), "8 lanes"),
        (lambda f: plots.address_map(identity((4, 4)), shape=(4, 5)), "differs"),
        (lambda f: plots.address_map(np.zeros((4, 4))), "ndarray"),
    ],
)
def test_bad_input_raises_a_laytune_error_naming_it(records, call, message):
    with pytest.raises(LaytuneError, match=message):
        call(records)


def test_figures_leave_no_pyplot_state(records):
    import matplotlib.pyplot as plt

    before = plt.get_fignums()
    plots.convergence(records)
    plots.address_map(identity((8, 8)))
    assert plt.get_fignums() == before


# -- what survives real databases -------------------------------------------------------


def test_a_buffer_with_one_point_gets_no_panel(records):
    staged = records.copy()
    staged["family.A.local"] = None
    staged.loc[staged.index[1], "family.A.local"] = "identity"  # staged once
    fig = plots.families(staged)
    assert [ax.get_title() for ax in fig.axes] == ["buffer A", "buffer B", "buffer C"]
    lonely = _frame(_study("one", "tpe", 5, 1, 700, workload="copy(shape=8x8;float32)"))
    with pytest.raises(plots.PlotError, match="at least two"):
        plots.families(lonely)
    with pytest.raises(plots.PlotError, match="at least two ok records"):
        plots.pareto(lonely)
    fig = plots.pareto(pd.concat([records, lonely], ignore_index=True))
    assert len(fig.axes) == 1  # the copy with one record gets no panel


@pytest.mark.parametrize(
    ("low", "high", "base"),
    [(0.0105, 0.0112, 10), (0.02, 0.09, 10), (1e-4, 10.0, 10), (0.9, 1.3, 2), (0.25, 16.0, 2)],
)
def test_log_axes_label_at_least_two_ticks_in_view(low: float, high: float, base: int):
    fig = Figure()
    ax = fig.subplots()
    ax.plot([0, 1], [low, high])
    plots._log_y(ax, base=base)
    shown_low, shown_high = ax.get_ylim()
    ticks = [t for t in ax.get_yticks() if shown_low <= t <= shown_high]
    labels = [ax.yaxis.get_major_formatter()(t) for t in ticks]
    assert 2 <= len(ticks) <= 8 and all(labels), labels
    assert len(set(labels)) == len(labels)  # no two ticks read the same


def test_several_devices_are_named_in_each_row(records):
    other = records.assign(
        device_key="dev1", device_name="Other device", study="x-" + records["study"]
    )
    fig = plots.convergence(pd.concat([records, other], ignore_index=True), x="trial")
    assert [sub.get_suptitle() for sub in fig.subfigs] == [
        "matmul 16x16x16 on Test device dev0",
        "matmul 16x16x16 on Other device",
    ]
    assert " on " not in fig.get_suptitle()


def test_plot_help_describes_every_kind(capsys):
    from laytune.cli import main

    with pytest.raises(SystemExit) as done:
        main(["plot", "--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    kinds = text.split("kinds:\n", 1)[1]
    described = dict(re.findall(r"^  (\S+): (.+(?:\n      .+)*)", kinds, flags=re.MULTILINE))
    assert set(described) == set(plots.KINDS)
    for kind, words in described.items():
        assert len(" ".join(words.split())) > 50, (kind, words)
    assert all(len(line) <= 80 for line in text.splitlines())


def test_a_layout_gallery_tells_its_layouts_apart_and_explains_its_colours(tmp_path):
    from laytune.layout import tile

    shape = (16, 16)
    gallery = [
        identity(shape),
        permute(shape, (1, 0)),
        pad_rows(shape, 2),
        pad_every(shape, rows=2, pad=4),
        row_xor(shape, period=8),
        swizzle(shape, bits=2, base=1, shift=2),
        block(shape, axis=0, factor=4),
        tile(shape, (4, 4)),
    ]
    fig = plots.layout_gallery(gallery)
    _save(fig, tmp_path, "gallery")
    panels = _panels(fig)
    assert [ax.get_label() for ax in panels] == [lay.describe() for lay in gallery]
    images = [np.asarray(ax.images[0].get_array()) for ax in panels]
    for lay, image in zip(gallery, images, strict=True):
        offsets = lay.index_map.flat_offsets(shape).reshape(shape)
        np.testing.assert_array_equal(image, offsets % 16)
    # every two panels differ in at least a quarter of their cells: visibly
    for (a, one), (b, other) in itertools.combinations(zip(gallery, images, strict=True), 2):
        assert (one != other).mean() >= 0.25, (a.describe(), b.describe())
    (bar,) = [ax for ax in fig.axes if ax.get_label() == "<colorbar>"]
    assert "mod 16" in bar.get_ylabel()
    with pytest.raises(plots.PlotError, match="one 2-D shape"):
        plots.layout_gallery([identity((4, 4)), identity((4, 8))])
