"""One training job: config in, trained model and a complete result.json out, resumable after a kill.

Layout of a run directory:
  result.json              the run record (slm.runs.record)
  config.yaml              the resolved config
  checkpoints/last.ckpt    Lightning checkpoint (model, optimizer, scheduler, loop, RNG), every ckpt_interval;
                           written atomically (slm.training.checkpoints): a kill or a full disk during a
                           save leaves the previous one intact; checked before a resume
  checkpoints/previous.ckpt  the checkpoint before it (a hard link), the fallback when last.ckpt is damaged
                           (`bad_checkpoint=previous`; `bad_checkpoint=restart` trains from step 0)
  checkpoints/step-<N>.ckpt  the checkpoints train.keep_every / train.keep_steps keep (never deleted; a full
                           training state, and a train.init_from source)
  model/                   final weights (model.safetensors), config.json and the tokenizer
  train_log.jsonl          one line per optimizer step: step, loss, lr; a damaged line past the checkpoint's step is
                           written again on resume, one before it refuses the resume (slm.training.train_log)
  logs/                    CSV (and TensorBoard / W&B) logger output
  .lock                    held (flock) by the process training the run; `slm-status` reads it

A run is trained by one process at a time: a second one (the same sweep started twice) finds the lock
held and leaves the run alone. Interruptions (Ctrl-C, scancel, a Slurm preemption or time limit) leave
the record `running`, so the next attempt resumes from checkpoints/last.ckpt. Ctrl-C and SIGTERM stop at the
next step boundary with a checkpoint of that step (training.interrupted in the record names the signal and the
step) and exit 128 + the signal (130, 143); a second one stops at once (slm.training.callbacks.SignalCheckpoint).

While it trains, a run prints what it is (the run directory, the model, the length, the optimisation, the
parameter count), where it starts (step 0, or the step it resumed from), then a progress bar on a terminal or
a progress line every train.print_interval steps elsewhere (slm.training.progress).

train_run decides whether the run trains (its lock, its record, its checkpoint), then runs the steps in order,
each taking what the ones before it made:
  prepare           the config checked, the data prepared, the model's config and counts, the length, the
                    init source: a PreparedJob; nothing is written (bad input raises here)
  start             config.yaml, the record `running`, the lines saying what the run is
  build             the Lightning parts (Built): the module (train.init_from's weights), data module, callbacks,
                    loggers, Trainer
  fit               Trainer.fit from the checkpoint or from step 0: the record's training section (on a signal
                    the record counts the interruption and the signal goes on)
  validate          the final validation, the best weights restored (train.restore_best), the test split
                    (train.eval_windows)
  record_completed  the weights saved, the record `completed` (record_diverged instead: `diverged`, no weights)
  evaluate          the eval suite on the saved model, merged into the record (its failure leaves the run
                    completed)
Lightning is imported when a job trains (at the top of _train and of the steps that use it), not with this module.
"""

from __future__ import annotations

import errno
import math
import os
import shutil
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import yaml

import slm.data
from slm.atomic import remove_stale
from slm.components.parametrization import scheme_of
from slm.cpu_busy import OtherWork
from slm.data import PreparedData
from slm.eval import run as eval_run
from slm.eval.score_lines import brief
from slm.model import FLOPS_CONVENTION, ModelConfig, build_model, config_from_spec, count, weights
from slm.model.budget import budget_knob
from slm.model.counting import Counts
from slm.renames import RenameError, upgrade_model_fields
from slm.model.weights import save_model
from slm.objectives import OBJECTIVES, tokenizer_node_for
from slm.omp_wait import wait_settings
from slm.runs.environment import environment
from slm.runs.errors import one_line
from slm.runs.keys import FULL_KEY_FILE
from slm.runs.record import load_record, now, settled, update_record
from slm.runs.status import lock_held, run_lock
from slm.training.checkpoints import PREVIOUS, ResumeError, checkpoint_step, os_error_in, resume_checkpoint
from slm.training.config import TrainConfig, TrainConfigError
from slm.training.distributed import is_rank_zero
from slm.training.init_from import InitSource, check_shapes, check_tokenizer, find_source, load_weights, tokenizer_meta
from slm.training.logs import tidy_lightning_logging
from slm.training.train_log import NAME as TRAIN_LOG
from slm.training.train_log import TrainLogError, kept_lines

if TYPE_CHECKING:  # build imports them: Lightning loads when a job trains
    import lightning as L

    from slm.data.datamodule import SLMDataModule
    from slm.training.callbacks import SignalCheckpoint, ThroughputMonitor
    from slm.training.module import LanguageModelModule
    from slm.training.routing import RoutingLoad

CHECKPOINT = Path("checkpoints") / "last.ckpt"


class RunInUseError(ValueError):
    """Another process holds the run's lock (it is training this run right now)."""


class RunConfigClash(ValueError):
    """The run directory's record is of another model than the one asked for (same job key)."""


class RunFailed(ValueError):
    """A run stopped by its machine (a full disk, no memory left): recorded `failed` with this one line, which says
    what ran out and what to do; the checkpoint before it is intact."""


def _model_clash(existing: dict | None, cfg: dict) -> str | None:
    """The first model field whose recorded value differs from the requested one ('n_layers: 2 recorded,
    28 asked'), or None. Fields one side lacks (added to ModelConfig since the record) are not compared."""
    recorded = ((existing or {}).get("config") or {}).get("model")
    asked = cfg.get("model")
    if not isinstance(recorded, dict) or not isinstance(asked, dict):
        return None
    try:
        recorded = upgrade_model_fields(recorded)  # flat fields of a run made before they moved into groups
    except RenameError as err:
        return str(err)
    return _first_difference(recorded, asked, "model")


