"""What a job writes into its record (result.json, through slm.runs.record) and the lines it prints about itself.

  start             config.yaml and the record `running`: its config, model and training sections (the
                    init source's, init_from_section) and the environment; the banner saying what the run is
  record_completed  the weights and the tokenizer saved (model/), the line saying how training ended, the record
                    `completed` with its validation (and test) metrics, bits per byte, data and artifacts
  record_diverged   the record `diverged` with the step and the loss; no weights
  health            the `health` section of a run that trained (slm.runs.health: loss spikes, validation rises and
                    a flag), written by record_completed, record_diverged and record_paused
  record_failure    a job that could not start (invalid config or data): `failed` with its error line
"""

from __future__ import annotations

import math
import os
import time
from typing import TYPE_CHECKING

import yaml

from slm.components.parametrization import scheme_of
from slm.model import FLOPS_CONVENTION
from slm.model.budget import budget_knob
from slm.model.weights import save_model
from slm.omp_wait import wait_settings
from slm.renames import RenameError, upgrade_model_fields
from slm.runs.environment import environment
from slm.runs.errors import one_line
from slm.runs.health import check_run
from slm.runs.layout import CHECKPOINT
from slm.runs.record import load_record, update_record
from slm.settings import nested
from slm.training.distributed import is_rank_zero

if TYPE_CHECKING:
    from slm.runs.assembly import Built
    from slm.runs.preflight import PreparedJob


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
        return f"muon lr {train_cfg.optim.muon.lr:g} on the hidden matrices + adamw lr {train_cfg.lr:g} on the rest"
    return f"{train_cfg.optimizer} lr {train_cfg.lr:g}"


def _parametrization_words(model_cfg) -> str:
    """'parametrization sp', 'parametrization mup from width 256' (the shape its learning rates were tuned at)."""
    p = model_cfg.parametrization
    base = {"mup": f" from width {p.base_width}",
            "completep": f" from width {p.base_width}, depth {p.base_depth}"}.get(p.kind, "")
    return f"parametrization {p.kind}{base}"


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
                 f"{train_cfg.precision}, accelerator {train_cfg.parallel.accelerator}, seed {train_cfg.seed}")
    if job.init is not None:
        lines.append(f"slm-train: weights from {job.init.given}")
    return lines


ARTIFACTS = {"checkpoint": str(CHECKPOINT), "train_log": "train_log.jsonl", "logs": "logs"}
"""The record's artifacts of a run that trained (a completed one adds its weights)."""


VAL_KEYS = ("val_nll", "val_ppl", "val_step", "val_attention_block")
"""The module's validation metrics the record names itself; the others (an objective's own: a preference run's
val_reward_accuracy, ...) are recorded as they are."""


def _data_section(job: PreparedJob, datamodule) -> dict:
    """The record's data section: the sources and the tokens drawn from each; a records run's records (data.records)
    and the records trained on so far instead."""
    if job.records is not None:
        return {**job.data.describe(), "records": job.records.describe(), **datamodule.tokens_per_source()}
    consumed = datamodule.tokens_per_source()
    total = sum(consumed.values())
    return {**job.data.describe(), "tokens_per_source": consumed,
            "token_share": {k: (v / total if total else 0.0) for k, v in consumed.items()}}


def _bits_per_byte(data, val_nll: float, test_nll: float | None) -> dict:
    """val_bpb (and test_bpb): the NLL in bits per UTF-8 byte of text, so runs with different tokenizers
    compare on one axis (a diffusion run's NELBO gives a bound, as its val_nll is), with the bytes per token
    used (`data.bytes_per_token`: slm.data.prepare.PreparedData's, or a records run's completions',
    slm.data.records.PreparedRecords)."""
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
                         training=training, health=health(job, built, val_curve(job.run_dir, built.module)),
                         data=_data_section(job, built.datamodule), artifacts=dict(ARTIFACTS))


def health(job: PreparedJob, built: Built, curve: list) -> dict:
    """The record's `health` section (slm.runs.health) of the run's train_log.jsonl and validation curve `curve`."""
    return check_run(job.run_dir, job.train_cfg.warmup(job.max_steps), curve, built.module.objective.nll_kind)


