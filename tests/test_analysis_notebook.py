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


def _train_logs(table) -> int:
    """A train_log.jsonl (step, loss, lr per line, a line being written at the end) in every completed run."""
    done = table[table["status"] == "completed"]
    for run_dir in done["run_dir"]:
        lines = [json.dumps({"step": s, "loss": 4.0 / s ** 0.3, "lr": 1e-3}) for s in range(1, 61)]
        (Path(run_dir) / "train_log.jsonl").write_text("\n".join(lines) + '\n{"step": 61, "lo')
    return len(done)


def _outputs(nb, cell_id: str) -> list:
    (cell,) = [c for c in nb.cells if c.get("id") == cell_id]
    return cell.outputs


def _text(outputs) -> str:
    return "".join(o.get("text", "") for o in outputs)


def _images(outputs) -> int:
    return sum("image/png" in o.get("data", {}) for o in outputs)


def test_notebook_executes(tmp_path, monkeypatch):
    """Run as `make sweep` leaves things: the table collected from the repository root with relative paths, at
    $SLM_RUNS/cpu_default/results.parquet (the notebook's default), train_log.jsonl in the run directories; the
    notebook runs from its own folder, as Jupyter runs it. Every cell that should draw data draws it, and its
    statistics are the report's (analysis.study), the diffusion bound left out of the tiers by the same rule."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    from analysis import load_results
    from analysis.study import analyse

    runs = study_runs(tmp_path / "runs" / "cpu_default")
    # a masked diffusion run whose NELBO (a bound) is lowest, at the least compute: an exact NLL there would
    # dominate every run; the notebook's frontier and tiers must leave it off, as the report's do
    bound = make_record(family="dllm", n_layers=4, d_model=64, tokens=1e5, val_nll=1.0)
    bound["eval"]["val_nll_kind"] = "nelbo"
    write(runs / "dllm" / "L4_d64", bound)
    monkeypatch.chdir(tmp_path)  # slm-collect runs/cpu_default -o runs/cpu_default/results.parquet, from the root
    save_results(collect(Path("runs") / "cpu_default"), Path("runs") / "cpu_default" / "results.parquet")
    table = load_results(runs / "results.parquet")
    logged = _train_logs(table)
    monkeypatch.delenv("SLM_RESULTS", raising=False)
    monkeypatch.setenv("SLM_RUNS", str(tmp_path / "runs"))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert "not drawn" not in _text(outputs)  # every plot had its data
    assert any(f"from {runs / 'results.parquet'}" in "".join(o.get("text", "")) for o in outputs)
    # each cell that draws, drew: one figure per plot
    for cell_id, figures in (("tiers", 1), ("threshold", 1), ("pareto", 1), ("plots", 3), ("loss_curves", 1)):
        assert _images(_outputs(nb, cell_id)) == figures, cell_id
    # the loss curves: every completed run's log, found from the notebook's folder
    assert f"{logged} of {logged} completed runs have a train_log.jsonl" in _text(_outputs(nb, "loss_curves"))
    # the statistics are the report's: one computation (analysis.study), the dllm's bound not among the tiers
    study = analyse(table)
    tiers = _text(_outputs(nb, "tiers"))
    assert study.tiers().summary() in tiers and "dllm" not in tiers
    assert study.threshold().summary() in _text(_outputs(nb, "threshold"))
    claims = "".join(o.get("data", {}).get("text/plain", "") for o in _outputs(nb, "pareto"))
    assert "two tiers" in claims and "a width threshold" in claims
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
