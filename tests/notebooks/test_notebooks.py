"""Every notebook under notebooks/ runs top to bottom without a failing cell,
and every cell that draws shows its figure."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

pytestmark = pytest.mark.slow  # each runs a whole notebook (seconds to a minute)

NOTEBOOKS = sorted((Path(__file__).parents[2] / "notebooks").glob("*.ipynb"))


def test_there_are_notebooks() -> None:
    assert NOTEBOOKS, "notebooks/ holds no notebook"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(path: Path, tmp_path: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    # the python3 kernel of this environment, so the notebook sees the installed laytune
    client = NotebookClient(
        notebook,
        timeout=600,
        kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()
    errors = [
        output
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.get("outputs", [])
        if output.get("output_type") == "error"
    ]
    assert not errors, errors
    # a cell that draws shows its figure (no backend switch hides it)
    blank = [
        cell.source.splitlines()[0]
        for cell in notebook.cells
        if cell.cell_type == "code"
        and ("plots." in cell.source or "plt." in cell.source)
        and not any("image/png" in out.get("data", {}) for out in cell.get("outputs", []))
    ]
    assert not blank, f"cells that draw but show no figure: {blank}"
