"""The Pareto plot: validation NLL against training FLOPs, the Pareto frontier as a step line
(analysis.thresholds.nll_frontier), each family's best configuration joined across the swept axis."""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter

import analysis.plot_style as style
from analysis.labels import run_labels
from analysis.metrics import bound_rows, higher_is_better, name_of, nll_column
from analysis.thresholds import nll_frontier
from analysis.tiers import units_of


def plot_pareto(table: pd.DataFrame, x: str = "train_flops", y: str | None = None, keys: pd.Series | None = None
                ) -> Figure:
    """Validation NLL against training FLOPs (log axis); colour = family, marker = depth, each family's points
    joined in order of depth, every point labelled (the frontier's only, past 14 runs); the Pareto frontier
    (analysis.thresholds.nll_frontier: no run has both less compute and lower NLL; a diffusion bound, drawn
    hollow, is never on the frontier of exact NLLs) as a step line. y None: analysis.metrics.nll_column (bits per
    byte when the tokenizers differ). `keys`: the table's config_keys where the caller has them."""
    y = y or nll_column(table)
    rows = style.completed_runs(table)
    for column in (x, y):
        if column not in rows or pd.to_numeric(rows[column], errors="coerce").notna().sum() == 0:
            return style.placeholder("NLL vs training FLOPs", f"the results have no {column} values (completed runs)")
    rows = rows[pd.to_numeric(rows[x], errors="coerce").notna() & pd.to_numeric(rows[y], errors="coerce").notna()]
    bound = bound_rows(rows, y)
    mixed = bool(bound.any() and (~bound).any())
    front = nll_frontier(table, x, y)
    fig = style.new_figure(figsize=(9.0, 5.6), layout="constrained")
    ax = fig.add_subplot()
    points = style.PointKeys(table)
    paths = _family_paths(table, rows[~(bound & mixed)], points, x, y, keys)
    for colour, px, py in paths:  # a family across the swept axis: its best configuration at each value
        ax.plot(px, py, color=colour, lw=1.0, alpha=0.45, zorder=2)
    for colour, marker, part in points.groups(rows):
        style.scatter(ax, part[x].astype(float), part[y].astype(float), colour, marker, bound[part.index], s=60,
                      alpha=0.85, zorder=3, linewidths=0.6)
    fx, fy = front[x].astype(float).to_numpy(), front[y].astype(float).to_numpy()
    ax.step(fx, fy, where="post", color="#222222", lw=1.4, zorder=2)
    ax.scatter(fx, fy, facecolors="none", edgecolors="#222222", s=150, linewidths=1.2, zorder=4)
    xs = rows[x].astype(float)
    if xs.max() / max(xs.min(), 1e-300) >= 3:
        ax.set_xscale("log")
        style.log_ticks(ax, xs)
    ax.xaxis.set_major_formatter(FuncFormatter(style.si_ticks))
    ax.set_xlabel(style.AXIS_LABELS.get(x, x) + (", log scale" if ax.get_xscale() == "log" else ""))
    ax.set_ylabel(style.score_label(table, y))
    ax.grid(color="#e5e5e5", linewidth=0.6)
    _legend(ax, points, rows, bool(paths), bound)
    style.pad_y(ax, 0.08)
    ax.margins(x=0.08)
    sub = []
    if points.colour and points.marker:
        sub.append(f"colour: {points.colour}; marker: {style.AXIS_NAMES.get(points.marker, points.marker)}; "
                   "circled and stepped: the Pareto frontier")
    if mixed:
        sub.append("hollow: diffusion NELBO (a bound), left off the frontier of exact NLLs")
    style.set_title(fig, f"{name_of(y)} against training compute", "\n".join(sub))
    style.set_caption(fig, f"{len(front)} of {len(rows)} runs on the Pareto frontier: no other run has both less "
                      "training compute and a lower loss",
                      "Training FLOPs = FLOPs per token (PaLM: 6N + 12·L·H·hd·T) × training tokens")
    labelled = rows if len(rows) <= 14 else front
    style.settle_layout(fig)
    style.label_points(ax, labelled[x].astype(float).to_numpy(), labelled[y].astype(float).to_numpy(),
                       run_labels(rows).loc[labelled.index].tolist(), [60] * len(labelled))
    fig.slm_frontier = list(front.index)
    return fig


def _legend(ax, points, rows: pd.DataFrame, joined: bool, bound: pd.Series) -> None:
    """The points' keys, then the frontier, a family's line where drawn (`joined`) and a bound where one is."""
    extra = [(Line2D([], [], color="#222222", lw=1.4, marker="o", mfc="none", markersize=9), "Pareto frontier")]
    if joined:
        extra.append((Line2D([], [], color="#888888", lw=1.0, alpha=0.6),
                      f"a {points.colour}'s best at each {style.AXIS_NAMES.get(points.marker, points.marker)}"))
    if bound.any():
        extra.append(style.bound_handle())
    points.shown(rows).legend(ax, extra)


def _family_paths(table: pd.DataFrame, rows: pd.DataFrame, keys, x: str, y: str,
                  config: pd.Series | None = None) -> list:
    """[(colour, xs, ys)]: per family (colour) with two or more values of the swept axis (marker), its best
    configuration at each value (seeds pooled, at its best lr: analysis.tiers.units_of), at the mean x of that
    configuration's runs, in the axis' order. `config`: the table's config_keys where the caller has them."""
    if not (keys.colour and keys.marker) or rows.empty:
        return []
    units, _, _ = units_of(rows, y, keys=config)
    if units.empty:
        return []
    first = [r[0] for r in units["runs"]]
    units = units.assign(_c=rows.loc[first, keys.colour].astype(str).to_numpy(),
                         _a=pd.to_numeric(rows.loc[first, keys.marker], errors="coerce").to_numpy(),
                         _x=[float(pd.to_numeric(rows.loc[r, x]).mean()) for r in units["runs"]])
    units = units.sort_values("value", ascending=higher_is_better(table, y)).drop_duplicates(["_c", "_a"], keep="last")
    out = []
    for family, part in units.dropna(subset=["_a"]).groupby("_c"):
        if len(part) >= 2:
            part = part.sort_values("_a")
            out.append((keys.colours.get(family, style.PALETTE[0]), part["_x"].to_numpy(), part["value"].to_numpy()))
    return out
