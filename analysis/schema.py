"""The results table's columns, each declared once: its name, role, kind, where the record holds it and what
it is. analysis.collect builds the rows from these declarations, the analysis reads the roles (which columns
make a configuration), and docs/results_table.md is written from them (write_docs_page).

Roles of a column:
  identity     which run: run, sweep, status, error, eval_error, run_dir
  config       what was trained: every model field (the record's model section, nested settings as
               <group>_<field>) plus the training choices TRAIN_AXES (data, tokenizer, objective, optimizer, ...).
               Runs with equal config columns are one *configuration*.
  nuisance     what varies between runs of one configuration without being the question: the seed (pooled:
               mean over seeds) and the learning rate (each configuration is taken at its best lr,
               analysis.tuning; lr_multiplier says which lr was the sweep's shared one).
  count        sizes and budgets derived from the config (params_*, flops_per_token, tokens, budget_*)
  derived      model-section notes and multipliers derived from the config: equal for equal configs
  metric       what was measured: val_*, test_*, every lm-eval column (score_, stderr_, ... prefixes); declared
               in slm.metrics (METRICS: with its direction, unit, bound rule, chance and standard error), from
               which columns() makes their columns
  training     how the training went (wall time, throughput, MFU, divergence, routing balance)
  throughput   the decode measurement
  provenance   device, git revision, time
  annotation   columns a notebook or the report adds (label, tier, unit, config_key)

A column not declared here is a model field, so a config axis: the model section is open-ended (every
ModelConfig field becomes a column); everything else the collector writes is declared, and
tests/test_analysis_table.py checks that on the records shipped in docs/ (a new metric left undeclared would
otherwise split runs that differ only by seed into separate configurations).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

import analysis.records as read
from analysis.readers import BadFile, is_number, shown
from analysis.records import ABSENT, Record, get, number, scalar
from slm.metrics import BY_METRIC, LM_EVAL, METRICS, PER_RUN, TASKS, VAL_CURVE, Metric
from slm.renames import model_column
from slm.runs.record import RESULT_FILE
from slm.runs.states import ORDER

MODEL = "the model section"
"""Source of a column the collector writes from the record's model section as it is (lists as "a,b", other
lists and dicts as JSON, nested settings flattened to <group>_<field>)."""
SWEEP = "sweep.json"
"""Source of a column the collector reads from the run group's sweep.json."""
ANALYSIS = "added by the analysis"
"""Source of a column no record holds: the analysis adds it to its own tables."""
KINDS = {"number": "a float (missing: NaN)", "integer": "an integer as recorded", "text": "a string",
         "flag": "true / false (empty: not recorded)", "value": "as recorded"}
"""What the values of a column are."""
KIND_WORDS = {"number": "a number", "integer": "an integer", "flag": "true or false", "text": "a string"}
"""What a record must hold where a column of the kind is read (anything else: the record is skipped, named)."""
ROLE_DOCS = {
    "identity": "which run", "config": "what was trained; runs with equal config columns are one configuration",
    "nuisance": "what varies between runs of one configuration: seeds are pooled, lrs searched (analysis.tuning)",
    "count": "sizes and budgets derived from the config", "derived": "derived from the config: equal for equal configs",
    "metric": "what was measured", "training": "how the training went",
    "throughput": "the decode measurement (batch 1)",
    "provenance": "where and when", "annotation": "added by the analysis to its own tables, never by slm-collect",
}
"""The roles, in the order the documentation lists them."""


