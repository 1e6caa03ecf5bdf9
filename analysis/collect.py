"""result.json files -> one tidy table (pandas), one row per run.

    table = collect(["runs/cpu_default", "runs/extra"])      # walks the directories
    table.to_parquet("results.parquet")
    table = load_results("results.parquet")                   # or a runs directory, or a .csv

Where runs are found: every directory holding a `result.json` is one run (the walk does not descend
into it). A Hydra job folder with no result.json (it has `.hydra/`, `config.yaml`, `checkpoints/` or a
train log) becomes a row with status `stopped` (`running` while a process holds its lock); a job of the
sweep whose folder was never created is a row with status `pending`: the jobs the sweepers listed in
sweep.json, or, for a sweep from before sweep.json, those of a basic-sweeper `multirun.yaml` when the
collector can expand it exactly (simple `key=a,b,c` overrides; anything else is not guessed). Statuses are
slm.runs.status's vocabulary, the same words as slm-status. A result.json that cannot be read or parsed, is no
JSON object, or has a status or section of the wrong type (slm.runs.record.load_record), and a
multirun.yaml that cannot be read, are each named in one warning line (logger `analysis.collect`) with
the reason, and skipped.

Columns (missing values are NaN/None; every column is documented in COLUMN_DOCS):
  identity   run (path relative to the collected root), sweep (the run group), run_dir, status, error
  axes       every scalar ModelConfig field under its own name (family, n_layers, d_model, n_heads,
             n_kv_heads, head_dim, d_ff, position, norm, mlp, canon_set, layer_repeat, ...; layer_types and
             mlp_types as "conv,conv,attn"; records from before layer_types are upgraded), data (mix
             name), tokenizer, objective, seed, lr, batch_size, schedule, precision
  counts     params_total, params_active (per token: less the experts a mixture of experts skips),
             params_embedding, params_non_embedding, flops_per_token, tokens, steps, max_steps,
             train_flops = flops_per_token x tokens; for a run whose width was solved for a parameter
             budget (model.param_budget): budget_count (total | active), budget_tolerance (the run's
             model.budget_tolerance, 0.25 when the record predates it; None: any distance),
             budget_error = params_<budget_count> / param_budget - 1 and budget_knob (which sizes the
             solver moved: "d_model", or e.g. "d_model, d_ff 256→336" when it tuned the MLP too)
  training   wall_seconds, train_seconds, train_tokens_per_s, mfu, final_train_loss, diverged_step,
             moe_max_load (a mixture of experts' routing balance: 1 = even), train_other_cores (other
             processes' CPU use while it trained, in cores)
  metrics    val_nll, val_nll_kind (nll exact | nelbo a diffusion bound), val_ppl (exact runs only),
             val_ppl_bound (diffusion runs: exp of a NELBO, a bound on the perplexity), val_step; per lm-eval
             task: score_<task> (headline value), stderr_<task>,
             metric_<task> (lm-eval's "metric,filter" key), samples_<task> (documents scored),
             chance_<task> (random-guess accuracy of a multiple-choice task, see chance_of); per suite:
             avg_<suite> (eval.lm_eval.averages), tasks_avg_<suite> (its member tasks, comma-separated),
             stderr_avg_<suite> (propagated: sqrt(sum stderr_i^2) / k over its k tasks, assuming the
             tasks' errors are independent; empty when a member has none), chance_avg_<suite> (the mean
             of the members' chance levels, when every member has one); evaluations no longer record a
             one-task "average" (older records' are kept: single_task_average flags them)
  old names  records from before names said what their numbers are collect into today's columns: a shipped
             task's former name (RENAMED_TASKS: slm_shakespeare_ppl, whose headline is bits per byte, is
             score_slm_shakespeare_bpb, its members in tasks_avg_<suite> too) and a diffusion run's val_ppl
             (val_ppl_bound)
  throughput decode_tokens_per_s, generate_tokens_per_s, time_to_first_token_s, peak_memory_bytes,
             peak_memory_measure, kv_cache_bytes, decode_device, decode_dtype, decoder (autoregressive |
             masked_diffusion), decode_sampler (a diffusion sampler's settings), and the conditions:
             decode_threads, decode_prompt_tokens, decode_new_tokens, decode_cuda_graph, decode_compile,
             decode_other_cores (other processes' CPU use during the measurement, in cores; empty: not
             recorded) (eval.throughput, batch 1)
  provenance device, git_revision, updated_at
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import os
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from slm.runs.record import RESULT_FILE, RecordError, load_record
from slm.runs.status import ORDER, PENDING, listed_jobs, live_status, sweep_lr_multipliers

log = logging.getLogger(__name__)

ALL_STATUSES = ORDER
"""Run statuses in the table: slm.runs.status's vocabulary, the words slm-status and the sweepers use (a run
recorded running that no process trains is `stopped`; a job folder without a record is `stopped`, or
`running` while its lock is held; a job of the sweep with no folder is `pending`)."""

SWEEP_AXES = ["family", "n_layers", "d_model", "n_heads", "n_kv_heads", "head_dim", "d_ff", "position", "norm",
              "norm_placement", "mlp", "layer_types", "mlp_types", "n_experts", "top_k", "qk_norm", "canon_set",
              "layer_repeat", "init", "sliding_window", "tie_embeddings", "context_length", "vocab_size", "objective",
              "parametrization", "data", "tokenizer", "optimizer", "lr", "lr_multiplier", "batch_size", "schedule",
              "precision", "seed"]
"""Columns that describe what was trained, shown first (a configuration = these minus the nuisance axes seed, lr
and lr_multiplier: analysis.schema)."""

COUNT_COLUMNS = ["params_total", "params_active", "params_embedding", "params_non_embedding", "flops_per_token",
                 "tokens", "steps", "max_steps", "train_flops", "param_budget", "budget_count", "budget_tolerance",
                 "budget_error", "budget_knob"]
DEFAULT_BUDGET_TOLERANCE = 0.25
"""model.budget_tolerance of a record that predates it: such runs were solved with 0.25 (the default since is
slm.model.budget.SOLVER_KEYS'; not imported: analysis reads result files only)."""
TRAINING_COLUMNS = ["wall_seconds", "train_seconds", "train_tokens_per_s", "mfu", "final_train_loss", "diverged_step",
                    "moe_max_load", "train_other_cores"]
THROUGHPUT_COLUMNS = ["decode_tokens_per_s", "generate_tokens_per_s", "time_to_first_token_s", "peak_memory_bytes",
                      "peak_memory_measure", "kv_cache_bytes", "decode_device", "decode_dtype", "decoder",
                      "decode_sampler", "decode_threads", "decode_prompt_tokens", "decode_new_tokens",
                      "decode_cuda_graph", "decode_compile", "decode_other_cores"]
METRIC_COLUMNS = ["val_nll", "val_nll_kind", "val_ppl", "val_ppl_bound", "val_bpb", "val_step"]
ID_COLUMNS = ["run", "sweep", "status", "error", "eval_error"]
TAIL_COLUMNS = ["device", "git_revision", "updated_at", "run_dir"]

COLUMN_DOCS = {
    "run": "run directory relative to the collected root", "sweep": "run group (the folder above the run)",
    "status": f"one of {', '.join(ALL_STATUSES)}", "error": "the record's error line",
    "eval_error": "why the lm-eval suite failed after training (the run itself completed)",
    "data": "data mix name (data.name)", "tokenizer": "tokenizer name", "objective": "training objective",
    "seed": "train.seed", "lr": "peak learning rate (train.lr: AdamW's, and the base of a parametrization's "
                                "per-group multipliers)",
    "lr_multiplier": "the multiplier of the point's lr this run was trained at (hydra.sweeper.lr_search; 1: the "
                     "shared lr; empty: no lr search)",
    "parametrization": "model.parametrization: sp | mup | completep (how init and lrs scale with shape)",
    "optimizer": "train.optimizer: adamw | muon | lion",
    "mup_<field>": "model.mup.<field>: the base shape mup / completep scale from (base_width, base_depth, ...); "
                   "empty under sp, which ignores it",
    "scaling": "the parametrization's multipliers at this shape (JSON; empty for sp)", "tokens": "training tokens seen",
    "train_flops": "training FLOPs = flops_per_token x tokens (PaLM convention, see model.flops_convention)",
    "train_tokens_per_s": "training throughput (tokens/s)",
    "train_other_cores": "CPU time other processes used while the run trained (its last session), in cores (0: an "
                         "otherwise idle machine; empty: not recorded)", "diverged_step": "step of the non-finite loss",
    "params_active": "parameters one token uses (= params_total except for a mixture of experts)",
    "moe_max_load": "mixture of experts: largest expert share of routed tokens x n_experts over the last logging "
                    "window (1 = balanced; n_experts = every token on one expert)",
    "notes": "settings that do not do what their name suggests at this shape (model.notes)",
    "val_nll": "validation NLL (nats/token), or for a masked-diffusion run its NELBO: see val_nll_kind",
    "val_nll_kind": "nll: an exact NLL; nelbo: a masked-diffusion upper bound on the NLL (not comparable with nll)",
    "val_bpb": "validation NLL in bits per UTF-8 byte of text (val_nll / ln 2 / val_bytes_per_token): comparable "
               "across tokenizers; a bound when val_nll is one (val_nll_kind nelbo)",
    "test_bpb": "test NLL in bits per UTF-8 byte (train.eval_windows runs)",
    "val_bytes_per_token": "UTF-8 bytes of text per token of the validation split (the mix's sources weighted)",
    "val_ppl": "validation perplexity (exp of val_nll) of a run whose val_nll is an exact NLL",
    "val_ppl_bound": "exp of a masked-diffusion run's val_nll (a NELBO): an upper bound on its perplexity",
    "decode_tokens_per_s": "batch-1 decode speed (tokens/s)",
    "generate_tokens_per_s": "batch-1 generation speed, prefill included (tokens/s)",
    "decoder": "how the model decodes: autoregressive or masked_diffusion (parallel, by its sampler)",
    "decode_sampler": "a diffusion model's sampler settings for the decode speed", "time_to_first_token_s": "batch-1 prefill time (s)",
    "peak_memory_bytes": "peak memory during decode (bytes; see peak_memory_measure)",
    "decode_threads": "torch threads the decode speed was measured with",
    "decode_prompt_tokens": "prompt length of the decode-speed measurement (tokens)",
    "decode_new_tokens": "tokens generated per call in the decode-speed measurement",
    "decode_cuda_graph": "whether the decode step replayed a CUDA graph", "decode_compile": "whether the decode step "
    "ran through torch.compile",
    "decode_other_cores": "CPU time other processes used while the decode speed was measured, in cores (0: an "
                          "otherwise idle machine; empty: not recorded)",
    "score_<task>": "headline lm-eval value of the task (metric_<task> names it)",
    "stderr_<task>": "lm-eval's standard error of score_<task>", "samples_<task>": "documents scored",
    "chance_<task>": "random-guess accuracy of a multiple-choice task (mean over its documents of 1 / choices); "
                     "empty for other tasks",
    "avg_<suite>": "mean headline score of the suite's averaged tasks",
    "tasks_avg_<suite>": "the tasks averaged into avg_<suite>, comma-separated",
    "stderr_avg_<suite>": "standard error of avg_<suite>: sqrt(sum of the tasks' stderr^2) / k, assuming independent "
                          "tasks; empty when a task has no stderr",
    "chance_avg_<suite>": "mean chance level of the averaged tasks (when every one has one)",
    "param_budget": "the parameter budget the width was solved for (model.param_budget; empty: d_model as given)",
    "budget_count": "which count the budget is for: total or active parameters (model.budget_count)",
    "budget_tolerance": "how far from the budget the solver may land, as a fraction (model.budget_tolerance)",
    "budget_error": "params_<budget_count> / param_budget - 1: how far the solved width landed from the budget",
    "budget_knob": "which sizes the budget solver moved (model.budget_knob): d_model (the width, the family's MLP "
                   "kept) or e.g. 'd_model, d_ff 256→336' (the MLP hidden size tuned after it; records from before "
                   "the second knob: d_model)",
}

RENAMED_TASKS = {"slm_shakespeare_ppl": "slm_shakespeare_bpb"}
"""Shipped tasks by their former names (as slm.eval.RENAMED_TASKS): a record's scores under an old name are read
into the new name's columns, unless the record also holds the new name (scored again since: that wins)."""

KNOWN_CHANCE = {
    "slm_shakespeare_mc": 0.25,  # the true line end and 3 distractors (slm/eval/offline_tasks.py)
    "hellaswag": 0.25, "mmlu": 0.25,  # 4 endings / 4 letters in every document
    "piqa": 0.5, "winogrande": 0.5,  # 2 solutions / 2 options in every document
}
"""Random-guess accuracy of multiple-choice tasks whose every document has the same number of choices, for
records written before the evaluation recorded it (eval.lm_eval.details[task].chance). Tasks not listed
(arc_challenge: 3 to 5 choices; truthfulqa_mc2: not an argmax accuracy; generation tasks) get no chance
level unless their record has one."""
CHANCE_METRICS = ("acc", "acc_norm")
"""Headline metrics for which a chance level means something (argmax accuracies)."""

# Substrings of metric or column names whose values are better when lower.
LOWER_IS_BETTER = ("nll", "perplexity", "ppl", "bits_per_byte", "bpb", "loss", "byte_perplexity")
_SKIP_DIRS = {".hydra", "checkpoints", "model", "logs", "eval", "__pycache__", ".git"}
_JOB_MARKERS = (".hydra", "config.yaml", "checkpoints", "train_log.jsonl", "train.log")


def lower_is_better(name: str | None) -> bool:
    """Whether a metric (lm-eval key like "bits_per_byte,none", or a column name) is better when lower."""
    if not name:
        return False
    base = str(name).split(",")[0].lower()
    return any(token in base for token in LOWER_IS_BETTER)


def _number(value):
    """A float for numbers and the record's non-finite strings ("nan", "inf"); None for anything else."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return None
        return number
    return None


def _scalar(value):
    """Model fields that are lists/dicts become a compact string so the table stays one value per cell: a
    list of names as "conv,conv,attn" (as a layer pattern is written on the command line), others as JSON."""
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return ",".join(value)
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value, sort_keys=True)
    return value


def _stderr(details: dict, metric: str | None) -> float | None:
    if not metric:
        return None
    name, _, filt = metric.partition(",")
    for key in (f"{name}_stderr,{filt}" if filt else f"{name}_stderr", f"{name}_stderr"):
        number = _number(details.get(key))
        if number is not None and math.isfinite(number):
            return number
    return None


def chance_of(task: str, details: dict, metric: str | None) -> float | None:
    """The chance level of a task's headline score: the record's own (slm.eval.run.chance_level), else
    KNOWN_CHANCE; None unless the headline metric is an argmax accuracy (acc, acc_norm)."""
    if (metric or "").split(",")[0] not in CHANCE_METRICS:
        return None
    level = _number(details.get("chance"))
    if level is None or not math.isfinite(level):
        level = KNOWN_CHANCE.get(task)
    return level


def _average_members(lm: dict, config: dict, suite: str) -> list[str] | None:
    """The tasks averaged into a suite: eval.lm_eval.average_tasks (written since the evaluation records it),
    else the run's `eval` config when it names this suite; None when unknown."""
    tasks = (lm.get("average_tasks") or {}).get(suite)
    ev = config.get("eval") if isinstance(config.get("eval"), dict) else {}
    average = ev.get("average")
    if not (isinstance(tasks, list) and tasks):
        if ev.get("name") == suite and isinstance(average, list) and average:
            tasks = average
        elif isinstance(average, dict) and isinstance(average.get(suite), list) and average[suite]:
            tasks = average[suite]
        else:
            return None
    return [RENAMED_TASKS.get(str(t), str(t)) for t in tasks]


def _renamed(lm: dict) -> dict:
    """eval.lm_eval with its tasks under today's names (RENAMED_TASKS); a task recorded under both names keeps
    the new name's entries."""
    lm = dict(lm)
    for key in ("scores", "metrics", "details"):
        entries = lm.get(key)
        if isinstance(entries, dict) and any(name in entries for name in RENAMED_TASKS):
            renamed = {RENAMED_TASKS.get(name, name): value for name, value in entries.items()
                       if name not in RENAMED_TASKS or RENAMED_TASKS[name] not in entries}
            lm[key] = renamed
    return lm


def average_stderr(stderrs) -> float | None:
    """Standard error of the mean of k task scores, sqrt(sum se_i^2) / k, assuming the tasks' errors are
    independent; None when any se_i is unknown."""
    values = [_number(v) for v in stderrs]
    if not values or any(v is None or not math.isfinite(v) for v in values):
        return None
    return math.sqrt(sum(v * v for v in values)) / len(values)


def row_from_record(record: dict, run_dir: str | os.PathLike, root: str | os.PathLike | None = None) -> dict:
    """One table row from a result.json record."""
    run_dir = Path(run_dir)
    config = record.get("config") or {}
    model = record.get("model") or {}
    data = record.get("data") or {}
    training = record.get("training") or {}
    ev = record.get("eval") or {}
    env = record.get("environment") or {}
    train_cfg = config.get("train") or {}

    row: dict = {"run": _relative(run_dir, root), "sweep": run_dir.parent.name if root is not None else None,
                 "status": live_status(record.get("status"), run_dir), "error": record.get("error"),
                 "eval_error": (record.get("eval") or {}).get("lm_eval_error")}
    if not model and isinstance(config.get("model"), dict):  # a run that failed before its model section
        model = config["model"]
    model = _current_model_fields(model)
    for key, value in model.items():
        if key in ("flops_convention",):
            continue
        if key == "mup" and isinstance(value, dict):  # the base shape of mup / completep: mup_base_width, ...
            if model.get("parametrization", "sp") != "sp":  # sp ignores it: empty, as in records before it
                row.update({f"mup_{name}": v for name, v in value.items()})
            continue
        row[key] = "; ".join(value) if key == "notes" else _scalar(value)
    tokenizer = data.get("tokenizer") if isinstance(data.get("tokenizer"), dict) else {}
    row["data"] = data.get("name") or (config.get("data") or {}).get("name")
    row["tokenizer"] = tokenizer.get("name") or (config.get("tokenizer") or {}).get("name")
    row["objective"] = train_cfg.get("objective")
    row["optimizer"] = train_cfg.get("optimizer") or "adamw"  # the only optimizer before train.optimizer
    row["seed"] = train_cfg.get("seed")
    row["lr"] = _number(train_cfg.get("lr"))
    row["batch_size"] = train_cfg.get("batch_size")
    row["schedule"] = train_cfg.get("schedule")
    row["precision"] = training.get("precision") or train_cfg.get("precision")
    if row["precision"] is not None:
        row["precision"] = str(row["precision"])

    row["tokens"] = _number(training.get("tokens"))
    row["steps"] = _number(training.get("steps"))
    row["max_steps"] = _number(training.get("max_steps"))
    fpt = _number(model.get("flops_per_token"))
    row["train_flops"] = fpt * row["tokens"] if fpt is not None and row["tokens"] is not None else None
    model_cfg = config.get("model") if isinstance(config.get("model"), dict) else {}
    budget = _number(model.get("param_budget", model_cfg.get("param_budget")))
    row["param_budget"] = budget
    if budget is not None and budget > 0:
        counted = str(model_cfg.get("budget_count") or "total")
        row["budget_count"] = counted
        row["budget_tolerance"] = (_number(model_cfg["budget_tolerance"]) if "budget_tolerance" in model_cfg
                                   else DEFAULT_BUDGET_TOLERANCE)
        params = _number(model.get(f"params_{counted}"))
        row["budget_error"] = params / budget - 1 if params is not None else None
        row["budget_knob"] = model.get("budget_knob") or "d_model"  # before the second knob: the width only
    row["wall_seconds"] = _number(training.get("wall_seconds"))
    row["train_seconds"] = _number(training.get("train_seconds"))
    row["train_tokens_per_s"] = _number(training.get("tokens_per_s"))
    row["train_other_cores"] = _number(training.get("other_cores_busy"))
    row["mfu"] = _number(training.get("mfu"))
    row["final_train_loss"] = _number(training.get("final_train_loss"))
    diverged = training.get("diverged")
    row["diverged_step"] = _number(diverged.get("step")) if isinstance(diverged, dict) else None
    load = training.get("moe_load")
    row["moe_max_load"] = _number(load.get("max_load")) if isinstance(load, dict) else None

    row["val_nll"] = _number(ev.get("val_nll"))
    row["val_nll_kind"] = ev.get("val_nll_kind") or ("nll" if row["val_nll"] is not None else None)
    bound = row["val_nll_kind"] == "nelbo"  # before val_ppl_bound, a diffusion run's bound was recorded as val_ppl
    row["val_ppl"] = None if bound else _number(ev.get("val_ppl"))
    if bound:  # a column only where some run has a bound
        row["val_ppl_bound"] = _number(ev.get("val_ppl_bound", ev.get("val_ppl")))
    row["val_step"] = _number(ev.get("val_step"))
    row["test_nll"] = _number(ev.get("test_nll"))
    row["test_targets"] = _number(ev.get("test_targets"))
    for name in ("val_bpb", "test_bpb", "val_bytes_per_token", "test_bytes_per_token"):
        row[name] = _number(ev.get(name))
    row["epochs"] = train_cfg.get("epochs")
    row["windows_per_epoch"] = train_cfg.get("windows_per_epoch")
    lm = _renamed(ev.get("lm_eval") or {})
    details = lm.get("details") or {}
    metrics = lm.get("metrics") or {}
    for task, score in (lm.get("scores") or {}).items():
        task_details = details.get(task) or {}
        row[f"score_{task}"] = _number(score)
        row[f"stderr_{task}"] = _stderr(task_details, metrics.get(task))
        row[f"metric_{task}"] = metrics.get(task)
        row[f"samples_{task}"] = _number(task_details.get("samples"))
        row[f"chance_{task}"] = chance_of(task, task_details, metrics.get(task))
    for suite, value in (lm.get("averages") or {}).items():
        row[f"avg_{suite}"] = _number(value)
        members = _average_members(lm, config, suite)
        if members:
            row[f"tasks_avg_{suite}"] = ",".join(members)
            row[f"stderr_avg_{suite}"] = average_stderr([row.get(f"stderr_{t}") for t in members])
            chances = [row.get(f"chance_{t}") for t in members]
            row[f"chance_avg_{suite}"] = (sum(chances) / len(chances)
                                          if all(c is not None for c in chances) else None)
    tp = ev.get("throughput") or {}
    row["decode_tokens_per_s"] = _number(tp.get("decode_tokens_per_s"))
    row["time_to_first_token_s"] = _number(tp.get("time_to_first_token_s"))
    row["peak_memory_bytes"] = _number(tp.get("peak_memory_bytes"))
    row["peak_memory_measure"] = tp.get("peak_memory_measure")
    row["kv_cache_bytes"] = _number(tp.get("kv_cache_bytes"))
    row["decode_device"] = tp.get("device")
    row["decode_dtype"] = tp.get("dtype")
    row["generate_tokens_per_s"] = _number(tp.get("generate_tokens_per_s"))
    row["decoder"] = tp.get("decoder", "autoregressive") if tp else None  # records before diffusion: AR
    row["decode_threads"] = _number(tp.get("torch_threads"))
    row["decode_prompt_tokens"] = _number(tp.get("prompt_tokens"))
    row["decode_new_tokens"] = _number(tp.get("new_tokens"))
    row["decode_cuda_graph"] = tp.get("cuda_graph") if isinstance(tp.get("cuda_graph"), bool) else None
    row["decode_compile"] = tp.get("compile") if isinstance(tp.get("compile"), bool) else None
    row["decode_other_cores"] = _number(tp.get("other_cores_busy"))
    sampler = tp.get("sampler") or {}
    row["decode_sampler"] = (f"blocks of {sampler.get('block_length')}, {sampler.get('steps')} steps, "
                             f"{sampler.get('remasking')}" + (f" {sampler['threshold']}" if sampler.get("threshold") else "")
                             ) if sampler else None

    row["device"] = env.get("device")
    row["git_revision"] = env.get("git_revision")
    row["updated_at"] = record.get("updated_at")
    row["run_dir"] = str(run_dir)
    return row


def _current_model_fields(model: dict) -> dict:
    """Records written before layer_types existed: `attention_pattern` (L local, G global) becomes
    layer_types, `attention` (always mha) is dropped, a dense model's active parameters are its total, and
    the init scheme is gpt2 (every family used it then)."""
    model = dict(model)
    model.pop("attention", None)
    pattern = model.pop("attention_pattern", None)
    if isinstance(pattern, str) and "layer_types" not in model:
        model["layer_types"] = [{"L": "local_attn", "G": "attn"}.get(c, c) for c in pattern]
    if "layer_types" in model:
        model.setdefault("mlp_types", ["dense"])
    if "params_total" in model:
        model.setdefault("init", "gpt2")  # the one scheme before init schemes were a choice
    if "params_active" not in model and "params_total" in model:
        model["params_active"] = model["params_total"]
    if "params_total" in model:
        model.setdefault("parametrization", "sp")  # the only one before model.parametrization
    return model


def _relative(run_dir: Path, root) -> str:
    if root is None:
        return run_dir.name
    try:
        rel = run_dir.resolve().relative_to(Path(root).resolve())
    except ValueError:
        return run_dir.name
    text = str(rel)
    return Path(root).resolve().name if text == "." else text


def _not_started_row(run_dir: Path, root, reason: str, status: str, overrides: dict | None = None) -> dict:
    row = {"run": _relative(run_dir, root), "sweep": run_dir.parent.name, "status": status, "error": reason,
           "run_dir": str(run_dir)}
    for key, value in (overrides or {}).items():
        name = key.split(".")[-1]
        if key.startswith(("model.", "train.")) and name in SWEEP_AXES:
            row[name] = _parse_value(value)
        elif key == "model":
            row["family"] = value  # the preset name; its own family label is unknown until it runs
        elif key in ("data", "tokenizer"):
            row[key] = value
    return row


def _parse_value(text: str):
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return {"true": True, "false": False, "null": None}.get(text.lower(), text)


def find_run_dirs(root: str | os.PathLike) -> tuple[list[Path], list[Path], list[Path]]:
    """(run dirs with a result.json, Hydra job folders without one, multirun.yaml files) under root."""
    root = Path(root)
    runs, bare, sweeps = [], [], []
    if (root / RESULT_FILE).exists():
        return [root], [], []
    for current, dirs, files in os.walk(root):
        here = Path(current)
        if RESULT_FILE in files or RESULT_FILE in dirs:  # a directory by that name: reported unreadable
            runs.append(here)
            dirs[:] = []
            continue
        if "multirun.yaml" in files:
            sweeps.append(here / "multirun.yaml")
        is_job = here != root and "multirun.yaml" not in files and \
            any((here / marker).exists() for marker in _JOB_MARKERS)
        if is_job:
            bare.append(here)
            dirs[:] = []
            continue
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.startswith("."))
    return sorted(runs), sorted(bare), sorted(sweeps)


