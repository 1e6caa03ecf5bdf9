"""Tiers: split runs into groups separated by real gaps in a score, or refuse when there is no real gap.

    result = find_tiers(table, "score_hellaswag")           # k chosen by significance (at most max_k)
    result = find_tiers(table, "val_nll", k=2)               # exactly two tiers, or a refusal
    result.split, result.reason, result.tiers, result.gaps, result.labels

Units. Runs that differ only in nuisance axes (analysis.schema: seed, lr) are one configuration: its value is
the mean over seeds at its best lr (analysis.tuning, when lrs were searched). Only completed runs with a value
take part.

Where the cuts go. Units sorted by score; a k-tier partition cuts at the k-1 largest gaps between
neighbours (greedily from the largest down, skipping a gap that would leave a tier with fewer than
`min_size` units): "k tiers by the largest gaps".

A partition is real when both of these hold:
1. Structure (gaps against the spread within tiers). The statistic is
       T = smallest cut gap / s_within,   s_within = sqrt(sum over tiers of SS_tier / (n - k)),
   the narrowest empty space between tiers in units of the pooled standard deviation inside them (SS:
   sum of squared deviations from the tier mean). Its p-value is Monte Carlo: n_sim samples of the same
   size from one population, put through exactly the same procedure (sort, cut at the largest admissible
   gaps, compute T), p = (1 + #{T* >= T}) / (1 + n_sim). Doing the same search in the null accounts
   for having picked the best cuts. T does not depend on location or scale, so the references need no
   fitting; but its null distribution depends on the population's shape (the sparse tail of a skewed
   population holds large gaps), so p is the largest over four single-population shapes: Gaussian,
   uniform, exponential and reflected exponential (REFERENCES). Required: p < alpha (default 0.05);
   with k chosen automatically, k = max_k, ..., 2 are tried and each must pass alpha / (number of k
   tried) (Bonferroni). For k > 2 each gap must also pass the same test locally, at alpha: as a
   2-tier split of the two tiers beside it (so a tight cluster is not split just because a big gap
   elsewhere makes the pooled spread small). A gap reports its local T and p, and the partition's p.
   In simulation (tests/test_analysis_tiers.py) evenly or randomly spread values, bell-shaped, flat
   or skewed, are split in <= ~5% of cases at alpha = 0.05.
2. Noise (each gap against the runs' uncertainty), when any is known. Each unit's value is redrawn
   `n_boot` times: seeds resampled with replacement (where a configuration has several), each seed's
   score redrawn from Normal(score, stderr) with lm-eval's standard error (for a suite average, the
   propagated stderr_avg_<suite>: the metric's standard-error column, slm.metrics; a parametric bootstrap
   over benchmark samples; result.json keeps no per-sample scores). Single-seed configurations get the
   pooled seed-to-seed spread of the configurations that have several. For each pair of adjacent tiers
   the separation probability is the share of redraws in which every unit of the upper tier still
   beats every unit of the lower one; required: >= 1 - alpha. With no stderr and no repeated seeds this
   check cannot be made, and the result says so (decided on the spread alone).

k. With k=None the largest k (<= max_k) whose partition passes both checks is returned. With k given,
only that partition is tested (at alpha). A refusal returns one tier holding every unit, `split=False`,
a `reason`, and the gaps that were tested (for k=None: those of the 2-tier partition).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import lru_cache

import numpy as np
import pandas as pd

from analysis.labels import LABEL_AXES, run_labels  # noqa: F401 (run_labels re-exported: it lived here)
from analysis.metrics import higher_is_better as _higher_is_better, stderr_column
from analysis.schema import config_columns, keys_of
from analysis.tuning import lr_varies, rows_at
from slm.words import counted


@dataclass
class Tier:
    rank: int
    """1 = best."""
    members: list[str]
    """Unit labels (configurations), best first."""
    low: float
    high: float
    mean: float

    @property
    def n(self) -> int:
        return len(self.members)


@dataclass
class Gap:
    upper: int
    """Rank of the better tier (the worse one is upper + 1 once accepted)."""
    low: float
    """Score of the worse tier's best unit (original scale)."""
    high: float
    """Score of the better tier's worst unit."""
    size: float
    t: float
    """This gap / the pooled standard deviation inside the two tiers it separates."""
    p_value: float
    """Monte Carlo p-value (the largest over REFERENCES) of this gap as a 2-tier split of the two tiers beside it."""
    separation: float | None
    """Bootstrap probability that every unit above the gap beats every unit below; None if no uncertainty known."""
    z: float | None
    """gap / sqrt(se_a^2 + se_b^2) of the two units bounding the gap; None if unknown."""
    n_upper: int
    n_lower: int
    significant: bool
    why: str
    p_partition: float | None = None
    """p-value of the whole k-tier partition (its smallest gap); equal to p_value for k = 2."""


