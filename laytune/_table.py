"""The command line's tables: aligned columns as wide as the terminal
(``COLUMNS`` when set, else 80 when the output is not a terminal), numbers
never cut, names cut with an ellipsis, long text folded; and the JSON forms
of the same rows."""

from __future__ import annotations

import json
import math
import shutil
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Column", "missing", "ms", "print_table", "times", "write_json"]


@dataclass(frozen=True)
class Column:
    header: str
    field: str
    numeric: bool = False
    shrink: int | None = None  # narrowest width when the terminal is narrow (None: never)
    wide: bool = False  # long text, folded onto more lines rather than cut
    drop: int = 0  # left out, lowest first, when even the narrowest widths do not fit (0: never)


#: Folded columns give way first, down to this width, before names are cut.
FOLD_WIDTH = 24


def column_widths(
    rows: Sequence[dict[str, str]], columns: Sequence[Column], total: int
) -> list[int]:
    """Column widths that fit ``total`` characters with two spaces between
    columns: the natural widths; then, while too wide, the widest folded
    column down to :data:`FOLD_WIDTH`, the widest cut column down to its
    ``shrink`` width, and the folded columns down to theirs. Numbers are
    never narrowed."""
    widths = [max([len(c.header)] + [len(row[c.field]) for row in rows]) for c in columns]
    room = total - 2 * (len(columns) - 1)
    stages = (
        [(k, FOLD_WIDTH) for k, c in enumerate(columns) if c.wide and c.shrink is not None],
        [(k, c.shrink) for k, c in enumerate(columns) if not c.wide and c.shrink is not None],
        [(k, c.shrink) for k, c in enumerate(columns) if c.wide and c.shrink is not None],
    )
    for stage in stages:
        while sum(widths) > room:
            narrowable = [(k, low) for k, low in stage if widths[k] > low]
            if not narrowable:
                break
            widest = max(narrowable, key=lambda item: widths[item[0]])[0]
            widths[widest] -= 1
    return widths


def cell_lines(text: str, width: int, column: Column) -> list[str]:
    if column.wide:
        return textwrap.wrap(text, width, break_long_words=True, break_on_hyphens=False) or [""]
    return [text if len(text) <= width else text[: width - 1] + "…"]


def print_table(rows: Sequence[dict[str, str]], columns: Sequence[Column]) -> None:
    """Rows as an aligned table as wide as the terminal (see the module doc):
    numbers are never cut, names are cut with an ellipsis, long text is
    folded onto more lines; on a terminal too narrow even for that, the
    columns that can go (``drop``) go."""
    total = shutil.get_terminal_size().columns
    widths = column_widths(rows, columns, total)
    droppable = sorted((c for c in columns if c.drop), key=lambda c: c.drop)
    while sum(widths) + 2 * (len(columns) - 1) > total and droppable:
        gone = droppable.pop(0)
        columns = [c for c in columns if c is not gone]
        widths = column_widths(rows, columns, total)
    header = {c.field: c.header for c in columns}
    for row in (header, *rows):
        cells = [cell_lines(row[c.field], w, c) for c, w in zip(columns, widths, strict=True)]
        for line in range(max(len(lines) for lines in cells)):
            parts = []
            for column, width, lines in zip(columns, widths, cells, strict=True):
                text = lines[line] if line < len(lines) else ""
                parts.append(text.rjust(width) if column.numeric else text.ljust(width))
            print("  ".join(parts).rstrip())


def ms(value: Any) -> str:
    return "-" if missing(value) else f"{float(value) * 1e3:.4g}"


def times(value: Any) -> str:
    return "-" if missing(value) else f"{float(value):.2f}x"


def missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def write_json(items: Sequence[dict[str, Any]], lines: bool) -> None:
    if lines:
        for item in items:
            print(json.dumps(item, sort_keys=True))
    else:
        json.dump(list(items), sys.stdout, indent=1, sort_keys=True)
        print()
