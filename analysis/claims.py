"""slm's verdict on a depth x width study's claims, from a results table: each claim supported, not supported
or not testable with the runs at hand, with the statistic behind it, at the shared lr and at each
configuration's best lr (analysis.tuning; a "best" verdict names how many configurations were best at an edge of
their lr grid, where the best is only a bound).

    verdicts = judge(table)                 # a DataFrame: claim, lr, verdict, statistic
    print(markdown(verdicts))

The claims (those the study reads off its tables and plots):
  two tiers        the configurations split into two groups separated by a real gap: the 2-tier partition of the
                   report's Tiers section tested on its own at 0.05 (analysis.tiers, TierResult.two_tiers: the
                   gap against the spread within tiers, and against the runs' noise; the section searches up to
                   4 tiers at 0.05 / the number of k tried, so it may refuse what this single test supports)
  width threshold  a hidden size above which scores are better: the report's Hidden-size threshold result
                   (analysis.thresholds on d_model; at a fixed budget width falls as depth rises, so a found
                   threshold names that confound)
  optimal depth    within the design (config apart from the shape) with the most depths, a best depth strictly inside the range that beats
                   both the shallowest and the deepest beyond noise (z > 1.96 on the seeds' standard errors);
                   a best depth at an end of the range is "not supported" (the score still moves that way)
  families within noise
                   at the depth where most families were trained, no two families differ beyond noise: Welch's
                   t-test over the seeds of each pair at alpha 0.05 / pairs (Bonferroni);
                   supported when none does, not supported naming the pair that does

Runs that trained far fewer tokens per parameter than usual (median below TOKENS_PER_PARAM_LOW, a tenth of
Chinchilla's ~20) get one line of caution above the table (tokens_caution): a ranking can change with tokens per
parameter (docs/decisions.md, "What this means for the study's claims").

"Not testable" says what is missing (fewer than three depths, one family, no repeated seeds to measure noise).
Every claim is judged on the runs the report compares (analysis.study: a diffusion NELBO is not ranked with exact
NLLs), and the tiers and the threshold are read from the study's one computation of them.
"""

from __future__ import annotations

import itertools
import math

import pandas as pd

from analysis.metrics import LOSS, bounds_left_out, comparable_rows, higher_is_better as _higher_is_better
from analysis.schema import config_columns, config_keys
from analysis.study import AS_RUN, BEST, SHARED, Study, analyse
from analysis.thresholds import ThresholdResult
from analysis.tiers import TierResult, format_p, units_of
from analysis.tuning import at_best_lr, rows_at
from slm.words import counted

SUPPORTED, NOT_SUPPORTED, NOT_TESTABLE = "supported", "not supported", "not testable"
TOKENS_PER_PARAM_LOW = 2.0
"""Training tokens per parameter (tokens / params_total, the runs' median) below which the verdicts get a caution: a
tenth of Chinchilla's ~20 (Hoffmann et al. 2022)."""
Z = 1.96
ALPHA = 0.05


def _tiers(result: TierResult) -> tuple[str, str]:
    """The claim from the study's tiers (analysis.study): the 2-tier partition tested on its own at alpha, with the
    references and redraws of the Tiers section's search."""
    two = result.two_tiers or result
    n = len(two.units)
    if n < 4:
        return NOT_TESTABLE, f"{counted(n, 'configuration')}: two tiers of at least 2 need 4"
    if two.split:
        gap = two.gaps[0] if two.gaps else None
        stat = (f"2 tiers ({two.tiers[0].n} + {two.tiers[1].n} of {n}); "
                + (f"gap {format_p(gap.p_value)}" if gap is not None and gap.p_value is not None else ""))
        return SUPPORTED, stat.rstrip("; ")
    return NOT_SUPPORTED, f"{counted(n, 'configuration')}: {two.reason}"


def _threshold(rows: pd.DataFrame, result: ThresholdResult | None) -> tuple[str, str]:
    if result is None or "d_model" not in rows or pd.to_numeric(rows["d_model"], errors="coerce").nunique() < 3:
        return NOT_TESTABLE, "fewer than 3 hidden sizes"
    confound = (", confounded with " + ", ".join(f"{k} (rho {v:+.2f})" for k, v in result.confounded_with.items())
                if result.confounded_with else "")
    if result.found:
        side = ">=" if result.better_side == "above" else "<"
        return SUPPORTED, (f"d_model {side} {result.threshold:g}: D = {result.effect:.2f}, permutation "
                           f"{format_p(result.p_value)}{confound}")
    return NOT_SUPPORTED, f"none: {result.reason}{confound}"


SHAPE_COLUMNS = ("n_layers", "d_model", "n_heads", "n_kv_heads", "head_dim", "d_ff", "moe_expert_d_ff", "layer_types",
                 "mlp_types", "canon_set", "mup_base_depth")
