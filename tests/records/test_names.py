"""Layouts are written with the operator's names for a buffer's axes, and
the text parses back to the same map."""

from __future__ import annotations

import dataclasses

import pytest

from laytune import ops
from laytune.layout import IndexMap, block, identity, permute
from laytune.records import Record, buffer_axis_names, layout_text
from laytune.space import Candidate

CONV2D = ops.conv2d(1, 16, 14, 14, 16, 3, 1, 1)
MATMUL = ops.matmul(8, 16, 4)


@pytest.mark.parametrize(
    ("workload", "buffer", "layout", "text"),
    [
        (CONV2D, "X", block((1, 16, 14, 14), 1, 8), "lambda n, c, h, w: [n, c // 8, h, w, c % 8]"),
        (
            CONV2D,
            "W",
            block((16, 16, 3, 3), 0, 8),
            "lambda f, c, kh, kw: [f // 8, c, kh, kw, f % 8]",
        ),
        (CONV2D, "Y", identity((1, 16, 14, 14)), "lambda n, f, oh, ow: [n, f, oh, ow]"),
        (MATMUL, "A", identity((8, 4)), "lambda i, k: [i, k]"),
        (MATMUL, "B", permute((4, 16), (1, 0)), "lambda k, j: [j, k]"),
        (MATMUL, "C", identity((8, 16)), "lambda i, j: [i, j]"),
    ],
)
def test_a_layout_reads_with_its_buffers_axis_names(workload, buffer, layout, text) -> None:
    for named_by in (workload, workload.key):
        assert layout_text(named_by, buffer, layout) == text
    assert IndexMap.parse(text) == layout.index_map
    assert str(IndexMap.parse(text)) == text


def test_without_names_the_canonical_text() -> None:
    layout = identity((8, 4))
    assert buffer_axis_names(MATMUL, "A.local") is None
    assert layout_text(MATMUL, "A.local", layout) == "lambda i, j: [i, j]"
    assert layout_text("nosuchop(x=1;float32)", "A", layout) == "lambda i, j: [i, j]"


def test_a_tune_summary_names_the_axes() -> None:
    from laytune.search import TuneResult

    layouts = {
        "X": block((1, 16, 14, 14), 1, 8),
        "W": identity((16, 16, 3, 3)),
        "Y": block((1, 16, 14, 14), 1, 8),
    }
    best = Record(CONV2D.key, "d", Candidate.make(layouts, {}), "ok", value_s=1e-3)
    fields = {
        f.name: None for f in dataclasses.fields(TuneResult) if f.default is f.default_factory
    }
    fields.update(
        workload_key=CONV2D.key,
        device_key="d",
        device_name="dev",
        study_name="s",
        strategy="tpe",
        database="sqlite://",
        best=best,
        measured=1,
        references=0,
        cached=0,
        failures={},
        stop_reason="done",
        elapsed_s=0.1,
    )
    summary = TuneResult(**fields).summary()
    assert "    X: lambda n, c, h, w: [n, c // 8, h, w, c % 8]" in summary
    assert "    W: lambda f, c, kh, kw: [f, c, kh, kw]" in summary
    assert "lambda i, j, k, l" not in summary
