"""The arXiv 2512.20877 side-by-side table: the paper's FLOPs formula against the FLOPs its code printed,
our seeds summarised beside its numbers, the figure and the CLI's refusals."""

from __future__ import annotations

import pandas as pd
import pytest

from analysis.cli import ladder_main
from analysis.ladder import PAPER, paper_flops, side_by_side, write


def test_the_flops_formula_gives_the_papers_printed_figures():
    """Its Table 1: Linear 4.12e13, MLP 1.65e14, Self-Attention 1.19e13, Transformer 2.21e13."""
    printed = {"Linear": 4.12e13, "MLP": 1.65e14, "Self-Attention": 1.19e13, "Transformer": 2.21e13}
    for row in PAPER.itertuples():
        if row.model in printed:
            assert paper_flops(row.paper_params, 50_000, 128, row.paper_epochs) == pytest.approx(printed[row.model], rel=5e-3)


def runs(values: dict[str, list[float]]) -> pd.DataFrame:
    rows = []
    for family, nlls in values.items():
        for seed, nll in enumerate(nlls):
            rows.append({"status": "completed", "family": family, "position": "learned", "seed": seed,
                         "test_nll": nll, "params_total": 1_073_345, "windows_per_epoch": 50_000,
                         "context_length": 128, "epochs": 3})
    return pd.DataFrame(rows)


def test_side_by_side_summarises_seeds_next_to_the_paper(tmp_path):
    table = runs({"ladder_linear": [3.0, 3.1, 3.2]})
    table.loc[len(table)] = {**table.iloc[0].to_dict(), "status": "failed", "test_nll": 9.0}  # ignored
    frame = side_by_side(table).set_index("model")
    linear = frame.loc["Linear"]
    assert linear["seeds"] == 3 and linear["test NLL"] == pytest.approx(3.1)
    assert (linear["min"], linear["max"]) == (3.0, 3.2)
    assert linear["difference"] == pytest.approx(3.1 - 3.0549)
    assert linear["FLOPs"] == pytest.approx(paper_flops(1_073_345, 50_000, 128, 3))
    assert frame.loc["MLP", "seeds"] == 0 and pd.isna(frame.loc["MLP", "test NLL"])
    path = write(table, tmp_path)
    assert "| Linear | 1,073,345 | 3.0549 | 4.12e+13 | 3 | 1,073,345 | 3.1000 | 3.0000 | 3.2000 | +0.0451 |" \
        in path.read_text()
    assert (tmp_path / "figures" / "ladder_nll_flops.png").stat().st_size > 0


def test_the_cli_refuses_results_without_a_test_nll(tmp_path, capsys):
    table = runs({"ladder_linear": [3.0]}).drop(columns=["test_nll"])
    table.to_csv(tmp_path / "results.csv", index=False)
    with pytest.raises(SystemExit) as exit_:
        ladder_main([str(tmp_path / "results.csv"), "-o", str(tmp_path / "out")])
    assert exit_.value.code == 2
    assert "no run with a test NLL" in capsys.readouterr().err


def test_runs_are_matched_by_run_group_and_setting(tmp_path):
    """Table 1's linear model and the context sweep's are the same family: the run group and the swept
    setting keep them apart; a section with no runs (word level here) is left out of the report."""
    table = runs({"ladder_linear": [3.0, 2.5, 2.7]})
    table["sweep"] = ["ladder_table1", "ladder_sweeps", "ladder_sweeps"]
    table["context_length"] = [128, 32, 64]
    frame = side_by_side(table).set_index("model")
    assert frame.loc["Linear", "seeds"] == 1 and frame.loc["Linear", "test NLL"] == 3.0
    assert frame.loc["Linear, T = 32", "test NLL"] == 2.5 and frame.loc["Linear, T = 64", "test NLL"] == 2.7
    assert frame.loc["Linear, T = 128", "seeds"] == 0 and frame.loc["Transformer, PTB", "seeds"] == 0
    text = write(table, tmp_path).read_text()
    assert "one-factor sweeps" in text and "| Linear, T = 32 | 274,625 | 2.5135 |" in text
    assert "Word level" not in text
