"""Decay branches: one wsd run, several token budgets (train.schedule.decay_branches, issue 42 §4).

A branch at fraction f of a wsd run IS the wsd run of f times its length (train.length.tokens x f, in whole batches as
any token budget, or round(train.length.steps x f)), the same config otherwise, with train.schedule.warmup_steps pinned
to the run's warmup in steps (so the two warmups agree) and no branches of its own. Its learning rate equals the run's
up to the step its own decay begins (slm.training.schedules.decay_start: never later than the run's), and training
batches are a pure function of (seed, step) (slm.data), so up to that step the two runs are the same run:

  - while the run trains, at the end of that step it saves its full training state into the branch's run directory
    as the branch's resume checkpoint (checkpoints/last.ckpt, atomic: slm.training.callbacks.BranchCheckpoints, before
    its own last.ckpt passes the step), with the branch's config.yaml and a record `running` holding the config and
    the `branch` section: {of: the run's key, fraction, step: where it branched, steps: its length};
  - once the run has ended, the same job trains each pending branch by resuming it in its own directory (slm.runs.job:
    train_run, the ordinary resume path; the resumed module takes the branch's schedule, not the checkpoint's:
    LanguageModelModule.apply_schedule), its train_log.jsonl and CSV log starting from the run's lines up to the
    branch's step (seed_logs): the branch records like any run (result.json with its own status, its config with its
    token budget, its validation, eval and weights), and equals, weights, log and validation bit for bit on a CPU, the
    wsd run trained alone with that budget and that warmup (tests/test_decay_branches.py).

A branch's run directory is a sibling of the run's, in the same run group (slm-collect and slm-status see it as a run):
`<run key>,branch=<fraction>` (branch_name). A job killed at any moment and started again trains nothing twice: the run
resumes or is skipped as ever, then the branches that are not settled resume from their own checkpoints. A branch whose
checkpoint is missing once the run has completed (a run that completed before its branches were asked for under the
same key) trains from step 0, which gives the same run. A branch of a run that failed or diverged before reaching the
branch's step has nothing to resume from and is not pending (it is left without a directory).

Standard library only at import (the sweepers and slm-status call pending_branches).
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass
from pathlib import Path

from slm.atomic import atomic_write
from slm.runs.layout import CHECKPOINT
from slm.runs.record import RecordError, load_record, settled, update_record

PREVIOUS = "previous.ckpt"  # slm.training.checkpoints.PREVIOUS (not imported here: it loads torch)
SECTION = "branch"
"""The record section of a branch's run: of (the key of the run it branched from), fraction, step, steps."""


def branch_name(run_name: str, fraction: float) -> str:
    """A branch's run-directory name: the run's key, `,branch=` and the fraction (slm.runs.keys keeps all of it)."""
    return f"{run_name},branch={float(fraction)!r}"


def fractions(cfg) -> list[float]:
    """train.schedule.decay_branches of a resolved config (a dict or an OmegaConf node), sorted; [] without any (and
    for a config that is None or holds no such setting)."""
    try:
        values = cfg["train"]["schedule"].get("decay_branches") if cfg is not None else None
    except (KeyError, TypeError, AttributeError):
        return []
    if not values or isinstance(values, (str, bytes)):
        return []
    try:
        return sorted({float(v) for v in values})
    except (TypeError, ValueError):
        return []


def branch_dirs(run_dir: str | os.PathLike, cfg) -> list[Path]:
    """The run directories of the run's decay branches (whether they exist yet or not), by fraction."""
    run_dir = Path(run_dir)
    return [run_dir.parent / branch_name(run_dir.name, f) for f in fractions(cfg)]


def has_checkpoint(run_dir: str | os.PathLike) -> bool:
    """Whether a run directory holds a checkpoint to resume from (last.ckpt, or previous.ckpt beside it)."""
    ckpts = Path(run_dir) / CHECKPOINT.parent
    return (ckpts / CHECKPOINT.name).exists() or (ckpts / PREVIOUS).exists()


def _status(run_dir: Path) -> str | None:
    return (load_record(run_dir) or {}).get("status")


def pending_branches(run_dir: str | os.PathLike, cfg, rerun_failed: bool = False) -> list[Path]:
    """The decay branches the job of `run_dir` (config `cfg`) would still train if it ran again: those whose record
    is not settled (slm.runs.record.settled with `rerun_failed`), except, when the run itself is settled as failed
    or diverged, those without a checkpoint (nothing to resume from; the run is not trained again). A branch whose
    record cannot be read is left alone (as the sweeper leaves an unreadable record). [] without branches.

    The sweeper's `finished(job)` holds for a job whose record is settled and for which this is empty."""
    run_dir = Path(run_dir)
    dirs = branch_dirs(run_dir, cfg)
    if not dirs:
        return []
    try:
        main = _status(run_dir)
    except RecordError:
        return []
    stuck = main in ("failed", "diverged") and settled(main, rerun_failed)  # it will not be trained again
    out = []
    for branch in dirs:
        try:
            status = _status(branch)
        except RecordError:
            continue
        if settled(status, rerun_failed) or (stuck and not has_checkpoint(branch)):
            continue
        out.append(branch)
    return out