@dataclass
class TierResult:
    score: str
    higher_is_better: bool
    split: bool
    reason: str
    tiers: list[Tier]
    gaps: list[Gap]
    """Accepted gaps (split) or the gaps that were tested and failed (refusal)."""
    units: pd.DataFrame
    """One row per configuration: label, value, se, n_seeds, tier."""
    labels: pd.Series
    """Tier rank for each row of the input table (NaN for rows that took no part)."""
    alpha: float
    noise_known: bool
    notes: list[str] = field(default_factory=list)
    two_tiers: TierResult | None = None
    """With k chosen automatically: the 2-tier partition tested on its own at alpha, from the same units and
    redraws (what find_tiers(k=2) gives; the claims table's "two tiers" reads it); None when k was given."""

    @property
    def units_source(self) -> dict:
        """Where the units' uncertainty came from: {"stderr": bool, "seeds": bool, "pooled": bool}."""
        u = self.units
        return {"stderr": bool("bench_se" in u and u["bench_se"].notna().any()),
                "seeds": bool("n_seeds" in u and ((u["n_seeds"] >= 2).any())),
                "pooled": bool("fill_sd" in u and (u["fill_sd"] > 0).any())}

    @property
    def k(self) -> int:
        return len(self.tiers)

    def summary(self) -> str:
        """A few lines a person can read."""
        direction = "higher is better" if self.higher_is_better else "lower is better"
        lines = [f"{self.score} ({direction}), {counted(len(self.units), 'configuration')}: "
                 + (f"{self.k} tiers" if self.split else f"no split: {self.reason}")]
        for tier in self.tiers if self.split else []:
            runs = f"{tier.n} run{'' if tier.n == 1 else 's'}"
            lines.append(f"  tier {tier.rank}: {runs}, {tier.low:.4g} to {tier.high:.4g}")
        for gap in self.gaps:
            lines.append("  " + describe_gap(gap))
        lines += [f"  note: {note}" for note in self.notes]
        return "\n".join(lines)


def describe_gap(gap: Gap) -> str:
    sep = "n/a" if gap.separation is None else f"{gap.separation:.3f}"
    verdict = "real" if gap.significant else "not significant"
    partition = "" if gap.p_partition is None or gap.p_partition == gap.p_value else \
        f" (partition {format_p(gap.p_partition)})"
    return (f"gap {gap.low:.4g} -> {gap.high:.4g} (size {gap.size:.3g}): T = {gap.t:.2f}, "
            f"{format_p(gap.p_value)}{partition}, separation = {sep}: {verdict}"
            + ("" if gap.significant else f" ({gap.why})"))


def format_p(p: float) -> str:
    """"p = 0.023", or "p < 0.001" below that."""
    return f"p = {p:.2g}" if p >= 0.001 else "p < 0.001"


# ---------------------------------------------------------------------------------------------- statistics


