"""Data parallel and gradient accumulation train like one device and one batch.

The peer here is the single-process, single-batch run: 2 processes (gloo, on the CPU) with the same global
batch, and 1 process with 2 micro-batches, must follow its loss trajectory within float tolerance (the sums are
taken in another order), and a data-parallel run resumed from a checkpoint must continue exactly.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from slm.data.mix import TrainSampler
from slm.model import ModelConfig, build_model
from slm.objectives import OBJECTIVES
from slm.runs.record import load_record, update_record
from slm.training.config import TrainConfig, TrainConfigError
from slm.training.distributed import is_rank_zero, started_by_launcher

RUN = ["model=debug", "model.n_layers=1", "model.context_length=32", "train.length.steps=6", "train.batch_size=4",
       "train.validation.interval=3", "train.validation.batches=1", "eval=none", "train.logging.progress_bar=false", "train.parallel.accelerator=cpu",
       "train.lr=3e-3"]


def train(root: Path, group: str, *extra: str) -> Path:
    env = {**os.environ, "SLM_RUNS": str(root), "SLM_CACHE": str(root.parent / "cache"), "OMP_NUM_THREADS": "1"}
    for key in ("RANK", "LOCAL_RANK", "NODE_RANK", "WORLD_SIZE", "SLURM_NTASKS", "SLURM_PROCID"):
        env.pop(key, None)
    proc = subprocess.run([sys.executable, "-m", "slm.cli.train", f"run_group={group}", *RUN, *extra], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_dir,) = [p for p in (root / group).iterdir() if p.is_dir() and not p.name.startswith(".")]
    return run_dir


def losses(run_dir: Path) -> list[float]:
    return [json.loads(line)["loss"] for line in (run_dir / "train_log.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("dp") / "runs"
    return {"one": train(root, "one"), "micro": train(root, "micro", "train.parallel.micro_batch_size=2"),
            "two": train(root, "two", "train.parallel.devices=2", "train.checkpoint.keep_steps=[3]"), "root": root}


def test_two_processes_and_two_micro_batches_follow_one_batch(runs):
    one = losses(runs["one"])
    assert len(one) == 6
    for name in ("micro", "two"):
        np.testing.assert_allclose(losses(runs[name]), one, rtol=2e-5, err_msg=name)
    a, b = (load_record(runs[name]) for name in ("one", "two"))
    assert b["eval"]["val_nll"] == pytest.approx(a["eval"]["val_nll"], rel=2e-5)
    assert b["training"]["world_size"] == 2 and b["training"]["tokens"] == a["training"]["tokens"] == 6 * 4 * 32
    assert load_record(runs["micro"])["training"]["accumulation"] == 2


@pytest.mark.slow  # three more runs, two of them 2-process (~40 s); make test-slow runs it
def test_muon_and_mup_under_data_parallel_and_accumulation_follow_one_batch(tmp_path):
    """train.optimizer=muon (torch's Muon + AdamW, stepping as one) with mup's per-group learning rates: the
    reduced gradients are the same sums, so 2 processes and 2 micro-batches follow the 1-batch run."""
    root = tmp_path / "runs"
    extra = ["train.optimizer=muon", "model.parametrization.kind=mup", "model.parametrization.base_width=32"]
    one = losses(train(root, "one", *extra))
    for group, more in (("micro", ["train.parallel.micro_batch_size=2"]), ("two", ["train.parallel.devices=2"])):
        np.testing.assert_allclose(losses(train(root, group, *extra, *more)), one, rtol=2e-5, err_msg=group)


def test_only_rank_zero_writes(runs):
    two = runs["two"]
    assert len(losses(two)) == 6  # one line per step, not one per rank
    assert (two / "model" / "model.safetensors").is_file() and (two / "checkpoints" / "step-3.ckpt").is_file()
    assert load_record(two)["status"] == "completed"


def test_a_data_parallel_run_resumes_exactly(runs, tmp_path):
    """The 2-process run again from its kept step-3 checkpoint (as if stopped there): the same steps 4-6."""
    root = runs["root"]
    resumed = root / "resumed" / runs["two"].name
    shutil.copytree(runs["two"], resumed)
    shutil.copy(resumed / "checkpoints" / "step-3.ckpt", resumed / "checkpoints" / "last.ckpt")
    update_record(resumed, status="running")
    for attempt in range(2):  # a fresh process now and then rounds AdamW's sqrt differently (platform flaw)
        again = train(root, "resumed", "train.parallel.devices=2", "train.checkpoint.keep_steps=[3]")
        if losses(again) == losses(runs["two"]):
            break
        shutil.copy(resumed / "checkpoints" / "step-3.ckpt", resumed / "checkpoints" / "last.ckpt")
        update_record(resumed, status="running")
    assert losses(again) == losses(runs["two"])
    assert load_record(again)["training"]["resumed_from"] == "checkpoints/last.ckpt"


def test_row_slices_equal_the_whole_batch():
    rng = np.random.default_rng(0)
    tokens = [rng.integers(0, 50, n) for n in (5000, 3000, 900)]
    for sampling in ("tiled", "random"):
        whole = TrainSampler(tokens, ["a", "b", "c"], [0.5, 0.3, 0.2], 12, 16, 3, sampling)
        parts = TrainSampler(tokens, ["a", "b", "c"], [0.5, 0.3, 0.2], 12, 16, 3, sampling)
        for index in (0, 1, 2, 50, 400):
            got = np.concatenate([parts.rows(index, lo, lo + 3) for lo in (0, 3, 6, 9)])
            assert np.array_equal(got, whole.batch(index)), (sampling, index)


def test_diffusion_noise_of_a_part_is_the_whole_batch_noise():
    cfg = ModelConfig(n_layers=1, d_model=16, attention=dict(n_heads=2, causal=False), vocab_size=20,
                      context_length=8, embedding=dict(mask_token_id=19))
    model, mdlm = build_model(cfg), OBJECTIVES.get("mdlm")()
    x = torch.randint(0, 19, (6, 9), generator=torch.Generator().manual_seed(0))
    whole = mdlm.terms(model, x, seed=5)["loss"]
    parts = [mdlm.terms(model, x[lo:lo + 2], seed=5, rows=(lo, 6))["loss"] for lo in (0, 2, 4)]
    torch.testing.assert_close(sum(parts) / 3, whole)


@pytest.mark.parametrize("fields, message", [
    ({"batch_size": 6, "devices": 4}, "train.batch_size=6 is invalid"),
    ({"batch_size": 8, "devices": 2, "micro_batch_size": 3}, "train.parallel.micro_batch_size=3 is invalid"),
    ({"devices": 0}, "train.parallel.devices=0 is invalid"),
    ({"strategy": "fsdp"}, "train.parallel.strategy='fsdp' is invalid: choose one of: auto, ddp"),
])
def test_bad_parallel_settings_are_one_line(fields, message):
    with pytest.raises(TrainConfigError, match=message.replace("(", r"\(").replace("[", r"\[")):
        TrainConfig.from_node(fields)


def test_accumulation_counts():
    cfg = TrainConfig(batch_size=32, parallel={"devices": 2, "num_nodes": 2, "micro_batch_size": 2})
    assert (cfg.world_size, cfg.micro_batch(), cfg.accumulation()) == (4, 2, 4)
    assert TrainConfig(batch_size=32, parallel={"devices": 2}).accumulation() == 1


def test_which_process_owns_the_run_directory():
    assert is_rank_zero({}) and not started_by_launcher({})
    assert not is_rank_zero({"RANK": "3"}) and started_by_launcher({"RANK": "0"})
    assert not is_rank_zero({"LOCAL_RANK": "1", "NODE_RANK": "0"})
    assert not is_rank_zero({"SLURM_NTASKS": "2", "SLURM_PROCID": "1"})
    assert is_rank_zero({"SLURM_NTASKS": "1", "SLURM_PROCID": "0"}) and not started_by_launcher({"SLURM_NTASKS": "1"})


def test_a_local_sweep_of_multi_process_jobs_is_refused_per_job(monkeypatch):
    """In a local -m sweep nothing starts a job's other processes (Lightning would rerun the whole sweep for
    each): the job is recorded failed with the way out; under a launcher (Slurm tasks, torchrun) it runs."""
    from slm.cli.train import _local_parallel_sweep

    for key in ("RANK", "LOCAL_RANK", "SLURM_NTASKS"):
        monkeypatch.delenv(key, raising=False)
    assert "a local sweep cannot start them" in _local_parallel_sweep({"train": {"devices": 2}})
    assert _local_parallel_sweep({"train": {"devices": 1, "num_nodes": 1}}) is None
    monkeypatch.setenv("SLURM_NTASKS", "2")
    assert _local_parallel_sweep({"train": {"devices": 2}}) is None
