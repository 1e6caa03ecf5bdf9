"""One training job: config in, trained model and a complete result.json out, resumable after a kill.

The run directory's layout is slm.runs.layout's docstring.

A run is trained by one process at a time: a second one (the same sweep started twice) finds the lock
held and leaves the run alone. Interruptions (Ctrl-C, scancel, a Slurm preemption or time limit) leave
the record `running`, so the next attempt resumes from checkpoints/last.ckpt. Ctrl-C and SIGTERM stop at the
next step boundary with a checkpoint of that step (training.interrupted in the record names the signal and the
step) and exit 128 + the signal (130, 143); a second one stops at once (slm.training.callbacks.SignalCheckpoint).

While it trains, a run prints what it is (the run directory, the model, the length, the optimisation, the
parameter count), where it starts (step 0, or the step it resumed from), then a progress bar on a terminal or
a progress line every train.logging.print_interval steps elsewhere (slm.training.progress).

train_run decides whether the run trains (its lock, its record, its checkpoint), then runs the steps in order,
each taking what the ones before it made, and then, still under the run's lock, trains the run's pending decay
branches (train.schedule.decay_branches: train_branches, slm.runs.branches), each a run of its own resumed from the
checkpoint the run wrote at its step:
  prepare           the config checked, the data prepared, the model's config and counts, the length, the
                    init source: a PreparedJob; nothing is written (bad input raises here)
  start             config.yaml, the record `running`, the lines saying what the run is
  build             the Lightning parts (Built): the module (train.init_from's weights), data module, callbacks,
                    loggers, Trainer
  fit               Trainer.fit from the checkpoint or from step 0: the record's training section (on a signal
                    the record counts the interruption and the signal goes on)
  validate          the final validation, the best weights restored (train.validation.restore_best) or the averaged
                    ones kept (train.validation.averaging.keep), the test split (train.validation.windows)
  record_completed  the weights saved, the record `completed` (record_diverged instead: `diverged`, no weights)
  evaluate          the eval suite on the saved model, merged into the record (its failure leaves the run
                    completed)
The steps live by concern: prepare (and PreparedJob) in slm.runs.preflight, build (and Built) in slm.runs.assembly,
start, record_completed and record_diverged in slm.runs.job_record (what a job writes into its record and prints);
fit, validate and evaluate are here, with train_run and the order of the steps (_train). A failure after start is
recorded `failed` with its line (a full disk or no memory: RunFailed, slm.runs.failures) and re-raised; the
directory of a single run refused before training is removed by slm-train (slm.runs.refused).
Lightning is imported when a job trains (at the top of _train and of the steps that use it), not with this module.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from slm.cpu_busy import OtherWork
from slm.eval import run as eval_run
from slm.eval.score_lines import brief
from slm.eval.summary import eval_section
from slm.renames import RenameError, upgrade_model_fields
from slm.runs.assembly import Built, build
from slm.runs.branches import has_checkpoint, mark, pending_branches, plan, seed_logs
from slm.runs.errors import one_line
from slm.runs.failures import RunFailed, machine_problem
from slm.runs.job_record import (record_completed, record_diverged, record_failure, record_paused, record_pruned,
                                 start)
from slm.runs.layout import CHECKPOINT
from slm.runs.preflight import PreparedJob, prepare
from slm.runs.record import load_record, now, settled, update_record
from slm.runs.lock import run_lock
from slm.settings import differing_fields, field_at
from slm.training.checkpoints import ResumeError, checkpoint_step, resume_checkpoint
from slm.training.distributed import is_rank_zero
from slm.training.train_log import NAME as TRAIN_LOG
from slm.training.train_log import TrainLogError, kept_lines

# the job's steps and its errors, wherever they are defined: what the commands, the sweepers and the tests import
__all__ = ["CHECKPOINT", "Built", "PreparedJob", "RunConfigClash", "RunFailed", "RunInUseError", "build",
           "check_train_log", "evaluate", "fit", "prepare", "record_completed", "record_diverged", "record_failure",
           "start", "train_branches", "train_run", "validate"]


class RunInUseError(ValueError):
    """Another process holds the run's lock (it is training this run right now)."""


