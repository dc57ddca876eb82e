"""IndexMap: construction, text, queries, algebra, and every bad input's error."""

from __future__ import annotations

import json

import numpy as np
import pytest

from laytune.layout import (
    AXIS_SEPARATOR,
    Condition,
    IndexMap,
    LayoutError,
    LayoutSyntaxError,
    NegativeIndexError,
    NonInjectiveLayoutError,
    ShapeMismatchError,
    Var,
    compose,
    to_opencl,
)


def test_from_func_and_parse_agree() -> None:
    traced = IndexMap.from_func(lambda n, h, w, c: [n, c // 4, h, w, c % 4])
    parsed = IndexMap.parse("lambda n, h, w, c: [n, c // 4, h, w, c % 4]")
    assert traced == parsed
    assert hash(traced) == hash(parsed)
    assert str(traced) == "lambda n, h, w, c: [n, c // 4, h, w, c % 4]"
    assert repr(traced) == "IndexMap('lambda n, h, w, c: [n, c // 4, h, w, c % 4]')"


def test_equality_ignores_parameter_names() -> None:
    assert IndexMap.parse("lambda i, j: [j, i]") == IndexMap.parse("lambda a, b: [b, a]")
    assert IndexMap.parse("lambda i, j: [j, i]") != IndexMap.parse("lambda i, j: [i, j]")


def test_constant_outputs_and_separators() -> None:
    m = IndexMap.from_func(lambda i, j: [0, i, AXIS_SEPARATOR, j, 3])
    assert str(m) == "lambda i, j: [0, i, AXIS_SEPARATOR, j, 3]"
    assert m.physical_shape((2, 5)) == (1, 2, 5, 4)
    assert m.flat_shape((2, 5)) == (2, 20)
    assert m.padding_count((2, 5)) == 2 * 5 * 4 - 10
    assert IndexMap.parse(str(m)) == m


def test_json_round_trip() -> None:
    m = IndexMap.parse("lambda i, j: [i, j ^ (i % 8)]")
    assert IndexMap.from_json(m.to_json()) == m
    assert IndexMap.from_json(json.dumps(m.to_json())) == m


def test_map_indices_scalar_and_vectorised() -> None:
    m = IndexMap.parse("lambda i, j: [j, i * 2]")
    assert m.map_indices((3, 4)) == (4, 6)
    assert m((3, 4)) == (4, 6)
    i, j = np.meshgrid(np.arange(3), np.arange(4), indexing="ij")
    pj, pi = m.map_indices((i, j))
    assert np.array_equal(pj, j) and np.array_equal(pi, 2 * i)
    stacked = m.map_indices(np.array([[3, 4], [1, 0]]))
    assert stacked.tolist() == [[4, 6], [0, 2]]


def test_flat_offsets_match_row_major_of_physical_shape() -> None:
    m = IndexMap.parse("lambda i, j: [j // 2, i, j % 2]")
    shape = (3, 6)
    pshape = m.physical_shape(shape)
    offsets = m.flat_offsets(shape).reshape(shape)
    for i in range(3):
        for j in range(6):
            assert offsets[i, j] == np.ravel_multi_index(m.map_indices((i, j)), pshape)
            assert m.flat_offset((i, j), shape) == offsets[i, j]


def test_compose_applies_inner_then_outer() -> None:
    f = IndexMap.parse("lambda i, j: [j, i]")
    g = IndexMap.parse("lambda a, b: [a // 4, b, a % 4]")
    h = compose(g, f)
    assert str(h) == "lambda i, j: [j // 4, i, j % 4]"
    for x in [(0, 0), (2, 7), (5, 3)]:
        assert h.map_indices(x) == g.map_indices(f.map_indices(x))


def test_compose_rejects_mismatched_ranks_and_inner_separators() -> None:
    with pytest.raises(ShapeMismatchError, match=r"takes 3 indices but .* returns 2"):
        compose(IndexMap.parse("lambda a, b, c: [a]"), IndexMap.parse("lambda i, j: [j, i]"))
    with pytest.raises(LayoutError, match="axis separators"):
        compose(
            IndexMap.parse("lambda a, b: [a, b]"),
            IndexMap.parse("lambda i, j: [i, AXIS_SEPARATOR, j]"),
        )


def test_inverse_of_a_permutation_and_a_block() -> None:
    m = IndexMap.parse("lambda n, c, h, w: [n, c // 4, h, w, c % 4]")
    inverse = m.inverse((2, 8, 3, 3))
    assert str(inverse.index_map) == "lambda p0, p1, p2, p3, p4: [p0, p1 * 4 + p4, p2, p3]"
    assert not inverse.has_padding
    assert inverse.predicate_opencl(["a", "b", "c", "d", "e"]) == "1"


def test_inverse_with_padding_gives_predicate() -> None:
    m = IndexMap.parse("lambda i, j: [i, j // 4, j % 4]")
    inverse = m.inverse((16, 14))
    assert inverse.has_padding
    grid = np.indices(m.physical_shape((16, 14)))
    assert np.array_equal(inverse.is_element(tuple(grid)), ~m.padding_mask((16, 14)))
    assert "13" in inverse.predicate_opencl(["a", "b", "c"])


def test_a_condition_compares_only_where_the_range_can_fail_it() -> None:
    x = Var(0)
    assert Condition(x, 3, 3).comparisons(0, 9) == [("==", 3)]
    assert Condition(x, 2, 5).comparisons(0, 9) == [(">=", 2), ("<=", 5)]
    assert Condition(x, 2, 5).comparisons(2, 9) == [("<=", 5)]
    assert Condition(x, 2, 5).comparisons(3, 4) == []
    # the C predicate says exactly that, on the physical ranges
    inverse = IndexMap.parse("lambda i, j: [i, j // 4, j % 4]").inverse((16, 14))
    (condition,) = inverse.conditions
    text = to_opencl(condition.expr, ["a", "b", "c"], [(0, 15), (0, 3), (0, 3)])
    assert inverse.predicate_opencl(["a", "b", "c"]) == f"(({text}) <= 13)"


def test_inverse_of_xor_swizzles() -> None:
    for text in [
        "lambda i, j: [i, j ^ (i % 8)]",
        "lambda i, j: [i, ((j // 8) ^ (i % 8)) * 8 + j % 8]",
    ]:
        m = IndexMap.parse(text)
        inverse = m.inverse((64, 64))
        assert inverse.index_map == IndexMap.parse(
            text.replace("i", "p0").replace("j", "p1").replace("lambda p0, p1", "lambda p0, p1")
        )


def test_equivalent_on_a_shape() -> None:
    a = IndexMap.parse("lambda i: [i % 4]")
    b = IndexMap.parse("lambda i: [i]")
    assert a.equivalent(b, (4,))
    assert not a.equivalent(b, (5,))


def test_simplify_uses_index_ranges() -> None:
    m = IndexMap.parse("lambda i, j: [(4 * i + j) // 4, (i % 8) % 4, (4 * i + j) % 4]")
    assert str(m.simplify((10, 4))) == "lambda i, j: [i, i % 4, j]"
    # without the range fact 0 <= j < 4 the quotient keeps j's share
    assert str(m.simplify((10, 6))) == "lambda i, j: [i + j // 4, i % 4, j % 4]"
    merged = IndexMap.parse("lambda i: [(i // 8) * 8 + i % 8]").simplify((100,))
    assert str(merged) == "lambda i: [i]"


def test_opencl_uses_shifts_and_masks_for_powers_of_two() -> None:
    m = IndexMap.parse("lambda n, c, h, w: [n, c // 4, h, w, c % 4]")
    (flat,) = m.to_opencl((1, 64, 56, 56))
    assert ">> 2" in flat and "& 3" in flat and "/" not in flat and "%" not in flat
    identity = IndexMap.parse("lambda i, k: [i, k]")
    assert identity.to_opencl((128, 96), ["i", "k"]) == ("i * 96 + k",)
    assert m.index_ctype((1, 64, 56, 56)) == "int"
    assert IndexMap.parse("lambda i, j: [i, j]").index_ctype((1 << 20, 1 << 12)) == "long"


def test_opencl_keeps_floor_semantics_for_negative_dividends() -> None:
    m = IndexMap.parse("lambda i: [(i - 5) // 4 + 2]")
    (text,) = m.to_opencl((16,), ["i"], flat=False)
    # i - 5 can be -5: lifted by a multiple of 4 so C's division is floor
    assert "- 5 + 8" in text or "+ 3" in text


# -- errors -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("lambda i: [i ** 2]", "unsupported operator '\\*\\*' at column 12"),
        ("lambda i: [j]", "unknown name 'j' \\(parameters: i\\)"),
        ("lambda i: i", "must return a list"),
        ("lambda i: [i // 0]", "positive divisor"),
        ("lambda i, j: [i // j]", "constant divisor"),
        ("lambda i: [i / 2]", "true division"),
        ("lambda i: [i << -1]", "non-negative shift"),
        ("lambda i: [i, AXIS_SEPARATOR]", "must stand between two physical indices"),
        ("lambda i: [AXIS_SEPARATOR, i]", "must stand between two physical indices"),
        ("lambda i: [i + AXIS_SEPARATOR]", "may only be an element of the list"),
        ("lambda i: [i +]", "not a valid lambda"),
        ("lambda i: [f(i)]", "function calls are not allowed"),
        ("lambda i: [1.5]", "only integer constants"),
        ("lambda i, i: [i]", "appears twice"),
        ("lambda *i: [i]", "plain positional parameters"),
        ("[i]", "expected 'lambda"),
        ("lambda i: []", "returns no physical index"),
        ("lambda i: [i | 1]", "'\\|'"),
        ("__import__('os').system('true')", "expected 'lambda"),
    ],
)
def test_malformed_text_raises_syntax_error_saying_what_and_where(text: str, message: str) -> None:
    with pytest.raises(LayoutSyntaxError, match=message):
        IndexMap.parse(text)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("lambda i: [" + "i + " * 20000 + "i]", "80013 characters long, more than the 10000"),
        ("lambda i: [" + "i + " * 2000 + "i]", "more than 64 levels deep"),  # Python parses it
        ("lambda i: [" + "i + " * 64 + "i]", "more than 64 levels deep"),
        ("lambda i: [" + "-" * 9000 + "i]", "more than 64 levels deep"),  # Python gives up
        ("lambda i: [" + "(" * 3000 + "i" + ")" * 3000 + "]", "not a valid lambda"),
        ("lambda " + ", ".join(f"a{k}" for k in range(5000)) + ": [a0]", "characters long"),
    ],
)
def test_text_past_the_bounds_is_a_syntax_error_not_a_crash(text: str, message: str) -> None:
    with pytest.raises(LayoutSyntaxError, match=message):
        IndexMap.parse(text)


