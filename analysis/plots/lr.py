"""The learning-rate plot: score against learning rate, one curve per configuration, the best lr starred and a best
lr at the edge of the grid ringed (analysis.tuning)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

import analysis.plot_style as style
from analysis.metrics import bound_rows, higher_is_better
from analysis.schema import keys_of
from analysis.tuning import at_best_lr, lr_curves, lr_labels, lr_varies


def plot_lr(table: pd.DataFrame, score: str | None = None, keys: pd.Series | None = None):
    """Score against learning rate, one curve per configuration (mean over seeds; x: a diverged lr; *: the best
    lr; a hollow ring: a best lr at the edge of the grid), keyed as every plot (colour = family, marker = depth)
    where that tells the configurations apart, else one colour per configuration under a key that says so. A
    placeholder (not drawn) when no configuration has several lrs. `keys`: the table's config_keys where the caller
    has them (else made once here)."""
    score, note = style.choose_score(table, score)
    keys = keys_of(table, keys) if score else None
    if not score or not lr_varies(table, score, keys):
        from analysis.halving import one_lr_reason

        return style.placeholder("Score against learning rate", one_lr_reason(table))
    curves, best = lr_curves(table, score, keys), at_best_lr(table, score, keys=keys)
    labels = lr_labels(table, best)
    first = table.loc[list(best["first_run"])]
    keys = style.PointKeys(table)
    pairs = [(keys.colour_of(r), keys.marker_of(r)) for _, r in first.iterrows()]
    by_family = bool(keys.colour) and len(set(pairs)) == len(pairs)  # colour = family, marker = depth, as everywhere
    colors = ({labels[i]: c for i, (c, _) in zip(best.index, pairs)} if by_family else style.group_colors(labels)[0])
    markers = {labels[i]: (m if by_family else "o") for i, (_, m) in zip(best.index, pairs)}
    bound = bound_rows(first, score).to_numpy()
    fig = style.new_figure(figsize=(8.0, 4.8), layout="constrained")
    ax = fig.add_subplot(1, 1, 1)
    _curves(ax, curves, best, labels, colors, markers, bound, higher_is_better(table, score))
    ax.set_xscale("log", base=2)
    tried = np.sort(curves["lr"].unique())
    if len(tried) <= 12:  # the lrs tried as the ticks, in the units they were set in
        ax.set_xticks(tried, [f"{lr:.3g}" for lr in tried])
        ax.minorticks_off()
    ax.set_xlabel("peak learning rate (train.lr)")
    ax.set_ylabel(style.score_label(table, score))
    ax.grid(alpha=0.3)
    edges = int(best["edge"].notna().sum())
    sub = ("mean over seeds at each lr; * best lr; x diverged" + (f"; red ring: best at the edge of the grid "
                                                                    f"({edges}): widen the grid" if edges else ""))
    if by_family:
        extra = [(Line2D([], [], ls="", marker="*", color="#777777", mec="black", ms=10), "best lr")]
        if bound.any():
            extra.append(style.bound_handle())
        keys.shown(first).legend(ax, extra)
        sub = (f"colour: {keys.colour}; " + (f"marker: {style.AXIS_NAMES.get(keys.marker, keys.marker)}; "
                                              if keys.marker else "") + sub)
    else:  # two configurations share a family and a depth: one colour per configuration, and the key says so
        style.legends_outside(ax, "configuration (colour)")
    style.set_title(fig, "Score against learning rate" + (f" ({note})" if note else ""), style.wrap_text(sub, 100))
    style.settle_layout(fig)
    return fig


def _curves(ax, curves: pd.DataFrame, best: pd.DataFrame, labels, colors: dict, markers: dict, bound, hib: bool
            ) -> None:
    """Each configuration's curve (a bound hollow), its diverged lrs (x at the worst finite value), its best lr (*)
    and, at the edge of the grid, a red ring."""
    finite = curves["mean"].dropna()
    for j, (i, row) in enumerate(best.iterrows()):
        curve = curves[curves["config_key"] == row["config_key"]].sort_values("lr")
        color = colors[labels[i]]
        ax.plot(curve["lr"], curve["mean"], marker=markers[labels[i]], ms=4, color=color, label=labels[i], lw=1.2,
                **({"mfc": "none"} if bound[j] else {}))  # a bound hollow, as in every plot
        dead = curve[curve["mean"].isna()]
        if len(dead) and len(finite):
            worst = finite.min() if hib else finite.max()
            ax.plot(dead["lr"], [worst] * len(dead), "x", color=color, ms=7)
        ax.plot([row["best_lr"]], [row["tuned"]], marker="*", ms=12, color=color, mec="black", mew=0.6)
        if isinstance(row["edge"], str):
            ax.plot([row["best_lr"]], [row["tuned"]], marker="o", ms=16, mfc="none", mec="red", mew=1.0)