def partition(z: np.ndarray, k: int, min_size: int) -> np.ndarray:
    """Cut positions (m, k-1), ascending, for each row of the ascending-sorted (m, n) array z: the k-1
    largest gaps between neighbours, taken greedily from the largest down, skipping any that would leave a
    tier with fewer than min_size values. A cut i means: the first i values form the lowest tier.
    Rows where k tiers cannot be made get -1."""
    m, n = z.shape
    cuts = np.full((m, k - 1), -1, dtype=np.int64)
    if k < 2:
        return cuts
    gaps = np.diff(z, axis=1)                              # gap j lies between values j and j+1: cut j+1
    order = np.argsort(-gaps, axis=1, kind="stable")
    filled = np.zeros(m, dtype=np.int64)
    rows = np.arange(m)
    big = np.iinfo(np.int64).max
    for rank in range(n - 1):
        cand = order[:, rank] + 1
        placed = np.where(cuts >= 0, cuts, -1)
        left = np.max(np.where((placed >= 0) & (placed < cand[:, None]), placed, 0), axis=1)
        right = np.min(np.where((placed >= 0) & (placed > cand[:, None]), placed, big), axis=1)
        right = np.minimum(right, n)
        ok = (filled < k - 1) & (cand - left >= min_size) & (right - cand >= min_size)
        idx = rows[ok]
        cuts[idx, filled[idx]] = cand[idx]
        filled[idx] += 1
        if (filled == k - 1).all():
            break
    cuts[filled < k - 1] = -1
    return np.sort(cuts, axis=1)