def expected_jobs(multirun_yaml: str | os.PathLike) -> dict[str, dict] | None:
    """{job folder name: overrides} of a sweep: the jobs its sweepers listed in sweep.json beside it, or,
    without one, those of a basic-sweeper multirun.yaml expanded, or None when that cannot be done exactly
    (another sweeper, sweeper params, range()/choice()/glob() or quoted values, a sub-directory pattern
    other than the override_dirname job key)."""
    sweep_dir = Path(multirun_yaml).parent
    try:
        listed = listed_jobs(sweep_dir)
    except RecordError as err:
        log.warning("cannot read %s; jobs it lists that never started are not shown", err)
        return None
    if listed:
        return {key: dict(str(o).split("=", 1) for o in overrides if "=" in str(o)) for key, overrides in listed.items()}
    try:
        import yaml

        from slm.runs.keys import job_key
    except ImportError:
        return None
    try:
        cfg = yaml.safe_load(Path(multirun_yaml).read_text())
        problem = None if isinstance(cfg, dict) and isinstance(cfg.get("hydra"), dict) else "no hydra: section"
    except UnicodeDecodeError:
        problem = "not UTF-8 text"
    except OSError as err:
        problem = err.strerror or type(err).__name__
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        problem = f"not valid YAML: {getattr(err, 'problem', None) or type(err).__name__}" + \
            (f" at line {mark.line + 1}" if mark else "")
    if problem:
        log.warning("cannot read %s: %s; jobs it lists that never started are not shown", multirun_yaml, problem)
        return None
    try:
        hydra = cfg["hydra"]
        sweeper = hydra.get("sweeper") or {}
        if not str(sweeper.get("_target_", "")).endswith("BasicSweeper") or sweeper.get("params"):
            return None
        if "slm_job_key:${hydra.job.override_dirname}}" not in str(hydra["sweep"]["subdir"]):
            return None
        dirname_cfg = hydra["job"]["config"]["override_dirname"]
        exclude = set(dirname_cfg.get("exclude_keys") or [])
        kv_sep, item_sep = dirname_cfg.get("kv_sep", "="), dirname_cfg.get("item_sep", ",")
        axes = []
        for item in hydra["overrides"]["task"]:
            key, sep, value = str(item).partition("=")
            if not sep or any(c in value for c in "()[]{}'\"\\") or key.startswith(("~", "+")):
                return None
            axes.append((key, value.split(",")))
    except Exception:  # noqa: BLE001 - any surprise means "cannot tell"
        return None
    jobs = {}
    for combo in itertools.product(*(values for _, values in axes)):
        overrides = dict(zip((key for key, _ in axes), combo))
        dirname = item_sep.join(sorted(f"{k}{kv_sep}{v}" for k, v in overrides.items() if k not in exclude))
        jobs[job_key(dirname)] = overrides
    return jobs


