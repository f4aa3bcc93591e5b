"""notebooks/quickstart.ipynb runs top to bottom."""

from __future__ import annotations

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("nemoguardrails")

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "quickstart.ipynb"


def test_the_quickstart_notebook_executes_and_shows_the_breaker_at_work(monkeypatch):
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbclient.NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOK.parent)}}
    ).execute()
    text = "".join(out.get("text", "") for cell in nb.cells if cell.cell_type == "code" for out in cell.get("outputs", []))
    assert "BLOCKED  identical_failure" in text
    assert "8 pages, none blocked" in text
    assert "False unverified_claim | True None" in text
    assert "saved $" in text
