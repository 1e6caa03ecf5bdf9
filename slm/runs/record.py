"""The run record: one `result.json` per run directory, always replaced atomically.

Top-level sections (schema_version 1):
  status       running | completed | failed | diverged | paused (train.length.pause_at) | pruned (halving, or an
               Optuna search's pruner)
  error        one line, or null
  config       the resolved Hydra config of the run (model, tokenizer, data, train, ...)
  model        every ModelConfig field (same names as conf/model) + params_* (params_active: per token) and
               flops_per_token; notes (settings that do nothing at this shape)
  data         tokenizer, sources (weights, tokens, cache keys), tokens_per_source, token_share
  training     max_steps, steps, tokens, wall_seconds, train_seconds, tokens_per_s, mfu, final_train_loss,
               other_cores_busy (other processes' CPU use during this session's training, in cores: slm.cpu_busy),
               diverged {step, loss} or null; moe_load {per_layer, max_load, min_load, steps} for a mixture of
               experts (the routing shares over the last logging window); init_from (train.init_from: path,
               model_dir, run_dir, weights_sha256, source_model {family, vocab_size, attention {causal, block},
               embedding {mask_token_id}}, source_run {run_group, key, status, objective, steps, tokens, val_nll,
               ...} when the source is a run with a record);
               attention_blocks [[first step, block], ...] under a block curriculum; paused {step, fraction, val_nll}:
               the last pause at train.length.pause_at
  eval         val_nll, val_ppl, val_step, val_nll_kind (nll: exact; nelbo: a masked-diffusion upper bound);
               val_curve [[step, val_nll], ...]: every validation of the run, in step order (resumes included);
               val_bpb and val_bytes_per_token (bits per UTF-8 byte: val_nll / ln 2 / bytes per token), and with
               train.validation.windows test_nll, test_ppl (test_ppl_bound for a diffusion run), test_targets, test_bpb,
               test_bytes_per_token;
               val_attention_block (block curriculum: the block the validation ran with, the last step's);
               with train.validation.averaging: val_nll_avg (the averaged weights' at the last validation),
               val_curve_avg [[step, nll], ...], averaged_weights {kind, updates, last_update, snapshots (lawa)}, and
               with its keep averaged_kept, last_val_nll and last_val_step (the raw weights'; restore_best writes
               restored_best with the same two);
               lm_eval {task: scores} and throughput, filled by later stages
  environment  python, package versions, device, hostname, git revision, omp_wait (libgomp's wait settings
               the run trained under, slm.omp_wait)
  artifacts    paths relative to the run directory (weights, checkpoint, logs)
  branch       a decay branch's run only (train.schedule.decay_branches, slm.runs.branches): of (the job key of the
               run it branched from, a sibling directory), fraction, step (the run's step it resumed from), steps
  health       a run that trained (slm.runs.health): flag (ok, spike, val_rise), spikes [{step, loss, median, steps}],
               val_rises [{step, val_nll, previous_step, previous}], steps_judged, warmup, rel, rule (the rules in words)
  halving      a run successive halving pruned (status `pruned`; hydra.sweeper.halving): rung (from 1, as the console
               numbers it; from 0 in records without `rungs`) of `rungs`, fraction, step, configuration (what tells it
               from the sweep's others), score (its configuration's mean validation loss there), rank of `of`
               configurations, kept (how many went on)
  pruner       a run an Optuna search's pruner stopped (status `pruned`; hydra.sweeper.pruner, slm.training.pruning):
               step, val_nll there, reason (one line), trial (its number), study, pruner (its name and arguments)
  created_at, updated_at  ISO-8601 UTC
"""

from __future__ import annotations

import json
import math
import os
from datetime import datetime, timezone
from pathlib import Path

from slm.atomic import atomic_write

SCHEMA_VERSION = 1
RESULT_FILE = "result.json"
STATUSES = ("running", "completed", "failed", "diverged", "paused", "pruned")
FINAL = ("completed", "failed", "diverged", "pruned")  # a run that ended (running: in progress or interrupted; paused:
# at train.length.pause_at, to go on; pruned: stopped there for good by successive halving, hydra.sweeper.halving,
# or by an Optuna search's pruner, hydra.sweeper.pruner)


def settled(status: str | None, rerun_failed: bool = False) -> bool:
    """True if a run recorded `status` is left alone when its job comes round again: completed or pruned, or
    failed / diverged unless `rerun_failed` (sweeps: rerun_failed=true; a single run always retries)."""
    return status in ("completed", "pruned") or (status in ("failed", "diverged") and not rerun_failed)


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _finite(value):
    """JSON has no NaN or Infinity: write non-finite floats as the strings "nan", "inf", "-inf"."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def write_json_atomic(path: str | os.PathLike, data: dict) -> None:
    """Write strict JSON atomically (slm.atomic: a temporary file beside it, fsync, rename; umask respected)."""
    text = json.dumps(_finite(data), indent=2, default=str, allow_nan=False) + "\n"
    atomic_write(path, lambda f: f.write(text.encode()))


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Write text atomically (slm.atomic), for the analysis's outputs that must not be left half-written."""
    atomic_write(path, lambda f: f.write(text.encode()))


class RecordError(ValueError):
    """A result.json (or another JSON file of a run) that exists but cannot be used; the message is one
    line, `<path>: <reason>`."""


SECTIONS = ("config", "model", "data", "training", "eval", "environment", "artifacts",
            "branch", "halving", "health")  # objects, or absent/null
_JSON_TYPES = {list: "an array", str: "a string", int: "a number", float: "a number", bool: "a boolean",
               type(None): "null"}


def read_object(path: str | os.PathLike) -> dict:
    """The JSON object in the file at `path`; RecordError if it cannot be read, parsed, or is no object."""
    try:
        text = Path(path).read_text()
    except UnicodeDecodeError:
        raise RecordError(f"{path}: not UTF-8 text") from None
    except OSError as err:
        raise RecordError(f"{path}: cannot read it ({err.strerror or type(err).__name__})") from None
    if not text.strip():
        raise RecordError(f"{path}: empty file")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise RecordError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(data, dict):
        raise RecordError(f"{path}: not a JSON object but {_JSON_TYPES.get(type(data), type(data).__name__)}")
    return data


def load_record(run_dir: str | os.PathLike) -> dict | None:
    """The run's record, or None if it has none yet. RecordError if its result.json cannot be read or
    parsed, is not a JSON object, or has a status or section of the wrong type."""
    path = Path(run_dir) / RESULT_FILE
    if not path.exists():
        return None
    record = read_object(path)
    if "status" in record and record["status"] not in STATUSES:
        raise RecordError(f"{path}: status {json.dumps(record['status'])} is not one of {', '.join(STATUSES)}")
    for key in SECTIONS:
        if record.get(key) is not None and not isinstance(record[key], dict):
            kind = _JSON_TYPES.get(type(record[key]), type(record[key]).__name__)
            raise RecordError(f"{path}: section {key!r} is {kind}, not an object")
    return record


def update_record(run_dir: str | os.PathLike, **sections) -> dict:
    """Merge `sections` into the record (dict sections merged key by key, others replaced) and save."""
    if "status" in sections and sections["status"] not in STATUSES:
        raise ValueError(f"status {sections['status']!r} is not one of {STATUSES}")
    record = load_record(run_dir) or {"schema_version": SCHEMA_VERSION, "created_at": now()}
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(record.get(key), dict):
            record[key] = {**record[key], **value}
        else:
            record[key] = value
    record["updated_at"] = now()
    write_json_atomic(Path(run_dir) / RESULT_FILE, record)
    return record