def _first_difference(recorded: dict, asked: dict, prefix: str) -> str | None:
    """The first key both mappings hold with different values (nested groups compared field by field)."""
    for key in sorted(recorded.keys() & asked.keys()):
        old, new = recorded[key], asked[key]
        if isinstance(old, dict) and isinstance(new, dict):
            found = _first_difference(old, new, f"{prefix}.{key}")
            if found:
                return found
        elif old != new:
            return f"{prefix}.{key}: {old!r} recorded, {new!r} asked"
    return None


def train_run(cfg: dict, run_dir: str | os.PathLike, *, sweep: bool = False, rerun_failed: bool = False) -> dict:
    """Train (or resume, or skip if completed) the run described by the resolved config `cfg`.

    Returns the final record. A single run (sweep=False) trains again a run recorded failed or diverged;
    bad input (and a train_log.jsonl that a resume cannot keep exact, TrainLogError) raises before anything is
    written (a sweep job says so and skips the run); a failure during the run is recorded as `failed` with
    its error line and re-raised; a divergence is recorded as `diverged`.
    A sweep job (sweep=True) skips a run recorded failed or diverged unless `rerun_failed`, and raises
    nothing: bad input and failures are recorded as `failed` (with the error line) and returned, so that
    the other jobs of the sweep go on. In both, an interruption (KeyboardInterrupt, SystemExit: Ctrl-C,
    a Slurm preemption) leaves the record `running` and propagates.
    """
    run_dir = Path(run_dir)
    if not is_rank_zero():  # a data-parallel job's other processes: train beside rank 0, write nothing
        return _follow(cfg, run_dir, sweep=sweep, rerun_failed=rerun_failed)
    with run_lock(run_dir) as held:
        if not held:
            if not sweep:
                raise RunInUseError(f"{run_dir} is being trained by another process (its .lock is held)")
            print(f"slm-train: {run_dir} is being trained by another process; skipped")
            return {"status": "running", "error": None, "busy": True}
        existing = load_record(run_dir)
        status = existing.get("status") if existing else None
        clash = _model_clash(existing, cfg)
        if clash:
            message = (f"{run_dir} holds a run of another model ({clash}): the defaults or the preset changed "
                       "since it was made; name the model on the command line, or choose another run_group")
            if not sweep:
                raise RunConfigClash(message)
            print(f"slm-train: {message}; skipped")
            return existing
        if settled(status, rerun_failed=rerun_failed or not sweep):
            if status == "completed":
                print(f"slm-train: {run_dir} is already completed; nothing to do "
                      f"(another eval suite: slm-eval {run_dir} --tasks ...)")
            else:
                print(f"slm-train: {run_dir} is recorded {status}; skipped (rerun_failed=true runs it again)")
            return existing
        policy = cfg.get("bad_checkpoint", "fail")
        try:
            chosen = resume_checkpoint(run_dir / CHECKPOINT.parent, policy, apply=False)  # nothing moved yet
        except ResumeError as err:  # a damaged checkpoint: recorded failed, with what to do
            record = update_record(run_dir, status="failed", error=one_line(err))
            if not sweep:
                raise
            return record
        try:
            check_train_log(run_dir, chosen)
        except TrainLogError as err:  # refused before anything is written: the record and the files stay as they are
            if not sweep:
                raise
            print(f"slm-train: {err}; skipped", file=sys.stderr)
            return existing
        resume = resume_checkpoint(run_dir / CHECKPOINT.parent, policy)  # the same answer, its notes and file moves
        try:
            job = prepare(cfg, run_dir)  # validates the config and prepares the data before anything is written
        except Exception as err:
            if not sweep:
                raise
            return record_failure(run_dir, cfg, err)
        try:
            return _train(job, resume)
        except Exception:
            if not sweep:
                raise
            return load_record(run_dir)  # recorded failed by _train


def _follow(cfg: dict, run_dir: Path, *, sweep: bool, rerun_failed: bool) -> dict:
    """train_run on a rank other than 0: the same decisions from the same files (skip a settled run, resume from
    the checkpoint rank 0 resumes from), no lock, no record, no output of its own."""
    existing = load_record(run_dir)
    status = existing.get("status") if existing else None
    if _model_clash(existing, cfg) or settled(status, rerun_failed=rerun_failed or not sweep):
        return existing
    try:
        resume = resume_checkpoint(run_dir / CHECKPOINT.parent, cfg.get("bad_checkpoint", "fail"), apply=False)
        check_train_log(run_dir, resume)
        return _train(prepare(cfg, run_dir), resume)
    except Exception as err:  # rank 0 records it; a sweep goes on
        if not sweep:
            raise
        return {"status": "failed", "error": one_line(err)}


def check_train_log(run_dir: Path, resume: Path | None) -> None:
    """Refuse a resume from `resume` (None: step 0) whose train_log.jsonl has a damaged line among the checkpoint's
    steps (TrainLogError, naming the file, the line and what to do), before anything is written; damaged lines past
    them are dropped with a note when training starts (slm.training.train_log)."""
    kept_lines(run_dir / TRAIN_LOG, checkpoint_step(resume) if resume is not None else 0)


HYDRA_LEFTOVERS = {".hydra", ".lock", FULL_KEY_FILE}  # what Hydra, the lock and slm-train leave before training