def val_curve(run_dir, module) -> list[list]:
    """The run's validation curve for its record: the module's (from its checkpoint on, resumes included) with the
    validations the record holds already at other steps (a pause's: it validates after saving its checkpoint, so the
    checkpoint's curve lacks it), in step order."""
    return _merged_curve(run_dir, "val_curve", module.val_curve)


def _merged_curve(run_dir, field: str, curve: list) -> list[list]:
    """`curve` ([[step, nll], ...]) with the points the record's eval.<field> holds at other steps, in step order."""
    recorded = ((load_record(run_dir) or {}).get("eval") or {}).get(field) or []
    points = {int(p[0]): float(p[1]) for p in recorded if isinstance(p, list) and len(p) == 2}
    points.update({int(step): float(nll) for step, nll in curve})
    return [[step, points[step]] for step in sorted(points)]


def averaged(run_dir, built: Built) -> dict:
    """The record's eval entries of train.validation.averaging (val_nll_avg, val_curve_avg, averaged_weights); {}
    without it."""
    if built.averaging is None:
        return {}
    return {**built.averaging.record(), "val_curve_avg": _merged_curve(run_dir, "val_curve_avg", built.averaging.curve)}


def record_paused(job: PreparedJob, built: Built, training: dict) -> dict:
    """The run paused at train.length.pause_at's step (its state saved as last.ckpt before this): validated there (the
    score a halving rung reads from eval.val_curve) and recorded `paused`; rank 0 writes. The checkpoint was saved
    before this validation, so the run goes on as if it had not paused."""
    built.trainer.validate(built.module, datamodule=built.datamodule, verbose=False)
    if not is_rank_zero():
        return {"status": "paused", "error": None}
    module, step = built.module, training["paused"]["step"]
    nll = module.val_metrics.get("val_nll")
    if not math.isfinite(nll if isinstance(nll, (int, float)) else float("nan")):
        raise FloatingPointError(f"validation NLL is {nll} at the pause (step {step})")
    print(f"slm-train: paused at step {step:,} of {job.max_steps:,} (train.length.pause_at="
          f"{training['paused']['fraction']:g}), checkpointed in {CHECKPOINT}; validation {module.objective.nll_kind} "
          f"{nll:.4f}; the same command with a later pause_at, or none, goes on")
    training["paused"]["val_nll"] = nll
    curve = val_curve(job.run_dir, module)
    return update_record(job.run_dir, status="paused", training=training, data=_data_section(job, built.datamodule),
                         eval={"val_curve": curve, **averaged(job.run_dir, built)}, health=health(job, built, curve))


def record_pruned(job: PreparedJob, built: Built, training: dict) -> dict:
    """The run its Optuna trial's pruner stopped at a validation (slm.training.pruning): recorded `pruned`, a final
    state, with `pruner` (the trial, the pruner, the step, val_nll there and the reason) and its validation curve;
    rank 0 writes. No weights are saved: a pruned trial is not a result."""
    from slm.training.trial_link import TrialLink

    if not is_rank_zero():
        return {"status": "pruned", "error": None}
    module, stop = built.module, training.pop("pruned")
    link = TrialLink.read(job.run_dir)
    print(f"slm-train: pruned at step {stop['step']:,} of {job.max_steps:,} by the study's pruner: {stop['reason']}")
    curve = val_curve(job.run_dir, module)
    section = {**stop, "trial": link.number if link else None, "study": link.study if link else None,
               "pruner": link.describe() if link else None}
    return update_record(job.run_dir, status="pruned", pruner=section, training=training,
                         data=_data_section(job, built.datamodule), eval={"val_curve": curve, **averaged(job.run_dir, built)},
                         health=health(job, built, curve))