"""Config columns that change with the shape at a fixed budget (the depth claim compares shapes of one design)."""


def _depth_series(rows: pd.DataFrame) -> pd.DataFrame:
    """The runs of the design (config apart from the shape) with the most depths."""
    others = [c for c in config_columns(rows) if c not in SHAPE_COLUMNS]
    keys = config_keys(rows[others]) if others else pd.Series("", index=rows.index)
    depths = rows.groupby(keys)["n_layers"].nunique()
    return rows[keys == depths.idxmax()] if len(depths) else rows.iloc[0:0]


def _depth(rows: pd.DataFrame, score: str, hib: bool, keys: pd.Series | None = None) -> tuple[str, str]:
    if "n_layers" not in rows or "family" not in rows:
        return NOT_TESTABLE, "no depth axis"
    series = _depth_series(rows)
    if series.empty or series["n_layers"].nunique() < 3:
        return NOT_TESTABLE, "no design trained at 3 or more depths"
    family = str(series["family"].iloc[0])
    units, _, _ = units_of(series, score, keys=keys)
    first = [r[0] for r in units["runs"]]
    units = units.assign(n_layers=pd.to_numeric(series.loc[first, "n_layers"]).to_numpy())
    units = units.sort_values("n_layers")
    if not units["se"].notna().all() or not (units["se"] > 0).all():
        return NOT_TESTABLE, f"{family}: no noise estimate (one seed, no stderr)"
    sign = 1.0 if hib else -1.0
    best = units.loc[(sign * units["value"]).idxmax()]
    ends = units.iloc[[0, -1]]
    z = [sign * (best["value"] - e["value"]) / math.hypot(best["se"], e["se"]) for _, e in ends.iterrows()]
    where = f"{family}: best at depth {int(best['n_layers'])} (depths {', '.join(str(int(d)) for d in units['n_layers'])})"
    if best["n_layers"] in (units["n_layers"].min(), units["n_layers"].max()):
        return NOT_SUPPORTED, f"{where}: at an end of the range (the score still improves that way)"
    stat = f"{where}; z vs shallowest {z[0]:.2f}, vs deepest {z[1]:.2f}"
    if min(z) > Z:
        return SUPPORTED, stat + f" (both > {Z})"
    end = "shallowest" if z[0] <= z[1] else "deepest"
    return NOT_SUPPORTED, stat + f": the {end}'s z {min(z):.2f} <= {Z}, within noise of the best"


def _families(rows: pd.DataFrame, score: str, keys: pd.Series | None = None) -> tuple[str, str]:
    if "family" not in rows or "n_layers" not in rows or rows["family"].nunique() < 2:
        return NOT_TESTABLE, "fewer than 2 families"
    per_depth = rows.groupby("n_layers")["family"].nunique()
    depth = per_depth.idxmax()
    if per_depth.max() < 2:
        return NOT_TESTABLE, "no depth with 2 or more families"
    at = rows[rows["n_layers"] == depth]
    families = sorted(at["family"].unique())
    units, _, _ = units_of(at, score, keys=keys)
    if not (units["n_seeds"] >= 2).any():
        return NOT_TESTABLE, f"depth {int(depth)}: one seed per family, no noise estimate"
    from scipy.stats import ttest_ind

    values = {f: pd.to_numeric(at.loc[at["family"] == f, score]).to_numpy(float) for f in families}
    pairs = [(a, b) for a, b in itertools.combinations(families, 2) if len(values[a]) >= 2 and len(values[b]) >= 2]
    if not pairs:
        return NOT_TESTABLE, f"depth {int(depth)}: fewer than 2 seeds per family"
    level = ALPHA / len(pairs)
    tests = [(a, b, float(ttest_ind(values[a], values[b], equal_var=False).pvalue)) for a, b in pairs]
    a, b, p = min(tests, key=lambda t: t[2])
    diff = values[a].mean() - values[b].mean()
    hib = _higher_is_better(rows, score)
    better, worse = (a, b) if (diff > 0) == hib else (b, a)
    stat = (f"{len(families)} families at {int(depth)} layers; smallest p: {better} vs {worse}, difference "
            f"{abs(diff):.3g}, Welch t-test over seeds {format_p(p)} (Bonferroni level {level:.3g})")
    return (NOT_SUPPORTED if p < level else SUPPORTED), stat


CLAIMS = ("two tiers", "a width threshold", "an optimal depth", "families within noise of each other")


def judge(table: pd.DataFrame, score: str = LOSS, seed: int = 0, study: Study | None = None) -> pd.DataFrame:
    """The claims table: claim, lr (shared | best), verdict (supported | not supported | not testable), statistic.
    With one lr per configuration the shared and best lr are the same runs: one row per claim, lr "as run". The
    tiers and the threshold are the study's (analysis.study: the report's sections and figures show the same
    results; `study` given, on its headline metric, the table is made once and kept in it); every claim compares
    the runs analysis.metrics.comparable_rows keeps (exact NLLs apart from diffusion bounds)."""
    if score not in table:
        raise KeyError(f"no column {score!r} in the results")
    if study is None or study.score != score:
        study = analyse(table, score, seed)
    return study.computed(("claims", score), lambda: _judge(table, score, study))