@dataclass(frozen=True)
class Column:
    """One column of the results table (a name with <task>, <suite> or <field> stands for one per value)."""

    name: str
    role: str
    """One of ROLE_DOCS."""
    doc: str
    source: tuple[str, ...] | Callable | str
    """Where the record holds it: a path of keys (("training", "tokens_per_s")); a function of the record (its
    docstring says what it reads; ABSENT: no such column in this row); or MODEL, SWEEP, ANALYSIS."""
    kind: str = "number"
    """One of KINDS; a path's value is read as a float for "number", as a bool for "flag", as is otherwise."""
    block: str | None = None
    """Where the table shows it (BLOCKS), after the config axes; None: after every block, in the order the
    columns first appear."""
    described: str = ""
    """The source in words where it is a function (else the function's docstring)."""

    @property
    def prefix(self) -> str | None:
        """What every column of a pattern starts with ("score_" for score_<task>), None for one column."""
        return self.name.split("<")[0] if "<" in self.name else None

    def read(self, view: Record, key: str | None = None):
        """This column's value in the record (ABSENT: not written); BadFile for a value of another kind where the
        record holds it at a path (a string where a number belongs)."""
        if callable(self.source):
            return self.source(view, key) if key is not None else self.source(view)
        value = get(view.record, self.source)
        if value is None or self.kind not in KIND_WORDS:
            return value
        if self.kind == "number":
            cell = number(value)
        elif self.kind == "integer":
            cell = value if is_number(value) else None
        else:
            cell = value if isinstance(value, bool if self.kind == "flag" else str) else None
        if cell is None:  # BadFile: the collector skips the record with one warning line
            raise BadFile(f"{view.run_dir / RESULT_FILE}: {'.'.join(self.source)} is {shown(value)}, not "
                          f"{KIND_WORDS[self.kind]}")
        return cell

    def where(self) -> str:
        """The source, as the documentation says it."""
        if isinstance(self.source, tuple):
            return ".".join(self.source)
        if callable(self.source):
            return self.described or " ".join((self.source.__doc__ or "").split())
        return self.source


BLOCKS = ("identity", "counts", "metrics", "throughput", "training", "tail")
"""The table's blocks: identity, then the config axes (LEADING_AXES), counts and metrics, the lm-eval columns,
throughput and training, the other columns, and the tail."""


# ---------------------------------------------------------------------------------------------- the columns


