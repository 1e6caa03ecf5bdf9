"""slm-search, the report on an Optuna sweep (analysis/search.py): the best first, the pruned trials as such with the
step they stopped at, Optuna's importances, and whether the search's best keep their order when rerun at a larger rung
(the share of pairs, by hand; its interval from seed redraws)."""

from __future__ import annotations

import json

import optuna
import pytest
import yaml

from analysis.search import agreement, report
from slm.training.trial_link import open_storage


def test_agreement_is_the_share_of_pairs_in_the_same_order_by_hand():
    assert agreement([1.0, 2.0, 3.0], [[1.0], [3.0], [2.0]]) == (pytest.approx(2 / 3),) * 3  # one seed: no spread
    share, low, high = agreement([1.0, 2.0], [[1.0, 1.2], [1.1, 1.3]], draws=400)
    assert share == 1.0 and low == 0.0 and high == 1.0  # seeds overlap: a redraw can swap the two


def _search(tmp_path):
    """A study of 5 trials (3 complete, one pruned at step 12, one failed) with their run directories."""
    sweep = tmp_path / "runs" / "s"
    sweep.mkdir(parents=True)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name="s", storage=open_storage(str(sweep / "optuna.journal")))
    trials = [("complete", 0.004, 2, 2.5), ("complete", 0.008, 4, 2.4), ("pruned", 0.02, 2, 3.3),
              ("complete", 0.002, 4, 2.7), ("fail", 0.05, 2, None)]
    for i, (state, lr, depth, value) in enumerate(trials):
        study.enqueue_trial({"train.lr": lr, "model.n_layers": depth})
        trial = study.ask({"train.lr": optuna.distributions.FloatDistribution(1e-3, 1e-1, log=True),
                           "model.n_layers": optuna.distributions.CategoricalDistribution([2, 4])})
        run = sweep / f"run{i}"
        run.mkdir()
        point = [f"model.n_layers={trial.params['model.n_layers']}", f"train.lr={trial.params['train.lr']:.4g}"]
        trial.set_user_attr("point", point)
        trial.set_user_attr("run_dir", str(run))
        record = {"status": state if state != "fail" else "failed", "training": {"steps": 108}}
        if state == "pruned":
            trial.report(3.3, 12)
            record["pruner"] = {"step": 12, "val_nll": 3.3}
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        elif state == "fail":
            trial.set_user_attr("error", "SettingsError: train.lr=0.05 is invalid")
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
        else:
            study.tell(trial, value)
        (run / "result.json").write_text(json.dumps(record))
    (sweep / "optuna_best.yaml").write_text(yaml.safe_dump({"study": "s", "objective": "eval.val_nll",
                                                            "sampler": {"name": "tpe", "seed": 0},
                                                            "pruner": {"name": "successive_halving"}}))
    return sweep, study


def test_the_report_puts_the_best_first_and_the_pruned_as_such(tmp_path):
    sweep, study = _search(tmp_path)
    text = report(sweep)
    best = min((t for t in study.trials if t.value is not None), key=lambda t: t.value)
    assert f"**The search's best:** trial {best.number + 1}, eval.val_nll = 2.4000" in text
    rows = [line for line in text.splitlines() if line.startswith("| ") and "| trial |" not in line]
    assert [r.split("|")[3].strip() for r in rows[:5]] == ["complete"] * 3 + ["pruned", "fail"]
    assert "pruned at step 12 (val_nll 3.3000)" in rows[3] and "SettingsError: train.lr=0.05" in rows[4]
    assert "5 trials: 3 complete, 1 pruned by the study's pruner, 1 failed" in text
    assert "Sampler tpe (seed=0), pruner successive_halving" in text
    assert "Optuna's fANOVA importances (seed 0) over the 3 complete trials" in text


def test_the_rerun_section_compares_the_two_orders(tmp_path):
    sweep, study = _search(tmp_path)
    rerun = tmp_path / "runs" / "top"
    done = sorted((t for t in study.trials if t.value is not None), key=lambda t: t.value)
    # the search's order is 2.4 < 2.5 < 2.7; at the larger rung the first two swap
    for rank, (t, values) in enumerate(zip(done, [[2.2, 2.21], [2.1, 2.12], [2.6, 2.62]])):
        for seed, value in enumerate(values):
            run = rerun / f"r{rank}s{seed}"
            (run / ".hydra").mkdir(parents=True)
            (run / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump([*t.user_attrs["point"],
                                                                            f"train.seed={seed}"]))
            (run / "result.json").write_text(json.dumps({"status": "completed", "eval": {"val_nll": value}}))
    text = report(sweep, rerun)
    assert "**The search's order holds on 67% of the 3 pairs** [95%: 67%, 67%" in text
    assert "The search's best is 2 of 3 in the rerun." in text
    assert "| 1 | " in text and "2.2050 ± 0.0071 (2) | 2 |" in text


def test_slm_search_without_a_study_is_one_line_and_exit_2(tmp_path, capsys):
    from analysis.cli import search_main

    (tmp_path / "grid").mkdir()
    with pytest.raises(SystemExit) as stop:
        search_main([str(tmp_path / "grid")])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1 and "no Optuna study there" in err, err


def test_slm_report_lists_the_runs_the_study_s_pruner_stopped(tmp_path):
    import pandas as pd

    from analysis.search import report_blocks

    sweep, _ = _search(tmp_path)
    blocks = report_blocks(pd.DataFrame({"run_dir": [str(p) for p in sorted(sweep.glob("run*"))]}))
    assert blocks[0].startswith("s: an Optuna study of 5 trials: 3 complete, 1 pruned by its pruner")
    assert list(blocks[1]["where it ended"]) == ["pruned at step 12 (val_nll 3.3000)"]
    assert report_blocks(pd.DataFrame({"run_dir": [str(tmp_path / "grid" / "run")]})) == []