def record_completed(job: PreparedJob, built: Built, training: dict, restored: dict | None) -> dict:
    """Save the weights and the tokenizer (model/), print how training ended and record the run `completed` with
    its validation (and test) metrics; rank 0. A non-finite validation NLL raises (the run is then failed)."""
    from slm.durations import duration
    from slm.training.progress import perplexity

    run_dir, module = job.run_dir, built.module
    save_model(module.model, run_dir / "model")
    job.data.tokenizer.save(run_dir / "model")
    val = module.val_metrics
    if not math.isfinite(val.get("val_nll", float("nan"))):
        raise FloatingPointError(f"validation NLL is {val.get('val_nll')}")
    kept = (restored or {}).get("kept") == "averaged"
    best = (" (the averaged weights, kept)" if kept else " (the best, restored)") if restored else ""
    avg = built.averaging.metrics.get("val_nll") if built.averaging is not None and not kept else None
    if avg is not None:  # train.validation.averaging without keep: the averaged weights' too
        best += f"; averaged weights ({built.averaging.averager.settings.kind}) {avg:.4f}"
    steps, session = training["steps"], training["session_steps"]
    print(f"slm-train: trained to step {steps:,} of {job.max_steps:,} ({session:,} step{'' if session == 1 else 's'} in "
          f"{duration(training['wall_seconds'])}); validation "
          f"{module.objective.nll_kind} {val['val_nll']:.4f} ({perplexity(module.objective.nll_kind, val['val_ppl'])})"
          f" at step {val['val_step']}"
          f"{best}", flush=True)
    artifacts = {**ARTIFACTS, "weights": "model/model.safetensors", "model_dir": "model"}
    per_byte = _bits_per_byte(job.records or job.data, val["val_nll"], module.test_metrics.get("test_nll"))
    curve = val_curve(run_dir, module)
    return update_record(run_dir, status="completed", error=None, training=training, health=health(job, built, curve),
                         data=_data_section(job, built.datamodule), artifacts=artifacts,
                         eval={"val_nll": val["val_nll"], "val_step": val["val_step"],  # exp(a NELBO): a bound
                               ("val_ppl" if module.objective.nll_kind == "nll" else "val_ppl_bound"): val["val_ppl"],
                               "val_nll_kind": module.objective.nll_kind, **module.test_metrics, **per_byte,
                               "val_curve": curve,
                               **averaged(run_dir, built),
                               **({("averaged_kept" if kept else "restored_best"): True,
                                   "last_val_nll": restored["val_nll"],
                                   "last_val_step": restored["val_step"]} if restored else {}),
                               **({"val_attention_block": val["val_attention_block"]}
                                  if "val_attention_block" in val else {}),
                               **{k: v for k, v in val.items() if k not in VAL_KEYS}})


def record_failure(run_dir: str | os.PathLike, cfg: dict, err: BaseException | str) -> dict:
    """Record a job that could not start (invalid config or data) as failed, with its error line."""
    return update_record(run_dir, status="failed", error=err if isinstance(err, str) else one_line(err), config=cfg)


SOURCE_MODEL = ("family", "vocab_size", "attention.causal", "attention.block", "embedding.mask_token_id")
"""What training.init_from.source_model says of the model the weights come from (a dotted field under its group)."""


def source_model(config: dict) -> dict:
    """SOURCE_MODEL of a stored model config (in any spelling ever written: slm.renames), None where absent."""
    try:
        config = upgrade_model_fields(config)
    except RenameError:
        pass
    return nested({name: _dotted(config, name) for name in SOURCE_MODEL})


def _dotted(fields: dict, name: str):
    for part in name.split("."):
        fields = fields.get(part) if isinstance(fields, dict) else None
    return fields


def init_from_section(source) -> dict:
    """The run record's training.init_from: where the weights came from (absolute paths, the weights' SHA-256)
    and, for a run directory with a record, what that run was."""
    section = {"path": source.given, "model_dir": str(source.model_dir) if source.model_dir else None,
               "run_dir": str(source.run_dir) if source.run_dir else None, "weights_sha256": source.sha256()}
    if source.checkpoint is not None:  # a training checkpoint file (checkpoints/step-<N>.ckpt): its SHA-256 above
        section.update(checkpoint=str(source.checkpoint), checkpoint_step=source.step())
    config = source.config()
    section["source_model"] = source_model(config)
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
