"""One training job: config in, trained model and a complete result.json out, resumable after a kill.

Layout of a run directory:
  result.json              the run record (slm.runs.record)
  config.yaml              the resolved config
  checkpoints/last.ckpt    Lightning checkpoint (model, optimizer, scheduler, loop, RNG), every ckpt_interval
  model/                   final weights (model.safetensors), config.json and the tokenizer
  train_log.jsonl          one line per optimizer step: step, loss, lr
  logs/                    CSV (and TensorBoard / W&B) logger output
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

import yaml

from slm.model import FLOPS_CONVENTION, config_from_spec, count
from slm.model.weights import save_model
from slm.runs.environment import environment
from slm.runs.record import load_record, update_record
from slm.training.config import TrainConfig

CHECKPOINT = Path("checkpoints") / "last.ckpt"


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    return f"{type(err).__name__}: {text}"


def _loggers(names: list[str], run_dir: Path):
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger, WandbLogger

    build = {
        "csv": lambda: CSVLogger(run_dir, name="logs", version="csv"),
        "tensorboard": lambda: TensorBoardLogger(run_dir, name="logs", version="tensorboard"),
        "wandb": lambda: WandbLogger(save_dir=str(run_dir), name=run_dir.name, id=run_dir.name, resume="allow"),
    }
    return [build[name]() for name in names]


def _data_section(prepared, datamodule) -> dict:
    consumed = datamodule.tokens_per_source()
    total = sum(consumed.values())
    return {**prepared.describe(), "tokens_per_source": consumed,
            "token_share": {k: (v / total if total else 0.0) for k, v in consumed.items()}}


def train_run(cfg: dict, run_dir: str | os.PathLike) -> dict:
    """Train (or resume, or skip if completed) the run described by the resolved config `cfg`.

    Returns the final record. Bad input raises before anything is written; a failure during the run
    is recorded as `failed` with its error line and re-raised; a divergence is recorded as `diverged`.
    """
    run_dir = Path(run_dir)
    existing = load_record(run_dir)
    if existing and existing.get("status") == "completed":
        print(f"slm-train: {run_dir} is already completed; nothing to do")
        return existing

    from slm.data import prepare

    train_cfg = TrainConfig(**cfg["train"])  # validates before any file is written
    prepared = prepare(cfg["data"], cfg["tokenizer"])
    model_cfg = config_from_spec({**cfg["model"], "vocab_size": prepared.vocab_size})
    counts = count(model_cfg)
    max_steps = train_cfg.max_steps(model_cfg.context_length)
    tokens_per_step = train_cfg.batch_size * model_cfg.context_length
    model_section = {**model_cfg.to_dict(), **vars(counts), "flops_convention": FLOPS_CONVENTION,
                     "param_budget": cfg["model"].get("param_budget")}

    started = time.time()
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    update_record(run_dir, status="running", error=None, config=cfg, model=model_section,
                  training={"max_steps": max_steps, "tokens_per_step": tokens_per_step}, environment=environment())
    try:
        record = _fit(cfg, run_dir, train_cfg, prepared, model_cfg, counts, max_steps, tokens_per_step, started)
    except BaseException as err:
        update_record(run_dir, status="failed", error=_one_line(err))
        raise
    return record


def _fit(cfg, run_dir, train_cfg, prepared, model_cfg, counts, max_steps, tokens_per_step, started) -> dict:
    import lightning as L
    from lightning.pytorch.callbacks import ModelCheckpoint

    from slm.data import SLMDataModule
    from slm.training.callbacks import StepLog, ThroughputMonitor
    from slm.training.module import LanguageModelModule

    L.seed_everything(train_cfg.seed, workers=True, verbose=False)
    module = LanguageModelModule(model_cfg, train_cfg, max_steps, tokens_per_step)
    datamodule = SLMDataModule(prepared, train_cfg.batch_size, model_cfg.context_length, train_cfg.seed,
                               train_cfg.val_batches)
    throughput = ThroughputMonitor(tokens_per_step, counts.flops_per_token, train_cfg.precision,
                                   train_cfg.log_interval, train_cfg.peak_flops)
    checkpoint = ModelCheckpoint(dirpath=run_dir / CHECKPOINT.parent, save_top_k=0, save_last=True,
                                 every_n_train_steps=train_cfg.ckpt_interval)
    val_every = train_cfg.val_interval or max_steps
    trainer = L.Trainer(
        default_root_dir=run_dir, accelerator=train_cfg.accelerator, devices=1, precision=train_cfg.precision,
        max_steps=max_steps, max_epochs=-1, val_check_interval=min(val_every, max_steps), check_val_every_n_epoch=None,
        limit_val_batches=train_cfg.val_batches, num_sanity_val_steps=0, log_every_n_steps=train_cfg.log_interval,
        logger=_loggers(train_cfg.loggers, run_dir), callbacks=[checkpoint, throughput, StepLog(run_dir / "train_log.jsonl")],
        enable_progress_bar=train_cfg.progress_bar, enable_model_summary=False, detect_anomaly=train_cfg.detect_anomaly,
        use_distributed_sampler=False,
    )
    ckpt = run_dir / CHECKPOINT
    resumed_from = None
    if ckpt.exists():
        resumed_from = str(CHECKPOINT)
    trainer.fit(module, datamodule=datamodule, ckpt_path=str(ckpt) if ckpt.exists() else None, weights_only=True)

    steps = trainer.global_step
    totals = throughput.totals()
    training = {
        "steps": steps, "tokens": steps * tokens_per_step, "wall_seconds": time.time() - started,
        **totals, "final_train_loss": module.last_train_loss, "diverged": module.diverged, "resumed_from": resumed_from,
        "precision": train_cfg.precision,
    }
    artifacts = {"checkpoint": str(CHECKPOINT), "train_log": "train_log.jsonl", "logs": "logs"}
    if module.diverged is not None:
        d = module.diverged
        return update_record(run_dir, status="diverged", error=f"non-finite training loss {d['loss']} at step {d['step']}",
                             training=training, data=_data_section(prepared, datamodule), artifacts=artifacts)
    if module.val_metrics.get("val_step") != steps:
        trainer.validate(module, datamodule=datamodule, verbose=False)
    save_model(module.model, run_dir / "model")
    prepared.tokenizer.save(run_dir / "model")
    val = module.val_metrics
    if not math.isfinite(val.get("val_nll", float("nan"))):
        raise FloatingPointError(f"validation NLL is {val.get('val_nll')}")
    artifacts.update(weights="model/model.safetensors", model_dir="model")
    return update_record(run_dir, status="completed", error=None, training=training,
                         data=_data_section(prepared, datamodule), artifacts=artifacts,
                         eval={"val_nll": val["val_nll"], "val_ppl": val["val_ppl"], "val_step": val["val_step"]})
