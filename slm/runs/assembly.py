"""The Lightning parts of one attempt at a job, assembled by `build` into a Built.

The module (seeded; train.init_from's weights on a fresh start), the data module, the callbacks (the start line,
the progress, checkpoints, throughput, train_log, routing load, averaged weights, kept steps, decay branches'
checkpoints, stop signals, train.length.pause_at's pause), the loggers, the strategy and the Trainer. Lightning is
imported when build runs, not with this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from slm.atomic import remove_stale
from slm.runs.layout import CHECKPOINT
from slm.training.distributed import is_rank_zero
from slm.training.init_from import load_weights, tokenizer_meta
from slm.training.logs import tidy_lightning_logging
from slm.training.train_log import NAME as TRAIN_LOG

if TYPE_CHECKING:  # build imports them: Lightning loads when a job trains
    import lightning as L

    from slm.data.datamodule import SLMDataModule
    from slm.runs.reference import records_datamodule
    from slm.runs.preflight import PreparedJob
    from slm.training.callbacks import SignalCheckpoint, ThroughputMonitor
    from slm.training.module import LanguageModelModule
    from slm.training.routing import RoutingLoad
    from slm.training.weight_averaging import AverageWeights


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
    averaging: AverageWeights | None = None
    """train.validation.averaging's averaged weights and their validations (None: kind none)."""


def _strategy(train_cfg) -> str:
    """Lightning's strategy: ddp for a job of several processes (gloo on a CPU, NCCL on GPUs), else auto."""
    if train_cfg.parallel.strategy == "auto" and train_cfg.world_size > 1:
        return "ddp"
    return train_cfg.parallel.strategy


def _branch_points(branches: list) -> list[tuple]:
    """BranchCheckpoints' (step, file, written) of the decay branches (slm.runs.branches) whose directory holds no
    checkpoint yet and no settled record: the run's state at the step each one branches at, saved as that branch's
    last.ckpt, then its config and record written (`mark`). A branch that has one (written earlier, or resumed and
    trained on since) is left as it is."""
    from slm.runs.branches import has_checkpoint, mark
    from slm.runs.record import RecordError, load_record, settled

    points = []
    for branch in branches:
        try:
            done = settled((load_record(branch.run_dir) or {}).get("status"))
        except RecordError:
            done = True  # an unreadable record: nothing overwrites it
        if done or has_checkpoint(branch.run_dir):
            continue
        points.append((branch.decay.start, branch.run_dir / CHECKPOINT,
                       lambda branch=branch: mark(branch.run_dir, branch.cfg, branch.section)))
    return points


def _branch_of(run_dir: Path) -> tuple[str, int] | None:
    """(the run it branched from, the step) where `run_dir` is a decay branch's (its record's branch section)."""
    from slm.runs.record import RecordError, load_record

    try:
        branch = (load_record(run_dir) or {}).get("branch")
    except RecordError:
        return None
    if not isinstance(branch, dict) or not isinstance(branch.get("step"), int):
        return None
    return str(branch.get("of")), branch["step"]


