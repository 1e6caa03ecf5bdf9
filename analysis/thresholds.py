"""Thresholds on a numeric axis, the best configuration per family, the Pareto frontier, two-level comparisons.

    find_threshold(table, "d_model", "score_hellaswag")      # "hidden size >= 512 is what matters"?
    best_per_family(table, "avg_study7")
    pareto_frontier(table, x="train_flops", y="val_nll")     # lower is better on both
    nll_frontier(table)                                      # the same, a diffusion bound never on it
    compare(table, "n_layers", 32, 12, "avg_study7")          # "32 layers beats 12"?

Threshold rule. Units are configurations (seeds pooled, see analysis.tiers). For every cut between two
distinct axis values (at least `min_size` units on each side) the statistic is the standardised
difference of the mean scores on the two sides,
    D = (mean(axis >= t) - mean(axis < t)) / s_within,   s_within pooled within the two sides,
oriented so that positive means "better at or above t" (or below t, when that direction is larger).
The cut with the largest |D| is the threshold. Its p-value is a permutation test: the scores are shuffled
over the units `n_perm` times and the same search (largest |D| over all cuts) is repeated, so picking the
best cut is paid for: p = (1 + #{max|D*| >= |D|}) / (1 + n_perm). Found when p < alpha. The result also
says whether the split is clean (every unit on the good side beats every unit on the other side), and
names any other numeric axis that moves with this one (|Spearman rho| >= 0.7, e.g. depth falls as width
rises at a fixed parameter budget), since the threshold may then belong to that axis instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from analysis.metrics import comparable_rows, higher_is_better as _higher_is_better
from analysis.tiers import _draws, format_p, units_of

CONFOUND_AXES = ("n_layers", "d_model", "params_active", "tokens", "layer_repeat", "context_length")
"""Axes checked for moving together with the threshold axis (size: active parameters per token, which equal
params_total except for a mixture of experts)."""


@dataclass
class ThresholdResult:
    axis: str
    score: str
    higher_is_better: bool
    found: bool
    reason: str
    threshold: float | None = None
    """The smallest axis value on the upper side: the rule reads `axis >= threshold`."""
    below: float | None = None
    """The largest axis value under the threshold (where a line between the two is drawn)."""
    better_side: str | None = None
    """"above" (axis >= threshold is better) or "below"."""
    effect: float | None = None
    """D: standardised mean difference, positive = the better side is better."""
    p_value: float | None = None
    mean_above: float | None = None
    mean_below: float | None = None
    n_above: int = 0
    n_below: int = 0
    clean: bool | None = None
    """Every unit on the better side beats every unit on the other side."""
    separation: float | None = None
    """Bootstrap probability of a clean split under the runs' noise (None if no uncertainty is known)."""
    confounded_with: dict = field(default_factory=dict)
    """Other axes that move with this one: {axis: Spearman rho}."""
    candidates: pd.DataFrame | None = None
    units: pd.DataFrame | None = None

    def summary(self) -> str:
        if not self.found:
            lines = [f"{self.axis} threshold on {self.score}: none ({self.reason})"]
        else:
            side = ">=" if self.better_side == "above" else "<"
            lines = [f"{self.axis} {side} {_fmt(self.threshold)} is better on {self.score}: mean "
                     f"{self.mean_above:.4g} (n={self.n_above}) at/above vs {self.mean_below:.4g} (n={self.n_below}) "
                     f"below; D = {self.effect:.2f}, permutation {format_p(self.p_value)}; "
                     + ("clean split" if self.clean else "the sides overlap")]
        if self.confounded_with:
            lines.append("  caution: " + ", ".join(f"{k} moves with {self.axis} (rho = {v:+.2f})"
                                                   for k, v in self.confounded_with.items()))
        return "\n".join(lines)


def _fmt(value) -> str:
    if value is None:
        return "?"
    return str(int(value)) if float(value).is_integer() else f"{value:.4g}"