def discard_unstarted(run_dir: str | os.PathLike) -> bool:
    """Remove the directory of a single run that was refused before it wrote anything (bad input): it holds
    only Hydra's .hydra/, the lock and an empty or Hydra-only log, so that `slm-status` does not list a run that
    never was. Returns whether it was removed; a directory with a record, or held by a process, is kept."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir() or (run_dir / "result.json").exists() or lock_held(run_dir):
        return False
    extra = [p for p in run_dir.iterdir() if p.name not in HYDRA_LEFTOVERS and not p.name.endswith(".log")]
    if extra:
        return False
    shutil.rmtree(run_dir, ignore_errors=True)
    return True


def record_failure(run_dir: str | os.PathLike, cfg: dict, err: BaseException | str) -> dict:
    """Record a job that could not start (invalid config or data) as failed, with its error line."""
    return update_record(run_dir, status="failed", error=err if isinstance(err, str) else one_line(err), config=cfg)


# ---------------------------------------------------------------------------------------------------- prepare
@dataclass
class PreparedJob:
    """What `prepare` makes of a job's config, before anything is written; the later steps read it."""

    cfg: dict
    """The resolved config (model, tokenizer, data, train, eval, ...), as recorded."""
    run_dir: Path
    train_cfg: TrainConfig
    data: PreparedData
    """The tokenizer and the cached token shards."""
    model_cfg: ModelConfig
    """The model to train: the spec with the tokenizer's vocabulary (and mask / document-end ids)."""
    counts: Counts
    max_steps: int
    init: InitSource | None
    """train.init_from's weights, checked against the model; None for random weights and for a resumed run."""
    began: float = field(default_factory=time.monotonic)
    """When this session's work on the job began (the data prepared): the record's training.session_job_seconds."""

    @property
    def tokens_per_step(self) -> int:
        return self.train_cfg.batch_size * self.model_cfg.context_length


def prepare(cfg: dict, run_dir: Path) -> PreparedJob:
    """Check the config (settings, loggers, accelerator, eval suite, objective against model, length, memory,
    init source) and prepare the data; raises one line for bad input, before anything is written."""
    train_cfg = TrainConfig.from_node(cfg["train"])
    train_cfg.check_loggers()  # a logger whose package is missing (wandb): one line, before the data is prepared
    train_cfg.check_accelerator()  # an accelerator or precision this machine cannot run: before the data too
    eval_run.preflight(cfg.get("eval"))  # hub tasks while offline, unknown tasks, bad fields: fail before training
    data = slm.data.prepare(cfg["data"], tokenizer_node_for(train_cfg.objective, cfg["tokenizer"]))
    mask = {"mask_token_id": data.tokenizer.mask_id} if data.tokenizer.mask_id is not None else {}
    if data.config.pack_documents:  # attention within documents: they end at the end-of-text id
        mask["document_end_id"] = data.tokenizer.eot_id
    spec = {**cfg["model"], "vocab_size": data.vocab_size, **mask}
    model_cfg = config_from_spec(spec)
    OBJECTIVES.get(train_cfg.objective)().check(model_cfg)  # e.g. causal_lm with a bidirectional model
    if train_cfg.block_curriculum is not None:
        model_cfg = config_from_spec(_curriculum_spec(spec, train_cfg.block_curriculum, model_cfg.context_length))
    eval_run.check_model(cfg.get("eval"), model_cfg)  # e.g. a diffusion sampler's cache the saved model cannot use
    if train_cfg.eval_windows is not None:
        data.check_first_windows(train_cfg.eval_windows, model_cfg.context_length)
    counts = count(model_cfg)
    max_steps = train_cfg.max_steps(model_cfg.context_length)
    train_cfg.check_length(max_steps)
    _check_memory(train_cfg, counts.params_total, model_cfg)
    init = None
    resuming = any((run_dir / CHECKPOINT.parent / name).exists() for name in (CHECKPOINT.name, PREVIOUS))
    if train_cfg.init_from is not None and not resuming:  # a resumed run has its weights
        init = _init_source(train_cfg.init_from, model_cfg, data.tokenizer)
    return PreparedJob(cfg, run_dir, train_cfg, data, model_cfg, counts, max_steps, init)


TRAIN_BYTES_PER_PARAM = 16
"""The least a parameter costs in training: float32 weight, gradient and AdamW's two moments (activations on top)."""


def _check_memory(train_cfg, params: int, model_cfg=None) -> None:
    """Refuse, before anything is allocated, a run that cannot fit in the memory free on the device it would train
    on: a model whose weights, gradients and optimizer state alone exceed it (a typo such as d_model=65536 would
    otherwise allocate until the kernel kills the job), or a batch whose activations alone do (batch_size=10**7
    would otherwise tokenize, sample and allocate for minutes first); see activation_bytes."""
    gpu = train_cfg.accelerator in ("auto", "gpu", "cuda") and torch.cuda.is_available()
    device = "cuda" if gpu else "cpu"
    free = weights.available_memory(device)
    need = params * TRAIN_BYTES_PER_PARAM
    if free is not None and need > free:
        raise TrainConfigError(f"the model has {params:,} parameters: training needs at least {need / 2**30:,.1f} GiB "
                               f"(float32 weights, gradients and AdamW's two moments) and the {device} has "
                               f"{free / 2**30:,.1f} GiB available; make the model smaller")
    if free is None or model_cfg is None:
        return
    rows, context = train_cfg.micro_batch(), model_cfg.context_length
    activations = activation_bytes(model_cfg, rows)
    if need + activations > free:
        name, value = (("train.micro_batch_size", train_cfg.micro_batch_size) if train_cfg.micro_batch_size
                       else ("train.batch_size", train_cfg.batch_size))
        per_device = f" per device (of {train_cfg.world_size})" if train_cfg.world_size > 1 else ""
        raise TrainConfigError(
            f"{name}={value} is too large for this {device}: one forward/backward of {rows:,} x {context:,} tokens"
            f"{per_device} holds at least {_size(activations)} of activations (each layer's input kept "
            f"for the backward pass), beside {_size(need)} of weights, gradients and optimizer state, and "
            f"the {device} has {_size(free)} available; lower {name}"
            + ("" if train_cfg.micro_batch_size else " or set train.micro_batch_size (gradients accumulated over "
               "smaller micro-batches)"))