def branches_settled(run_dir: str | os.PathLike, cfg, rerun_failed: bool = False) -> bool:
    """True when the run's decay branches leave its job nothing to train (pending_branches is empty)."""
    return not pending_branches(run_dir, cfg, rerun_failed)


@dataclass
class Branch:
    """A decay branch of a run, as its job trains it."""

    decay: object
    """Its slm.training.decay_branches.DecayBranch: fraction, steps, start (the step it branches at), length."""
    run_dir: Path
    cfg: dict
    """Its resolved config (branch_config)."""
    section: dict
    """Its record's `branch` section."""


def plan(cfg: dict, run_dir: str | os.PathLike, train_cfg=None, context_length: int | None = None) -> list[Branch]:
    """The decay branches of the run of `cfg` in `run_dir`, by fraction ([] without any); SettingsError for branches
    its length cannot have (slm.training.decay_branches). train_cfg: the run's TrainConfig when the caller holds it
    (default: made from the config); context_length: the model's (default: the config's model.context_length)."""
    if not fractions(cfg):
        return []
    if train_cfg is None:
        from slm.training.config import TrainConfig

        train_cfg = TrainConfig.from_node(cfg["train"])
    run_dir = Path(run_dir)
    context = int(context_length if context_length is not None else cfg["model"]["context_length"])
    warmup = train_cfg.warmup(train_cfg.max_steps(context))
    return [Branch(b, run_dir.parent / branch_name(run_dir.name, b.fraction), branch_config(cfg, b, warmup),
                   section(run_dir, b)) for b in train_cfg.decay_branches(context)]


def branch_config(cfg: dict, branch, warmup: int) -> dict:
    """The resolved config of a decay branch's run (`branch`: a slm.training.decay_branches.DecayBranch of this config's
    run, `warmup`: that run's warmup in steps): the run's, with the branch's train.length, train.schedule.warmup_steps
    pinned to `warmup`, no decay branches, and the kept checkpoints (train.checkpoint.keep_steps) it reaches."""
    from slm.renames import upgrade_train_fields

    out = copy.deepcopy(dict(cfg))
    train = upgrade_train_fields(dict(out["train"]))
    train["length"] = {**(train.get("length") or {}), "steps": None, **branch.length, "pause_at": None}
    train["schedule"] = {**(train.get("schedule") or {}), "warmup_steps": int(warmup), "decay_branches": []}
    checkpoint = dict(train.get("checkpoint") or {})
    if checkpoint.get("keep_steps"):
        checkpoint["keep_steps"] = [s for s in checkpoint["keep_steps"] if s <= branch.steps]
        train["checkpoint"] = checkpoint
    out["train"] = train
    return out


def section(run_dir: str | os.PathLike, branch) -> dict:
    """A branch's record section: the key of the run it branched from, the fraction, the step it branched at (the
    run's checkpoint it resumed from) and its length in steps."""
    return {"of": Path(run_dir).name, "fraction": branch.fraction, "step": branch.start, "steps": branch.steps}


def mark(branch_dir: str | os.PathLike, cfg: dict, branch_section: dict) -> None:
    """Write what a branch's directory holds besides its checkpoint: config.yaml and the record's config and branch
    section (a record `running` when it has none yet; a record of its own is otherwise kept as it is)."""
    import yaml

    branch_dir = Path(branch_dir)
    branch_dir.mkdir(parents=True, exist_ok=True)
    text = yaml.safe_dump(cfg, sort_keys=False).encode()
    atomic_write(branch_dir / "config.yaml", lambda f: f.write(text))
    if load_record(branch_dir) is None:
        update_record(branch_dir, status="running", error=None, config=cfg, branch=branch_section)
    else:
        update_record(branch_dir, branch=branch_section)


CSV_LOG = Path("logs") / "csv" / "metrics.csv"
"""The CSV logger's file in a run directory (slm.runs.assembly: KeptCSVLogger, name logs, version csv)."""


def seed_logs(run_dir: str | os.PathLike, branch_dir: str | os.PathLike, step: int) -> None:
    """Start a branch's train_log.jsonl with the run's lines of steps up to `step` (the steps they share), and its
    logs/csv/metrics.csv with the run's (the resumed branch keeps the rows before `step`: CSVHistory), unless the branch
    has files of its own: the branch's logs then read as those of the run trained alone."""
    from slm.training.train_log import NAME, kept_lines

    run_dir, branch_dir = Path(run_dir), Path(branch_dir)
    target, source = branch_dir / NAME, run_dir / NAME
    if not target.exists() and source.exists():
        text = "".join(line + "\n" for line in kept_lines(source, step).lines).encode("utf-8")
        atomic_write(target, lambda f: f.write(text))
    target, source = branch_dir / CSV_LOG, run_dir / CSV_LOG
    if not target.exists() and source.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        data = source.read_bytes()
        atomic_write(target, lambda f: f.write(data))
