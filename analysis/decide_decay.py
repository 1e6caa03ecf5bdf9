"""Before and after the decay (WSD-S; Wen et al. 2025, arXiv 2509.02046): where a ladder's runs are wsd with decay
branches (train.schedule.decay_branches; slm.runs.branches), two proxies read at the same step and compute.

- before: the stable-phase loss, the run's own validation at the branch's last step (val_nll_stable, on the branch's
  row: its run's eval.val_curve at branch.steps);
- after: the decay branch's final val_nll (the wsd run of that length, decayed).

A branch's row (the results table's `branch` column: its fraction) has its run's configuration, rung, lr and seed, so
it is set aside before the ladder is judged (branch_runs) and is never another seed of its run. For each rung and
fraction: the decision accuracy of each against the truth's order at the target (as analysis.decide's), and their
agreement with each other, the share of the pairs the two order the same way: how often the order before the decay is
the order after it, which measures Wen et al.'s flip directly.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from analysis.decide_values import _has_values, _means, _num, _values, agreement, first_of as _first

BRANCH = "branch"
STABLE = "val_nll_stable"
AFTER = "val_nll"


@dataclass
class DecayRow:
    """One rung and branch fraction: the stable-phase loss and the decayed branch's, each against the target."""

    rung: float
    fraction: float
    share: float | None
    """The branches' mean train_flops over the target's: both proxies cost the same."""
    configurations: int
    before: float
    """Decision accuracy of the stable-phase loss against the target."""
    after: float
    """Decision accuracy of the decayed branch's loss against the target."""
    agreement: float
    """The share of the pairs of configurations ordered the same by the two."""
    pairs: int
    first_before: str | None
    first_after: str | None
    intervals: dict = field(default_factory=dict)
    """{"before" | "after" | "agreement": (low, high)}: 95% intervals from redrawn seeds (a branch's before and after
    redrawn together, as one run's), {} without redraws."""


def branch_runs(table: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the runs, their decay branches): a row with a `branch` fraction is a branch."""
    if BRANCH not in table:
        return table, table.iloc[:0]
    marked = pd.to_numeric(table[BRANCH], errors="coerce").notna()
    return table[~marked], table[marked]


def _redrawn(before: dict, after: dict, top: dict, draws: int, rng: np.random.Generator) -> dict:
    """95% intervals of the three agreements over `draws` redraws of every configuration's seeds (with replacement):
    the branches' seeds once for both before and after, the target's on their own."""
    boot: dict[str, list[float]] = {"before": [], "after": [], "agreement": []}
    names = sorted(set(before) & set(after))
    for _ in range(draws):
        b, a = {}, {}
        for c in names:
            seeds = sorted(set(before[c]) & set(after[c]), key=str)
            pick = [seeds[i] for i in rng.choice(len(seeds), size=len(seeds), replace=True)]
            b[c], a[c] = float(np.mean([before[c][s] for s in pick])), float(np.mean([after[c][s] for s in pick]))
        truth = _means(top, rng)
        for key, pair in (("before", (b, truth)), ("after", (a, truth)), ("agreement", (b, a))):
            boot[key].append(agreement(*pair)[0])
    return {k: (float(np.percentile(v, 2.5)), float(np.percentile(v, 97.5))) for k, v in boot.items()}


def decay_phase(branches: pd.DataFrame, config: str, rung: str, top: dict, target_flops: float | None,
                draws: int = 0, seed: int = 0) -> list[DecayRow]:
    """The before/after rows of every rung and branch fraction with both values (`top`: the truth at the target,
    {configuration: {seed: value}}, lower is better, as analysis.decide's), with 95% intervals from `draws` seed
    redraws (each row its own generator, from `seed`, the fraction and the rung); [] without branches."""
    if branches.empty or not _has_values(branches, STABLE) or not _has_values(branches, AFTER):
        return []
    truth = _means(top)
    fractions = pd.to_numeric(branches[BRANCH], errors="coerce")
    rows = []
    for fraction in sorted(set(fractions)):
        sub = branches[fractions == fraction]
        before, after = _values(sub, config, rung, STABLE), _values(sub, config, rung, AFTER)
        for r in sorted(set(before) & set(after)):
            b, a = _means(before[r]), _means(after[r])
            agree, pairs = agreement(b, a)
            if not pairs:
                continue
            spent = pd.to_numeric(sub["train_flops"], errors="coerce")[pd.to_numeric(sub[rung], errors="coerce") == r]\
                .mean() if "train_flops" in sub else None
            share = float(spent / target_flops) if target_flops and spent is not None and pd.notna(spent) else None
            row = DecayRow(r, float(fraction), share, len(set(b) & set(a) & set(truth)), agreement(b, truth)[0],
                           agreement(a, truth)[0], agree, pairs, _first(b), _first(a))
            if draws and any(len(v) > 1 for v in (*before[r].values(), *top.values())):
                rng = np.random.default_rng([seed, zlib.crc32(f"decay {fraction!r} {r!r}".encode())])
                row.intervals = _redrawn(before[r], after[r], top, draws, rng)
            rows.append(row)
    return rows


TITLE = ("Before and after the decay (WSD-S): the stable-phase loss at a branch's last step, and the decayed branch's "
         "final loss, each against the target; agreement: the share of pairs the two order the same way")


def _interval(row: DecayRow, key: str) -> str:
    low_high = row.intervals.get(key)
    return "" if low_high is None else f" ({low_high[0]:.3f}-{low_high[1]:.3f})"


def decay_table(rows: list[DecayRow], rung: str) -> list[dict[str, str]]:
    """The before/after rows, each cell formatted as slm-decide prints it (the report shows the same)."""
    return [{rung: _num(row.rung), "branch": f"{row.fraction:g}",
             "% of target compute": "" if row.share is None else f"{100 * row.share:.3g}%",
             "configurations": str(row.configurations),
             "before: decision accuracy": f"{row.before:.3f}" + _interval(row, "before"),
             "after: decision accuracy": f"{row.after:.3f}" + _interval(row, "after"),
             "agreement before vs after": f"{row.agreement:.3f}" + _interval(row, "agreement") + f", {row.pairs} pairs",
             "first before": row.first_before or "tie", "first after": row.first_after or "tie"} for row in rows]


def decay_markdown(rows: list[DecayRow], rung: str) -> str:
    """The before/after table as Markdown ("" without rows)."""
    cells = decay_table(rows, rung)
    if not cells:
        return ""
    lines = [TITLE, "", "| " + " | ".join(cells[0]) + " |", "| " + " | ".join("---" for _ in cells[0]) + " |"]
    lines += ["| " + " | ".join(row.values()) + " |" for row in cells]
    return "\n".join(lines) + "\n"


__all__ = ["BRANCH", "STABLE", "TITLE", "DecayRow", "branch_runs", "decay_markdown", "decay_phase", "decay_table"]
