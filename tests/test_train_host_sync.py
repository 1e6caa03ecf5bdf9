"""The training step never waits for the host: the loss is read back on the logging cadence (LanguageModelModule.
settle), while a non-finite loss still ends the run `diverged` at its own step, the train_log stays one exact line
per step, and no checkpoint is ever written from a diverged run or from non-finite weights."""

from __future__ import annotations

import io
import json
import traceback

import pytest
import torch

from slm.training.checkpoint_io import NOT_WRITTEN, AtomicCheckpointIO
from slm.training.module import LanguageModelModule
from tests.test_train_talks import train_here

TINY = ["model=debug", "eval=none", "train.logging.progress_bar=false", "train.validation.batches=1", "train.logging.print_interval=0"]
SYNCS = ("item", "tolist", "cpu", "numpy", "__float__", "__int__", "__bool__")
"""Tensor methods that make the host wait for the device."""


def _module() -> LanguageModelModule:
    """The debug preset's module, outside a trainer."""
    from omegaconf import OmegaConf

    from slm.cli.config import compose_config
    from slm.model import config_from_spec
    from slm.training.config import TrainConfig

    spec = OmegaConf.to_container(compose_config(["model=debug"]).model, resolve=True)
    return LanguageModelModule(config_from_spec({**spec, "vocab_size": 65}), TrainConfig(), 10, 64)


def _log(run) -> list[dict]:
    return [json.loads(line) for line in (run / "train_log.jsonl").read_text().splitlines()]


def test_a_step_between_logging_steps_reads_nothing_back(tmp_path, monkeypatch):
    """Counted per optimizer step (from its training_step to the next one's): reads of a tensor's value happen
    only on the steps that log (every 10th), none on the others."""
    per_step: dict[int, int] = {}
    current = {"step": -1}
    real_step = LanguageModelModule.training_step

    def training_step(self, batch, batch_idx):
        current["step"] = self.global_step
        return real_step(self, batch, batch_idx)

    monkeypatch.setattr(LanguageModelModule, "training_step", training_step)
    for name in SYNCS:
        real = getattr(torch.Tensor, name)

        def counted(self, *args, _real=real, **kwargs):
            # torch.optim reads its step counter, a tensor it keeps on the host (also on CUDA): no device wait
            if current["step"] >= 0 and "torch/optim/" not in traceback.extract_stack(limit=2)[0].filename:
                per_step[current["step"]] = per_step.get(current["step"], 0) + 1
            return _real(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counted)
    record, run = train_here(tmp_path, [*TINY, "train.length.steps=30", "train.logging.interval=10", "train.validation.interval=30",
                                        "train.checkpoint.interval=30"], io.StringIO())
    assert record["status"] == "completed"
    logging_steps = {9, 19, 29}  # global_step + 1 a multiple of log_interval; 29 also ends the run
    quiet = [s for s in range(30) if s not in logging_steps]
    assert all(per_step.get(s, 0) == 0 for s in quiet), {s: per_step.get(s) for s in quiet if per_step.get(s)}
    assert [row["step"] for row in _log(run)] == list(range(1, 31))  # every step's line, exact
    assert record["training"]["final_train_loss"] == _log(run)[-1]["loss"]


def _diverging(tmp_path, name: str, log_interval: int) -> tuple[dict, object]:
    """A run that diverges (lr 1e4, no clipping), checkpointing every 3 steps."""
    return train_here(tmp_path, [*TINY, "train.length.steps=40", "train.lr=1e4", "train.grad_clip=null",
                                 "train.schedule.warmup_steps=0", "train.checkpoint.interval=3", "train.validation.interval=40",
                                 f"train.logging.interval={log_interval}"], io.StringIO(), name=name)


def test_divergence_is_found_at_its_step_with_the_loss_read_back_late(tmp_path):
    """log_interval 10 (the losses read back every 10 steps) records the same divergence as log_interval 1
    (read back every step, the run stopping at the non-finite loss itself): the same step and value, the same
    train_log, and the same last checkpoint, whose weights are finite."""
    late, late_run = _diverging(tmp_path, "late", 10)
    each, each_run = _diverging(tmp_path, "each", 1)
    assert late["status"] == each["status"] == "diverged"
    d_late, d_each = late["training"]["diverged"], each["training"]["diverged"]
    assert d_late["step"] == d_each["step"] and str(d_late["loss"]) == str(d_each["loss"]) in ("nan", "inf", "-inf")
    step = late["training"]["diverged"]["step"]
    assert 0 < step < 39 and late["error"] == each["error"]
    rows = _log(late_run)
    assert rows == _log(each_run) and [r["step"] for r in rows] == list(range(1, step + 1))
    ckpts = [torch.load(run / "checkpoints" / "last.ckpt", weights_only=False) for run in (late_run, each_run)]
    assert ckpts[0]["global_step"] == ckpts[1]["global_step"] <= step
    for key, value in ckpts[0]["state_dict"].items():
        assert torch.isfinite(value).all() and torch.equal(value, ckpts[1]["state_dict"][key])
    assert not (late_run / "model").exists()  # no weights from a diverged run


def test_a_checkpoint_of_non_finite_weights_is_not_written(tmp_path):
    """A finite loss can still leave infinite weights: the checkpoint is marked, the previous copy stays."""
    io_ = AtomicCheckpointIO()
    path = tmp_path / "last.ckpt"
    io_.save_checkpoint({"state_dict": {"w": torch.ones(2)}}, path)
    before = path.read_bytes()
    io_.save_checkpoint({"state_dict": {"w": torch.full((2,), float("inf"))}, NOT_WRITTEN: "diverged"}, path)
    assert path.read_bytes() == before

    module = _module()
    checkpoint: dict = {}
    module.on_save_checkpoint(checkpoint)
    assert NOT_WRITTEN not in checkpoint and module.diverged is None
    with torch.no_grad():
        next(module.model.parameters())[0].fill_(float("inf"))
    module.on_save_checkpoint(checkpoint)
    assert checkpoint[NOT_WRITTEN] == "diverged" and module.diverged["parameters"] == "non-finite"


@pytest.mark.parametrize("values, diverged_at", [([2.0, 1.5, 1.25], None), ([2.0, float("nan"), 1.0], 1)])
def test_settle_reads_every_queued_loss_and_stops_at_the_first_non_finite(values, diverged_at):
    module = _module()
    module._pending = [{"step": i + 1, "loss": torch.tensor(v), "lr": 1e-3} for i, v in enumerate(values)]
    module.settle()
    rows = module.take_settled()
    if diverged_at is None:
        assert [r["loss"] for r in rows] == values and module.diverged is None
        assert module.last_train_loss == values[-1]
    else:
        assert [r["loss"] for r in rows] == values[:diverged_at]  # nothing after the first non-finite step
        assert module.diverged["step"] == diverged_at and module.last_train_loss == values[diverged_at - 1]
    assert module.take_settled() == [] and module._pending == []
