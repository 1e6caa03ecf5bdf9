"""make search's comparison table (analysis/search_compare.py) on hand-made records: the grid's truth is the mean over
seeds, each search's pick is ranked in it, a search outside the grid says so, and compute is put per seed."""

from __future__ import annotations

import json

import optuna

from analysis.search_compare import compare, markdown
from slm.training.trial_link import open_storage


def _run(sweep, name, family, lr, seed, value, tokens=1000, start="2026-11-29T10:00:00+00:00",
         end="2026-11-29T10:00:10+00:00", status="completed"):
    run = sweep / name
    run.mkdir(parents=True)
    record = {"status": status, "created_at": start, "updated_at": end, "eval": {"val_nll": value},
              "training": {"tokens": tokens}, "model": {"flops_per_token": 10.0},
              "config": {"model": {"family": family, "n_layers": 2, "layer_types": ["attn"], "canon": {"set": ""}},
                         "train": {"lr": lr, "seed": seed}}}
    (run / "result.json").write_text(json.dumps(record))
    return run


def test_the_comparison_ranks_each_pick_in_the_grid_and_puts_compute_per_seed(tmp_path):
    grid = tmp_path / "halving_cpu_grid"
    for seed in (0, 1):  # a: 2.0 on average, b: 2.1
        _run(grid, f"a{seed}", "llama3", 0.004, seed, 2.0 + 0.02 * seed)
        _run(grid, f"b{seed}", "gpt2", 0.004, seed, 2.09 + 0.02 * seed, end="2026-11-29T10:01:40+00:00")
    _run(tmp_path / "halving_cpu", "b0", "gpt2", 0.004, 0, 2.1)
    asha = tmp_path / "search_cpu_asha_s0"
    run = _run(asha, "b", "gpt2", 0.004, 0, 2.09, tokens=500)
    study = optuna.create_study(study_name="search_cpu_asha_s0", storage=open_storage(str(asha / "optuna.journal")))
    trial = study.ask()
    trial.set_user_attr("run_dir", f"somewhere/else/{run.name}")  # recorded from another working directory
    study.tell(trial, 2.09)
    result = compare(tmp_path)
    rows = {r["method"]: r for r in result["rows"]}
    assert result["configurations"] == 2 and rows["full grid"]["rank"] == 1 and rows["full grid"]["value"] == 2.01
    assert rows["full grid"]["wall"] == 100 and rows["full grid"]["flops"] == 4 * 1000 * 10.0
    assert rows["synchronous halving"]["rank"] == 2
    asha_row = rows["ASHA, seed 0"]
    assert asha_row["rank"] == 2 and asha_row["seeds"] == 1 and asha_row["share"] == 500 * 10 / 40000
    text = markdown(result)
    assert "| ASHA, seed 0 | 1 | gpt2 x2, lr 0.004 | 2.0900 | 2 of 2 | 5e+03 | 12.5% | 25.0% | 1 | 10 s |" in text, text
