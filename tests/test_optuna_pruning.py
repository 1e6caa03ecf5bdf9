"""hydra.sweeper.pruner (issue 52): a trial's run reports each validation to its Optuna trial and stops where the
study's pruner says; the run is recorded `pruned` (final), the study's trial PRUNED; under two processes every rank
stops together; bad pruner settings are one line and exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from slm.runs.record import load_record
from slm.training.trial_link import TRIAL_FILE, TrialLink, make_pruner, open_storage, pruner_error
from tests.test_sweep_grid import TINY, slm


def test_pruner_settings_are_checked_by_optuna_s_own_signatures():
    assert pruner_error({"name": "median", "n_startup_trials": 2}) is None
    assert pruner_error({"name": "successive_halving", "min_resource": 2, "reduction_factor": 3}) is None
    assert pruner_error(None) is None and pruner_error({"name": "none"}) is None
    assert "is not a pruner; choose one of: none, median" in pruner_error({"name": "asha"})
    assert "unexpected keyword argument 'eta'" in pruner_error({"name": "median", "eta": 3})
    assert "its arguments: n_startup_trials" in pruner_error({"name": "median", "eta": 3})
    assert "reduction_factor" in pruner_error({"name": "successive_halving", "reduction_factor": 1})
    assert isinstance(make_pruner({"name": "patient", "wrapped_pruner": {"name": "median"}, "patience": 1}),
                      optuna.pruners.PatientPruner)


def _study(tmp_path: Path, pruner: dict):
    storage = str(tmp_path / "study.journal")
    study = optuna.create_study(study_name="s", storage=open_storage(storage), pruner=make_pruner(pruner))
    return storage, study


def test_asha_stops_a_trial_behind_its_rung_and_a_resumed_run_reports_each_step_once(tmp_path):
    """ReportToTrial._decide against a real study: two trials set the rung at step 2 (ASHA, min_resource 2, reduction
    factor 2: a trial goes on where its value is at most the (n // 2)-th best of the n values there); a third trial
    reporting 3.0 (of 1, 2, 3: the 1st best is 1.0) is stopped, a fourth reporting 0.5 (of 0.5, 1, 2, 3: the 2nd best
    is 1.0) goes on; reporting a step again (a resumed run) adds nothing and decides the same."""
    from slm.training.pruning import ReportToTrial

    pruner = {"name": "successive_halving", "min_resource": 2, "reduction_factor": 2}
    storage, study = _study(tmp_path, pruner)
    for value in (1.0, 2.0):  # ASHA keeps a rung's values where its trials asked at the rung
        trial = study.ask()
        trial.report(value, 2)
        trial.should_prune()
        study.tell(trial, value)
    worse, better = study.ask(), study.ask()
    stop = ReportToTrial(TrialLink(storage, "s", worse._trial_id, worse.number, pruner))
    decision = stop._decide(2, 3.0)
    assert decision[:2] == [2, 3.0] and decision[2].startswith("successive_halving (min_resource=2, reduction_factor=2)")
    assert ReportToTrial(TrialLink(storage, "s", better._trial_id, better.number, pruner))._decide(2, 0.5) is None
    again = ReportToTrial(TrialLink(storage, "s", worse._trial_id, worse.number, pruner))  # the run resumed
    assert again._decide(2, 9.9) is not None  # the same decision, from the value reported first
    frozen = optuna.load_study(study_name="s", storage=open_storage(storage)).trials[worse.number]
    assert frozen.intermediate_values == {2: 3.0}


def test_the_trial_link_round_trips_through_the_run_directory(tmp_path):
    link = TrialLink("sqlite:////x/optuna.db", "s", 7, 3, {"name": "median", "n_startup_trials": 2})
    path = link.write(tmp_path / "run")
    assert path.name == TRIAL_FILE and TrialLink.read(tmp_path / "run") == link
    assert TrialLink.read(tmp_path / "nothing") is None and link.describe() == "median (n_startup_trials=2)"


def test_a_sweep_s_pruned_trials_are_recorded_pruned_final_and_shown(tmp_path):
    """Two trials, lr 1e-6 and 1e-2: the threshold pruner (val_nll above 4.0 at a validation; 4.18 and 3.75 at the
    first, step 2) stops the one that barely learns at its first validation; its record is `pruned` with the step and
    reason, the study's trial PRUNED, slm-status shows it, and the same command again launches nothing (a pruned
    trial is final)."""
    args = ["-m", "hydra/sweeper=optuna", "run_group=prune", *TINY, "train.length.steps=8",
            "train.validation.interval=2", "hydra.sweeper.n_trials=2", "hydra.sweeper.params=null",
            "train.lr=choice(1e-6,1e-2)", "hydra.sweeper.sampler.name=random", "hydra.sweeper.sampler.seed=0",
            "hydra.sweeper.pruner={name: threshold, upper: 4.0}"]  # random seed 0 draws 1e-2, then 1e-6
    out = slm(tmp_path, *args)
    assert out.returncode == 0, out.stderr[-3000:]
    sweep = tmp_path / "runs" / "prune"
    trials = optuna.load_study(study_name="prune", storage=open_storage(str(sweep / "optuna.journal"))).trials
    by_lr = {t.params["train.lr"]: t for t in trials}
    assert set(by_lr) == {1e-6, 1e-2}, [(t.params, t.state) for t in trials]
    slow, fast = by_lr[1e-6], by_lr[1e-2]
    assert slow.state == TrialState.PRUNED and fast.state == TrialState.COMPLETE
    assert slow.intermediate_values and min(slow.intermediate_values) == 2
    record = load_record(slow.user_attrs["run_dir"])
    assert record["status"] == "pruned" and record["pruner"]["step"] == 2 and record["pruner"]["trial"] == slow.number
    assert record["pruner"]["reason"].startswith("threshold (upper=4.0) at step 2: val_nll ")
    assert record["training"]["steps"] == 2 and record["eval"]["val_curve"][0][0] == 2
    assert load_record(fast.user_attrs["run_dir"])["status"] == "completed"
    assert sorted(fast.intermediate_values) == [2, 4, 6, 8]
    assert "1 complete, 1 pruned, 0 failed" in out.stdout
    # a line per trial as it ends (numbered from 1), with the counts and the best so far
    assert "optuna study prune: trial 1 of 2 completed: eval.val_nll=" in out.stdout, out.stdout[-2000:]
    assert ("optuna study prune: trial 2 of 2 pruned: threshold (upper=4.0) at step 2: val_nll 4.1808; 1 complete, "
            "1 pruned, 0 failed; best #1 eval.val_nll=") in out.stdout
    status = slm(tmp_path, str(sweep), module="slm.cli.status")
    assert "pruned at step 2 by the study's pruner, threshold (upper=4.0): val_nll" in status.stdout, status.stdout
    before = load_record(slow.user_attrs["run_dir"])["updated_at"]
    again = slm(tmp_path, *args)
    assert again.returncode == 0, again.stderr[-3000:]
    assert load_record(slow.user_attrs["run_dir"])["updated_at"] == before
    assert len(optuna.load_study(study_name="prune", storage=open_storage(str(sweep / "optuna.journal"))).trials) == 2


@pytest.mark.parametrize("setting, needle", [
    ("hydra.sweeper.pruner={name: asha}", "'asha' is not a pruner; choose one of"),
    ("hydra.sweeper.pruner={name: median, eta: 3}", "unexpected keyword argument 'eta'"),
])
def test_bad_pruner_settings_are_one_line_and_exit_2(tmp_path, setting, needle):
    out = slm(tmp_path, "-m", "hydra/sweeper=optuna", "run_group=bad", *TINY, setting)
    assert out.returncode == 2 and needle in out.stderr, out.stderr[-2000:]
    assert not (tmp_path / "runs" / "bad" / "optuna.journal").exists()


def test_a_pruner_with_an_objective_it_cannot_judge_is_refused(tmp_path):
    out = slm(tmp_path, "-m", "hydra/sweeper=optuna", "run_group=bad", *TINY, "hydra.sweeper.pruner={name: median}",
              "hydra.sweeper.objective=eval.lm_eval.scores.piqa", "hydra.sweeper.direction=maximize")
    assert out.returncode == 2 and "the objective must be eval.val_nll, minimised" in out.stderr, out.stderr[-2000:]


def test_two_processes_stop_together_where_rank_0_s_trial_is_pruned(tmp_path):
    """A two-process run (gloo on the CPU) with a trial link: rank 0 reports, the pruner stops it at the first
    validation, the decision is broadcast, both processes leave cleanly and the record is `pruned` at that step."""
    storage, study = _study(tmp_path, {"name": "threshold", "upper": 0.5})
    trial = study.ask()
    run_dir = tmp_path / "runs" / "ddp" / "run"
    TrialLink(storage, "s", trial._trial_id, trial.number, {"name": "threshold", "upper": 0.5}).write(run_dir)
    env = {**os.environ, "SLM_RUNS": str(tmp_path / "runs"), "SLM_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    for key in ("RANK", "LOCAL_RANK", "NODE_RANK", "WORLD_SIZE", "SLURM_NTASKS", "SLURM_PROCID"):
        env.pop(key, None)
    proc = subprocess.run([sys.executable, "-m", "slm.cli.train", "run_group=ddp", f"hydra.run.dir={run_dir}",
                           "model=debug", "model.n_layers=1", "model.context_length=32", "train.length.steps=8",
                           "train.batch_size=4", "train.validation.interval=2", "train.validation.batches=1", "eval=none",
                           "train.logging.progress_bar=false", "train.parallel.accelerator=cpu",
                           "train.parallel.devices=2"], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = load_record(run_dir)
    assert record["status"] == "pruned" and record["pruner"]["step"] == 2 and record["training"]["steps"] == 2
    assert json.loads((run_dir / TRIAL_FILE).read_text())["trial_id"] == trial._trial_id
    frozen = optuna.load_study(study_name="s", storage=open_storage(storage)).trials[trial.number]
    assert list(frozen.intermediate_values) == [2]
