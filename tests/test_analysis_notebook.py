"""analysis/notebooks/explore_results.ipynb executes on a small results table (opening with the report's verdict,
drawing the report's Pareto frontier), and is stored without outputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analysis import collect, save_results
from analysis.thresholds import nll_frontier, pareto_frontier
from analysis.tiers import run_labels
from tests.test_analysis_collect import make_record, write
from tests.test_analysis_plots import study_runs

NOTEBOOK = Path(__file__).resolve().parents[1] / "analysis" / "notebooks" / "explore_results.ipynb"


def test_notebook_is_stored_with_outputs_cleared():
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(not c.outputs and c.execution_count is None for c in code)


def _train_logs(runs: Path) -> int:
    """A train_log.jsonl (step, loss, lr per line, a line being written at the end) in the study's gpt2 runs."""
    n = 0
    for record in sorted((runs / "gpt2").glob("L*/result.json")):
        lines = [json.dumps({"step": s, "loss": 4.0 / s ** 0.3, "lr": 1e-3}) for s in range(1, 61)]
        (record.parent / "train_log.jsonl").write_text("\n".join(lines) + '\n{"step": 61, "lo')
        n += 1
    return n


def test_notebook_executes(tmp_path, monkeypatch):
    """Run as `make sweep` leaves things: the table at $SLM_RUNS/cpu_default/results.parquet (the notebook's
    default), train_log.jsonl in the run directories."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    runs = study_runs(tmp_path / "runs" / "cpu_default")
    logged = _train_logs(runs)
    # a masked diffusion run whose NELBO (a bound) is lowest, at the least compute: an exact NLL there would
    # dominate every run; the notebook's frontier must leave it off, as the report's does
    bound = make_record(family="dllm", n_layers=4, d_model=64, tokens=1e5, val_nll=1.0)
    bound["eval"]["val_nll_kind"] = "nelbo"
    write(runs / "dllm" / "L4_d64", bound)
    table = collect(runs)
    save_results(table, runs / "results.parquet")
    monkeypatch.delenv("SLM_RESULTS", raising=False)
    monkeypatch.setenv("SLM_RUNS", str(tmp_path / "runs"))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert sum("image/png" in o.get("data", {}) for o in outputs) >= 7
    assert any("tiers" in "".join(o.get("text", "")) for o in outputs)
    assert any(f"from {runs / 'results.parquet'}" in "".join(o.get("text", "")) for o in outputs)
    # the loss curves: one figure, from the runs that have a log (not the failed or running ones' missing files)
    (loss_cell,) = [c for c in nb.cells if c.get("id") == "loss_curves"]
    texts = "".join(o.get("text", "") for o in loss_cell.outputs)
    assert f"{logged} of " in texts and logged > 0
    assert sum("image/png" in o.get("data", {}) for o in loss_cell.outputs) == 1
    # each column's role and doc, from the schema
    (columns_cell,) = [c for c in nb.cells if c.get("id") == "columns"]
    shown = "".join(o.get("data", {}).get("text/plain", "") for o in columns_cell.outputs)
    assert "train_flops" in shown and "flops_per_token x tokens" in shown and "nuisance" in shown
    # the verdict opens the notebook as it opens the report
    (verdict_cell,) = [c for c in nb.cells if c.get("id") == "verdict"]
    shown = "".join(o.get("data", {}).get("text/markdown", "") for o in verdict_cell.outputs)
    assert shown.startswith("Headline metric:") and "**Ranking**" in shown
    # the Pareto frontier by the report's rule, from the same function
    (pareto_cell,) = [c for c in nb.cells if c.get("id") == "pareto"]
    line = next(t for o in pareto_cell.outputs for t in o.get("text", "").splitlines()
                if t.startswith("Pareto frontier:"))
    frontier = line.split(":", 1)[1].strip().split("; ")
    labels = run_labels(table)
    assert frontier == labels.loc[nll_frontier(table).index].tolist()
    assert "dllm" not in line and len(frontier) >= 2
    assert labels.loc[pareto_frontier(table).index].tolist() == [labels[table["family"] == "dllm"].iloc[0]]