def test_text_up_to_the_bounds_parses() -> None:
    deepest = IndexMap.parse("lambda i: [" + "i + " * 63 + "i]")  # 64 levels
    assert deepest.map_indices((1,)) == (64,)
    # 32 physical indices, the most an index map has (test_bounded_arithmetic
    # shows 33 and 3000 refused: numpy arrays have at most 64 axes)
    widest = "lambda i: [" + ", ".join(["i"] * 32) + "]"
    assert IndexMap.parse(widest).ndim_out == 32


def test_syntax_error_points_at_the_column() -> None:
    with pytest.raises(LayoutSyntaxError) as info:
        IndexMap.parse("lambda i: [i ** 2]")
    assert info.value.column == 11
    assert str(info.value).splitlines()[-1] == "  " + " " * 11 + "^"


def test_non_injective_map_names_two_colliding_indices() -> None:
    m = IndexMap.parse("lambda i, j: [i + j]")
    assert not m.is_injective((4, 4))
    with pytest.raises(NonInjectiveLayoutError) as info:
        m.validate((4, 4))
    a, b = info.value.first, info.value.second
    assert a != b and m.map_indices(a) == m.map_indices(b)
    assert str(a) in str(info.value) and str(b) in str(info.value)


def test_negative_image_names_the_index() -> None:
    m = IndexMap.parse("lambda i, j: [i, j - 2]")
    with pytest.raises(NegativeIndexError, match=r"logical index \(0, 0\)") as info:
        m.physical_shape((3, 4))
    assert info.value.index == (0, 0)