def _size(n: int) -> str:
    return f"{n / 2**30:,.1f} GiB" if n >= 2**30 else f"{n / 2**20:,.1f} MiB"


ACTIVATION_BYTES_PER_TOKEN = 16
"""A token's input and target ids (int64 each), per sequence position of a micro-batch."""


def activation_bytes(model_cfg, rows: int) -> int:
    """A lower bound on the memory one forward/backward of `rows` sequences holds: each layer's d_model-wide input
    at 2 bytes an element (kept for the backward pass in any precision) and the ids; the attention, MLP and
    logits memory is on top. A bound, not an estimate: it refuses only batches that cannot fit."""
    tokens = rows * model_cfg.context_length
    layers = int(getattr(model_cfg, "n_layers", 0) or 0)
    width = int(getattr(model_cfg, "d_model", 0) or 0)
    return tokens * (ACTIVATION_BYTES_PER_TOKEN + 2 * layers * width)


def _curriculum_spec(spec: dict, curriculum, context: int) -> dict:
    """The model spec under a block curriculum: attention_block is the curriculum's (its decay block, which the
    saved model keeps, or none); a model that cannot attend block-causally is refused before training."""
    if spec.get("attention_block") is not None:
        raise TrainConfigError(f"model.attention_block={spec['attention_block']} is set with train.block_curriculum, "
                               "which chooses the block of every step and the saved model's (its decay_block): "
                               "leave model.attention_block null")
    curriculum.check(context)
    smallest = min([*curriculum.warmup_blocks(context), curriculum.decay_block or context])
    if smallest < context:  # ModelConfig's own checks of block-causal attention (causal, Canon)
        try:
            config_from_spec({**spec, "attention_block": smallest})
        except ValueError as err:
            raise TrainConfigError(f"train.block_curriculum trains with attention blocks down to {smallest}: "
                                   f"{err}") from None
    return {**spec, "attention_block": curriculum.decay_block}


def _init_source(path: str, model_cfg, tokenizer):
    """train.init_from resolved and checked against the model about to be built (on the meta device: shapes
    only) and the run's tokenizer; raises with one line before anything is written."""
    source = find_source(path)
    check_tokenizer(source, tokenizer)
    with torch.device("meta"):
        check_shapes(source, build_model(model_cfg), model_cfg.mask_token_id)
    return source


def init_from_section(source) -> dict:
    """The run record's training.init_from: where the weights came from (absolute paths, the weights' SHA-256)
    and, for a run directory with a record, what that run was."""
    section = {"path": source.given, "model_dir": str(source.model_dir) if source.model_dir else None,
               "run_dir": str(source.run_dir) if source.run_dir else None, "weights_sha256": source.sha256()}
    if source.checkpoint is not None:  # a training checkpoint file (checkpoints/step-<N>.ckpt): its SHA-256 above
        section.update(checkpoint=str(source.checkpoint), checkpoint_step=source.step())
    config = source.config()
    section["source_model"] = {k: config.get(k) for k in ("family", "causal", "attention_block", "vocab_size",
                                                          "mask_token_id")}
    rec = load_record(source.run_dir) if source.run_dir else None
    if rec:
        training, evals = rec.get("training") or {}, rec.get("eval") or {}
        section["source_run"] = {
            "run_group": source.run_dir.parent.name, "key": source.run_dir.name, "status": rec.get("status"),
            "created_at": rec.get("created_at"), "updated_at": rec.get("updated_at"),
            "objective": ((rec.get("config") or {}).get("train") or {}).get("objective"),
            "params_total": (rec.get("model") or {}).get("params_total"),
            "steps": training.get("steps"), "tokens": training.get("tokens"),
            "val_nll": evals.get("val_nll"), "val_nll_kind": evals.get("val_nll_kind"),
            "git_revision": (rec.get("environment") or {}).get("git_revision"),
        }
    return section


def _train(job: PreparedJob, resume: Path | None) -> dict:
    """The steps after prepare, in order (the module docstring). A failure is recorded `failed` with its line (a
    full disk or no memory: RunFailed, saying what to do) and re-raised; an interruption leaves the run `running`."""
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    started = start(job)
    try:
        built = build(job, resume)
        training = fit(job, built, started)
        if built.module.diverged is not None:
            return record_diverged(job, built, training)
        restored = validate(job, built)
        if not is_rank_zero():  # the validations ran on every rank (collectively); saving and scoring are rank 0's
            return {"status": "completed", "error": None}
        evaluate(job.cfg, job.run_dir, record_completed(job, built, training, restored))
        return update_record(job.run_dir, training={"session_job_seconds": time.monotonic() - job.began})
    except SIGTERMException:  # Lightning's own SIGTERM stop (outside the training steps) has no exit code: 0
        raise SystemExit(128 + signal.SIGTERM) from None
    except Exception as err:  # an interruption (BaseException) leaves the run `running`, to be resumed
        problem = _machine_problem(err, job.run_dir, job.train_cfg)
        if is_rank_zero():
            try:
                update_record(job.run_dir, status="failed", error=problem or one_line(err))
            except OSError as record_err:  # the disk that filled up holds the record too: it stays `running`
                if problem is None:
                    raise
                problem += f" (result.json could not be updated: {record_err.strerror or record_err})"
        if problem is not None:
            raise RunFailed(problem) from err
        raise


