"""The learning rate as a nuisance axis: each configuration at its best lr, with its lr curve kept.

    curves = lr_curves(table, "val_nll")     # one row per (configuration, lr): mean over seeds, sd, n
    best = at_best_lr(table, "val_nll")      # one row per configuration: shared and tuned score, both ranks
    tuned = rows_at(table, "val_nll", "tuned")    # the runs of each configuration at its best lr
    shared = rows_at(table, "val_nll", "shared")  # ... at the sweep's shared lr

A configuration is the set of runs with equal config columns (analysis.schema); its lrs are those its runs
were trained at. The best lr is the one whose mean score over seeds is best. It is flagged `edge` when it is
the lowest or the highest lr tried ("widen the grid": the optimum may lie outside it), and such a score is
never reported as the configuration's optimum without that flag. A diverged run counts as tried (its lr is
part of the grid, with the worst possible score), so a best lr just below a diverging one is not an edge.

The shared lr is the lr the configuration was given before any search: its runs with lr_multiplier 1
(`hydra.sweeper.lr_search`, recorded by the sweeper), else, with one lr, that lr, else the lr most
configurations were trained at (ties: the median of those).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from analysis.labels import LABEL_AXES, run_labels
from analysis.metrics import higher_is_better as _higher_is_better
from analysis.schema import keys_of

EDGE_LOW, EDGE_HIGH = "lowest lr tried", "highest lr tried"


def _usable(table: pd.DataFrame, score: str) -> pd.DataFrame:
    """Runs that count for the lr grid: completed with a value of `score`, or diverged (tried, no value)."""
    if score not in table or "lr" not in table:
        return table.iloc[0:0]
    status = table["status"] if "status" in table else pd.Series("completed", index=table.index)
    value = pd.to_numeric(table[score], errors="coerce")
    lr = pd.to_numeric(table["lr"], errors="coerce")
    ok = ((status == "completed") & value.notna() | (status == "diverged")) & lr.notna()
    return table[ok]


def _shared_lr(group: pd.DataFrame, common: float | None) -> float | None:
    lrs = pd.to_numeric(group["lr"], errors="coerce")
    if "lr_multiplier" in group:
        mult = pd.to_numeric(group["lr_multiplier"], errors="coerce")
        base = lrs[np.isclose(mult.fillna(np.nan), 1.0)]
        if len(base):
            return float(base.iloc[0])
    distinct = sorted(set(lrs.dropna()))
    if len(distinct) == 1:
        return float(distinct[0])
    if common is not None and any(math.isclose(common, x, rel_tol=1e-9) for x in distinct):
        return common
    return None


def _common_lr(rows: pd.DataFrame, keys: pd.Series) -> float | None:
    """The lr most configurations were trained at (ties: the median of the tied lrs)."""
    pairs = pd.DataFrame({"key": keys, "lr": pd.to_numeric(rows["lr"], errors="coerce")}).dropna().drop_duplicates()
    if pairs.empty:
        return None
    counts = pairs["lr"].value_counts()
    tied = sorted(counts[counts == counts.max()].index)
    return float(tied[(len(tied) - 1) // 2])


CURVE_COLUMNS = ["config_key", "lr", "mean", "sd", "n_seeds", "n_diverged", "runs"]


def lr_curves(table: pd.DataFrame, score: str, keys: pd.Series | None = None) -> pd.DataFrame:
    """One row per (configuration, lr): config_key, lr, mean (over completed seeds; NaN when every run at
    that lr diverged), sd, n_seeds, n_diverged, runs (table index of the runs). `keys`: the table's config_keys
    where the caller has them (analysis.schema.keys_of)."""
    rows = _usable(table, score)
    if rows.empty:
        return pd.DataFrame(columns=CURVE_COLUMNS)
    return _curves(rows, keys_of(rows, keys), score)


def _curves(rows: pd.DataFrame, keys: pd.Series, score: str) -> pd.DataFrame:
    """lr_curves of the usable runs `rows` with their config keys: per (key, lr) in sorted order, the positions of
    its runs (GroupBy.indices, in table order) read from whole columns."""
    scores = pd.to_numeric(rows[score], errors="coerce").to_numpy(float)
    diverged = (rows["status"] == "diverged").to_numpy() if "status" in rows else np.zeros(len(rows), bool)
    out = []
    for (key, lr), at in keys.groupby([keys, pd.to_numeric(rows["lr"])], sort=True).indices.items():
        values = scores[at][~np.isnan(scores[at])]
        out.append({"config_key": key, "lr": float(lr), "mean": float(values.mean()) if len(values) else math.nan,
                    "sd": float(values.std(ddof=1)) if len(values) >= 2 else math.nan, "n_seeds": len(values),
                    "n_diverged": int(diverged[at].sum()), "runs": list(rows.index[at])})
    return pd.DataFrame(out, columns=CURVE_COLUMNS)


def at_best_lr(table: pd.DataFrame, score: str, higher_is_better: bool | None = None,
               keys: pd.Series | None = None) -> pd.DataFrame:
    """One row per configuration: config_key, n_lrs, best_lr, tuned (mean score at best_lr), tuned_sd,
    tuned_seeds, edge (None, EDGE_LOW or EDGE_HIGH; always None with one lr), shared_lr, shared (mean score at
    the shared lr; NaN when unknown), shared_seeds, gain (tuned - shared, oriented: positive = better),
    rank_shared and rank_tuned (1 = best; configurations without a shared score are not ranked there),
    first_run (a table index for labels). `keys`: the table's config_keys where the caller has them."""
    hib = _higher_is_better(table, score) if higher_is_better is None else higher_is_better
    rows = _usable(table, score)
    columns = ["config_key", "n_lrs", "best_lr", "tuned", "tuned_sd", "tuned_seeds", "edge", "shared_lr", "shared",
               "shared_seeds", "gain", "rank_shared", "rank_tuned", "first_run"]
    if rows.empty:
        return pd.DataFrame(columns=columns)
    keys = keys_of(rows, keys)
    curves = _curves(rows, keys, score)
    common = _common_lr(rows, keys)
    lrs_of = rows[[c for c in ("lr", "lr_multiplier") if c in rows]]  # what _shared_lr reads
    out = []
    for key, curve in curves.groupby("config_key", sort=False):
        curve = curve.sort_values("lr")
        finite = curve[curve["mean"].notna()]
        if finite.empty:
            continue  # every lr diverged: nothing to rank
        best = finite.loc[finite["mean"].idxmax() if hib else finite["mean"].idxmin()]
        lrs = curve["lr"].to_numpy(float)
        edge = None
        if len(lrs) >= 2:
            edge = EDGE_LOW if best["lr"] == lrs.min() else EDGE_HIGH if best["lr"] == lrs.max() else None
        shared_lr = _shared_lr(lrs_of[keys == key], common)
        at_shared = curve[np.isclose(curve["lr"], shared_lr)] if shared_lr is not None else curve.iloc[0:0]
        shared = float(at_shared["mean"].iloc[0]) if len(at_shared) else math.nan
        sign = 1.0 if hib else -1.0
        out.append({"config_key": key, "n_lrs": len(lrs), "best_lr": float(best["lr"]), "tuned": float(best["mean"]),
                    "tuned_sd": float(best["sd"]), "tuned_seeds": int(best["n_seeds"]), "edge": edge,
                    "shared_lr": shared_lr, "shared": shared,
                    "shared_seeds": int(at_shared["n_seeds"].iloc[0]) if len(at_shared) else 0,
                    "gain": sign * (float(best["mean"]) - shared) if not math.isnan(shared) else math.nan,
                    "first_run": best["runs"][0]})
    out = pd.DataFrame(out, columns=[c for c in columns if not c.startswith("rank_")])
    if out.empty:
        return pd.DataFrame(columns=columns)
    out["rank_tuned"] = out["tuned"].rank(ascending=not hib, method="min").astype(int)
    out["rank_shared"] = out["shared"].rank(ascending=not hib, method="min").astype("Int64")
    return out[columns].sort_values("rank_tuned", kind="stable").reset_index(drop=True)


