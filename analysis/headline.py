"""The headline metric of a study: the first metric, in a fixed order, on which the configurations are
distinguishable from each other and from chance. The report's verdict ranks the configurations on it.

    h = choose_headline(table)              # Headline: column, why (plain words), candidates, at_chance
    h = choose_headline(table, "val_nll")   # an explicit choice (slm-report --score) is kept, and described

Order tried: suite averages of more than one task (study7 first), the lm-eval task scores where higher is
better (accuracies), the validation loss (bits per byte when the runs' tokenizers differ, else NLL per
token), then the other lm-eval task scores (bits per byte of a text, perplexities).

The validation loss there is the registry's headline metrics (slm.metrics, headline=True: val_nll, compared as its
across_tokenizers val_bpb where the tokenizers differ; a metric registered with headline=True follows it).

Each candidate is judged over configurations (seeds pooled, each at its best lr: analysis.tiers.units_of):
  at chance   a metric with a chance level is at chance for the study when half or more of its
              configurations are within noise of it (value - chance <= 1.96 se; at or below chance where
              se is unknown)
  separates   some pair's z = |a - b| / sqrt(se_a^2 + se_b^2) beats the Bonferroni critical value for all the
              pairs (two-sided, alpha 0.05) of Student's t with the pair's Welch-Satterthwaite degrees of
              freedom (an se from n seeds has n - 1; lm-eval's stderr counts as known: the normal value); None
              (untested) when fewer than two configurations have a known, non-zero se
  se          lm-eval's standard error (an average's propagated one) and, where a configuration has several
              seeds, their spread (single-seed configurations then get the pooled spread). The validation
              loss has no standard error: its noise is known only from repeated seeds, else it is unknown
              and said to be, never invented.
The headline is the first candidate that is not at chance and separates; else the first that is not at
chance (its differences untested or within noise, said so); else the first candidate (every metric at
chance, said so). Where some runs' val_nll is a diffusion bound (NELBO) and others' an exact NLL, only the
exact ones are compared. The selection uses unpaired z (per-document pairing is the verdict's,
analysis.verdict), so it is conservative where runs share documents.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy.stats import t as student_t

from analysis.metrics import (  # noqa: F401 (comparable_rows, name_of re-exported: they lived here)
    BOUND, EXACT, bounds_left_out, chance_column, comparable_column, comparable_rows, headline_metrics,
    higher_is_better, name_of, score_columns, single_task_average, task_names, value_kinds)
from analysis.schema import keys_of
from analysis.tiers import units_of
from slm.words import counted
from slm.eval.score_lines import near_chance

ALPHA = 0.05


@dataclass
class Candidate:
    """One metric judged for the headline (module docstring)."""

    column: str
    configurations: int
    chance: float | None = None
    """The metric's chance level (None: it has none)."""
    near_chance: int = 0
    """Configurations within noise of chance."""
    noise: str = "none"
    """Where its uncertainty comes from: "lm-eval stderr", "seeds", "lm-eval stderr and seeds" or "none"."""
    max_z: float | None = None
    z_crit: float | None = None
    pair: tuple[str, str] | None = None
    """The two configurations farthest apart in units of noise."""
    pairs: int = 0

    @property
    def at_chance(self) -> bool:
        return self.chance is not None and self.configurations > 0 and 2 * self.near_chance >= self.configurations

    @property
    def separates(self) -> bool | None:
        """True / False: the configurations differ beyond noise / do not; None: untested (no noise known)."""
        if self.max_z is None or self.z_crit is None:
            return None
        return self.max_z > self.z_crit

    def describe(self) -> str:
        """One line: what was found for this metric."""
        parts = []
        if self.chance is not None:
            parts.append(f"{self.near_chance} of {self.configurations} configurations within noise of chance "
                         f"({self.chance:.3g})")
        if self.separates is None:
            parts.append("no noise estimate (" + ("one configuration" if self.configurations < 2 else
                         "one seed per configuration and no standard error") + "): differences untested")
        else:
            a, b = self.pair
            parts.append(f"largest difference {self.max_z:.2f} standard errors ({a} vs {b}), "
                         f"{'beyond' if self.separates else 'within'} noise (Bonferroni over {counted(self.pairs, 'pair')}: "
                         f"{self.z_crit:.2f})")
        return "; ".join(parts)


@dataclass
class Headline:
    """The chosen metric and why. column None: the table has no metric at all."""

    column: str | None
    why: str
    """Plain words, for the verdict."""
    note: str = ""
    """A short line for a plot or choose_score ("" when the first metric of the order was taken as it is)."""
    explicit: bool = False
    candidates: list[Candidate] = field(default_factory=list)

    @property
    def at_chance(self) -> list[Candidate]:
        """Candidates at chance for the study (their own heading in the report)."""
        return [c for c in self.candidates if c.at_chance]

    def candidate(self, column: str) -> Candidate | None:
        return next((c for c in self.candidates if c.column == column), None)


