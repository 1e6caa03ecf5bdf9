"""analysis/notebooks/explore_results.ipynb executes on a small results table, and is stored without outputs."""

from __future__ import annotations

from pathlib import Path

import pytest

from analysis import collect, save_results
from tests.test_analysis_plots import study_runs

NOTEBOOK = Path(__file__).resolve().parents[1] / "analysis" / "notebooks" / "explore_results.ipynb"


def test_notebook_is_stored_with_outputs_cleared():
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(not c.outputs and c.execution_count is None for c in code)


def test_notebook_executes(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    results = save_results(collect(study_runs(tmp_path / "runs")), tmp_path / "results.parquet")
    monkeypatch.setenv("SLM_RESULTS", str(results))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert sum("image/png" in o.get("data", {}) for o in outputs) >= 6
    assert any("tiers" in "".join(o.get("text", "")) for o in outputs)
