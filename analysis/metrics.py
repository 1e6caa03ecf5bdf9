"""The metric registry (slm.metrics) read over a results table: which way a column is better, its label, its
standard-error and chance columns, which runs' values are bounds, and which runs a comparison uses. Every module
of the analysis that ranks, labels or draws a metric asks here, so a metric is described in one place.

    higher_is_better(table, "score_piqa")      # from its lm-eval metric (metric_piqa)
    bound_rows(table, "val_nll")               # True where a run's val_nll is a NELBO (val_nll_kind nelbo)
    comparable_rows(table, "val_nll")          # the completed runs a comparison uses: the exact ones among bounds
    name_of("score_slm_shakespeare_mc")       # "Shakespeare line endings"

One rule for which runs a comparison uses (comparable_rows): completed runs with a value; for a metric declared
exact_only (the validation and test losses), where some runs' values are bounds (a masked-diffusion NELBO) and
others' exact, the exact ones only (a bound is not an NLL).
"""

from __future__ import annotations

import pandas as pd

from slm.metrics import BOUND, EXACT, LM_EVAL, LOSS, LOWER, METRICS, Metric, companion, direction, label, metric

__all__ = ["LOSS", "Metric", "average_members", "axis_label", "bound_rows", "bounds_left_out", "chance_column",
           "comparable_column", "comparable_rows", "completed_runs", "headline_metrics", "higher_is_better",
           "lower_is_better", "metric", "metric_of", "name_of", "nll_column", "score_columns",
           "single_task_average", "stderr_column", "task_names", "value_kinds"]


def completed_runs(table: pd.DataFrame) -> pd.DataFrame:
    """The completed runs (every row of a table without a status column)."""
    return table[table["status"] == "completed"] if "status" in table else table


def name_of(column: str) -> str:
    """A column's name in plain words: a metric's label ("validation NLL", "Shakespeare line endings",
    "study7 average"), else the column's own name."""
    return label(column)


def axis_label(column: str) -> str:
    """A metric's label with its unit ("validation NLL (nats/token)"), else the column's own name."""
    entry = metric(column)
    return name_of(column) + (f" ({entry.unit})" if entry is not None and entry.unit else "")


# ---------------------------------------------------------------------------------------------- direction


def lower_is_better(name: str | None) -> bool:
    """Whether a metric (lm-eval key like "bits_per_byte,none", or a column name) is better when lower
    (slm.metrics.direction)."""
    return bool(name) and direction(name) == LOWER


def metric_of(table: pd.DataFrame, column: str) -> str | None:
    """The lm-eval metric key behind a task score (score_<task> -> its metric_<task>), else None."""
    entry = metric(column)
    name = companion(column, entry.lm_metric) if entry is not None else None
    if name is None or name not in table:
        return None
    values = table[name].dropna()
    return str(values.iloc[0]) if len(values) else None


def higher_is_better(table: pd.DataFrame, column: str) -> bool:
    """Direction of a score column: its declaration's; a task score's from its lm-eval metric when known, else
    from its name."""
    lm = metric_of(table, column)
    return not lower_is_better(lm if lm else column)


# ---------------------------------------------------------------------------------------------- companions


def stderr_column(table: pd.DataFrame, column: str) -> str | None:
    """The standard-error column of a score column (score_<task> -> stderr_<task>, avg_<suite> ->
    stderr_avg_<suite>: the entry's `stderr`) when the table has it, else None."""
    entry = metric(column)
    name = companion(column, entry.stderr) if entry is not None else None
    return name if name is not None and name in table else None


def chance_column(table: pd.DataFrame, column: str) -> str | None:
    """The chance-level column of a score column (chance_<task>, chance_avg_<suite>: the entry's `chance`) when the
    table has one with a value, else None."""
    entry = metric(column)
    name = companion(column, entry.chance) if entry is not None else None
    if name is None or name not in table:
        return None
    return name if pd.to_numeric(table[name], errors="coerce").notna().any() else None


def task_names(table: pd.DataFrame) -> list[str]:
    """lm-eval tasks with at least one score in the table."""
    return [c[len("score_"):] for c in table.columns if c.startswith("score_") and table[c].notna().any()]


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