def candidate_columns(table: pd.DataFrame) -> list[str]:
    """The metrics to try, in the order of the module docstring (only those with a value in a completed run)."""
    rows = table[table["status"] == "completed"] if "status" in table else table

    def has(column: str) -> bool:
        return column in rows and pd.to_numeric(rows[column], errors="coerce").notna().any()

    averages = [c for c in table.columns if c.startswith("avg_") and has(c) and not single_task_average(table, c)]
    averages.sort(key=lambda c: c != "avg_study7")
    tasks = [f"score_{t}" for t in task_names(rows) if has(f"score_{t}")]
    higher = [c for c in tasks if higher_is_better(table, c)]
    # the registry's headline metrics (slm.metrics: headline=True; the validation loss), each as compared across
    # these runs' tokenizers (val_nll -> val_bpb where they differ)
    declared = [c for c in dict.fromkeys(comparable_column(table, m) for m in headline_metrics()) if has(c)]
    return list(dict.fromkeys(averages + higher + declared + [c for c in tasks if c not in higher]))


def units(table: pd.DataFrame, column: str, keys: pd.Series | None = None) -> pd.DataFrame:
    """Configurations of the comparable runs (analysis.tiers.units_of), with their chance level. `keys`: the
    table's config_keys where the caller has them (analysis.schema.keys_of)."""
    rows = comparable_rows(table, column)
    if rows.empty:
        return pd.DataFrame(columns=["label", "value", "se", "n_seeds", "runs"])
    out, _, _ = units_of(rows, column, keys=keys)
    name = chance_column(rows, column)
    if len(out):
        out["chance"] = [float(pd.to_numeric(rows.at[r[0], name], errors="coerce")) if name else np.nan
                         for r in out["runs"]]
    return out


def se_df(units_: pd.DataFrame) -> np.ndarray:
    """Degrees of freedom of each configuration's se (analysis.tiers.units_of; inf where not recorded)."""
    if "se_df" not in units_:
        return np.full(len(units_), np.inf)
    return pd.to_numeric(units_["se_df"], errors="coerce").fillna(np.inf).to_numpy(float)


def welch_df(se_a, df_a, se_b, df_b):
    """Welch-Satterthwaite degrees of freedom of se_a^2 + se_b^2 (inf when both are known exactly)."""
    va, vb = np.square(se_a), np.square(se_b)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(np.isfinite(df_a), va ** 2 / df_a, 0.0) + np.where(np.isfinite(df_b), vb ** 2 / df_b, 0.0)
        return np.where(terms > 0, (va + vb) ** 2 / np.where(terms > 0, terms, 1.0), np.inf)


def t_crit(df, alpha: float = ALPHA, tests: int = 1):
    """Two-sided critical value of Student's t with `df` (inf: the normal one) at level alpha / tests."""
    return student_t.isf(alpha / (2 * max(tests, 1)), df)