_BEFORE_METRICS: tuple[Column, ...] = (
    # identity
    Column("run", "identity", "run directory relative to the collected root", read.run, "text", "identity"),
    Column("sweep", "identity", "run group (the folder above the run)", read.sweep, "text", "identity"),
    Column("status", "identity", f"one of {', '.join(ORDER)} (slm.runs.states: the words of slm-status)",
           read.status, "text", "identity"),
    Column("error", "identity", "the record's error line; a stopped run's: the signal and step that stopped it",
           read.error, "text", "identity"),
    Column("eval_error", "identity", "why the lm-eval suite failed after training (the run itself completed)",
           ("eval", "lm_eval_error"), "text", "identity"),
    # the model section: open-ended
    Column("<field>", "config", "a model setting under its own name (documented in conf/model_base/base.yaml): "
           "ModelConfig's top-level fields, and the fields of its groups attention, position, mlp, conv, norm, "
           "embedding, block and parametrization under the flat names they had before they moved (model.norm.kind: "
           "norm, model.attention.n_heads: n_heads, model.parametrization.init: init; slm.renames.model_column); "
           "lists of names as \"conv,conv,attn\", other lists as JSON; records from before a field moved or existed "
           "are read in today's spelling (slm.renames)", MODEL, "value"),
    Column("<group>_<field>", "config", "a nested model setting, model.<group>.<field> (moe, memory, canon)",
           MODEL, "value"),
    Column("mup_<field>", "config", "model.parametrization.<field> of the base shape mup / completep scale from "
           "(base_width, base_depth, ...; once model.mup.<field>); empty under sp, which ignores it", MODEL, "value"),
    Column("params_total", "count", "parameters of the model (a tied embedding and head counted once)", MODEL,
           "integer", "counts"),
    Column("params_active", "count", "parameters one token uses (= params_total except for a mixture of experts)",
           MODEL, "integer", "counts"),
    Column("params_embedding", "count", "token embedding, learned positions and an untied head", MODEL, "integer",
           "counts"),
    Column("params_non_embedding", "count", "params_total - params_embedding", MODEL, "integer", "counts"),
    Column("flops_per_token", "count", "training FLOPs per token, PaLM's convention: 6N + 12 L H hd T, N the active "
           "parameters, the attention term over attention layers only", MODEL, "integer", "counts"),
    Column("notes", "derived", "settings that do not do what their name suggests at this shape (model.notes, "
           "joined by \"; \")", MODEL, "text"),
    Column("scaling", "derived", "the parametrization's multipliers at this shape (model.scaling as JSON; {} for "
           "sp)", MODEL, "text"),
    # training choices
    Column("data", "config", "data mix name", read.data, "text"),
    Column("tokenizer", "config", "tokenizer name", read.tokenizer, "text"),
    Column("objective", "config", "training objective (causal_lm, last_token, mdlm; sft, preference: post-training stages)", read.train("objective"), "text"),
    Column("optimizer", "config", "train.optimizer: adamw | muon | lion", read.optimizer, "text"),
    Column("seed", "nuisance", "train.seed (model init, data order, dropout)", read.train("seed"), "integer"),
    Column("lr", "nuisance", "peak learning rate (train.lr: AdamW's, and the base of a parametrization's per-group "
           "multipliers)", read.train("lr")),
    Column("lr_multiplier", "nuisance", "the multiplier of the point's lr this run was trained at "
           "(hydra.sweeper.lr_search; 1: the shared lr; empty: no lr search)", SWEEP),
    Column("lr_rule", "nuisance", "a ladder job's lr rule (hydra.sweeper.ladder.lr): search (its rung searches the lr) "
           "or transfer (the best multiplier of the lower rungs, carried up), fixed without an lr search; empty: not a "
           "ladder", SWEEP, "text"),
    Column("ladder_point", "config", "a ladder job's configuration: its overrides without the rung's, the seed and the "
           "lr (sweep.json); one per point of the ladder", SWEEP, "text"),
    Column("branch", "config", "a decay branch's fraction of the run it branched from (train.schedule.decay_branches: "
           "the wsd run of that length; its lr rule and ladder point are its run's); empty: not a branch",
           ("branch", "fraction")),
    Column("batch_size", "config", "sequences per optimizer step (train.batch_size)", read.train("batch_size"),
           "integer"),
    Column("schedule", "config", "learning-rate schedule (train.schedule: cosine, wsd, constant)",
           read.train("schedule"), "text"),
    Column("precision", "config", "training precision (Lightning's: 32, bf16-mixed, ...)", read.precision, "text"),
    # counts
    Column("tokens", "count", "training tokens seen", ("training", "tokens"), block="counts"),
    Column("steps", "count", "optimizer steps taken", ("training", "steps"), block="counts"),
    Column("max_steps", "config", "optimizer steps the run was set to take", ("training", "max_steps"),
           block="counts"),
    Column("train_flops", "count", "training FLOPs = flops_per_token x tokens (PaLM convention)", read.train_flops,
           block="counts"),
    Column("param_budget", "count", "the parameter budget the width was solved for (model.param_budget; empty: "
           "d_model as given)", read.param_budget, block="counts"),
    Column("budget_count", "count", "which count the budget is for: total, active or non_embedding "
           "parameters (model.budget_count)", read.budget_count, "text", "counts"),
    Column("budget_tolerance", "count", "how far from the budget the solver may land, as a fraction "
           "(model.budget_tolerance)", read.budget_tolerance, block="counts"),
    Column("budget_error", "count", "params_<budget_count> / param_budget - 1: how far the solved width landed "
           "from the budget", read.budget_error, block="counts"),
    Column("budget_knob", "derived", "which sizes the budget solver moved: d_model (the width, the family's MLP "
           "kept) or e.g. 'd_model, d_ff 256→336' (the MLP hidden size tuned after it)", read.budget_knob, "text",
           "counts"),
    # training
    Column("wall_seconds", "training", "wall-clock seconds of the job's last session, start to end",
           ("training", "wall_seconds"), block="training"),
    Column("train_seconds", "training", "seconds in training steps (validation excluded) of the last session",
           ("training", "train_seconds"), block="training"),
    Column("train_tokens_per_s", "training", "training throughput (tokens/s)", ("training", "tokens_per_s"),
           block="training"),
    Column("mfu", "training", "model FLOPs utilisation: flops_per_token x tokens/s / the devices' peak FLOP/s "
           "(empty where the peak is unknown, e.g. a CPU)", ("training", "mfu"), block="training"),
    Column("final_train_loss", "training", "training loss at the last step", ("training", "final_train_loss"),
           block="training"),
    Column("diverged_step", "training", "step of the non-finite loss", read.diverged_step, block="training"),
    Column("health", "training", "training health by slm.runs.health's rules: ok, spike (a step's loss far above the "
           "median of the steps before it) or val_rise (a validation above the one before); empty: not judged (a "
           "record from before the rules, or a run that never trained)", ("health", "flag"), "text", "training"),
    Column("health_note", "training", "what health found, in one line: each loss spike's step and loss against the "
           "median before it, the validation rises", read.health_note, "text", "training"),
    Column("warmup_steps", "derived", "learning-rate warmup steps (the schedule's: train.schedule.warmup_steps, else "
           "warmup_fraction x max_steps)", read.warmup_steps, block="counts"),
    Column("moe_max_load", "training", "mixture of experts: largest expert share of routed tokens x n_experts over "
           "the last logging window (1 = balanced; n_experts = every token on one expert)", read.moe_max_load,
           block="training"),
    Column("train_other_cores", "training", "CPU time other processes used while the run trained (its last "
           "session), in cores (0: an otherwise idle machine; empty: not recorded)",
           ("training", "other_cores_busy"), block="training"),
    # metrics: slm.metrics.METRICS, here (columns())
)