class RunConfigClash(ValueError):
    """The run directory's record is of another model than the one asked for (same job key)."""


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
    name = next(differing_fields(recorded, asked), None)
    return None if name is None else f"model.{name}: {field_at(recorded, name)!r} recorded, {field_at(asked, name)!r} asked"


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
    With train.schedule.decay_branches, the run's pending decay branches are trained next, each a run of its own
    (train_branches); the run's record is returned.
    """
    run_dir = Path(run_dir)
    if not is_rank_zero():  # a data-parallel job's other processes: train beside rank 0, write nothing
        record = _follow(cfg, run_dir, sweep=sweep, rerun_failed=rerun_failed)
        if not record.get("clash"):
            train_branches(cfg, run_dir, record.get("status"), sweep=sweep, rerun_failed=rerun_failed)
        return record
    with run_lock(run_dir) as held:
        if not held:
            if not sweep:
                raise RunInUseError(f"{run_dir} is being trained by another process (its .lock is held)")
            print(f"slm-train: {run_dir} is being trained by another process; skipped")
            return {"status": "running", "error": None, "busy": True}
        record, go_on = _run(cfg, run_dir, sweep=sweep, rerun_failed=rerun_failed)
        if go_on and (record or {}).get("status") != "paused":  # the decay branches (slm.runs.branches), under the
            # run's lock: the job is the run and its branches (not while it is paused at a halving rung)
            train_branches(cfg, run_dir, (record or {}).get("status"), sweep=sweep, rerun_failed=rerun_failed)
        return record


def _run(cfg: dict, run_dir: Path, *, sweep: bool, rerun_failed: bool) -> tuple[dict, bool]:
    """train_run's work on the run itself, its lock held: (its record, whether its decay branches come next: not after
    a clash of models or a run refused before anything was written)."""
    existing = load_record(run_dir)
    status = existing.get("status") if existing else None
    clash = _model_clash(existing, cfg)
    if clash:
        message = (f"{run_dir} holds a run of another model ({clash}): the defaults or the preset changed "
                   "since it was made; name the model on the command line, or choose another run_group")
        if not sweep:
            raise RunConfigClash(message)
        print(f"slm-train: {message}; skipped")
        return existing, False
    if settled(status, rerun_failed=rerun_failed or not sweep):
        pending = pending_branches(run_dir, cfg, rerun_failed=rerun_failed or not sweep)
        if status == "completed":
            then = (f"training its decay branch{'es' if len(pending) > 1 else ''} next" if pending else
                    f"nothing to do (another eval suite: slm-eval {run_dir} --tasks ...)")
            print(f"slm-train: {run_dir} is already completed; {then}")
        else:
            print(f"slm-train: {run_dir} is recorded {status}; skipped (rerun_failed=true runs it again)")
        return existing, True
    policy = cfg.get("bad_checkpoint", "fail")
    try:
        chosen = resume_checkpoint(run_dir / CHECKPOINT.parent, policy, apply=False)  # nothing moved yet
    except ResumeError as err:  # a damaged checkpoint: recorded failed, with what to do
        record = update_record(run_dir, status="failed", error=one_line(err))
        if not sweep:
            raise
        return record, True
    try:
        check_train_log(run_dir, chosen)
    except TrainLogError as err:  # refused before anything is written: the record and the files stay as they are
        if not sweep:
            raise
        print(f"slm-train: {err}; skipped", file=sys.stderr)
        return existing, False
    past = _past_pause(existing, cfg, chosen)
    if past is not None:
        print(f"slm-train: {run_dir} is at step {past}, at or past its train.length.pause_at; nothing to do")
        return existing, False
    resume = resume_checkpoint(run_dir / CHECKPOINT.parent, policy)  # the same answer, its notes and file moves
    try:
        job = prepare(cfg, run_dir)  # validates the config and prepares the data before anything is written
    except Exception as err:
        if not sweep:
            raise
        return record_failure(run_dir, cfg, err), False
    try:
        return _train(job, resume), True
    except Exception:
        if not sweep:
            raise
        return load_record(run_dir), True  # recorded failed by _train


def train_branches(cfg: dict, run_dir: Path, status: str | None, *, sweep: bool = False,
                   rerun_failed: bool = False) -> list[dict]:
    """Train the pending decay branches (slm.runs.branches.pending_branches) of the run in `run_dir`, which has ended
    `status`: each by resuming it in its own directory from the checkpoint the run wrote at its step (train_run: the
    ordinary resume). A branch without that checkpoint trains from step 0 (the same run) after a completed run, and
    not at all after one that failed or diverged before the branch's step. Returns the branches' records. A single
    run (sweep=False) raises a branch's failure as its own; a sweep job records it in the branch's result.json and
    goes on. Called under the run's lock."""
    pending = set(pending_branches(run_dir, cfg, rerun_failed=rerun_failed or not sweep))
    if not pending:
        return []
    try:
        branches = [b for b in plan(cfg, run_dir) if b.run_dir in pending]
    except ValueError as err:  # branches this run's length cannot have (a run completed before they were asked for)
        if not sweep:
            raise
        print(f"slm-train: {run_dir}: no decay branch trained: {one_line(err)}", file=sys.stderr)
        return []
    records, rank_zero = [], is_rank_zero()
    for branch in branches:
        if not has_checkpoint(branch.run_dir) and status != "completed":
            if rank_zero:
                print(f"slm-train: decay branch {branch.decay.fraction} of {run_dir.name} not trained: the run ended "
                      f"{status} before step {branch.decay.start}, where the branch begins", file=sys.stderr)
            continue
        if rank_zero:
            _announce(run_dir, branch)
            if has_checkpoint(branch.run_dir):  # the steps it shares with the run, in its own log
                seed_logs(run_dir, branch.run_dir, branch.decay.start)
            mark(branch.run_dir, branch.cfg, branch.section)
        records.append(train_run(branch.cfg, branch.run_dir, sweep=sweep, rerun_failed=rerun_failed))
    return records