# ---------------------------------------------------------------------------------------------- bounds


def bound_rows(table: pd.DataFrame, column: str) -> pd.Series:
    """Rows whose value of `column` is an upper bound, not an exact value, by its entry's rule: a masked-diffusion
    run's (val_nll_kind nelbo) validation and test losses, and its perplexity-type lm-eval scores (bits per byte,
    byte or word perplexity: its log-likelihoods are Monte Carlo ELBO estimates); every value of a BOUND metric.
    Every plot draws such a point hollow."""
    entry = metric(column)
    if entry is None or entry.kind == EXACT:
        return pd.Series(False, index=table.index)
    if entry.kind == BOUND:
        return pd.Series(True, index=table.index)
    rule = entry.bound_when
    kinds = table[rule.column] if rule.column in table else pd.Series(rule.default, index=table.index)
    bound = kinds.fillna(rule.default).isin(rule.values)
    if rule.lm_eval:
        name = companion(column, entry.lm_metric)
        if name is None or name not in table:
            return pd.Series(False, index=table.index)
        bounded = [m for m, facts in LM_EVAL.items() if facts.elbo_bound]
        bound = bound & table[name].astype(str).str.split(",").str[0].isin(bounded)
    return bound


def value_kinds(table: pd.DataFrame, column: str) -> set[str]:
    """What a column holds in the rows that have a value: {EXACT}, {BOUND} or both (empty: no value)."""
    if column not in table or not table[column].notna().any():
        return set()
    has = table[column].notna()
    return set(bound_rows(table, column)[has].map({True: BOUND, False: EXACT}))


def _valued(table: pd.DataFrame, column: str) -> pd.DataFrame:
    rows = completed_runs(table)
    if column not in rows:
        return rows.iloc[0:0]
    return rows[pd.to_numeric(rows[column], errors="coerce").notna()]


def _mixed(rows: pd.DataFrame, column: str) -> pd.Series | None:
    """The bound rows of `column` where they sit among exact ones and the metric compares exact values only."""
    entry = metric(column)
    if entry is None or not entry.exact_only:
        return None
    bound = bound_rows(rows, column)
    return bound if bound.any() and (~bound).any() else None


def comparable_rows(table: pd.DataFrame, column: str) -> pd.DataFrame:
    """The completed runs with a value of `column` that can be compared with each other: for a metric compared on
    exact values only (exact_only: the validation and test losses) holding both exact values and bounds, the exact
    ones."""
    rows = _valued(table, column)
    bound = _mixed(rows, column)
    return rows if bound is None else rows[~bound]


def bounds_left_out(table: pd.DataFrame, column: str) -> pd.DataFrame:
    """Completed runs whose value of `column` is a bound left out of a comparison of exact values
    (comparable_rows)."""
    rows = _valued(table, column)
    bound = _mixed(rows, column)
    return rows.iloc[0:0] if bound is None else rows[bound]


# ---------------------------------------------------------------------------------------------- which metric


def comparable_column(table: pd.DataFrame, column: str) -> str:
    """The metric to compare runs on in place of `column`: a per-token metric's across_tokenizers one (val_nll ->
    val_bpb) when the completed runs' tokenizers differ and every one of them has it, else `column`."""
    entry = metric(column)
    other = entry.across_tokenizers if entry is not None else None
    rows = completed_runs(table)
    tokenizers = rows["tokenizer"].dropna().unique() if "tokenizer" in rows else []
    if other and len(tokenizers) > 1 and other in rows and rows[other].notna().all() and len(rows):
        return other
    return column


def nll_column(table: pd.DataFrame) -> str:
    """The validation loss to compare runs on: val_bpb (bits per byte) when the completed runs' tokenizers differ
    and every one of them has it, else val_nll (nats per token)."""
    return comparable_column(table, LOSS)


def headline_metrics() -> list[str]:
    """The registry's headline candidates (besides the lm-eval scores), in its order."""
    return [m.name for m in METRICS.values() if m.headline]


def score_columns(table: pd.DataFrame) -> list[str]:
    """The table's columns that hold a score (a metric with a direction: task scores, suite averages, losses)."""
    return [c for c in table.columns if (metric(str(c)) is not None and metric(str(c)).is_score)]