_AFTER_METRICS: tuple[Column, ...] = (
    Column("epochs", "config", "training length in epochs (train.length.epochs; empty: steps or tokens)", read.train("epochs"),
           "integer"),
    Column("windows_per_epoch", "config", "training windows per epoch (train.length.windows_per_epoch)",
           read.train("windows_per_epoch"), "integer"),
    # throughput
    Column("decode_tokens_per_s", "throughput", "batch-1 decode speed (tokens/s)",
           read.throughput("decode_tokens_per_s"), block="throughput"),
    Column("generate_tokens_per_s", "throughput", "batch-1 generation speed, prefill included (tokens/s)",
           read.throughput("generate_tokens_per_s"), block="throughput"),
    Column("time_to_first_token_s", "throughput", "batch-1 prefill time (s)", read.throughput("time_to_first_token_s"),
           block="throughput"),
    Column("peak_memory_bytes", "throughput", "peak memory during decode (bytes; see peak_memory_measure)",
           read.throughput("peak_memory_bytes"), block="throughput"),
    Column("peak_memory_measure", "throughput", "how peak_memory_bytes was measured: cuda_max_memory_allocated "
           "(after a reset) or process_peak_rss (the whole process's, since it started)",
           read.throughput("peak_memory_measure"), "text", "throughput"),
    Column("kv_cache_bytes", "throughput", "size of the decode's cache for prompt + new tokens (bytes; 0: none)",
           read.throughput("kv_cache_bytes"), block="throughput"),
    Column("decode_device", "throughput", "device the decode speed was measured on", read.throughput("device"), "text",
           "throughput"),
    Column("decode_dtype", "throughput", "dtype of the weights during the decode measurement",
           read.throughput("dtype"), "text", "throughput"),
    Column("decoder", "throughput", "how the model decodes: autoregressive or masked_diffusion (parallel, by its "
           "sampler)", read.decoder, "text", "throughput"),
    Column("decode_sampler", "throughput", "a diffusion model's sampler settings for the decode speed",
           read.decode_sampler, "text", "throughput"),
    Column("decode_threads", "throughput", "torch threads the decode speed was measured with",
           read.throughput("torch_threads"), block="throughput"),
    Column("decode_prompt_tokens", "throughput", "prompt length of the decode-speed measurement (tokens)",
           read.throughput("prompt_tokens"), block="throughput"),
    Column("decode_new_tokens", "throughput", "tokens generated per call in the decode-speed measurement",
           read.throughput("new_tokens"), block="throughput"),
    Column("decode_cuda_graph", "throughput", "whether the decode step replayed a CUDA graph",
           read.throughput("cuda_graph"), "flag", "throughput"),
    Column("decode_compile", "throughput", "whether the decode step ran through torch.compile",
           read.throughput("compile"), "flag", "throughput"),
    Column("decode_other_cores", "throughput", "CPU time other processes used while the decode speed was measured, "
           "in cores (0: an otherwise idle machine; empty: not recorded)", read.throughput("other_cores_busy"),
           block="throughput"),
    # provenance
    Column("device", "provenance", "the training device as recorded (e.g. \"cpu (2 threads)\", the GPU's name)",
           ("environment", "device"), "text", "tail"),
    Column("git_revision", "provenance", "slm's git commit (\"-dirty\": with uncommitted changes)",
           ("environment", "git_revision"), "text", "tail"),
    Column("updated_at", "provenance", "when the record was last written (ISO 8601, UTC)", ("updated_at",), "text",
           "tail"),
    Column("run_dir", "identity", "the run directory as collected", read.run_dir, "text", "tail"),
    # annotations
    Column("label", "annotation", "a short name of the configuration (analysis.labels.run_labels)", ANALYSIS, "text"),
    Column("tier", "annotation", "tier rank, 1 = best (analysis.tiers)", ANALYSIS, "integer"),
    Column("unit", "annotation", "the configuration a run's score is pooled into (analysis.tiers.units_of)",
           ANALYSIS, "integer"),
    Column("config_key", "annotation", "one string naming a configuration (config_keys)", ANALYSIS, "text"),
)