def z_matrix(units_: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(|a - b| / sqrt(se_a^2 + se_b^2), testable) for every pair of configurations."""
    value = units_["value"].to_numpy(float)
    se = pd.to_numeric(units_["se"], errors="coerce").to_numpy(float)
    spread = np.sqrt(se[:, None] ** 2 + se[None, :] ** 2)
    ok = np.isfinite(spread) & (spread > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(ok, np.abs(value[:, None] - value[None, :]) / np.where(ok, spread, 1.0), np.nan)
    return z, ok


def bonferroni_z(pairs: int, alpha: float = ALPHA, df=np.inf):
    """Two-sided critical value for `pairs` tests at family-wise level alpha (Student's t with df; inf: z)."""
    return t_crit(df, alpha, pairs)


def judge(table: pd.DataFrame, column: str, keys: pd.Series | None = None) -> Candidate:
    """The candidate's numbers (module docstring); `keys`: the table's config_keys where the caller has them."""
    u = units(table, column, keys)
    c = Candidate(column, len(u))
    if u.empty:
        return c
    chance = u["chance"].to_numpy(float) if "chance" in u else np.full(len(u), np.nan)
    if np.isfinite(chance).any():
        c.chance = float(np.nanmedian(chance))
        se = np.nan_to_num(pd.to_numeric(u["se"], errors="coerce").to_numpy(float))
        c.near_chance = int(np.sum(np.isfinite(chance) & near_chance(u["value"].to_numpy(float), chance, se)))
    bench = "bench_se" in u and u["bench_se"].notna().any()
    seeds = "n_seeds" in u and (u["n_seeds"] >= 2).any()
    c.noise = " and ".join(s for s, on in (("lm-eval stderr", bench), ("seeds", seeds)) if on) or "none"
    z, ok = z_matrix(u)
    upper = np.triu(ok, k=1)
    c.pairs = int(upper.sum())
    if c.pairs:
        se_ = pd.to_numeric(u["se"], errors="coerce").to_numpy(float)
        dfs = se_df(u)
        crit = bonferroni_z(c.pairs, df=welch_df(se_[:, None], dfs[:, None], se_[None, :], dfs[None, :]))
        margin = np.where(upper, z / crit, -np.inf)  # the pair most beyond (or least within) its critical value
        i, j = np.unravel_index(int(np.argmax(margin)), margin.shape)
        c.max_z, c.z_crit = float(z[i, j]), float(crit[i, j])
        c.pair = (str(u["label"].iloc[i]), str(u["label"].iloc[j]))
    return c


def choose_headline(table: pd.DataFrame, score: str | None = None, keys: pd.Series | None = None) -> Headline:
    """The headline metric of `table` (module docstring); `score` given: that one, still judged. `keys`: the
    table's config_keys where the caller has them (else made once here for every candidate)."""
    columns = candidate_columns(table)
    if score:
        if score not in table:
            raise KeyError(f"no column {score!r} in the results (columns: {', '.join(score_columns(table))})")
        columns = list(dict.fromkeys([score, *columns]))
    keys = keys_of(table, keys) if columns else None
    candidates = [judge(table, c, keys) for c in columns]
    if score:
        chosen = candidates[0]
        why = f"**{name_of(score)}** was chosen by the user (--score): {chosen.describe()}."
        return Headline(score, why, "", True, candidates)
    if not candidates:
        return Headline(None, "No metric to rank on: no lm-eval scores and no validation loss.",
                        "no score: no lm-eval scores and no validation NLL", False, candidates)
    chosen = (next((c for c in candidates if not c.at_chance and c.separates), None)
              or next((c for c in candidates if not c.at_chance), None) or candidates[0])
    skipped = candidates[:candidates.index(chosen)]
    why = _why(table, chosen, skipped)
    note = _note(table, chosen, skipped)
    return Headline(chosen.column, why, note, False, candidates)


def _why(table: pd.DataFrame, chosen: Candidate, skipped: list[Candidate]) -> str:
    name = f"**{name_of(chosen.column)}**"
    reasons = []
    for c in skipped:
        if c.at_chance:
            reasons.append(f"{name_of(c.column)} is within noise of chance for {c.near_chance} of "
                           f"{c.configurations} configurations, so it cannot rank them")
        elif c.separates is False:
            reasons.append(f"{name_of(c.column)} does not separate the configurations beyond noise")
        else:
            reasons.append(f"{name_of(c.column)}'s differences cannot be tested (no noise estimate)")
    text = f"Headline metric: {name}. "
    if reasons:
        text += "It was chosen because " + "; ".join(reasons) + "."
    else:
        text += "It is the first metric of the order (appendix)."
    if chosen.at_chance:
        text += f" But it too is at chance for {chosen.near_chance} of {chosen.configurations} configurations: " \
                "no metric here ranks the configurations yet."
    elif chosen.separates:
        text += " Its configurations differ beyond noise."
    elif chosen.separates is False:
        text += " No metric separates the configurations beyond noise; it is the first not at chance."
    else:
        pruned = "status" in table and bool(table["status"].eq("pruned").any())
        if chosen.configurations < 2 and pruned:
            text += (" Nothing to test at the end: one configuration was trained to it, successive halving pruned "
                     "the others at its rungs (the verdict lists them with their scores there).")
        else:
            text += (" Its noise is unknown: " + ("there is one configuration." if chosen.configurations < 2 else
                     "one seed per configuration and no standard error, so its differences are not tested."))
    if not bounds_left_out(table, chosen.column).empty:
        text += " Diffusion runs' NELBO (an upper bound on the NLL) is not ranked with exact NLLs."
    return text


def _note(table: pd.DataFrame, chosen: Candidate, skipped: list[Candidate]) -> str:
    """Short: what a plot title or choose_score says about the choice."""
    if not any(c.startswith(("score_", "avg_")) for c in candidate_columns(table)):
        if chosen.column == "val_bpb":
            return ("no lm-eval scores, and the runs' tokenizers differ: validation bits per byte used (an NLL "
                    "per token is not comparable across tokenizers)")
        if chosen.column == "val_nll" and value_kinds(table, "val_nll") == {EXACT, BOUND}:
            return ("no lm-eval scores: val_nll used as the score, but it holds exact NLLs and diffusion NELBO "
                    "bounds, which are not comparable: rank each kind on its own")
        return "no lm-eval scores: validation NLL used as the score"
    if not skipped:
        return ""
    why = {True: "at chance", False: "within noise", None: "noise unknown"}
    return f"{name_of(chosen.column)} (" + "; ".join(
        f"{name_of(c.column)}: {why[True if c.at_chance else c.separates]}" for c in skipped) + ")"