def _judge(table: pd.DataFrame, score: str, study: Study) -> pd.DataFrame:
    hib = _higher_is_better(table, score)
    done = comparable_rows(table, score)
    keys = study.keys_for(table)  # each run's configuration, made once: every claim groups the runs by it
    if SHARED in study.views:
        views = [(SHARED, study.view(SHARED), rows_at(done, score, "shared", keys=keys)),
                 (BEST, study.view(BEST), rows_at(done, score, "tuned", keys=keys))]
    else:
        views = [(AS_RUN, study.view(AS_RUN), done)]
    caveat = _edge_caveat(done, score, hib, keys) if len(views) == 2 else ""
    out = []
    for claim in CLAIMS:
        for lr, view, rows in views:
            if rows.empty:
                verdict, stat = NOT_TESTABLE, "no completed runs"
            elif claim == "two tiers":
                verdict, stat = _tiers(view.tiers(score))
            elif claim == "a width threshold":
                verdict, stat = _threshold(rows, view.threshold(score))
            elif claim == "an optimal depth":
                verdict, stat = _depth(rows, score, hib, keys)
            else:
                verdict, stat = _families(rows, score, keys)
            if lr == BEST and caveat and verdict != NOT_TESTABLE:
                stat = f"{stat}; {caveat}"
            out.append({"claim": claim, "lr": lr, "verdict": verdict, "statistic": stat})
    return pd.DataFrame(out)


def _edge_caveat(done: pd.DataFrame, score: str, hib: bool, keys: pd.Series | None = None) -> str:
    """A best lr at an edge of its grid is a bound, not an optimum: say how many configurations have one."""
    best = at_best_lr(done, score, hib, keys)
    edge = int(best["edge"].notna().sum()) if len(best) else 0
    return (f"caveat: {edge} of {len(best)} configurations best at an edge of their lr grid (a bound, not their "
            "optimum: widen hydra.sweeper.lr_search)") if edge else ""


def markdown(verdicts: pd.DataFrame) -> str:
    """The claims table as Markdown."""
    lines = ["| claim | lr | verdict | statistic |", "| --- | --- | --- | --- |"]
    for _, row in verdicts.iterrows():
        stat = str(row["statistic"]).replace("|", "/")
        lines.append(f"| {row['claim']} | {row['lr']} | **{row['verdict']}** | {stat} |")
    return "\n".join(lines)


def seeds_summary(table: pd.DataFrame, score: str = LOSS, keys: pd.Series | None = None) -> str:
    """One line: how many runs, configurations, seeds and lrs the verdicts rest on (the comparable runs: a
    diffusion bound left out of exact NLLs is counted apart). `keys`: the table's config_keys where the caller has
    them (analysis.schema.keys_of)."""
    done = comparable_rows(table, score)
    units, _, _ = units_of(done, score, by_config=True, keys=keys) if len(done) else (pd.DataFrame(), None, None)
    lrs = pd.to_numeric(done.get("lr"), errors="coerce").nunique() if "lr" in done else 0
    seeds = done["seed"].nunique() if "seed" in done else 0
    bounds = len(bounds_left_out(table, score))
    return (f"{len(done)} completed runs: {counted(len(units), 'configuration')}, {counted(seeds, 'seed')}, {counted(lrs, 'learning rate')}; "
            f"score {score}" + (f" ({bounds} diffusion run(s) left out: a NELBO is a bound, not an NLL)"
                                if bounds else ""))




def tokens_caution(table: pd.DataFrame, score: str = LOSS) -> str:
    """One line when the compared runs' median tokens per parameter is below TOKENS_PER_PARAM_LOW, else "": their
    ranking may not be the one at the target's tokens per parameter (docs/decisions.md measured a flip)."""
    done = comparable_rows(table, score)
    if "tokens" not in done or "params_total" not in done:
        return ""
    ratio = pd.to_numeric(done["tokens"], errors="coerce") / pd.to_numeric(done["params_total"], errors="coerce")
    ratio = ratio[ratio.gt(0) & ratio.lt(math.inf)]
    if ratio.empty or ratio.median() >= TOKENS_PER_PARAM_LOW:
        return ""
    return (f"Caution: these runs trained {ratio.median():.2g} tokens per parameter (median), far below Chinchilla's "
            "~20: rankings can change with tokens per parameter (at 2e5 parameters LFM2 leads LLaMA3+Canon at 0.6 "
            "tokens per parameter and trails it at 5: docs/decisions.md), so read these verdicts at the target's tokens "
            "per parameter before trusting them at scale.")