def metric_column(entry: Metric) -> Column:
    """The results-table column of a metric (slm.metrics): read from its record path, by its reader in
    analysis.records (the entry's `where` says what that reads), or from the validation curve at its curve_at."""
    if entry.curve_at is not None:
        field = entry.source[-1]
        return Column(entry.name, "metric", entry.doc,
                      functools.partial(read.curve_at, fraction=entry.curve_at, field=field), entry.value,
                      entry.block, entry.where or f"eval.{field} at {entry.curve_at:.0%} of training.max_steps")
    if entry.curve_last is not None:
        return Column(entry.name, "metric", entry.doc, functools.partial(read.curve_mean, last=entry.curve_last),
                      entry.value, entry.block, entry.where)
    source = entry.source if isinstance(entry.source, tuple) else getattr(read, entry.source)
    return Column(entry.name, "metric", entry.doc, source, entry.value, entry.block, entry.where)


@functools.lru_cache(maxsize=8)
def _columns(metrics: tuple[Metric, ...]) -> tuple[Column, ...]:
    return (*_BEFORE_METRICS, *map(metric_column, metrics), *_AFTER_METRICS)


def columns() -> tuple[Column, ...]:
    """Every column, in the order the collector writes them (which orders the columns outside BLOCKS): the
    declarations here with the metrics of slm.metrics.METRICS (as registered now) after the training columns."""
    return _columns(tuple(METRICS.values()))


def __getattr__(name: str):
    if name == "COLUMNS":  # every column, as columns() (the registry may grow at run time)
        return columns()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