def read_record(path: Path) -> dict | None:
    """The parsed result.json, or None (with one warning line naming the file and the reason) when it
    cannot be read or is not a record."""
    try:
        return load_record(path.parent)
    except RecordError as err:
        log.warning("cannot read %s; skipped", err)
        return None


def _row(record: dict, run_dir: Path, root) -> dict | None:
    """row_from_record, or None (one warning line) for a record whose nested fields have unexpected types."""
    try:
        return row_from_record(record, run_dir, root)
    except (AttributeError, TypeError, ValueError) as err:
        log.warning("cannot read %s: unexpected content (%s: %s); skipped", run_dir / RESULT_FILE,
                    type(err).__name__, " ".join(str(err).split()))
        return None


def _lr_multipliers(sweep_dir: Path) -> dict[str, float]:
    """{run folder: multiplier of its point's lr} of the sweep's lr searches ({} without; a warning line when
    sweep.json cannot be read)."""
    try:
        return sweep_lr_multipliers(sweep_dir)
    except RecordError as err:
        log.warning("cannot read %s; the lr search's shared lr is inferred", err)
        return {}


def collect(paths: str | os.PathLike | Iterable[str | os.PathLike]) -> pd.DataFrame:
    """One row per run found under `paths` (directories walked, or result.json files). Raises
    FileNotFoundError for a path that does not exist."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    rows, seen = [], set()
    multipliers: dict[Path, dict[str, float]] = {}
    for path in map(Path, paths):
        if not path.exists():
            raise FileNotFoundError(f"no such file or directory: {path}")
        root = path.parent if path.is_file() else path
        if path.is_file():
            run_dirs, bare, sweeps = [path.parent], [], []
        else:
            run_dirs, bare, sweeps = find_run_dirs(path)
        for run_dir in run_dirs:
            key = run_dir.resolve()
            if key in seen:
                continue
            seen.add(key)
            record = read_record(run_dir / RESULT_FILE)
            row = _row(record, run_dir, root) if record is not None else None
            if row is not None:
                if run_dir.parent not in multipliers:
                    multipliers[run_dir.parent] = _lr_multipliers(run_dir.parent)
                row["lr_multiplier"] = multipliers[run_dir.parent].get(run_dir.name)
                rows.append(row)
        for job_dir in bare:
            if job_dir.resolve() not in seen:
                seen.add(job_dir.resolve())
                rows.append(_not_started_row(job_dir, root, "job folder without result.json",
                                             live_status(None, job_dir)))
        for multirun in sweeps:
            jobs = expected_jobs(multirun)
            for name, overrides in (jobs or {}).items():
                job_dir = multirun.parent / name
                if job_dir.resolve() not in seen:
                    seen.add(job_dir.resolve())
                    rows.append(_not_started_row(job_dir, root, "a job of the sweep with no job folder", PENDING,
                                                 overrides))
    return tidy(pd.DataFrame(rows))


def tidy(table: pd.DataFrame) -> pd.DataFrame:
    """Columns in a stable order (identity, axes, counts, training, metrics, lm-eval, throughput, the rest),
    numbers as numbers."""
    if table.empty:
        return pd.DataFrame(columns=ID_COLUMNS + SWEEP_AXES + COUNT_COLUMNS + METRIC_COLUMNS + TAIL_COLUMNS)
    for column in ID_COLUMNS + ["train_flops", "val_nll"] + TAIL_COLUMNS:
        if column not in table:
            table[column] = None
    tasks = sorted({c[len("score_"):] for c in table.columns if c.startswith("score_")})
    lm_cols = [f"{p}_{t}" for t in tasks for p in ("score", "stderr", "metric", "samples", "chance")
               if f"{p}_{t}" in table]
    avg_cols = [f"{p}{c}" for c in sorted(c for c in table.columns if c.startswith("avg_"))
                for p in ("", "stderr_", "chance_", "tasks_") if f"{p}{c}" in table]
    order = [*ID_COLUMNS, *[c for c in SWEEP_AXES if c in table], *[c for c in COUNT_COLUMNS if c in table],
             *[c for c in METRIC_COLUMNS if c in table], *avg_cols, *lm_cols,
             *[c for c in THROUGHPUT_COLUMNS if c in table], *[c for c in TRAINING_COLUMNS if c in table]]
    rest = [c for c in table.columns if c not in order and c not in TAIL_COLUMNS]
    table = table[order + rest + TAIL_COLUMNS].copy()
    for column in table.columns:
        if table[column].dtype == object:
            values = table[column].dropna()
            if len(values) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
                table[column] = pd.to_numeric(table[column])
            elif len(values) and all(isinstance(v, bool) for v in values):
                table[column] = table[column].astype("boolean")
    table = table.sort_values(["sweep", "run"], na_position="last", kind="stable").reset_index(drop=True)
    return table


def load_results(path: str | os.PathLike) -> pd.DataFrame:
    """The results table from a .parquet or .csv file written by `slm-collect`, or collected afresh
    from a runs directory (or a result.json)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no such file or directory: {path}")
    if path.is_dir() or path.name == RESULT_FILE:
        return collect([path])
    suffix = path.suffix.lower()
    if suffix in (".parquet", ".pq"):
        return pd.read_parquet(path)
    if suffix == ".csv":
        return pd.read_csv(path)
    if suffix == ".json":
        return tidy(pd.read_json(path, orient="records"))
    raise ValueError(f"{path}: expected a .parquet or .csv results table, or a runs directory")


