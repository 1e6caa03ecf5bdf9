"""slm.runs.job's steps run one by one in this process (prepare, start, build, fit, validate, record_completed,
evaluate), each checked for what it makes, and together against train_run on the same config; a mixture of
experts' routing load kept by its callback (slm.training.routing.RoutingLoad): logged, recorded, and carried
across a resume by the checkpoint's `slm_routing_load` entry."""

from __future__ import annotations

import csv
import io
import json
import shutil
import sys
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from slm.runs import job as steps
from slm.runs.record import load_record

TINY = ["model=debug", "eval=none", "train.length.steps=6", "train.validation.interval=3", "train.checkpoint.interval=3",
        "train.validation.batches=1", "train.logging.print_interval=0", "train.logging.progress_bar=false", "train.logging.interval=2"]
MOE = ["model=moe", "model.n_layers=2", "model.d_model=32", "model.attention.head_dim=16", "model.attention.n_kv_heads=1",
       "model.moe.n_experts=4", "model.moe.expert_d_ff=32", "model.context_length=32", "train.batch_size=4",
       "eval=none", "train.validation.batches=1", "train.logging.print_interval=0", "train.logging.progress_bar=false"]


def compose(overrides: list[str]) -> dict:
    from slm.cli.config import compose_config

    return OmegaConf.to_container(compose_config(overrides), resolve=True)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SLM_CACHE", str(tmp_path.parent / "slm-cache"))  # the tokenized shards, shared by the tests


def train_log(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "train_log.jsonl").read_text().splitlines()]


def test_each_step_makes_its_part_and_together_they_are_train_run(tmp_path, cache, monkeypatch):
    cfg = compose(TINY)
    run = tmp_path / "steps"

    job = steps.prepare(cfg, run)
    assert not run.exists()  # nothing is written before training starts
    assert (job.max_steps, job.init, job.model_cfg.vocab_size) == (6, None, job.data.vocab_size)
    assert job.tokens_per_step == cfg["train"]["batch_size"] * job.model_cfg.context_length

    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    run.mkdir()
    started = steps.start(job)
    rec = load_record(run)
    assert rec["status"] == "running" and rec["config"] == cfg and rec["model"]["params_total"] == job.counts.params_total
    assert rec["training"] == {"max_steps": 6, "tokens_per_step": job.tokens_per_step}
    assert OmegaConf.to_container(OmegaConf.load(run / "config.yaml")) == cfg
    assert out.getvalue().splitlines()[0] == f"slm-train: run {run}"

    built = steps.build(job, None)
    assert sum(p.numel() for p in built.module.model.parameters()) == job.counts.params_total  # counted = built
    assert (built.trainer.max_steps, built.resume, built.resumed_from) == (6, None, None)
    assert built.routing in built.trainer.callbacks and not (run / "checkpoints").exists()

    training = steps.fit(job, built, started)
    log = train_log(run)
    assert [row["step"] for row in log] == [1, 2, 3, 4, 5, 6] and (run / "checkpoints" / "last.ckpt").is_file()
    assert (training["steps"], training["tokens"]) == (6, 6 * job.tokens_per_step)
    assert training["final_train_loss"] == log[-1]["loss"] and training["diverged"] is None
    assert "moe_load" not in training  # a dense model has no routing load

    assert steps.validate(job, built) is None  # nothing restored (train.validation.restore_best is off)
    assert built.module.val_metrics["val_step"] == 6

    rec = steps.record_completed(job, built, training, None)
    assert rec["status"] == "completed" and rec["eval"]["val_nll"] == built.module.val_metrics["val_nll"]
    assert rec["training"]["steps"] == 6 and (run / "model" / "model.safetensors").is_file()
    assert steps.evaluate(cfg, run, rec) == rec  # eval=none: nothing to add

    whole = steps.train_run(cfg, tmp_path / "whole")
    assert train_log(tmp_path / "whole") == log  # the same losses, step by step
    assert whole["eval"]["val_nll"] == rec["eval"]["val_nll"]
    assert {k: v for k, v in whole["training"].items() if k not in TIMED} == \
           {k: v for k, v in rec["training"].items() if k not in TIMED}


TIMED = {"wall_seconds", "train_seconds", "tokens_per_s", "mfu", "other_cores_busy", "session_job_seconds"}


def test_prepare_refuses_bad_input_before_anything_is_written(tmp_path, cache):
    from slm.training.config import TrainConfigError

    with pytest.raises(TrainConfigError, match="train.schedule.warmup_steps"):
        steps.prepare(compose([*TINY, "train.schedule.warmup_steps=100"]), tmp_path / "run")
    assert not (tmp_path / "run").exists()


def metrics_rows(run: Path) -> list[dict]:
    with open(run / "logs" / "csv" / "metrics.csv") as f:
        return list(csv.DictReader(f))