LEADING_AXES = ("family", "n_layers", "d_model", "n_heads", "n_kv_heads", "head_dim", "d_ff", "position", "norm",
                "norm_placement", "mlp", "layer_types", "mlp_types", "moe_n_experts", "moe_top_k", "qk_norm",
                "canon_set", "layer_repeat", "init", "sliding_window", "tie_embeddings", "context_length",
                "vocab_size", "objective", "parametrization", "data", "tokenizer", "optimizer", "lr", "lr_multiplier",
                "batch_size", "schedule", "precision", "seed")
"""Config and nuisance columns shown first, after identity, in this order (the other model fields follow the
blocks, in the record's order)."""
MODEL_SKIPPED = ("flops_convention",)
"""Model-section fields that are no column (the same text for every run)."""

_MODEL_FIELD = next(c for c in _BEFORE_METRICS if c.name == "<field>")
_PREFIX_ROLES = (("params_", "count"), ("val_", "metric"), ("test_", "metric"))
"""Roles of undeclared names by prefix: a count or a measurement the collector does not read yet."""

NUISANCE_AXES = tuple(c.name for c in _BEFORE_METRICS + _AFTER_METRICS if c.role == "nuisance")
"""Columns that vary between runs of one configuration: seeds are pooled, lrs searched (analysis.tuning)."""
TRAIN_AXES = tuple(c.name for c in _BEFORE_METRICS + _AFTER_METRICS if c.role == "config" and c.source is not MODEL)
"""Config columns that come from the training and data settings rather than the model section."""


@functools.lru_cache(maxsize=8)
def _index(all_columns: tuple[Column, ...]) -> tuple[dict, list]:
    by_name = {c.name: c for c in all_columns if c.prefix is None}
    patterns = sorted((c for c in all_columns if c.prefix), key=lambda c: -len(c.prefix))
    return by_name, patterns


def block(name: str) -> list[str]:
    """The declared columns of one of BLOCKS, in table order."""
    return [c.name for c in columns() if c.block == name]


def declared(name: str, index: tuple[dict, list] | None = None) -> Column | None:
    """The declaration a column name falls under (a pattern for score_hellaswag), None for a name not declared
    (a model field: the model section is open-ended). `index`: _index(columns()), where the caller has it."""
    by_name, patterns = index or _index(columns())
    if name in by_name:
        return by_name[name]
    return next((c for c in patterns if c.prefix and name.startswith(c.prefix)), None)


def role_of(column: str, index: tuple[dict, list] | None = None) -> str:
    """The role of a column (see the module docstring); "config" for a model field. `index`: as declared's."""
    column_ = declared(column, index)
    if column_ is not None:
        return column_.role
    return next((role for prefix, role in _PREFIX_ROLES if column.startswith(prefix)), "config")


def doc_of(column: str) -> str:
    """What a column is: its declaration's doc, a model field's for an undeclared name."""
    return (declared(column) or _MODEL_FIELD).doc


def describe(table: pd.DataFrame) -> pd.DataFrame:
    """One row per column of a results table: column, role, doc."""
    return pd.DataFrame({"column": [str(c) for c in table.columns],
                         "role": [role_of(str(c)) for c in table.columns],
                         "doc": [doc_of(str(c)) for c in table.columns]})


def column_used(column: str, model: dict) -> bool:
    """Whether a nested model setting's column is written: the mup_* columns (the base shape the μP family scales
    from) only where a parametrization reads them (sp ignores them: empty, as in records from before them); every
    other one always."""
    return not column.startswith("mup_") or (model.get("parametrization") or {}).get("kind", "sp") != "sp"


