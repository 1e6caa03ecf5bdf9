"""Runs too short to rank architectures, by a stated rule; the report says so in one line at the top of its verdict.

A completed run is too short to rank when either holds:
  - it trained fewer tokens than it has parameters (tokens / params_active < MIN_TOKENS_PER_PARAM = 1; not a
    post-training stage (sft, preference), which starts from trained weights; the active
    parameters, which a token uses, for a mixture of experts). That far from its data budget a model is in its first,
    fastest phase of learning, and the order of the runs is which one leaves the early plateaus first (the unigram
    statistics, then the bigrams), not which one learns better. The README's 20-step first look (0.16 tokens per
    parameter) ranks gpt2 ahead at every depth, the full study (244 steps, 2 tokens per parameter) behind: at depth 2
    gpt2's training loss is 2.86 nats after 20 steps and llama3's 3.29 (still on the 3.31-nat unigram plateau), after
    244 steps their validation NLLs are 2.35 and 1.89.
    Compute-optimal training is about 20 tokens per parameter (Chinchilla), so 1 is a floor, not a target.
  - it ended within MIN_STEPS_PAST_WARMUP = 2 x its warmup steps (steps < 2 x warmup_steps): it spent no longer at its
    peak learning rate than it took to get there, so its loss is still mostly the schedule's.
A falling loss at the end is no test: a cosine schedule flattens every run's end, whatever its length, and a run
stuck on a plateau is flat too. Standard library and pandas only; reads the results table.
"""

from __future__ import annotations

import pandas as pd

MIN_TOKENS_PER_PARAM = 1.0
POST_TRAINING = ("sft", "preference")
"""Objectives of a post-training stage (docs/preference.md): it starts from trained weights, so its own few tokens are
not the measure (the warmup rule still applies)."""
MIN_STEPS_PAST_WARMUP = 2.0
RULE = (f"a run is too short to rank when it trained fewer than {MIN_TOKENS_PER_PARAM:g} token per parameter, or "
        f"ended within {MIN_STEPS_PAST_WARMUP:g}x its warmup steps")


def _column(table: pd.DataFrame, name: str) -> pd.Series:
    return pd.to_numeric(table[name], errors="coerce") if name in table else pd.Series(float("nan"), table.index)


def _measures(table: pd.DataFrame) -> tuple[pd.Series, pd.Series, pd.Series]:
    """(tokens per parameter, too few tokens, ended within the warmup rule) per row; the two rules hold only for
    completed runs."""
    params = _column(table, "params_active").fillna(_column(table, "params_total"))
    per_param = _column(table, "tokens") / params
    steps, warmup = _column(table, "steps"), _column(table, "warmup_steps")
    completed = table["status"].eq("completed") if "status" in table else pd.Series(True, table.index)
    stage = table["objective"].isin(POST_TRAINING) if "objective" in table else pd.Series(False, table.index)
    few = completed & ~stage & (per_param < MIN_TOKENS_PER_PARAM)
    early = completed & (warmup > 0) & (steps < MIN_STEPS_PAST_WARMUP * warmup)
    return per_param, few, early


def warning(table: pd.DataFrame) -> str | None:
    """The report's line when completed runs are too short to rank (module docstring), None when none is."""
    per_param, few, early = _measures(table)
    short = few | early
    if not short.any():
        return None
    completed = int(table["status"].eq("completed").sum()) if "status" in table else len(table)
    ended_early = int(early.sum())
    shown = "; ".join(
        ([f"{_range(per_param[few])} tokens per parameter"] if few.any() else [])
        + ([f"{ended_early} ended within {MIN_STEPS_PAST_WARMUP:g}x {'its' if ended_early == 1 else 'their'} warmup"]
           if ended_early else []))
    if int(short.sum()) == completed:
        head = (f"**Too short to rank anything**: all {completed} completed runs are too short ({shown}), so the order "
                "below says which model starts fastest, not which is better; train longer before reading it")
    else:
        head = (f"**{int(short.sum())} of {completed} completed runs are too short to rank** ({shown}): their places "
                "below say which model starts fastest, not which is better")
    return f"{head} (rule: {RULE}; analysis/too_short.py says why)."


def _range(values: pd.Series) -> str:
    lo, hi = f"{values.min():.2g}", f"{values.max():.2g}"
    return lo if lo == hi else f"{lo} to {hi}"