OUT_OF_SPACE = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
OUT_OF_MEMORY = ("out of memory", "can't allocate memory", "not enough memory", "cannot allocate memory",
                 "bad_alloc")
"""Fragments of the allocators' messages (PyTorch's CPU and CUDA allocators, the C++ runtime) for an allocation that
failed."""


def _out_of_memory(err: BaseException) -> bool:
    seen = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, (MemoryError, torch.OutOfMemoryError)) or (
                isinstance(err, RuntimeError) and any(text in str(err).lower() for text in OUT_OF_MEMORY)):
            return True
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return False


def _resume_point(run_dir: Path) -> str:
    """Where running the same command again starts: 'resumes from checkpoints/last.ckpt (step N), which is intact',
    or 'starts again from step 0 (...)'."""
    path = run_dir / CHECKPOINT
    if not path.is_file():
        return "starts again from step 0 (no checkpoint was written yet)"
    try:  # the pickle only: the tensors stay memory-mapped, unread
        step = torch.load(path, map_location="cpu", weights_only=True, mmap=True).get("global_step")
    except Exception:  # noqa: BLE001 - the resume checks it properly
        return f"resumes from {CHECKPOINT}"
    return f"resumes from {CHECKPOINT} (step {step}), which is intact"


def _machine_problem(err: BaseException, run_dir: Path, train_cfg) -> str | None:
    """One line for a run stopped by its machine rather than by its config or a bug (None otherwise): a full disk
    or quota (naming the file and the free space) or an allocation that failed, with what to do."""
    system = os_error_in(err)
    if system is not None and system.errno in OUT_OF_SPACE:
        name = getattr(system, "path", None) or system.filename  # a checkpoint's, or the file a write named
        where = Path(name) if isinstance(name, (str, os.PathLike)) else None
        if where is not None and where.is_relative_to(run_dir):
            where = where.relative_to(run_dir)
        try:
            free = f"; {shutil.disk_usage(run_dir).free / 2**20:,.1f} MiB free there"
        except OSError:
            free = ""
        what = {errno.EDQUOT: "disk quota exceeded", errno.EFBIG: "file too large"}.get(system.errno,
                                                                                        "no space left on device")
        return (f"{what} writing {where or 'the run directory'} in {run_dir}{free}: free space on that disk (or "
                f"move $SLM_RUNS to one with room) and run the same command again (a sweep: with rerun_failed=true); "
                f"it {_resume_point(run_dir)}")
    if _out_of_memory(err):
        reason = " ".join(str(err).split())[:160] or type(err).__name__
        micro = train_cfg.micro_batch()
        smaller = (f"set train.micro_batch_size below {micro} (gradients accumulated over smaller micro-batches) or "
                   "make the model smaller" if micro > 1 else "make the model or model.context_length smaller")
        return (f"out of memory ({type(err).__name__}: {reason}) with {micro} sequence{'s' if micro != 1 else ''} per "
                f"forward: {smaller} (a new run), or free memory and run the same command again (a sweep: with "
                f"rerun_failed=true): it {_resume_point(run_dir)}")
    return None