def _announce(run_dir: Path, branch) -> None:
    """One line before a decay branch trains: which, how long, and from where."""
    b = branch.decay
    where = (f"branching off at step {b.start}" if has_checkpoint(branch.run_dir) else
             f"from step 0: the run left no checkpoint of step {b.start} there (it completed before the branch was "
             "asked for), and trained alone it is the same run")
    print(f"slm-train: decay branch {b.fraction} of the run: {b.steps:,} steps, decaying from step {b.start}, {where}: "
          f"{branch.run_dir}", flush=True)


def _follow(cfg: dict, run_dir: Path, *, sweep: bool, rerun_failed: bool) -> dict:
    """train_run on a rank other than 0: the same decisions from the same files (skip a settled run, resume from
    the checkpoint rank 0 resumes from), no lock, no record, no output of its own."""
    existing = load_record(run_dir)
    status = existing.get("status") if existing else None
    if _model_clash(existing, cfg):
        return {**existing, "clash": True}
    if settled(status, rerun_failed=rerun_failed or not sweep):
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


def _past_pause(record: dict | None, cfg: dict, checkpoint: Path | None) -> int | None:
    """The step of the checkpoint a run would resume from when it is at or past the step train.length.pause_at asks
    to pause at (a run paused there already, or a halving sweep started again after a later rung began: nothing to
    train for this rung), else None."""
    pause_at = ((cfg.get("train") or {}).get("length") or {}).get("pause_at")
    max_steps = ((record or {}).get("training") or {}).get("max_steps")
    if pause_at is None or checkpoint is None or not isinstance(max_steps, int):
        return None
    from slm.training.length import pause_step

    step = checkpoint_step(checkpoint)
    return step if step >= pause_step(pause_at, max_steps) else None


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
        if training.get("paused"):
            return record_paused(job, built, training)
        if training.get("pruned"):
            return record_pruned(job, built, training)
        restored = validate(job, built)
        if not is_rank_zero():  # the validations ran on every rank (collectively); saving and scoring are rank 0's
            return {"status": "completed", "error": None}
        evaluate(job.cfg, job.run_dir, record_completed(job, built, training, restored))
        return update_record(job.run_dir, training={"session_job_seconds": time.monotonic() - job.began})
    except SIGTERMException:  # Lightning's own SIGTERM stop (outside the training steps) has no exit code: 0
        raise SystemExit(128 + signal.SIGTERM) from None
    except Exception as err:  # an interruption (BaseException) leaves the run `running`, to be resumed
        problem = machine_problem(err, job.run_dir, job.train_cfg)
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