def test_wrong_rank_and_bad_shapes() -> None:
    m = IndexMap.parse("lambda i, j: [j, i]")
    with pytest.raises(ShapeMismatchError, match="rank 3 but the index map takes 2"):
        m.physical_shape((2, 3, 4))
    with pytest.raises(ShapeMismatchError, match="non-positive extent 0"):
        m.physical_shape((2, 0))
    with pytest.raises(ShapeMismatchError, match="has 3 entries"):
        m.map_indices((1, 2, 3))


def test_from_func_rejects_what_it_cannot_trace() -> None:
    with pytest.raises(LayoutError, match="truth value"):
        IndexMap.from_func(lambda i: [i if i else 0])
    with pytest.raises(LayoutError, match="'/' is true division"):
        IndexMap.from_func(lambda i: [i / 2])
    with pytest.raises(LayoutError, match="integers"):
        IndexMap.from_func(lambda i: [i * 1.5])


def test_json_errors() -> None:
    with pytest.raises(LayoutSyntaxError, match="not valid JSON"):
        IndexMap.from_json("{")
    with pytest.raises(LayoutSyntaxError, match="'index_map' field"):
        IndexMap.from_json({"map": "lambda i: [i]"})
    with pytest.raises(LayoutSyntaxError, match="version 99 is not supported"):
        IndexMap.from_json({"version": 99, "index_map": "lambda i: [i]"})