# ------------------------------------------------------------------------------------------------------ start
def start(job: PreparedJob) -> float:
    """Write config.yaml and the record `running` (its config, model and training sections), and print what the
    run is; rank 0 only. Returns the start time (the record's wall_seconds count from it)."""
    cfg, model_cfg, max_steps = job.cfg, job.model_cfg, job.max_steps
    model_section = {**model_cfg.to_dict(), **vars(job.counts), "flops_convention": FLOPS_CONVENTION,
                     "param_budget": cfg["model"].get("param_budget"), "budget_knob": budget_knob(model_cfg),
                     "notes": model_cfg.notes(),
                     "scaling": scheme_of(model_cfg).describe()}
    training = {"max_steps": max_steps, "tokens_per_step": job.tokens_per_step}
    if job.init is not None:  # a resumed run keeps the section written when it started
        training["init_from"] = init_from_section(job.init)
    if job.train_cfg.block_curriculum is not None:
        training["attention_blocks"] = job.train_cfg.block_curriculum.schedule(max_steps, model_cfg.context_length)
    started = time.time()
    if is_rank_zero():
        (job.run_dir / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
        update_record(job.run_dir, status="running", error=None, config=cfg, model=model_section,
                      training=training, environment={**environment(), "omp_wait": wait_settings()})
        for line in _banner(job):
            print(line, flush=True)
    return started


def _vocab_note(configured, model_cfg) -> str:
    """' (the tokenizer's; model.vocab_size=N is replaced)' when the config asked for fewer rows than the tokenizer
    has symbols (its vocabulary always wins), else ''."""
    if isinstance(configured, int) and not isinstance(configured, bool) and configured < model_cfg.vocab_size:
        return f" (the tokenizer's; model.vocab_size={configured} is replaced)"
    return ""


def _optimizer_words(train_cfg) -> str:
    """The optimizer with its peak learning rates: 'adamw lr 0.001', 'muon lr 0.02 on the hidden matrices + adamw lr
    0.001 on the rest'."""
    if train_cfg.optimizer == "muon":
        return f"muon lr {train_cfg.optim['muon'].lr:g} on the hidden matrices + adamw lr {train_cfg.lr:g} on the rest"
    return f"{train_cfg.optimizer} lr {train_cfg.lr:g}"


def _parametrization_words(model_cfg) -> str:
    """'parametrization sp', 'parametrization mup from width 256' (the shape its learning rates were tuned at)."""
    mup = model_cfg.mup
    base = {"mup": f" from width {mup.base_width}",
            "completep": f" from width {mup.base_width}, depth {mup.base_depth}"}.get(model_cfg.parametrization, "")
    return f"parametrization {model_cfg.parametrization}{base}"


def _banner(job: PreparedJob) -> list[str]:
    """What the run is, in three or four lines printed before training starts. The tokenizer sets the vocabulary:
    a model.vocab_size too small for it is named as replaced."""
    train_cfg, model_cfg, counts, max_steps = job.train_cfg, job.model_cfg, job.counts, job.max_steps
    preset = model_cfg.family + (f" ({model_cfg.kind})" if model_cfg.kind != "transformer" else "")
    params = f"{counts.params_total:,} parameters ({counts.params_non_embedding:,} non-embedding"
    if counts.params_active != counts.params_total:
        params += f", {counts.params_active:,} active"
    vocab_note = _vocab_note(job.cfg["model"].get("vocab_size"), model_cfg)
    model = (f"slm-train: model {preset}: {model_cfg.n_layers} layer{'' if model_cfg.n_layers == 1 else 's'}, d_model {model_cfg.d_model}, context "
             f"{model_cfg.context_length}, vocabulary {model_cfg.vocab_size}{vocab_note}; "
             f"{params})")
    lines = [f"slm-train: run {job.run_dir}", model]
    length = (f"{max_steps:,} step{'' if max_steps == 1 else 's'} of {train_cfg.batch_size} x {model_cfg.context_length} tokens = "
              f"{max_steps * job.tokens_per_step:,} tokens")
    epochs = train_cfg.length.epochs
    if epochs is not None:
        length += f" ({epochs} epoch{'' if epochs == 1 else 's'})"
    warmup = train_cfg.warmup(max_steps)
    lines.append(f"slm-train: {length}; {train_cfg.objective}, {_optimizer_words(train_cfg)} ({train_cfg.schedule.kind}, "
                 f"warmup {warmup} step{'s' if warmup != 1 else ''}), {_parametrization_words(model_cfg)}, precision "
                 f"{train_cfg.precision}, accelerator {train_cfg.accelerator}, seed {train_cfg.seed}")
    if job.init is not None:
        lines.append(f"slm-train: weights from {job.init.given}")
    return lines


# ------------------------------------------------------------------------------------------------------ build
@dataclass
class Built:
    """What `build` makes: the Lightning parts of one attempt, and the callbacks whose results the record reads."""

    module: LanguageModelModule
    datamodule: SLMDataModule
    trainer: L.Trainer
    throughput: ThroughputMonitor
    """Steps, tokens/s and MFU of this attempt."""
    preemption: SignalCheckpoint
    """The step a signal stopped the run at, and the signal."""
    routing: RoutingLoad
    """A mixture of experts' routing load."""
    resume: Path | None
    """The checkpoint this attempt starts from (None: step 0)."""
    resumed_from: str | None
    """The same relative to the run directory, as the record and the start line say it."""


def _strategy(train_cfg) -> str:
    """Lightning's strategy: ddp for a job of several processes (gloo on a CPU, NCCL on GPUs), else auto."""
    if train_cfg.strategy == "auto" and train_cfg.world_size > 1:
        return "ddp"
    return train_cfg.strategy


def build(job: PreparedJob, resume: Path | None) -> Built:
    """The module (seeded; train.init_from's weights on a fresh start), the data module, the callbacks (progress,
    checkpoints, throughput, train_log, routing load, kept steps, stop signals), the loggers and the Trainer. Only
    rank 0's callbacks print or write files; stale temporary checkpoint files are removed."""
    import lightning as L
    from lightning.pytorch.loggers import TensorBoardLogger, WandbLogger
    from lightning.pytorch.plugins.environments import SLURMEnvironment

    from slm.data.datamodule import SLMDataModule
    from slm.training.callbacks import (CSVHistory, KeepCheckpoints, KeptCSVLogger, RunCheckpoint, SignalCheckpoint,
                                        StepLog, ThroughputMonitor)
    from slm.training.checkpoint_io import AtomicCheckpointIO
    from slm.training.module import LanguageModelModule
    from slm.training.progress import ProgressLog, StartLine, StepsBar, interactive
    from slm.training.routing import RoutingLoad

    run_dir, train_cfg, model_cfg, max_steps = job.run_dir, job.train_cfg, job.model_cfg, job.max_steps
    tidy_lightning_logging()
    rank_zero = is_rank_zero()
    L.seed_everything(train_cfg.seed, workers=True, verbose=False)
    module = LanguageModelModule(model_cfg, train_cfg, max_steps, job.tokens_per_step,
                                 checkpoint_meta={"tokenizer": tokenizer_meta(job.data.tokenizer)})
    if job.init is not None:  # a fresh start (prepare leaves init None for a resumed run): weights only
        load_weights(module.model, job.init, model_cfg.mask_token_id)
    datamodule = SLMDataModule(job.data, train_cfg.batch_size, model_cfg.context_length, train_cfg.seed,
                               train_cfg.val_batches, sampling=train_cfg.window_sampling,
                               eval_windows=train_cfg.eval_windows, micro_batch_size=train_cfg.micro_batch())
    throughput = ThroughputMonitor(job.tokens_per_step, job.counts.flops_per_token, train_cfg.precision,
                                   train_cfg.log_interval, train_cfg.peak_flops, devices=train_cfg.world_size)
    checkpoint = RunCheckpoint(run_dir / CHECKPOINT.parent, train_cfg.ckpt_interval)
    preemption = SignalCheckpoint(run_dir / CHECKPOINT)
    keep = KeepCheckpoints(run_dir / CHECKPOINT.parent, train_cfg.keeps)
    routing = RoutingLoad(train_cfg.log_interval)
    bar = train_cfg.progress_bar and interactive()  # a bar only on a terminal: in a file it is a stream of \r
    resumed_from = str(Path(resume).relative_to(run_dir)) if resume is not None else None
    talk = [StartLine(resumed_from), StepsBar(throughput) if bar else
            ProgressLog(throughput, max_steps, train_cfg.print_every(max_steps))] if rank_zero else []
    # Requeueing is submitit's (conf/hydra/launcher/slurm.yaml): where Lightning would pick SLURMEnvironment,
    # it gets one with its own auto-requeue off.
    plugins = [AtomicCheckpointIO(), *([SLURMEnvironment(auto_requeue=False)] if SLURMEnvironment.detect() else [])]
    if rank_zero:
        remove_stale(run_dir / CHECKPOINT.parent)  # temporary files of saves a kill interrupted
    val_every = train_cfg.validation_interval(max_steps)
    make_logger = {
        "csv": lambda: KeptCSVLogger(run_dir, name="logs", version="csv"),
        "tensorboard": lambda: TensorBoardLogger(run_dir, name="logs", version="tensorboard"),
        "wandb": lambda: WandbLogger(save_dir=str(run_dir), name=run_dir.name, id=run_dir.name, resume="allow"),
    }
    loggers = [make_logger[name]() for name in train_cfg.loggers]
    # the loggers write on rank 0 only (Lightning), and so do these
    history = [CSVHistory(logger) for logger in loggers if isinstance(logger, KeptCSVLogger)] if rank_zero else []
    step_log = [StepLog(run_dir / TRAIN_LOG)] if rank_zero else []
    trainer = L.Trainer(
        default_root_dir=run_dir, accelerator=train_cfg.accelerator, devices=train_cfg.devices,
        num_nodes=train_cfg.num_nodes, strategy=_strategy(train_cfg), precision=train_cfg.precision,
        accumulate_grad_batches=train_cfg.accumulation(),
        max_steps=max_steps, max_epochs=-1, val_check_interval=min(val_every, max_steps), check_val_every_n_epoch=None,
        limit_val_batches=train_cfg.val_batches if train_cfg.eval_windows is None else None, num_sanity_val_steps=0, log_every_n_steps=train_cfg.log_interval,
        logger=loggers, plugins=plugins,
        # routing before anything that saves a checkpoint on a step's end (its load is in the checkpoint);
        # keep before preemption: a kept step that is also interrupted is saved before the run stops
        callbacks=[*talk, routing, checkpoint, throughput, *step_log, *history, keep, preemption],
        enable_progress_bar=bar, enable_model_summary=False, detect_anomaly=train_cfg.detect_anomaly,
        use_distributed_sampler=False,
    )
    return Built(module, datamodule, trainer, throughput, preemption, routing, resume, resumed_from)


# -------------------------------------------------------------------------------------------------------- fit
def fit(job: PreparedJob, built: Built, started: float) -> dict:
    """Train from the checkpoint (built.resume) or from step 0 to max_steps, a divergence or a stop signal; returns the
    record's training section. On a signal SignalCheckpoint has saved the step: the record counts the interruption
    (rank 0) and the exception goes on."""
    train_cfg, module, throughput, preemption = job.train_cfg, built.module, built.throughput, built.preemption
    try:
        with OtherWork() as other:  # what else used the CPUs meanwhile: tokens/s on a shared machine reads lower
            built.trainer.fit(module, datamodule=built.datamodule,
                              ckpt_path=str(built.resume) if built.resume is not None else None,
                              weights_only=True)
    except BaseException:
        if preemption.step is not None and is_rank_zero():  # a requeue (submitit) or the same command resumes
            before = (load_record(job.run_dir) or {}).get("training", {}).get("interruptions", 0)
            update_record(job.run_dir, training={"interruptions": before + 1, "interrupted": {
                "step": preemption.step, "signal": preemption.signal_name, "at": now()}})
            print(f"slm-train: stopped by {preemption.signal_name} at step {preemption.step} of {job.max_steps}, "
                  f"checkpointed in {CHECKPOINT}: the same command resumes the run", file=sys.stderr, flush=True)
        raise
    steps = built.trainer.global_step
    training = {
        "steps": steps, "tokens": steps * job.tokens_per_step, "wall_seconds": time.time() - started,
        **throughput.totals(), "final_train_loss": module.last_train_loss, "diverged": module.diverged,
        "resumed_from": built.resumed_from, "precision": train_cfg.precision, "other_cores_busy": other.cores,
    }
    load = built.routing.summary()
    if load is not None:
        training["moe_load"] = load
    if train_cfg.world_size > 1:
        training.update(devices=train_cfg.devices, num_nodes=train_cfg.num_nodes, world_size=train_cfg.world_size)
    if train_cfg.accumulation() > 1:
        training.update(micro_batch_size=train_cfg.micro_batch(), accumulation=train_cfg.accumulation())
    return training


# --------------------------------------------------------------------------------------------------- validate
def validate(job: PreparedJob, built: Built) -> dict | None:
    """The last step's validation (unless training ended on one), the best validation's weights restored
    (train.restore_best) and the test split's first windows scored (train.eval_windows); on every rank. Returns
    the metrics of the last validation that a restored best replaced (None when nothing was restored)."""
    module, trainer, datamodule = built.module, built.trainer, built.datamodule
    if module.val_metrics.get("val_step") != trainer.global_step:
        trainer.validate(module, datamodule=datamodule, verbose=False)
    last_val = module.restore_best() if job.train_cfg.restore_best else None
    if job.train_cfg.eval_windows is not None:  # the test split's first windows, scored by the model saved next
        module.scoring_test = True
        trainer.validate(module, dataloaders=datamodule.test_dataloader(), verbose=False)
        module.scoring_test = False
    return last_val


# ----------------------------------------------------------------------------------------------------- record
ARTIFACTS = {"checkpoint": str(CHECKPOINT), "train_log": "train_log.jsonl", "logs": "logs"}
"""The record's artifacts of a run that trained (a completed one adds its weights)."""


def _data_section(data: PreparedData, datamodule) -> dict:
    consumed = datamodule.tokens_per_source()
    total = sum(consumed.values())
    return {**data.describe(), "tokens_per_source": consumed,
            "token_share": {k: (v / total if total else 0.0) for k, v in consumed.items()}}


def _bits_per_byte(data: PreparedData, val_nll: float, test_nll: float | None) -> dict:
    """val_bpb (and test_bpb): the NLL in bits per UTF-8 byte of text, so runs with different tokenizers
    compare on one axis (a diffusion run's NELBO gives a bound, as its val_nll is), with the bytes per token
    used (slm.data.prepare.PreparedData.bytes_per_token)."""
    out = {}
    for name, nll, split in (("val", val_nll, "valid"), ("test", test_nll, "test")):
        ratio = data.bytes_per_token(split) if nll is not None else None
        if ratio:
            out.update({f"{name}_bpb": nll / math.log(2) / ratio, f"{name}_bytes_per_token": ratio})
    return out


def record_diverged(job: PreparedJob, built: Built, training: dict) -> dict:
    """The record `diverged` with the step and the loss (rank 0); no weights are saved."""
    if not is_rank_zero():
        return {"status": "diverged", "error": None}
    d = built.module.diverged
    return update_record(job.run_dir, status="diverged", error=f"non-finite training loss {d['loss']} at step {d['step']}",
                         training=training, data=_data_section(job.data, built.datamodule), artifacts=dict(ARTIFACTS))


def record_completed(job: PreparedJob, built: Built, training: dict, restored: dict | None) -> dict:
    """Save the weights and the tokenizer (model/), print how training ended and record the run `completed` with
    its validation (and test) metrics; rank 0. A non-finite validation NLL raises (the run is then failed)."""
    from slm.training.progress import duration, perplexity

    run_dir, module = job.run_dir, built.module
    save_model(module.model, run_dir / "model")
    job.data.tokenizer.save(run_dir / "model")
    val = module.val_metrics
    if not math.isfinite(val.get("val_nll", float("nan"))):
        raise FloatingPointError(f"validation NLL is {val.get('val_nll')}")
    best = " (the best, restored)" if restored else ""
    steps, session = training["steps"], training["session_steps"]
    print(f"slm-train: trained to step {steps:,} of {job.max_steps:,} ({session:,} step{'' if session == 1 else 's'} in "
          f"{duration(training['wall_seconds'])}); validation "
          f"{module.objective.nll_kind} {val['val_nll']:.4f} ({perplexity(module.objective.nll_kind, val['val_ppl'])})"
          f" at step {val['val_step']}"
          f"{best}", flush=True)
    artifacts = {**ARTIFACTS, "weights": "model/model.safetensors", "model_dir": "model"}
    per_byte = _bits_per_byte(job.data, val["val_nll"], module.test_metrics.get("test_nll"))
    return update_record(run_dir, status="completed", error=None, training=training,
                         data=_data_section(job.data, built.datamodule), artifacts=artifacts,
                         eval={"val_nll": val["val_nll"], "val_step": val["val_step"],  # exp(a NELBO): a bound
                               ("val_ppl" if module.objective.nll_kind == "nll" else "val_ppl_bound"): val["val_ppl"],
                               "val_nll_kind": module.objective.nll_kind, **module.test_metrics, **per_byte,
                               **({"restored_best": True, "last_val_nll": restored["val_nll"],
                                   "last_val_step": restored["val_step"]} if restored else {}),
                               **({"val_attention_block": val["val_attention_block"]}
                                  if "val_attention_block" in val else {})})


# --------------------------------------------------------------------------------------------------- evaluate
def evaluate(cfg: dict, run_dir: Path, record: dict) -> dict:
    """The `eval` suite (conf/eval) on the trained model, merged into the record. The run stays
    `completed` whatever happens here: a failure is recorded as eval.lm_eval_error, and
    `slm-eval <run dir> --tasks ...` can score it again."""
    try:
        summary = eval_run.evaluate_config(run_dir, cfg.get("eval"), log_file=run_dir / "eval" / "lm_eval.log")
    except Exception as err:
        print(f"slm-train: evaluation failed for {run_dir}: {one_line(err)}", file=sys.stderr)
        return update_record(run_dir, eval={"lm_eval_error": one_line(err)})
    if summary is None:
        return record
    section = eval_run.eval_section(summary, record.get("eval"))
    print(f"slm-train: evaluated {run_dir}: {brief(section.get('lm_eval') or {})}")
    return update_record(run_dir, eval=section)
