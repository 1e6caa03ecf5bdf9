"""Drivers that share one Optuna study (slm.sweeps.study_claims; issue 52 §2): claims keep two drivers off one trial,
a trial whose driver is gone is taken up with its own values (not failed and asked again), the study never holds more
than n_trials, two slm-workers copies share a study with no barrier, and a storage they cannot share is refused."""

from __future__ import annotations

import os
import sys

import optuna
import pytest
from optuna.trial import TrialState

from slm.sweeps.study_claims import Claims, next_batch, refuse_unshared
from slm.runs.record import load_record
from slm.training.trial_link import open_storage
from tests.test_sweep_grid import TINY, slm

SAMPLE = lambda trial: trial.suggest_float("x", 0.0, 1.0)  # noqa: E731


def study_in(path):
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.create_study(study_name="s", storage=open_storage(str(path / "s.journal")), load_if_exists=True,
                               sampler=optuna.samplers.RandomSampler(seed=0))


def test_claims_keep_drivers_apart_and_a_gone_driver_s_trial_is_taken_up_with_its_own_values(tmp_path):
    study = study_in(tmp_path)
    a, b, c = Claims(tmp_path), Claims(tmp_path), Claims(tmp_path)  # each its own descriptors: three drivers to flock
    first, resumed = next_batch(study, SAMPLE, n_trials=3, n_jobs=2, claims=a)
    assert [t.number for t in first] == [0, 1] and resumed == []
    second, resumed = next_batch(study, SAMPLE, n_trials=3, n_jobs=2, claims=b)
    assert [t.number for t in second] == [2] and resumed == []  # a's two are claimed; the study is full at 3
    assert next_batch(study, SAMPLE, n_trials=3, n_jobs=2, claims=c) == ([], [])
    study.tell(first[0], 1.0)
    a.release(first[0].number)
    x = first[1].params["x"]
    a.release_all()  # a dies with trial 1 unfinished: its claim goes with it
    taken, resumed = next_batch(study, SAMPLE, n_trials=3, n_jobs=2, claims=c)
    assert [t.number for t in taken] == [1] and resumed == [1]  # taken up, not asked again; the told one left alone
    assert study.trials[1].params == {"x": x}
    assert len(study.trials) == 3 and study.trials[1].state == TrialState.RUNNING
    assert not (tmp_path / ".optuna" / "trial-0.lock").exists()  # a told trial's claim file is removed


def test_a_trial_told_while_another_driver_looks_is_not_taken_up(tmp_path, monkeypatch):
    study = study_in(tmp_path)
    a, b = Claims(tmp_path), Claims(tmp_path)
    (trial,), _ = next_batch(study, SAMPLE, n_trials=1, n_jobs=1, claims=a)
    stale = study.get_trials(deepcopy=False)  # b reads trial 0 RUNNING ...
    study.tell(trial, 0.5)  # ... a tells it and lets go before b takes the claim
    a.release(trial.number)
    monkeypatch.setattr(type(study), "get_trials", lambda self, deepcopy=False, states=None: stale)
    assert next_batch(study, SAMPLE, n_trials=1, n_jobs=1, claims=b) == ([], [])


def test_sqlite_is_refused_for_more_than_one_driver():
    assert refuse_unshared("sqlite:////runs/x/optuna.db", 1) is None
    assert refuse_unshared("/runs/x/optuna.journal", 8) is None and refuse_unshared("postgresql://h/db", 8) is None
    line = refuse_unshared("sqlite:////runs/x/optuna.db", 2)
    assert "cannot be shared by 2 drivers" in line and "storage=<path>.journal" in line and "\n" not in line


@pytest.mark.parametrize("sampler, space", [
    pytest.param("tpe", "tag(log, interval(1e-4, 1e-2))", marks=pytest.mark.slow),  # ~7 s; the grid one covers make test
    ("grid", "choice(1e-4, 1e-3, 3e-3, 1e-2)")])
def test_two_copies_share_one_study_each_trial_run_once(tmp_path, sampler, space):
    """Two slm-workers copies of one command: 4 trials in all, each run once. With the grid sampler, each of the grid's
    4 points once (its drivers share one order: a grid id means a point only under the seed that drew the order)."""
    args = ["-m", "hydra/sweeper=optuna", "run_group=two", *TINY, "train.length.steps=4", "hydra.sweeper.n_trials=4",
            "hydra.sweeper.params=null", f"train.lr={space}", f"hydra.sweeper.sampler={{name: {sampler}, seed: 0}}"]
    out = slm(tmp_path, "2", "--stagger", "0.3", "--", sys.executable, "-m", "slm.cli.train", *args, module="slm.cli.workers")
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    trials = optuna.load_study(study_name="two", storage=open_storage(str(tmp_path / "runs" / "two" /
                                                                           "optuna.journal"))).trials
    assert [t.number for t in trials] == [0, 1, 2, 3] and all(t.state == TrialState.COMPLETE for t in trials)
    assert len({t.user_attrs["run_dir"] for t in trials}) == 4  # the two drivers' samplers draw apart
    assert all(load_record(t.user_attrs["run_dir"])["eval"]["val_nll"] == t.value for t in trials)
    ended = [line for line in out.stdout.splitlines() if " of 4 completed: " in line]
    assert len(ended) == 4 and {line[:3] for line in ended} == {"[1]", "[2]"}, out.stdout[-3000:]


@pytest.mark.parametrize("setting, env, needle", [
    ("hydra.sweeper.storage=sqlite:///{root}/s.db", {"SLM_WORKERS": "2"}, "cannot be shared by 2 drivers"),
    ("hydra.sweeper.workers=2", {}, "submits the workers as one Slurm array: add hydra/launcher=slurm"),
])
def test_drivers_that_cannot_share_the_study_are_refused(tmp_path, monkeypatch, setting, env, needle):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    out = slm(tmp_path, "-m", "hydra/sweeper=optuna", "run_group=bad", *TINY, setting.format(root=tmp_path))
    assert out.returncode == 2 and needle in out.stderr and out.stderr.count("\n") == 1, out.stderr[-2000:]
    assert not (tmp_path / "runs" / "bad" / "optuna.journal").exists() and not os.path.exists(tmp_path / "s.db")
