"""What each column of the results table is: one schema used by collect, tiers, thresholds, best-per-family,
the lr analysis and the report.

Roles of a column:
  identity     which run: run, sweep, status, error, eval_error, run_dir
  config       what was trained: every model field (the record's model section: family, n_layers, d_model, ...,
               mup_*) plus the training choices TRAIN_AXES (data, tokenizer, objective, optimizer, ...). Runs
               with equal config columns are one *configuration*.
  nuisance     NUISANCE_AXES, what varies between runs of one configuration without being the question: the
               seed (pooled: mean over seeds) and the learning rate (each configuration is taken at its best lr,
               analysis.tuning; lr_multiplier says which lr was the sweep's shared one).
  count        sizes and budgets derived from the config (params_*, flops_per_token, tokens, budget_*)
  metric       what was measured: val_*, test_*, every lm-eval column (score_, stderr_, ... prefixes)
  training     how the training went (wall time, throughput, MFU, divergence, routing balance)
  throughput   the decode measurement
  provenance   device, git revision, time
  annotation   columns a notebook or the report adds (label, tier, unit)

A column the collector does not name here is a model field, so a config axis: the model section is open-ended
(every ModelConfig field becomes a column), everything else the collector writes is listed, and
tests/test_analysis_schema.py checks that on real records (a new metric left out of this file would otherwise
split runs that differ only by seed into separate configurations).
"""

from __future__ import annotations

import math

import pandas as pd

from analysis.collect import (COUNT_COLUMNS, ID_COLUMNS, METRIC_COLUMNS, TAIL_COLUMNS, THROUGHPUT_COLUMNS,
                              TRAINING_COLUMNS)

NUISANCE_AXES = ("seed", "lr", "lr_multiplier")
"""Columns that vary between runs of one configuration: seeds are pooled, lrs searched (analysis.tuning)."""
TRAIN_AXES = ("data", "tokenizer", "objective", "optimizer", "batch_size", "schedule", "precision", "max_steps",
              "epochs", "windows_per_epoch")
"""Config columns that come from the training and data settings rather than the model section."""
OUTPUT_PREFIXES = ("score_", "stderr_", "metric_", "samples_", "avg_", "chance_", "tasks_")
"""lm-eval columns (per task or suite): metrics."""
DERIVED_MODEL = ("notes", "scaling", "budget_knob")
"""Model-section columns derived from the config (a note, a parametrization's multipliers, which budget knob
moved): equal for equal configs, so never an axis of their own."""
EXTRA_METRICS = ("test_nll", "test_ppl", "test_ppl_bound", "test_targets", "val_bpb", "test_bpb", "val_bytes_per_token",
                 "test_bytes_per_token", "val_attention_block")
ANNOTATIONS = ("label", "tier", "unit", "config_key")

ROLES = {
    "identity": [c for c in ID_COLUMNS] + ["run_dir"],
    "nuisance": list(NUISANCE_AXES),
    "count": [c for c in COUNT_COLUMNS if c != "max_steps"],
    "metric": METRIC_COLUMNS + list(EXTRA_METRICS),
    "training": list(TRAINING_COLUMNS),
    "throughput": list(THROUGHPUT_COLUMNS),
    "provenance": [c for c in TAIL_COLUMNS if c != "run_dir"],
    "annotation": list(ANNOTATIONS),
    "derived": list(DERIVED_MODEL),
}
_ROLE_OF = {column: role for role, columns in ROLES.items() for column in columns}


def role_of(column: str) -> str:
    """The role of a column (see the module docstring); "config" for a model field or TRAIN_AXES."""
    if column in _ROLE_OF:
        return _ROLE_OF[column]
    if column.startswith(OUTPUT_PREFIXES):
        return "metric"
    if column.startswith("params_"):
        return "count"
    return "config"


def config_columns(table: pd.DataFrame) -> list[str]:
    """The columns that say what was trained (no nuisance axis: seed and lr are not part of a configuration)."""
    return [c for c in table.columns if role_of(c) == "config"]


def _text(value) -> str:
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def config_keys(table: pd.DataFrame) -> pd.Series:
    """One string per row naming its configuration: rows with equal keys differ only in nuisance axes (a CSV
    round trip that reads 4 as 4.0 gives the same key)."""
    columns = config_columns(table)
    if not columns:
        return pd.Series(["" for _ in table.index], index=table.index, dtype=object)
    return table[columns].map(_text).agg("|".join, axis=1)
