"""Layout families: JSON round trips and every malformed-JSON error."""

from __future__ import annotations

import pytest

from laytune.layout import (
    Layout,
    LayoutError,
    LayoutSyntaxError,
    block,
    compose,
    permute,
    row_xor,
    swizzle,
)


@pytest.mark.parametrize(
    "layout",
    [
        block((2, 8, 3, 3), 1, 4),
        row_xor((16, 16), 8, 2),
        swizzle((16, 16), 2, 1, 2),
    ],
)
def test_layout_json_round_trip(layout: Layout) -> None:
    assert Layout.from_json(layout.to_json()) == layout


def test_composite_layout_json_round_trip() -> None:
    inner = block((8, 8, 3, 3), 1, 4)
    both = compose(block(inner.physical_shape, 0, 4), inner)
    again = Layout.from_json(both.to_json())
    assert again == both and again.describe() == both.describe()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ("{", "layout JSON is not valid JSON"),
        ("[1, 2]", "layout JSON must be an object"),
        ({"version": 7, "family": "identity"}, "layout JSON version 7 is not supported"),
        ({"family": "identity", "params": {}}, "malformed layout JSON"),
        (
            {"family": "spiral", "params": {}, "shape": [4], "index_map": "lambda i: [i]"},
            "unknown layout family 'spiral'",
        ),
        (
            {
                "family": "permute",
                "params": {"order": [0, 1]},
                "shape": [2, 3],
                "index_map": "lambda i, j: [j, i]",
            },
            "gives lambda i, j: \\[i, j\\]",
        ),
        (
            {
                "family": "identity",
                "params": {"bogus": 1},
                "shape": [4],
                "index_map": "lambda i: [i]",
            },
            "malformed layout JSON",
        ),
    ],
)
def test_malformed_layout_json_names_the_problem(data: object, message: str) -> None:
    with pytest.raises(LayoutSyntaxError, match=message):
        Layout.from_json(data)  # type: ignore[arg-type]


def test_family_parameters_are_validated() -> None:
    with pytest.raises(LayoutError, match="not a permutation"):
        permute((2, 3), (0, 0))
    with pytest.raises(LayoutError, match="needs shift >= bits"):
        swizzle((16, 16), 3, 0, 2)
    with pytest.raises(LayoutError, match="factor must be a positive integer"):
        block((4, 4), 0, 0)