def save_results(table: pd.DataFrame, path: str | os.PathLike) -> Path:
    """Write the table as .parquet (default) or .csv, by the file name."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix.lower() == ".csv":
        table.to_csv(path, index=False)
    elif path.suffix.lower() == ".json":
        table.to_json(path, orient="records", indent=1)
    else:
        table.to_parquet(path, index=False)
    return path


def task_names(table: pd.DataFrame) -> list[str]:
    """lm-eval tasks with at least one score in the table."""
    return [c[len("score_"):] for c in table.columns if c.startswith("score_") and table[c].notna().any()]


def stderr_column(table: pd.DataFrame, column: str) -> str | None:
    """The standard-error column of a score column (score_<task> -> stderr_<task>, avg_<suite> ->
    stderr_avg_<suite>) when the table has it, else None."""
    if column.startswith("score_"):
        name = f"stderr_{column[len('score_'):]}"
    elif column.startswith("avg_"):
        name = f"stderr_{column}"
    else:
        return None
    return name if name in table else None


def chance_column(table: pd.DataFrame, column: str) -> str | None:
    """The chance-level column of a score column (chance_<task>, chance_avg_<suite>) when the table has one
    with a value, else None."""
    if column.startswith("score_"):
        name = f"chance_{column[len('score_'):]}"
    elif column.startswith("avg_"):
        name = f"chance_{column}"
    else:
        return None
    return name if name in table and pd.to_numeric(table[name], errors="coerce").notna().any() else None


def average_members(table: pd.DataFrame, column: str) -> list[str] | None:
    """The tasks averaged into an avg_<suite> column (the most common list over the rows), or None when
    the table does not say."""
    name = f"tasks_{column}"
    if not column.startswith("avg_") or name not in table:
        return None
    values = table.loc[table[column].notna() if column in table else table.index, name].dropna().astype(str)
    return values.value_counts().index[0].split(",") if len(values) else None


def single_task_average(table: pd.DataFrame, column: str) -> bool:
    """An avg_<suite> column whose suite averages one task: it only repeats that task's score."""
    members = average_members(table, column)
    return members is not None and len(members) == 1


def metric_of(table: pd.DataFrame, column: str) -> str | None:
    """The lm-eval metric key behind a score column (score_<task> -> metric_<task>), else None."""
    if column.startswith("score_") and f"metric_{column[len('score_'):]}" in table:
        values = table[f"metric_{column[len('score_'):]}"].dropna()
        return str(values.iloc[0]) if len(values) else None
    return None


def higher_is_better(table: pd.DataFrame, column: str) -> bool:
    """Direction of a score column: from its lm-eval metric when known, else from its name."""
    metric = metric_of(table, column)
    return not lower_is_better(metric if metric else column)