def lr_varies(table: pd.DataFrame, score: str, keys: pd.Series | None = None) -> bool:
    """Whether some configuration was trained at more than one lr (so its runs are not all seeds of one point).
    `keys`: the table's config_keys where the caller has them."""
    curves = lr_curves(table, score, keys)
    return bool(len(curves)) and bool((curves.groupby("config_key")["lr"].nunique() > 1).any())


def rows_at(table: pd.DataFrame, score: str, which: str = "tuned", higher_is_better: bool | None = None,
            keys: pd.Series | None = None) -> pd.DataFrame:
    """The runs (rows of `table`) of each configuration at its best lr (`tuned`) or at its shared lr (`shared`;
    configurations whose shared lr is unknown are left out). Runs without a value of `score` are left out.
    `keys`: the table's config_keys where the caller has them."""
    if which not in ("tuned", "shared"):
        raise ValueError(f"which={which!r}: choose tuned or shared")
    best = at_best_lr(table, score, higher_is_better, keys)
    if best.empty:
        return table.iloc[0:0]
    rows = table[pd.to_numeric(table.get(score), errors="coerce").notna()] if score in table else table.iloc[0:0]
    target = dict(zip(best["config_key"], best["best_lr" if which == "tuned" else "shared_lr"]))
    goal = np.array([target.get(key) for key in keys_of(rows, keys).tolist()], dtype=float)  # None: NaN
    lr = pd.to_numeric(rows["lr"], errors="coerce").to_numpy(float)
    return rows.loc[rows.index[_isclose(lr, goal)].tolist()]


def _isclose(a: np.ndarray, b: np.ndarray, rel_tol: float = 1e-9) -> np.ndarray:
    """math.isclose(a, b, rel_tol=rel_tol) elementwise (NaN is close to nothing, an infinity only to itself)."""
    with np.errstate(invalid="ignore"):
        near = np.isfinite(a) & np.isfinite(b) & (np.abs(a - b) <= rel_tol * np.maximum(np.abs(a), np.abs(b)))
    return (a == b) | near


def lr_labels(table: pd.DataFrame, best: pd.DataFrame) -> pd.Series:
    """A short label per configuration of `best` (analysis.labels.run_labels of its first run, lr and seed left
    out)."""
    if best.empty:
        return pd.Series([], dtype=object)
    first = table.loc[list(best["first_run"])]
    labels = run_labels(first, [c for c in LABEL_AXES if c not in ("lr", "seed")])
    return pd.Series(labels.to_numpy(), index=best.index)
