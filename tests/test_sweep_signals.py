"""The preemption signal without Slurm: USR2 checkpoints at a step boundary and stops the run, which is
left `running` and resumes to the weights of an uninterrupted run; `make smoke` twice trains once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.test_sweep_grid import slm

ARGS = ["run_group=sig", "model=debug", "eval=none", "train.length.steps=80", "train.checkpoint.interval=1000", "train.validation.interval=40",
        "train.validation.batches=2", "train.logging.interval=10", "train.logging.progress_bar=false", "train.seed=5"]


def _last_step(run_dir: Path) -> int:
    log = run_dir / "train_log.jsonl"
    lines = log.read_text().splitlines() if log.exists() else []
    return json.loads(lines[-1])["step"] if lines else 0


@pytest.mark.slow
def test_usr2_checkpoints_and_the_run_resumes_exactly(tmp_path):
    ref = slm(tmp_path / "ref", *ARGS)
    assert ref.returncode == 0, ref.stderr[-2000:]
    cut_root = tmp_path / "cut"
    env = {**os.environ, "SLM_RUNS": str(cut_root / "runs"), "SLM_CACHE": str(tmp_path / "slm-cache")}
    proc = subprocess.Popen([sys.executable, "-m", "slm.cli.train", *ARGS], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    runs = cut_root / "runs" / "sig"
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        dirs = list(runs.glob("*/train_log.jsonl")) if runs.exists() else []
        if dirs and _last_step(dirs[0].parent) >= 25:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGUSR2)
    proc.wait(timeout=120)
    assert proc.returncode == 128 + signal.SIGUSR2, proc.stderr.read()[-2000:]
    (cut,) = runs.iterdir()
    record = json.loads((cut / "result.json").read_text())
    stopped_at = record["training"]["interrupted"]["step"]
    assert record["status"] == "running" and record["training"]["interrupted"]["signal"] == "SIGUSR2"
    assert 25 <= stopped_at < 80 and _last_step(cut) == stopped_at  # checkpointed at the step it stopped
    assert (cut / "checkpoints" / "last.ckpt").exists()  # written on the signal (ckpt_interval is 1000)

    resumed = slm(cut_root, *ARGS)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    record = json.loads((cut / "result.json").read_text())
    assert record["status"] == "completed" and record["training"]["resumed_from"] == "checkpoints/last.ckpt"
    (ref_dir,) = (tmp_path / "ref" / "runs" / "sig").iterdir()
    a, b = load_file(ref_dir / "model" / "model.safetensors"), load_file(cut / "model" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert (ref_dir / "train_log.jsonl").read_text() == (cut / "train_log.jsonl").read_text()


@pytest.mark.slow
def test_smoke_sweep_twice_trains_once(tmp_path):
    first = slm(tmp_path, "-m", "sweep=smoke")
    assert first.returncode == 0, first.stderr[-2000:]
    assert "sweep smoke: 4 jobs: 4 completed" in first.stdout
    started = time.time()
    second = slm(tmp_path, "-m", "sweep=smoke")
    assert second.returncode == 0 and "launching 0 of 4 jobs" in second.stdout
    assert "Trainer.fit" not in second.stderr and time.time() - started < 30