def partition_t(z: np.ndarray, cuts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(gaps (m, k-1), T (m,)) of the partitions: T = smallest gap / pooled within-tier sd, with
    s_within = sqrt(sum over tiers of SS / (n - k)). Rows with cut -1 get T = nan."""
    m, n = z.shape
    k = cuts.shape[1] + 1
    valid = (cuts > 0).all(axis=1)
    safe = np.where(valid[:, None], cuts, 1)
    rows = np.arange(m)[:, None]
    gaps = z[rows, safe] - z[rows, safe - 1]
    c1 = np.concatenate([np.zeros((m, 1)), np.cumsum(z, axis=1)], axis=1)
    c2 = np.concatenate([np.zeros((m, 1)), np.cumsum(z * z, axis=1)], axis=1)
    edges = np.concatenate([np.zeros((m, 1), np.int64), safe, np.full((m, 1), n)], axis=1)
    lo, hi = edges[:, :-1], edges[:, 1:]
    size = np.maximum(hi - lo, 1)
    s1 = c1[rows, hi] - c1[rows, lo]
    s2 = c2[rows, hi] - c2[rows, lo]
    ss = np.maximum((s2 - s1 ** 2 / size).sum(axis=1), 0.0)
    s = np.sqrt(ss / max(n - k, 1))
    smallest = gaps.min(axis=1)
    scale = np.maximum(np.abs(z).max(axis=1), 1.0) * 1e-9
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(s > scale, smallest / np.where(s > scale, s, 1.0), np.where(smallest > scale, np.inf, 0.0))
    t = np.where(valid, t, np.nan)
    return gaps, t


REFERENCES = ("gaussian", "uniform", "exponential", "reflected exponential")
"""The single-population shapes the observed partition is compared against (bell, flat, skewed either way)."""


def _reference_sample(name: str, rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    if name == "gaussian":
        return rng.standard_normal(shape)
    if name == "uniform":
        return rng.uniform(size=shape)
    if name == "exponential":
        return rng.exponential(size=shape)
    if name == "reflected exponential":
        return -rng.exponential(size=shape)
    raise ValueError(name)


@lru_cache(maxsize=256)
def _null_t(n: int, k: int, min_size: int, n_sim: int, seed: int, reference: str) -> np.ndarray:
    """Sorted T of the k-tier partition for n_sim samples of n values from one reference population."""
    rng = np.random.default_rng([seed, n, k, min_size, REFERENCES.index(reference)])
    z = np.sort(_reference_sample(reference, rng, (n_sim, n)), axis=1)
    _, t = partition_t(z, partition(z, k, min_size))
    return np.sort(t[np.isfinite(t) | np.isinf(t)])


def p_values(t: float, n: int, k: int, min_size: int, n_sim: int = 4000, seed: int = 0) -> dict[str, float]:
    """Monte Carlo p-value of an observed T under each reference population: (1 + #{T* >= T}) / (1 + n_sim)."""
    out = {}
    for reference in REFERENCES:
        null = _null_t(n, k, min_size, n_sim, seed, reference)
        exceed = len(null) - np.searchsorted(null, t, side="left")
        out[reference] = float((1 + exceed) / (1 + len(null)))
    return out


def _draws(units: pd.DataFrame, n_boot: int, rng: np.random.Generator) -> np.ndarray | None:
    """(n_boot, n_units) redrawn unit values (oriented: higher = better), or None if no uncertainty known."""
    if not units["noisy"].any():
        return None
    out = np.empty((n_boot, len(units)))
    for j, (values, errors, fill_sd) in enumerate(zip(units["seed_values"], units["seed_stderrs"], units["fill_sd"])):
        values, errors = np.asarray(values, float), np.asarray(errors, float)
        m = len(values)
        if m >= 2:
            pick = rng.integers(0, m, size=(n_boot, m))
            sample = values[pick] + rng.standard_normal((n_boot, m)) * np.nan_to_num(errors)[pick]
            out[:, j] = sample.mean(axis=1)
        else:
            sd = math.sqrt(float(np.nan_to_num(errors[0])) ** 2 + fill_sd ** 2)
            out[:, j] = values[0] + rng.standard_normal(n_boot) * sd
    return out


# ---------------------------------------------------------------------------------------------- units


def units_of(table: pd.DataFrame, score: str, stderr: str | None = None, completed_only: bool = True,
             by_config: bool = True, keys: pd.Series | None = None) -> tuple[pd.DataFrame, pd.Series, list[str]]:
    """(units, unit index of each used row, notes): one unit per configuration (seeds pooled). `keys`: the
    table's config_keys where the caller has them (analysis.schema.keys_of)."""
    notes = []
    rows = table
    if completed_only and "status" in rows:
        rows = rows[rows["status"] == "completed"]
    rows = rows[pd.to_numeric(rows[score], errors="coerce").notna()] if score in rows else rows.iloc[0:0]
    dropped = len(table) - len(rows)
    if dropped:
        notes.append(f"{dropped} run(s) without a value of {score} (or not completed) left out")
    if stderr is None:
        stderr = stderr_column(table, score)  # a task's lm-eval stderr, or an average's propagated one
    if by_config:
        keys = keys_of(rows, keys)  # made once: the lr search and the pooling below read them
    if by_config and lr_varies(rows, score, keys):  # lr is a nuisance axis: each configuration at its best lr
        tuned = rows_at(rows, score, "tuned", keys=keys)
        notes.append(f"learning rate searched: each configuration at its best lr ({len(tuned)} of {len(rows)} runs; "
                     "analysis.tuning)")
        rows = tuned
    labels = run_labels(rows, [c for c in LABEL_AXES if c not in ("seed", "lr") or not by_config], dedupe=not by_config)
    keys = (keys_of(rows, keys) if by_config and config_columns(rows)
            else pd.Series(rows.index.astype(str), index=rows.index))
    units, membership = [], pd.Series(index=rows.index, dtype=float)
    read = rows[[c for c in dict.fromkeys((score, stderr)) if c and c in rows]]  # grouped without the other columns
    for j, (_, group) in enumerate(read.groupby(keys, sort=False)):
        values = pd.to_numeric(group[score]).to_numpy(float)
        errors = (pd.to_numeric(group[stderr], errors="coerce").to_numpy(float) if stderr and stderr in group
                  else np.full(len(values), np.nan))
        m = len(values)
        seed_sd = float(np.std(values, ddof=1)) if m >= 2 else None
        bench_se = float(np.sqrt(np.nanmean(errors ** 2)) / math.sqrt(m)) if np.isfinite(errors).any() else None
        units.append({"label": labels.loc[group.index[0]], "value": float(values.mean()), "n_seeds": m,
                      "seed_sd": seed_sd, "bench_se": bench_se, "seed_values": values, "seed_stderrs": errors,
                      "runs": list(group.index)})
        membership.loc[group.index] = j
    units = pd.DataFrame(units)
    if units.empty:
        return units, membership, notes
    dup = units["label"].duplicated(keep=False)
    if dup.any():  # different configurations that the label axes do not tell apart
        number = units.loc[dup].groupby("label").cumcount().add(1).astype(str)
        units.loc[dup, "label"] = units.loc[dup, "label"] + " #" + number
    multi = units[units["n_seeds"] >= 2]
    pooled = None
    if len(multi):
        pooled = math.sqrt(float((multi["seed_sd"] ** 2 * (multi["n_seeds"] - 1)).sum() / (multi["n_seeds"] - 1).sum()))
        notes.append(f"seed-to-seed sd {pooled:.3g} pooled over {len(multi)} configuration(s) with repeated seeds"
                     + ("; used for single-seed ones" if (units["n_seeds"] == 1).any() else ""))
    units["fill_sd"] = [(pooled or 0.0) if m == 1 else 0.0 for m in units["n_seeds"]]
    pooled_df = float((multi["n_seeds"] - 1).sum()) if len(multi) else math.inf
    ses, dfs = [], []
    for _, u in units.iterrows():
        parts = [(x, df) for x, df in ((u["seed_sd"] / math.sqrt(u["n_seeds"]) if u["seed_sd"] is not None else None,
                                        float(u["n_seeds"] - 1)),
                                       (u["bench_se"], math.inf), (u["fill_sd"] or None, pooled_df))
                 if x is not None and not math.isnan(x)]
        se, df = max(parts) if parts else (np.nan, math.inf)
        ses.append(se)
        dfs.append(df)
    units["se"] = ses
    units["se_df"] = dfs  # degrees of freedom of se: seeds - 1 (pooled: their sum); lm-eval's stderr: inf
    units["noisy"] = units["se"].notna() & (units["se"] > 0)
    return units, membership, notes


# ---------------------------------------------------------------------------------------------- main entry


@dataclass(frozen=True)
class TierTest:
    """How a partition is tested (the module docstring's rule): k, the level and the Monte Carlo sizes."""

    k: int | None = None
    """Exactly this many tiers, or a refusal; None: the largest k <= max_k whose partition passes."""
    max_k: int = 4
    """Most tiers tried when k is None."""
    alpha: float = 0.05
    """Level of each check (Bonferroni over the k values tried when k is None)."""
    min_size: int = 2
    """Fewest configurations in a tier."""
    n_sim: int = 4000
    """Samples of each reference population for the structure check's p-value."""
    n_boot: int = 2000
    """Redraws of the units' values for the noise check."""
    seed: int = 0
    """Seed of both the references and the redraws."""


@dataclass
class Units:
    """What is split: one row per configuration (units_of), the unit of each row of the table that took part,
    the table's index, the score and its direction, and the notes so far."""

    units: pd.DataFrame
    membership: pd.Series
    index: pd.Index
    score: str
    higher_is_better: bool
    notes: list[str]

    @property
    def noise_known(self) -> bool:
        """Whether some unit has an uncertainty (an lm-eval stderr or repeated seeds)."""
        return bool(len(self.units) and self.units["noisy"].any())


def find_tiers(table: pd.DataFrame, score: str, test: TierTest | None = None, *, higher_is_better: bool | None = None,
               stderr: str | None = None, completed_only: bool = True, by_config: bool = True,
               keys: pd.Series | None = None, **settings) -> TierResult:
    """Tiers of `score` over the runs of `table` (see the module docstring for the rule). `test` or TierTest's
    fields as keywords (k=2, n_sim=500) say how it is tested; stderr names the score's standard-error column
    (default: the metric's, analysis.metrics.stderr_column); by_config pools the seeds of a configuration (else
    each run is a unit); `keys`: the table's config_keys where the caller has them."""
    if score not in table:
        raise KeyError(f"no column {score!r} in the table")
    test = replace(test or TierTest(), **settings)
    hib = _higher_is_better(table, score) if higher_is_better is None else higher_is_better
    units, membership, notes = units_of(table, score, stderr, completed_only, by_config, keys)
    data = Units(units, membership, table.index, score, hib, notes)
    result = _tiers_of_units(replace(data, notes=list(notes)), test)
    if test.k is None:  # the 2-tier partition on its own, from the same units, references and redraws
        result.two_tiers = _tiers_of_units(replace(data, notes=list(notes)), replace(test, k=2))
    return result


def tiers_from_values(values, stderr=None, labels=None, test: TierTest | None = None, *,
                      higher_is_better: bool = True, score: str = "score", **settings) -> TierResult:
    """Tiers of bare values (one per configuration), with optional standard errors; `test` or TierTest's fields
    as keywords, as find_tiers."""
    test = replace(test or TierTest(), **settings)
    values = np.asarray(values, float)
    labels = list(labels) if labels is not None else [f"#{i}" for i in range(len(values))]
    table = pd.DataFrame({"label_": labels, score: values, "status": "completed"})
    if stderr is not None:
        table[f"{score}_se"] = np.asarray(stderr, float)
    units, membership, notes = units_of(table.rename(columns={"label_": "run"}), score,
                                        f"{score}_se" if stderr is not None else None, by_config=False)
    units["label"] = labels
    return _tiers_of_units(Units(units, membership, table.index, score, higher_is_better, notes), test)


def _refuse(data: Units, test: TierTest, reason: str, gaps: list[Gap]) -> TierResult:
    units = data.units
    labels = pd.Series(np.nan, index=data.index)
    if len(units):
        labels.loc[data.membership.index] = 1.0
        units = units.assign(tier=1)
        ordered = units.sort_values("value", ascending=not data.higher_is_better)
        tiers = [Tier(1, list(ordered["label"]), float(units["value"].min()), float(units["value"].max()),
                      float(units["value"].mean()))]
    else:
        tiers = []
    return TierResult(data.score, data.higher_is_better, False, reason, tiers, gaps, _public(units), labels,
                      test.alpha, data.noise_known, data.notes)


def _public(units: pd.DataFrame) -> pd.DataFrame:
    keep = [c for c in ("label", "value", "se", "n_seeds", "bench_se", "fill_sd", "tier", "runs") if c in units]
    return units[keep].reset_index(drop=True) if len(units) else pd.DataFrame(columns=keep)


def _tiers_of_units(data: Units, test: TierTest) -> TierResult:
    units, k, alpha, min_size = data.units, test.k, test.alpha, test.min_size
    if len(units) and not data.noise_known:
        data.notes.append("no per-run uncertainty (no stderr, no repeated seeds): decided on the spread alone")
    n = len(units)
    if k is not None and k < 1:
        raise ValueError("k must be >= 1")
    if k == 1:
        return _refuse(data, test, "one tier requested", [])
    need = 2 * min_size if k is None else k * min_size
    if n < need:
        return _refuse(data, test, f"too few configurations ({n}) to split: need at least {need} "
                                   f"(min_size={min_size} per tier)", [])
    sign = 1 if data.higher_is_better else -1
    oriented = units["value"].to_numpy(float) * sign
    if np.ptp(oriented) == 0:
        return _refuse(data, test, "all values are equal", [])
    order = np.argsort(oriented, kind="stable")          # ascending: worst first
    v = oriented[order]
    draws = _draws(units, test.n_boot, np.random.default_rng(test.seed))
    if draws is not None:
        draws = draws * sign
    se = units["se"].to_numpy(float)

    ks = [k] if k is not None else list(range(test.max_k, 1, -1))
    ks = [kk for kk in ks if n >= kk * min_size]
    level = alpha / len(ks) if k is None else alpha      # Bonferroni over the k values tried
    tested: dict[int, list[Gap]] = {}
    for kk in ks:
        cuts = partition(v[None], kk, min_size)[0]
        if (cuts < 0).any():
            continue
        gaps, t = partition_t(v[None], cuts[None])
        t = float(t[0])
        p_by_ref = p_values(t, n, kk, min_size, test.n_sim, test.seed)
        p = max(p_by_ref.values())
        edges = [0, *cuts.tolist(), n]
        result = []
        for j, cut in enumerate(cuts.tolist()):
            lo, hi = edges[j], edges[j + 2]
            # locally: this gap against the spread of the two tiers it separates, as a 2-tier split of them
            if kk == 2:
                local_t, local_p = t, p
            else:
                seg = v[lo:hi][None]
                _, lt = partition_t(seg, np.array([[cut - lo]]))
                local_t = float(lt[0])
                local_p = max(p_values(local_t, hi - lo, 2, min_size, test.n_sim, test.seed).values())
            sep = z = None
            if draws is not None:
                below, above = order[lo:cut], order[cut:hi]
                sep = float(np.mean(draws[:, above].min(axis=1) > draws[:, below].max(axis=1)))
                s = math.hypot(np.nan_to_num(se[order[cut - 1]]), np.nan_to_num(se[order[cut]]))
                z = float(gaps[0, j] / s) if s > 0 else math.inf
            why = []
            if not p < level:
                why.append(f"gaps not large against the spread within tiers: {format_p(p)} >= {level:.3g}")
            elif not local_p < alpha:
                why.append(f"gap not large against the spread of the two tiers beside it: {format_p(local_p)} "
                           f">= {alpha}")
            if sep is not None and sep < 1 - alpha:
                why.append(f"within the runs' noise: separation {sep:.3f} < {1 - alpha:.3f}")
            result.append(Gap(0, sign * float(v[cut - 1]), sign * float(v[cut]), float(gaps[0, j]), local_t,
                              local_p, sep, z, hi - cut, cut - lo, not why, "; ".join(why), p_partition=p))
        tested[kk] = result
        if all(g.significant for g in result):
            return _accept(data, test, order, cuts.tolist(), result, kk, p_by_ref)
    if not tested:
        return _refuse(data, test, "no admissible partition", [])
    first = min(tested)                                   # report the simplest split that was tried
    failed = [g for g in tested[first] if not g.significant]
    reason = (f"no real gap: {failed[0].why}" if k is None else f"no real gap for {k} tiers: {failed[0].why}")
    return _refuse(data, test, reason, tested[first])


def _accept(data: Units, test: TierTest, order: np.ndarray, cuts: list[int], gap_list: list[Gap], k: int,
            p_by_ref: dict[str, float]) -> TierResult:
    units = data.units
    n = len(units)
    edges = [0, *cuts, n]
    segments = list(zip(edges[:-1], edges[1:]))[::-1]     # rank 1 = best = top of the ascending order
    tier_of_unit = np.empty(n, int)
    tiers = []
    values = units["value"].to_numpy(float)
    for rank, (lo, hi) in enumerate(segments, start=1):
        members = order[lo:hi][::-1]
        tier_of_unit[members] = rank
        vals = values[members]
        tiers.append(Tier(rank, list(units["label"].iloc[members]), float(vals.min()), float(vals.max()),
                          float(vals.mean())))
    gaps = []
    for cut, gap in sorted(zip(cuts, gap_list), reverse=True):
        gap.upper = int(tier_of_unit[order[cut]])
        gaps.append(gap)
    units = units.assign(tier=tier_of_unit)
    labels = pd.Series(np.nan, index=data.index)
    labels.loc[data.membership.index] = tier_of_unit[data.membership.to_numpy(int)]
    worst_ref = max(p_by_ref, key=p_by_ref.get)
    notes = [*data.notes, f"p-value of the {k}-tier partition: largest over references ({worst_ref} gave the largest)"]
    reason = f"{k} tiers separated by {len(gaps)} real gap(s)"
    return TierResult(data.score, data.higher_is_better, True, reason, tiers, gaps, _public(units), labels,
                      test.alpha, data.noise_known, notes)
