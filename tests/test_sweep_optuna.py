"""hydra/sweeper=optuna: search spaces, failed trials marked failed, and a study interrupted after 3 of
6 trials that resumes to exactly 6."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import optuna
import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState

from hydra_plugins.slm_optuna_sweeper.optuna_sweeper import distribution
from slm.runs.record import load_record
from slm.training.trial_link import open_storage
from tests.test_sweep_grid import TINY, slm


def dist(line: str):
    (override,) = OverridesParser.create().parse_overrides([line])
    return distribution(override)


def test_search_space_syntax():
    assert dist("a=tag(log, interval(1e-4, 1e-2))") == FloatDistribution(1e-4, 1e-2, log=True)
    assert dist("a=interval(0.0, 0.2)") == FloatDistribution(0.0, 0.2)
    assert dist("a=interval(1, 4)") == FloatDistribution(1.0, 4.0)
    assert dist("a=int(interval(1, 4))") == dist("a=tag(int, interval(1, 4))") == IntDistribution(1, 4)
    assert dist("a=choice(8, 16, 32)") == CategoricalDistribution([8, 16, 32])
    assert dist("a=8,16") == CategoricalDistribution([8, 16])
    assert dist("a=range(2, 9, 2)") == IntDistribution(2, 8, step=2)


def _trials(journal, name: str):
    try:
        return optuna.load_study(study_name=name, storage=open_storage(str(journal))).get_trials(deepcopy=False)
    except Exception:  # not created yet, or the database busy for a moment
        return []


@pytest.mark.slow  # ~30 s; make test-slow runs it (make test: under ~10 min on 2 cores)
def test_interrupted_study_resumes_to_exactly_n_trials(tmp_path):
    args = ["-m", "hydra/sweeper=optuna", "run_group=study", *TINY, "train.length.steps=4", "hydra.sweeper.n_trials=6"]
    sweep = tmp_path / "runs" / "study"
    storage = sweep / "optuna.journal"
    env = {**os.environ, "SLM_RUNS": str(tmp_path / "runs"), "SLM_CACHE": str(tmp_path.parent / "slm-cache")}
    proc = subprocess.Popen([sys.executable, "-m", "slm.cli.train", *args], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 400
    while time.time() < deadline and proc.poll() is None:  # the study is read only once the driver is dead
        if len(list(sweep.glob("*/.hydra"))) >= 4:  # trial 3 has started (one trial at a time)
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)  # the driver dies in the middle of trial 3
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the study ended before it could be interrupted"
    trials = _trials(storage, "study")
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 3 + [TrialState.RUNNING], [t.state for t in trials]
    interrupted = trials[3].params

    out = slm(tmp_path, *args)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "resuming 1 interrupted trial(s): [3]" in out.stdout + out.stderr
    trials = _trials(storage, "study")
    assert [t.number for t in trials] == list(range(6))  # not 6 more: the 6 of the study
    assert all(t.state == TrialState.COMPLETE for t in trials)
    assert trials[3].params == interrupted  # trial 3 finished with its own values
    run_dirs = {t.user_attrs["run_dir"] for t in trials}
    assert len(run_dirs) == 6
    for t in trials:
        record = load_record(t.user_attrs["run_dir"])
        assert record["status"] == "completed" and t.value == record["eval"]["val_nll"]
        assert record["config"]["train"]["lr"] == pytest.approx(t.params["train.lr"], rel=1e-3)
    assert "optuna study study: 6 trials: 6 complete, 0 pruned, 0 failed" in out.stdout
    assert (sweep / "optuna_best.yaml").exists()


def test_failed_trials_are_marked_failed_and_the_study_goes_on(tmp_path):
    out = slm(tmp_path, "-m", "hydra/sweeper=optuna", "run_group=fails", *TINY, "train.length.steps=3",
              "hydra.sweeper.n_trials=4", "hydra.sweeper.sampler.name=random", "hydra.sweeper.sampler.seed=3",
              "train.lr=interval(-0.01,0.01)")  # a negative learning rate is an invalid config
    assert out.returncode == 0, out.stderr[-3000:]
    trials = _trials(tmp_path / "runs" / "fails" / "optuna.journal", "fails")
    assert len(trials) == 4
    failed = [t for t in trials if t.state == TrialState.FAIL]
    done = [t for t in trials if t.state == TrialState.COMPLETE]
    assert failed and done, [(t.params, t.state) for t in trials]
    assert all(t.params["train.lr"] < 0 and "train.lr=" in t.user_attrs["error"] for t in failed)
    assert all(t.params["train.lr"] > 0 for t in done)
    assert all(load_record(t.user_attrs["run_dir"])["status"] == "failed" for t in failed)