def test_inverse_refuses_maps_it_cannot_invert() -> None:
    with pytest.raises(LayoutError, match="cannot derive an inverse"):
        IndexMap.parse("lambda i, j: [i * j, j, i]").inverse((3, 4))
    with pytest.raises(NonInjectiveLayoutError):
        IndexMap.parse("lambda i: [i // 2]").inverse((4,))


def test_shape_facts_keep_their_arrays_within_a_process_wide_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Caches of code generation keep many layouts alive, each with offsets
    as large as its buffer: past the budget the least recently used drop
    their arrays, and answer as before when asked again."""
    from laytune.layout import _index_map as im
    from laytune.layout import block, pad_rows, permute

    shape = (64, 256)
    per_map = 8 * 64 * 256  # int64 offsets of one layout
    monkeypatch.setattr(im, "FACTS_BUDGET_BYTES", 3 * per_map)
    layouts = [pad_rows(shape, pad) for pad in range(1, 9)] + [
        permute(shape, (1, 0)),
        block(shape, 1, 4),
    ]
    for layout in layouts:
        layout.index_map.flat_offsets(shape)
    with im._HELD_LOCK:
        held = sum(size for _, size in im._HELD.values())
    assert held == im._HELD_BYTES[0]
    # each pad_rows map also keeps its occupancy (1 byte per physical element)
    assert held <= 3 * per_map + 2 * (64 * 264)
    dropped = [
        layout for layout in layouts if layout.index_map._shape_facts(shape)._offsets is None
    ]
    assert len(dropped) >= len(layouts) - 4
    first = layouts[0]  # pad_rows(shape, 1): dropped, then computed again
    assert first in dropped
    rows, cols = np.meshgrid(np.arange(64), np.arange(256), indexing="ij")
    assert np.array_equal(first.index_map.flat_offsets(shape), (rows * 257 + cols).reshape(-1))
    assert first.index_map.padding_count(shape) == 63  # no pad after the last row
    assert first.index_map.is_injective(shape)