def model_cells(model: dict) -> dict:
    """The model section's columns (source MODEL): each field under its own name, in the record's order, as one
    cell (scalar; notes joined by "; "); a nested setting that is no declared column under its column name
    (slm.renames.model_column: a field of the groups made from flat fields under its former name, norm, n_heads,
    mup_base_width; others as <group>_<field>, column_used); MODEL_SKIPPED left out."""
    cells = {}
    by_name = _index(columns())[0]
    for key, value in model.items():
        if key in MODEL_SKIPPED:
            continue
        if isinstance(value, dict) and key not in by_name:
            cells.update({column: scalar(v) for column, v in ((model_column(key, name), v) for name, v in value.items())
                          if column_used(column, model)})
            continue
        cells[key] = "; ".join(value) if key == "notes" else scalar(value)
    return cells


PLACEHOLDERS = {"<task>": read.tasks, "<suite>": read.suites}
"""The values a pattern column is written for: each task lm-eval scored, each suite it averaged."""


def config_columns(table: pd.DataFrame) -> list[str]:
    """The columns that say what was trained (no nuisance axis: seed and lr are not part of a configuration)."""
    index = _index(columns())  # once for every column
    return [c for c in table.columns if role_of(c, index) == "config"]


def _text(value) -> str:
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _one_text_per_value(column: pd.Series) -> bool:
    """Whether equal cells (as pd.factorize groups them) of this column always have the same _text: numbers, flags
    and strings in a column of their own dtype, or only strings (or nothing) in an object column (there 1 == True
    == 1.0 would be grouped although their texts differ)."""
    dtype = column.dtype
    if dtype.kind in "fiub" or isinstance(dtype, pd.StringDtype):
        return True
    return dtype == object and pd.api.types.infer_dtype(column, skipna=True) in ("string", "empty")


def cell_texts(column: pd.Series) -> np.ndarray:
    """Each cell of a column as text (an object array of str): "" for a missing value, 4.0 as "4", str() otherwise;
    made once per distinct value where that is exact (_one_text_per_value), else cell by cell."""
    if not _one_text_per_value(column):
        return column.map(_text).to_numpy(object)
    codes, uniques = pd.factorize(column)
    out = np.empty(len(codes), dtype=object)
    valued = codes >= 0
    out[valued] = pd.Series(uniques).map(_text).to_numpy(object)[codes[valued]]
    # a missing cell: NaN or NA ("") except in an object column, which may hold NaT or Decimal("NaN")
    out[~valued] = [_text(x) for x in column.to_numpy()[~valued]] if column.dtype == object else ""
    return out


def config_keys(table: pd.DataFrame) -> pd.Series:
    """One string per row naming its configuration: rows with equal keys differ only in nuisance axes (a CSV
    round trip that reads 4 as 4.0 gives the same key). Column by column (each cell's text made once per distinct
    value), not row by row."""
    columns = config_columns(table)
    if not columns:
        return pd.Series(["" for _ in table.index], index=table.index, dtype=object)
    texts = [cell_texts(table[c]) for c in columns]
    return pd.Series(["|".join(parts) for parts in zip(*texts)], index=table.index, dtype="str")


def keys_of(rows: pd.DataFrame, keys: pd.Series | None = None) -> pd.Series:
    """config_keys(rows), taken from `keys` where given: config_keys of a table that `rows` is an unmodified row
    subset of (its columns, so its config columns, and its values), made once by the caller. Made afresh where
    `keys` cannot name each row once (a repeated or missing index label)."""
    if keys is None or not keys.index.is_unique or not rows.index.isin(keys.index).all():
        return config_keys(rows)
    return keys.loc[rows.index]


DOCS_PAGE = Path(__file__).resolve().parents[1] / "docs" / "results_table.md"
"""The page markdown() writes (write_docs_page)."""


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "\\<")