# -------------------------------------------------------------------------------------------------------- fit
def fit(job: PreparedJob, built: Built, started: float) -> dict:
    """Train from the checkpoint (built.resume) or from step 0 to max_steps, a divergence or a stop signal; returns the
    record's training section. On a signal SignalCheckpoint has saved the step: the record counts the interruption
    (rank 0) and the exception goes on."""
    from slm.training.callbacks import RunPaused
    from slm.training.pruning import RunPruned

    train_cfg, module, throughput, preemption = job.train_cfg, built.module, built.throughput, built.preemption
    paused = pruned = None
    try:
        with OtherWork() as other:  # what else used the CPUs meanwhile: tokens/s on a shared machine reads lower
            try:
                built.trainer.fit(module, datamodule=built.datamodule,
                                  ckpt_path=str(built.resume) if built.resume is not None else None,
                                  weights_only=True)
            except RunPaused as pause:  # train.length.pause_at: the step is saved as last.ckpt
                paused = {"step": pause.step, "fraction": train_cfg.length.pause_at}
            except RunPruned as stop:  # hydra.sweeper.pruner: the trial's pruner stopped it (final)
                pruned = {"step": stop.step, "val_nll": stop.value, "reason": stop.reason}
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
        **({"paused": paused} if paused else {}), **({"pruned": pruned} if pruned else {}),
    }
    load = built.routing.summary()
    if load is not None:
        training["moe_load"] = load
    if train_cfg.world_size > 1:
        training.update(devices=train_cfg.parallel.devices, num_nodes=train_cfg.parallel.num_nodes, world_size=train_cfg.world_size)
    if train_cfg.accumulation() > 1:
        training.update(micro_batch_size=train_cfg.micro_batch(), accumulation=train_cfg.accumulation())
    return training


# --------------------------------------------------------------------------------------------------- validate
def validate(job: PreparedJob, built: Built) -> dict | None:
    """The last step's validation (unless training ended on one), the best validation's weights restored
    (train.validation.restore_best) or the averaged ones kept (train.validation.averaging.keep), and the test split's
    first windows scored (train.validation.windows); on every rank. Returns the metrics of the last validation that
    restored or kept weights replaced (None when nothing was; kept: averaged for the averaged ones)."""
    module, trainer, datamodule = built.module, built.trainer, built.datamodule
    if module.val_metrics.get("val_step") != trainer.global_step:
        trainer.validate(module, datamodule=datamodule, verbose=False)
    last_val = module.restore_best() if job.train_cfg.validation.restore_best else None
    if job.train_cfg.validation.averaging.keep and built.averaging is not None:
        last_val = built.averaging.keep(module)
    if job.train_cfg.validation.windows is not None:  # the test split's first windows, scored by the model saved next
        module.scoring_test = True
        trainer.validate(module, dataloaders=datamodule.test_dataloader(), verbose=False)
        module.scoring_test = False
    return last_val


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
    section = eval_section(summary, record.get("eval"))
    print(f"slm-train: evaluated {run_dir}: {brief(section.get('lm_eval') or {})}")
    return update_record(run_dir, eval=section)