def build(job: PreparedJob, resume: Path | None) -> Built:
    """The module (seeded; train.init_from's weights on a fresh start), the data module, the callbacks (progress,
    checkpoints, throughput, train_log, routing load, kept steps, decay branches' checkpoints, stop signals, the pause), the
    loggers and the Trainer. Only
    rank 0's callbacks print or write files; stale temporary checkpoint files are removed."""
    import lightning as L
    from lightning.pytorch.loggers import TensorBoardLogger, WandbLogger
    from lightning.pytorch.plugins.environments import SLURMEnvironment

    from slm.data.datamodule import SLMDataModule
    from slm.runs.reference import records_datamodule
    from slm.training.callbacks import (BranchCheckpoints, CSVHistory, KeepCheckpoints, KeptCSVLogger, PauseAt,
                                        RunCheckpoint, SignalCheckpoint, StepLog, ThroughputMonitor)
    from slm.training.checkpoint_io import AtomicCheckpointIO
    from slm.training.module import LanguageModelModule
    from slm.training.progress import ProgressLog, StartLine, StepsBar, interactive
    from slm.training.pruning import ReportToTrial
    from slm.training.trial_link import TrialLink
    from slm.training.routing import RoutingLoad
    from slm.training.weight_averaging import AverageWeights

    run_dir, train_cfg, model_cfg, max_steps = job.run_dir, job.train_cfg, job.model_cfg, job.max_steps
    tidy_lightning_logging()
    rank_zero = is_rank_zero()
    L.seed_everything(train_cfg.seed, workers=True, verbose=False)
    module = LanguageModelModule(model_cfg, train_cfg, max_steps, job.tokens_per_step,
                                 checkpoint_meta={"tokenizer": tokenizer_meta(job.data.tokenizer)})
    if job.init is not None:  # a fresh start (prepare leaves init None for a resumed run): weights only
        load_weights(module.model, job.init, model_cfg.embedding.mask_token_id)
    if job.records is None:
        datamodule = SLMDataModule(job.data, train_cfg.batch_size, model_cfg.context_length, train_cfg.seed,
                                   train_cfg.validation.batches, sampling=train_cfg.window_sampling,
                                   eval_windows=train_cfg.validation.windows, micro_batch_size=train_cfg.micro_batch())
    else:  # data.records: sft or preference records (slm.runs.reference: the preference losses' reference first)
        datamodule = records_datamodule(job, module)
    throughput = ThroughputMonitor(job.tokens_per_step, job.counts.flops_per_token, train_cfg.precision,
                                   train_cfg.logging.interval, train_cfg.logging.peak_flops, devices=train_cfg.world_size)
    checkpoint = RunCheckpoint(run_dir / CHECKPOINT.parent, train_cfg.checkpoint.interval)
    preemption = SignalCheckpoint(run_dir / CHECKPOINT)
    keep = KeepCheckpoints(run_dir / CHECKPOINT.parent, train_cfg.checkpoint.keeps)
    branches = BranchCheckpoints(_branch_points(job.branches))
    pause_step = train_cfg.length.pause_step(max_steps)
    pause = [PauseAt(pause_step, run_dir / CHECKPOINT)] if pause_step is not None else []
    link = TrialLink.read(run_dir)  # an Optuna trial's run (hydra.sweeper.pruner): report, and stop where pruned
    report = [ReportToTrial(link)] if link is not None else []
    routing = RoutingLoad(train_cfg.logging.interval)
    averaging = AverageWeights(train_cfg.validation.averaging) if train_cfg.validation.averaging.on else None
    bar = train_cfg.logging.progress_bar and interactive()  # a bar only on a terminal: in a file it is a stream of \r
    resumed_from = str(Path(resume).relative_to(run_dir)) if resume is not None else None
    talk = [StartLine(resumed_from, branch_of=_branch_of(run_dir)), StepsBar(throughput) if bar else
            ProgressLog(throughput, max_steps, train_cfg.logging.print_every(max_steps))] if rank_zero else []
    # Requeueing is submitit's (conf/hydra/launcher/slurm.yaml): where Lightning would pick SLURMEnvironment,
    # it gets one with its own auto-requeue off.
    plugins = [AtomicCheckpointIO(), *([SLURMEnvironment(auto_requeue=False)] if SLURMEnvironment.detect() else [])]
    if rank_zero:
        remove_stale(run_dir / CHECKPOINT.parent)  # temporary files of saves a kill interrupted
    val_every = train_cfg.validation_interval(max_steps)  # in optimizer steps; Lightning counts micro-batches
    make_logger = {
        "csv": lambda: KeptCSVLogger(run_dir, name="logs", version="csv"),
        "tensorboard": lambda: TensorBoardLogger(run_dir, name="logs", version="tensorboard"),
        "wandb": lambda: WandbLogger(save_dir=str(run_dir), name=run_dir.name, id=run_dir.name, resume="allow"),
    }
    loggers = [make_logger[name]() for name in train_cfg.logging.loggers]
    # the loggers write on rank 0 only (Lightning), and so do these
    history = [CSVHistory(logger) for logger in loggers if isinstance(logger, KeptCSVLogger)] if rank_zero else []
    step_log = [StepLog(run_dir / TRAIN_LOG)] if rank_zero else []
    trainer = L.Trainer(
        default_root_dir=run_dir, accelerator=train_cfg.parallel.accelerator, devices=train_cfg.parallel.devices,
        num_nodes=train_cfg.parallel.num_nodes, strategy=_strategy(train_cfg), precision=train_cfg.precision,
        accumulate_grad_batches=train_cfg.accumulation(),
        max_steps=max_steps, max_epochs=-1, val_check_interval=min(val_every, max_steps) * train_cfg.accumulation(),
        check_val_every_n_epoch=None,
        limit_val_batches=train_cfg.validation.batches if train_cfg.validation.windows is None else None,
        num_sanity_val_steps=0, log_every_n_steps=train_cfg.logging.interval,
        logger=loggers, plugins=plugins,
        # routing and averaging before anything that saves a checkpoint on a step's end (their state is in it);
        # branches and keep before preemption: a step that is also interrupted is saved before the run stops; the
        # pause last (train.length.pause_at: it saves the step and stops the run); a trial's report after every
        # other validation hook (it may stop the run there)
        callbacks=[*talk, routing, *([averaging] if averaging else []), checkpoint, throughput, *step_log, *history,
                   branches, keep, preemption, *pause, *report],
        enable_progress_bar=bar, enable_model_summary=False, detect_anomaly=train_cfg.logging.detect_anomaly,
        use_distributed_sampler=False,
    )
    return Built(module, datamodule, trainer, throughput, preemption, routing, resume, resumed_from, averaging)