def markdown() -> str:
    """docs/results_table.md: every column by role, with its kind, its source in result.json and its doc."""
    lines = ["# The results table", "",
             "<!-- written from analysis/schema.py by `.venv/bin/python -c \"import analysis.schema as s; "
             "s.write_docs_page()\"`; tests/test_analysis_table.py checks it is current -->", "",
             "`slm-collect` (analysis.collect) makes one row per run from its `result.json`; a run that never wrote "
             "one is a row with its status. A missing value is empty (NaN / None); a column exists when some run has "
             "it. `<task>` stands for each lm-eval task, `<suite>` for each averaged suite, `<group>` and "
             "`<field>` for the model's settings. Sources are paths in `result.json`.", "",
             "Order: " + ", then ".join([
                 "the identity columns", "the config axes " + ", ".join(f"`{c}`" for c in LEADING_AXES),
                 "the counts", "the validation metrics", "the lm-eval suites and tasks", "the decode measurement",
                 "the training", "the other columns as they first appear (the other model fields, test metrics, "
                 "...)", "device, git_revision, updated_at and run_dir"]) + ".", "",
             "Kinds: " + "; ".join(f"{k}: {v}" for k, v in KINDS.items()) + ".", ""]
    for role, what in ROLE_DOCS.items():
        lines += [f"## {role}", "", what[0].upper() + what[1:] + ".", "",
                  "| column | kind | source | what it is |", "| --- | --- | --- | --- |"]
        for c in columns():
            if c.role == role:
                lines.append(f"| `{c.name}` | {c.kind} | {_cell(c.where())} | {_cell(c.doc)} |")
        lines.append("")
        if role == "metric":
            lines += _score_facts()
    return "\n".join(lines)


def _score_facts() -> list[str]:
    """The metric section's second table: how the analysis reads each score (slm.metrics)."""
    def better(m: Metric) -> str:
        return f"by its lm-eval metric ({m.lm_metric})" if m.direction == BY_METRIC else m.direction

    def kind(m: Metric) -> str:
        if m.kind != PER_RUN or m.bound_when is None:
            return m.kind
        return f"a bound where {m.bound_when.describe()}" + ("; compared on exact values only" if m.exact_only
                                                             else "; bounds compared too, drawn hollow")

    lines = ["### Scores", "",
             "What the analysis reads of each metric that ranks runs (slm.metrics.METRICS: adding a metric is one "
             "entry there, then this page is written again). lm-eval metrics: " + "; ".join(
                 f"{m.name} ({m.label}, {m.direction}" + (", a fraction" if m.fraction else "")
                 + (", chance level" if m.chance else "") + (", a bound under an ELBO" if m.elbo_bound else "") + ")"
                 for m in LM_EVAL.values()) + ". Tasks with a known chance level (records before it was written): "
             + ", ".join(f"{t.name} {t.chance:g}" for t in TASKS.values() if t.chance is not None) + ".", "",
             "| metric | label | better | unit | exact or bound | standard error | chance | headline |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for m in METRICS.values():
        if m.is_score:
            lines.append(f"| `{m.name}` | {_cell(m.label)} | {_cell(better(m))} | {m.unit} | {_cell(kind(m))} | "
                         f"{_cell(m.stderr or '')} | {_cell(m.chance or '')} | "
                         + ("yes" + (f" ({m.across_tokenizers} where tokenizers differ)" if m.across_tokenizers
                                     else "") if m.headline else "") + " |")
    return lines + [""]


def budget_flags(table: pd.DataFrame) -> pd.Series:
    """True for runs whose parameter count landed farther from their budget than their tolerance
    (|budget_error| > budget_tolerance); False otherwise (no budget, or a tolerance of None: any distance)."""
    if "budget_error" not in table:
        return pd.Series(False, index=table.index)
    error = pd.to_numeric(table["budget_error"], errors="coerce").abs()
    tolerance = pd.to_numeric(table.get("budget_tolerance", pd.Series(index=table.index, dtype=float)),
                              errors="coerce")
    return (error.notna() & tolerance.notna() & (error > tolerance)).astype(bool)


def write_docs_page(path: Path = DOCS_PAGE) -> Path:
    """Write markdown() to docs/results_table.md."""
    path.write_text(markdown())
    return path