def _d_stats(x: np.ndarray, y: np.ndarray, cuts: list[int]) -> np.ndarray:
    """D for each cut (index into the ascending-by-axis order) and each row of y (m, n)."""
    out = np.empty((y.shape[0], len(cuts)))
    n = y.shape[1]
    for j, i in enumerate(cuts):
        lo, hi = y[:, :i], y[:, i:]
        ss = ((lo - lo.mean(axis=1, keepdims=True)) ** 2).sum(axis=1) \
            + ((hi - hi.mean(axis=1, keepdims=True)) ** 2).sum(axis=1)
        s = np.sqrt(ss / max(n - 2, 1))
        diff = hi.mean(axis=1) - lo.mean(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            out[:, j] = np.where(s > 0, diff / np.where(s > 0, s, 1), np.sign(diff) * np.inf)
    return out


def find_threshold(table: pd.DataFrame, axis: str, score: str, higher_is_better: bool | None = None,
                   alpha: float = 0.05, min_size: int = 1, n_perm: int = 4000, n_boot: int = 2000, seed: int = 0,
                   completed_only: bool = True, keys: pd.Series | None = None) -> ThresholdResult:
    """The cut on `axis` that best separates `score` (see the module docstring). `keys`: the table's config_keys
    where the caller has them (analysis.schema.keys_of)."""
    if axis not in table:
        raise KeyError(f"no column {axis!r} in the table")
    if score not in table:
        raise KeyError(f"no column {score!r} in the table")
    hib = _higher_is_better(table, score) if higher_is_better is None else higher_is_better
    rows = table[pd.to_numeric(table[axis], errors="coerce").notna()]
    units, _, notes = units_of(rows, score, completed_only=completed_only, keys=keys)
    base = ThresholdResult(axis, score, hib, False, "")
    if units.empty:
        base.reason = f"no completed run with both {axis} and {score}"
        return base
    units["x"] = [float(pd.to_numeric(rows.loc[r[0], axis])) for r in units["runs"]]
    units = units.sort_values("x", kind="stable").reset_index(drop=True)
    base.units = units[["label", "x", "value", "se", "n_seeds"]].rename(columns={"x": axis})
    x = units["x"].to_numpy(float)
    y = units["value"].to_numpy(float) * (1 if hib else -1)
    n = len(x)
    cuts = [i for i in range(1, n) if x[i] != x[i - 1] and min_size <= i <= n - min_size]
    if not cuts:
        base.reason = (f"{axis} takes {len(np.unique(x))} distinct value(s) over {n} configuration(s): "
                       f"nothing to cut (min_size={min_size})")
        return base
    if np.ptp(y) == 0:
        base.reason = f"{score} is the same for every configuration"
        return base
    d = _d_stats(x, y[None], cuts)[0]
    best = int(np.argmax(np.abs(d)))
    cut, effect = cuts[best], float(d[best])
    rng = np.random.default_rng(seed)
    perms = np.argsort(rng.random((n_perm, n)), axis=1)
    null = np.nanmax(np.abs(_d_stats(x, y[perms], cuts)), axis=1)
    p = float((1 + np.sum(null >= abs(effect) - 1e-12)) / (1 + n_perm))
    better = "above" if effect > 0 else "below"
    good, bad = (y[cut:], y[:cut]) if better == "above" else (y[:cut], y[cut:])
    clean = bool(good.min() > bad.max())
    separation = None
    draws = _draws(units, n_boot, rng)
    if draws is not None:
        draws = draws * (1 if hib else -1)
        g_idx, b_idx = (np.arange(cut, n), np.arange(cut)) if better == "above" else (np.arange(cut), np.arange(cut, n))
        separation = float(np.mean(draws[:, g_idx].min(axis=1) > draws[:, b_idx].max(axis=1)))
    values = units["value"].to_numpy(float)
    result = ThresholdResult(
        axis, score, hib, p < alpha, "", threshold=float(x[cut]), below=float(x[cut - 1]), better_side=better,
        effect=abs(effect), p_value=p, mean_above=float(values[cut:].mean()), mean_below=float(values[:cut].mean()),
        n_above=n - cut, n_below=cut, clean=clean, separation=separation,
        confounded_with=_confounds(rows, axis), units=base.units,
        candidates=pd.DataFrame({"threshold": [x[i] for i in cuts], "D": d, "n_above": [n - i for i in cuts]}))
    result.reason = ("found" if result.found else
                     f"no cut separates {score} beyond chance: best is {axis} >= {_fmt(x[cut])} with "
                     f"permutation {format_p(p)} >= {alpha}")
    return result


def _confounds(rows: pd.DataFrame, axis: str, limit: float = 0.7) -> dict:
    out = {}
    x = pd.to_numeric(rows[axis], errors="coerce")
    for other in CONFOUND_AXES:
        if other == axis or other not in rows:
            continue
        y = pd.to_numeric(rows[other], errors="coerce")
        ok = x.notna() & y.notna()
        if ok.sum() < 3 or x[ok].nunique() < 2 or y[ok].nunique() < 2:
            continue
        rho = x[ok].rank().corr(y[ok].rank())
        if rho is not None and math.isfinite(rho) and abs(rho) >= limit:
            out[other] = round(float(rho), 2)
    return out


BEST_Z = 1.96
"""A configuration is called its family's best only when it beats every other one of the family by more
than this many standard errors of the difference (95%, two-sided)."""


def best_per_family(table: pd.DataFrame, score: str, by: str = "family", higher_is_better: bool | None = None,
                    completed_only: bool = True, z: float = BEST_Z, keys: pd.Series | None = None) -> pd.DataFrame:
    """The best configuration of each family (seeds pooled), and whether that is a claim the noise allows.

    Columns: family, label, score, se, n_seeds, n_configs (configurations of the family), runner_up (the other
    configuration closest to the best in units of noise), z = (best - runner_up) / sqrt(se_best^2 +
    se_runner_up^2), clear (True: z > `z` against every other configuration; False: some are within noise;
    None: no uncertainty known, or the family has one configuration), within_noise (the configurations
    within noise of the best, comma-separated), verdict (one line saying which), then the best's size and
    shape. se is a configuration's standard error (lm-eval's stderr, an average's propagated one, or the
    seed-to-seed spread; analysis.tiers.units_of). `keys`: the table's config_keys where the caller has them."""
    columns = [by, "label", score, "se", "n_seeds", "n_configs", "runner_up", "z", "clear", "within_noise", "verdict"]
    if score not in table or by not in table:
        return pd.DataFrame(columns=columns)
    hib = _higher_is_better(table, score) if higher_is_better is None else higher_is_better
    units, _, _ = units_of(table, score, completed_only=completed_only, keys=keys)
    if units.empty:
        return pd.DataFrame(columns=columns)
    first = [r[0] for r in units["runs"]]
    extra = [c for c in (by, "n_layers", "d_model", "params_active", "train_flops", "run") if c in table]
    units = pd.concat([units.reset_index(drop=True), table.loc[first, extra].reset_index(drop=True)], axis=1)
    units = units.sort_values("value", ascending=not hib, kind="stable")
    sign = 1.0 if hib else -1.0
    rows = []
    for family, group in units.groupby(by, sort=False, dropna=False):
        best, others = group.iloc[0], group.iloc[1:]
        row = {by: family, "label": best["label"], score: best["value"], "se": best["se"],
               "n_seeds": best["n_seeds"], "n_configs": len(group), "runner_up": None, "z": None, "clear": None,
               "within_noise": None, **{c: best[c] for c in extra if c != by}}
        if others.empty:
            row["verdict"] = "the family's only configuration: nothing to compare"
        else:
            se_best = float(best["se"]) if pd.notna(best["se"]) else math.nan
            se_other = pd.to_numeric(others["se"], errors="coerce").to_numpy(float)
            spread = np.sqrt(se_best ** 2 + se_other ** 2)
            lead = sign * (float(best["value"]) - others["value"].to_numpy(float))
            if not np.isfinite(spread).all() or (spread <= 0).any():
                row["runner_up"] = others.iloc[0]["label"]
                row["verdict"] = (f"{'highest' if hib else 'lowest'} value of {len(group)} (the best: "
                                  f"{'higher' if hib else 'lower'} is better), but no uncertainty is known (no "
                                  "stderr, one seed): not tested against noise")
            else:
                zs = lead / spread
                k = int(np.argmin(zs))
                tied = others["label"][zs <= z].tolist()
                row.update(runner_up=others.iloc[k]["label"], z=float(zs[k]), clear=not tied,
                           within_noise=", ".join(tied) or None)
                row["verdict"] = (f"beats the other {len(others)} beyond noise (closest: {others.iloc[k]['label']}, "
                                  f"z = {zs[k]:.2f} > {z:g})" if not tied else
                                  f"no clear best: {len(tied)} other configuration(s) within noise "
                                  f"(closest: {others.iloc[k]['label']}, z = {zs[k]:.2f} <= {z:g})")
        rows.append(row)
    out = pd.DataFrame(rows)
    return out[columns + [c for c in extra if c != by]].reset_index(drop=True)


def pareto_mask(x, y, lower_x: bool = True, lower_y: bool = True) -> np.ndarray:
    """True where no other point is at least as good on both and strictly better on one."""
    x = np.asarray(x, float) * (1 if lower_x else -1)
    y = np.asarray(y, float) * (1 if lower_y else -1)
    ok = np.isfinite(x) & np.isfinite(y)
    mask = np.zeros(len(x), bool)
    for i in np.flatnonzero(ok):
        dominated = ok & (x <= x[i]) & (y <= y[i]) & ((x < x[i]) | (y < y[i]))
        mask[i] = not dominated.any()
    return mask


def pareto_frontier(table: pd.DataFrame, x: str = "train_flops", y: str = "val_nll", lower_x: bool = True,
                    lower_y: bool | None = None, completed_only: bool = True) -> pd.DataFrame:
    """Rows on the Pareto frontier of y against x (by default: less compute and lower NLL are better),
    sorted by x."""
    if x not in table or y not in table:
        return table.iloc[0:0]
    rows = table
    if completed_only and "status" in rows:
        rows = rows[rows["status"] == "completed"]
    lower_y = (not _higher_is_better(table, y)) if lower_y is None else lower_y
    mask = pareto_mask(pd.to_numeric(rows[x], errors="coerce"), pd.to_numeric(rows[y], errors="coerce"),
                       lower_x, lower_y)
    return rows[mask].sort_values(x, kind="stable")


def nll_frontier(table: pd.DataFrame, x: str = "train_flops", y: str = "val_nll") -> pd.DataFrame:
    """The Pareto frontier of a validation loss against compute, by the one rule the report, the Pareto plot and
    the notebook share: completed runs with both values; where val_nll holds exact NLLs and diffusion bounds
    (val_nll_kind nelbo) the frontier is the exact runs' (a bound is an upper bound on an NLL, not comparable
    with one: never on their frontier). Sorted by x."""
    rows = comparable_rows(table, y)
    if x not in rows:
        return rows.iloc[0:0]
    rows = rows[pd.to_numeric(rows[x], errors="coerce").notna()]
    return pareto_frontier(rows, x, y, lower_y=not _higher_is_better(table, y), completed_only=False)


@dataclass
class Comparison:
    axis: str
    a: object
    b: object
    score: str
    higher_is_better: bool
    mean_a: float
    mean_b: float
    difference: float
    """mean_a - mean_b, oriented so that positive = a is better."""
    ci: tuple[float, float]
    p_value: float
    n_a: int
    n_b: int

    def summary(self) -> str:
        verdict = f"{self.axis}={self.a} beats {self.axis}={self.b}" if self.ci[0] > 0 else \
            f"{self.axis}={self.b} beats {self.axis}={self.a}" if self.ci[1] < 0 else "no clear winner"
        return (f"{self.score}: {self.axis}={self.a} {self.mean_a:.4g} (n={self.n_a}) vs {self.axis}={self.b} "
                f"{self.mean_b:.4g} (n={self.n_b}); advantage of {self.a} {self.difference:+.3g}, 95% CI "
                f"[{self.ci[0]:+.3g}, {self.ci[1]:+.3g}], {format_p(self.p_value)}: {verdict}")


def compare(table: pd.DataFrame, axis: str, a, b, score: str, higher_is_better: bool | None = None,
            n_boot: int = 4000, seed: int = 0, completed_only: bool = True) -> Comparison:
    """Mean score of configurations with axis == a against axis == b. The bootstrap resamples the
    configurations of each side and redraws each from its own noise (seeds, stderr): a 95% interval of
    the advantage of `a` and a two-sided p-value (twice the share of redraws on the other side of 0)."""
    hib = _higher_is_better(table, score) if higher_is_better is None else higher_is_better
    sides = []
    for level in (a, b):
        rows = table[pd.to_numeric(table[axis], errors="coerce") == float(level)] if \
            pd.api.types.is_number(level) else table[table[axis] == level]
        units, _, _ = units_of(rows, score, completed_only=completed_only)
        if units.empty:
            raise ValueError(f"no completed run with {axis} = {level} and a value of {score}")
        sides.append(units)
    rng = np.random.default_rng(seed)
    sign = 1 if hib else -1
    boots = []
    for units in sides:
        draws = _draws(units, n_boot, rng)
        if draws is None:
            draws = np.tile(units["value"].to_numpy(float), (n_boot, 1))
        pick = rng.integers(0, len(units), size=(n_boot, len(units)))
        boots.append(np.take_along_axis(draws, pick, axis=1).mean(axis=1))
    diff = sign * (boots[0] - boots[1])
    mean_a, mean_b = float(sides[0]["value"].mean()), float(sides[1]["value"].mean())
    p = float(min(1.0, 2 * min(np.mean(diff <= 0), np.mean(diff >= 0)) + 1 / (n_boot + 1)))
    lo, hi = np.quantile(diff, [0.025, 0.975])
    return Comparison(axis, a, b, score, hib, mean_a, mean_b, sign * (mean_a - mean_b), (float(lo), float(hi)), p,
                      len(sides[0]), len(sides[1]))
