"""slm's commands make waiting OpenMP threads spin briefly before they sleep (slm/omp_wait.py), unless the user
chose how they wait, and that changes no number a job computes (its speed: bench/job_overhead.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from slm.omp_wait import SPIN_COUNT, USER_SETTINGS, prefer_short_spin

ROOT = Path(__file__).resolve().parents[1]


def _clean_env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in USER_SETTINGS}
    env.pop("HYDRA_FULL_ERROR", None)
    return {**env, **extra}


@pytest.fixture
def no_torch(monkeypatch):
    """sys.modules as a fresh command sees it: torch not imported yet."""
    monkeypatch.delitem(sys.modules, "torch", raising=False)


def test_short_spin_unless_the_user_chose(no_torch):
    env = {"PATH": "/bin"}
    assert prefer_short_spin(env) is True
    assert env == {"PATH": "/bin", "GOMP_SPINCOUNT": SPIN_COUNT}
    for name, value in (("OMP_WAIT_POLICY", "passive"), ("GOMP_SPINCOUNT", "300000")):
        env = {name: value}
        assert prefer_short_spin(env) is False
        assert env == {name: value}


def test_too_late_once_torch_is_loaded():
    import torch  # noqa: F401 - loaded: libgomp has read its environment

    env: dict = {}
    assert prefer_short_spin(env) is False
    assert env == {}


def _libgomp_settings(code: str, **env: str) -> str:
    """libgomp's own report of its settings (OMP_DISPLAY_ENV) in a fresh interpreter that runs `code`."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env=_clean_env(OMP_DISPLAY_ENV="VERBOSE", OMP_NUM_THREADS="2", **env))
    assert out.returncode == 0, out.stderr[-2000:]
    if "OPENMP DISPLAY ENVIRONMENT" not in out.stderr:
        pytest.skip("torch's OpenMP is not libgomp here (no OMP_DISPLAY_ENV report)")
    return out.stderr


def test_an_slm_command_runs_torch_with_the_short_spin():
    """Importing the command-line package (as every slm-* entry point does) before torch: libgomp starts with
    slm's spin count; torch alone keeps libgomp's default, and a user's setting wins."""
    run = "import torch; torch.ones(4).sum()"
    assert f"GOMP_SPINCOUNT = '{SPIN_COUNT}'" in _libgomp_settings(f"import slm.cli.train; {run}")
    assert "GOMP_SPINCOUNT = '300000'" in _libgomp_settings(run)
    user = _libgomp_settings(f"import slm.cli.train; {run}", OMP_WAIT_POLICY="PASSIVE")
    assert "OMP_WAIT_POLICY = 'PASSIVE'" in user and f"GOMP_SPINCOUNT = '{SPIN_COUNT}'" not in user


def _train_and_score(runs: Path, **env: str) -> dict:
    """A tiny run trained and scored by slm-train on two threads: its record's numbers, per-document scores and
    the wait settings it records."""
    cmd = [sys.executable, "-m", "slm.cli.train", "model=debug", "model.n_layers=1", "train.length.steps=6",
           "train.batch_size=32", "train.validation.batches=2", "train.logging.progress_bar=false", "eval.limit=12",
           "eval.throughput.enabled=false", "run_group=wait"]  # batches large enough for both threads to work
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600,
                         env=_clean_env(SLM_RUNS=str(runs), OMP_NUM_THREADS="2", **env))
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    (run,) = (runs / "wait").iterdir()
    record = json.loads((run / "result.json").read_text())
    documents = record["eval"]["lm_eval"]["documents_file"]
    return {"val_nll": record["eval"]["val_nll"], "loss": record["training"]["final_train_loss"],
            "scores": record["eval"]["lm_eval"]["scores"], "documents": (run / documents).read_text(),
            "omp_wait": record["environment"]["omp_wait"]}


def test_the_short_spin_changes_no_number(tmp_path):
    """Training and scoring on two threads give the same numbers, to the last bit, under libgomp's default
    spin (before slm chose) and under the short spin slm's commands now use."""
    before = _train_and_score(tmp_path / "before", GOMP_SPINCOUNT="300000")
    after = _train_and_score(tmp_path / "after")
    assert (before.pop("omp_wait"), after.pop("omp_wait")) == ({"GOMP_SPINCOUNT": "300000"},
                                                               {"GOMP_SPINCOUNT": SPIN_COUNT})
    assert after == before
