"""The values slm-decide judges, below analysis.decide and its companions (decide_decay, decide_axes): each
configuration's seeds at a rung at its chosen lr (values), the agreement of two orders, and the small helpers they
share. analysis.decide re-exports them."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd

BAD = ("failed", "diverged")


class DecideError(ValueError):
    """A table slm-decide cannot read as a ladder: one line naming the column or value and what is needed."""


def _completed(table: pd.DataFrame) -> pd.DataFrame:
    if "status" in table:
        return table[table["status"].fillna("completed") == "completed"]
    return table


def _sign(table: pd.DataFrame, metric: str) -> float:
    """+1 where lower is better (a loss; unknown columns too), -1 where higher is better (analysis.metrics)."""
    from analysis.metrics import higher_is_better
    from slm.metrics import metric as declared

    known = declared(metric) is not None or str(metric).startswith(("score_", "avg_"))
    return -1.0 if known and higher_is_better(table, metric) else 1.0


def _values(table: pd.DataFrame, config: str, rung: str, proxy: str, chosen: dict | None = None,
            edges: list | None = None) -> dict:
    """{rung: {configuration: {seed: value}}} of the completed runs with a finite value (negated where higher is
    better), each configuration at a rung at its best lr where it has several (`chosen` gets {(proxy, rung,
    configuration): lr}; `edges` the best lrs at the edge of their grid). DecideError for two runs of one
    configuration at one rung, lr and seed."""
    sign = _sign(table, proxy)
    status = table["status"].fillna("completed") if "status" in table else pd.Series("completed", index=table.index)
    values = pd.to_numeric(table[proxy], errors="coerce")
    seeds = table["seed"] if "seed" in table else pd.Series(range(len(table)), index=table.index)
    lrs = pd.to_numeric(table["lr"], errors="coerce") if "lr" in table else pd.Series(math.nan, index=table.index)
    cells: dict = {}
    bad: dict = {}
    for r, c, s, lr, v, st in zip(pd.to_numeric(table[rung], errors="coerce"), table[config].astype(str), seeds, lrs,
                                  values, status):
        if pd.isna(r):
            continue
        key = None if pd.isna(lr) else float(lr)
        by_lr = cells.setdefault(float(r), {}).setdefault(c, {}).setdefault(key, {})
        if st in BAD:
            bad[(float(r), c, key)] = bad.get((float(r), c, key), 0) + 1
        if st != "completed" or pd.isna(v) or not math.isfinite(v):
            continue
        if s in by_lr:
            raise DecideError(f"two runs of {config} = {c} at {rung} = {_num(float(r))}, lr {key}, seed {s}: the "
                              f"configurations differ in more than {config}; name the column that tells them apart "
                              "with --config (a ladder sweep's table has ladder_point)")
        by_lr[s] = sign * float(v)
    out: dict = {}
    for r, by_config in cells.items():
        for c, by_lr in by_config.items():
            ran = {lr: v for lr, v in by_lr.items() if v}
            if not ran:
                continue
            if len(by_lr) == 1:
                out.setdefault(r, {})[c] = next(iter(ran.values()))
                continue
            means = {lr: float(np.mean(list(v.values()))) for lr, v in ran.items()}
            best = min(means, key=lambda lr: (bad.get((r, c, lr), 0) > 0, means[lr]))
            out.setdefault(r, {})[c] = ran[best]
            if chosen is not None:
                chosen[(proxy, r, c)] = best
            grid = sorted(lr for lr in by_lr if lr is not None)
            if edges is not None and grid and best in (grid[0], grid[-1]):
                edges.append((r, c, best))
    return out


def agreement(a: dict[str, float], b: dict[str, float]) -> tuple[float, int]:
    """(share of the pairs of configurations in both whose order in `a` is their order in `b`, a tie counting one
    half; number of pairs)."""
    names = sorted(set(a) & set(b))
    total = 0.0
    pairs = 0
    for i, j in itertools.combinations(names, 2):
        da, db = np.sign(a[i] - a[j]), np.sign(b[i] - b[j])
        total += 0.5 if da == 0 or db == 0 else float(da == db)
        pairs += 1
    return (total / pairs if pairs else math.nan), pairs


def first_of(means: dict[str, float]) -> str | None:
    """The configuration with the lowest mean; None where none, or where two share it."""
    if not means:
        return None
    low = min(means.values())
    leaders = [c for c, v in means.items() if v == low]
    return leaders[0] if len(leaders) == 1 else None


def _means(by_config: dict, rng: np.random.Generator | None = None) -> dict[str, float]:
    out = {}
    for name, seeds in by_config.items():
        values = np.array(list(seeds.values()))
        if rng is not None:
            values = rng.choice(values, size=len(values), replace=True)
        out[name] = float(values.mean())
    return out


def _has_values(table: pd.DataFrame, column: str) -> bool:
    return column in table and pd.to_numeric(table[column], errors="coerce").notna().any()


def _num(value: float) -> str:
    """A rung as written: 100000, 3198976, 0.5."""
    return f"{value:.0f}" if float(value).is_integer() else f"{value:g}"


def clusters(values, ratio: float) -> list[list[float]]:
    """Sorted positive `values` in runs where each is within `ratio` of the one before (token regimes: one run length
    over configurations whose parameter counts differ a little)."""
    groups: list[list[float]] = []
    for v in sorted(values):
        if groups and v <= groups[-1][-1] * ratio:
            groups[-1].append(v)
        else:
            groups.append([v])
    return groups


def part_read(proxy: str) -> float:
    """The fraction of a run's training (and compute) a proxy is read at: its slm.metrics entry's curve_at (val_nll_25:
    0.25), else 1 (the final value)."""
    from slm.metrics import metric as declared

    entry = declared(proxy)
    return entry.curve_at if entry is not None and entry.curve_at is not None else 1.0


def snr(by_config: dict) -> float | None:
    """Spread across configurations (std of their means) over the pooled seed-to-seed std; None without repeats."""
    groups = [np.array(list(s.values())) for s in by_config.values()]
    if len(groups) < 2 or not any(len(g) > 1 for g in groups):
        return None
    within = sum(((g - g.mean()) ** 2).sum() for g in groups) / sum(len(g) - 1 for g in groups)
    spread = float(np.std([g.mean() for g in groups], ddof=1))
    return math.inf if within == 0 else spread / math.sqrt(within)