def test_moe_routing_load_is_logged_recorded_and_resumed_from_the_checkpoint(tmp_path, cache):
    """log_interval 3 over 6 steps: the windows start at steps 0 and 3, the record's load is the mean over steps
    3-5, and a run resumed from the step-4 checkpoint (inside that window) records the same load."""
    cfg = compose([*MOE, "train.length.steps=6", "train.logging.interval=3", "train.validation.interval=6", "train.checkpoint.interval=6",
                   "train.checkpoint.keep_steps=[4]"])
    whole = steps.train_run(cfg, tmp_path / "whole")
    load = whole["training"]["moe_load"]
    assert load["steps"] == 3 and len(load["per_layer"]) == 2
    for row in load["per_layer"]:  # shares of the routed (token, expert) pairs: they sum to 1 in each layer
        assert len(row) == 4 and sum(row) == pytest.approx(1.0, abs=1e-5)
    flat = [v for row in load["per_layer"] for v in row]
    assert load["max_load"] == pytest.approx(max(flat) * 4, abs=1e-5)
    assert load["min_load"] == pytest.approx(min(flat) * 4, abs=1e-5)

    logged = [row for row in metrics_rows(tmp_path / "whole") if row.get("moe/load_e0")]
    assert [int(row["step"]) for row in logged] == [2, 5]  # the logging steps only (global_step + 1 = 3, 6)
    for row in logged:  # each expert's share averaged over the layers: they sum to 1 too
        shares = [float(row[f"moe/load_e{i}"]) for i in range(4)]
        assert sum(shares) == pytest.approx(1.0, abs=1e-5)
        assert float(row["train/moe_max_load"]) >= 1.0

    kept = torch.load(tmp_path / "whole" / "checkpoints" / "step-4.ckpt", weights_only=True)
    load_sum, counted = kept["slm_routing_load"]
    assert counted == 1 and load_sum.shape == (2, 4)  # the window from step 3: one step in it at step 4

    resumed = tmp_path / "resumed"  # a run killed after step 4: its last checkpoint is that one
    (resumed / "checkpoints").mkdir(parents=True)
    shutil.copy(tmp_path / "whole" / "checkpoints" / "step-4.ckpt", resumed / "checkpoints" / "last.ckpt")
    again = steps.train_run(cfg, resumed)
    assert again["training"]["resumed_from"] == "checkpoints/last.ckpt"
    assert again["training"]["moe_load"] == load


def test_routing_load_reads_the_checkpoint_entry_the_module_wrote():
    """The checkpoint entry (the window's summed load, its steps), as every slm checkpoint of a mixture of experts
    holds it, is read back; a checkpoint without it gives no load; and the callback writes the same entry."""
    from slm.training.routing import RoutingLoad

    load_sum = torch.tensor([[0.5, 1.0, 1.5, 1.0], [1.0, 1.0, 1.0, 1.0]])  # 4 steps, summed
    routing = RoutingLoad(log_interval=10)
    routing.on_load_checkpoint(None, None, {"slm_routing_load": (load_sum, 4)})
    summary = routing.summary()
    assert summary["per_layer"] == [[0.125, 0.25, 0.375, 0.25], [0.25, 0.25, 0.25, 0.25]]
    assert (summary["max_load"], summary["min_load"], summary["steps"]) == (1.5, 0.5, 4)
    written = {}
    routing.on_save_checkpoint(None, None, written)
    assert written["slm_routing_load"][1] == 4 and torch.equal(written["slm_routing_load"][0], load_sum)

    fresh = RoutingLoad(log_interval=10)
    fresh.on_load_checkpoint(None, None, {"state_dict": {}})  # written before the routing load was kept
    assert fresh.summary() is None


def test_a_logging_window_keeps_every_micro_batch_of_its_steps():
    """With gradient accumulation a step has several micro-batches: the window restarts at the first of a step
    that is a multiple of log_interval, and the mean is over all the window's micro-batches."""
    from types import SimpleNamespace

    import torch

    from slm.training.routing import RoutingLoad

    cb, module = RoutingLoad(log_interval=2), SimpleNamespace(log_dict=lambda *a, **k: None, log=lambda *a, **k: None)
    loads = []
    for step in range(5):  # steps 0..4, two micro-batches each: windows {0, 1}, {2, 3}, {4}
        for micro in range(2):
            load = torch.full((1, 2), float(10 * step + micro))
            loads.append((step, load))
            cb.on_train_batch_start(SimpleNamespace(global_step=step), module, None, 2 * step + micro)
            cb.on_train_batch_end(SimpleNamespace(global_step=step), module, {"moe_load": load}, None, 2 * step + micro)
        if step == 3:
            window = [l for s, l in loads if s in (2, 3)]
            assert cb.steps == 4 and torch.equal(cb.load_sum, sum(window))
    assert cb.steps == 2 and torch.equal(cb.load_sum / cb.steps, torch.full((1, 2), 40.5))
