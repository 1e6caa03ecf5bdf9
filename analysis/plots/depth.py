"""The depth plot: score against depth, one panel per lm-eval task (and suite average), a line per family (or per
family and width, where the grid crosses depth with width)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

import analysis.plot_style as style
from analysis.metrics import bound_rows, name_of
from analysis.tuning import lr_varies, rows_at
from slm.metrics import LOSS


@dataclass
class _Lines:
    """What the depth plot draws a line through: each run's series (a family, or a family and a width), their
    order, colours and what the key calls them."""

    group: str | None
    crossed: bool
    series: pd.Series
    how: str
    order: list
    colors: dict


def plot_depth(table: pd.DataFrame, tasks: list[str] | None = None, max_panels: int = 9) -> Figure:
    """One panel per lm-eval task (and suite average): score against depth; points are runs, lines the mean
    per family at each depth. Without lm-eval scores: one panel of validation NLL."""
    rows = style.completed_runs(table)
    if "n_layers" not in rows or pd.to_numeric(rows["n_layers"], errors="coerce").notna().sum() == 0:
        return style.placeholder("Depth", "the results have no n_layers values")
    columns = style.score_columns_to_show(rows, tasks)
    note = ""
    if not columns:
        if LOSS not in rows or rows[LOSS].notna().sum() == 0:
            return style.placeholder("Depth", "no lm-eval scores and no validation NLL in the results")
        columns, note = [LOSS], "no lm-eval scores: validation NLL shown"
    columns = columns[:max_panels]
    ncol = min(3, len(columns))
    nrow = math.ceil(len(columns) / ncol)
    fig = style.new_figure(figsize=(max(4.2 * ncol + 0.6, 7.5), 3.5 * nrow + 1.3), layout="constrained")
    axes = fig.subplots(nrow, ncol, squeeze=False)
    keys = style.PointKeys(table)
    lines = _lines(rows, keys)
    depth_marker = (lambda v: keys.markers.get(style.format_number(v), "o")) if keys.marker == "n_layers" \
        else (lambda v: "o")
    any_bound = tuned = False
    for ax, column in zip(axes.flat, columns):
        bound, at_best = _panel(ax, table, rows, column, lines, depth_marker)
        any_bound, tuned = any_bound or bound, tuned or at_best
    for ax in list(axes.flat)[len(columns):]:
        ax.set_axis_off()
    _legend(axes[0][-1], keys, rows, lines, tuned, any_bound)
    title = "Score against depth" + (" per task" if len(columns) > 1 else "") + (f" ({note})" if note else "")
    subtitle, captions = _words(rows, columns, keys, lines, any_bound)
    style.set_title(fig, title, style.wrap_text("; ".join(subtitle), 110))
    style.set_caption(fig, *captions)
    return fig


def _lines(rows: pd.DataFrame, keys) -> _Lines:
    """A grid that crosses depth with width (several d_model at one depth): one line per width; otherwise (e.g. a
    fixed parameter budget, where width follows depth) one line per family through the depth means."""
    group = keys.colour
    crossed = "d_model" in rows and rows.assign(_g=rows[group] if group else "all").groupby(
        ["_g", "n_layers"])["d_model"].nunique().max() > 1
    if crossed:
        series = (rows[group].astype(str) + " " if group else "") + "d" + \
            pd.to_numeric(rows["d_model"], errors="coerce").map(style.format_number)
        how = "lines: one per " + (f"{group} and " if group else "") + "width (d_model)"
    else:
        series = rows[group].astype(str) if group else pd.Series("all", rows.index)
        how = "lines: mean per " + (group or "group") + " at each depth"
    order = sorted(series.unique(), key=lambda k: (k.split(" d")[0], float(k.rsplit("d", 1)[-1])
                                                   if crossed and k.rsplit("d", 1)[-1].isdigit() else 0))
    colors = ({k: style.PALETTE[i % len(style.PALETTE)] for i, k in enumerate(order)} if crossed else
              {k: keys.colours.get(k, style.PALETTE[0]) for k in order})  # the family's colour everywhere
    return _Lines(group, crossed, series, how, order, colors)


def _panel(ax, table: pd.DataFrame, rows: pd.DataFrame, column: str, lines: _Lines, depth_marker
           ) -> tuple[bool, bool]:
    """One task's panel: each run a point (marker = depth, a bound hollow), each series' line through its exact
    values, the chance line; (whether a bound was drawn, whether the runs are at their best lr)."""
    depth_values = pd.to_numeric(rows["n_layers"], errors="coerce")
    part = rows[pd.to_numeric(rows[column], errors="coerce").notna() & depth_values.notna()]
    tuned = lr_varies(part, column)
    if tuned:  # lr a nuisance axis, as everywhere else: each configuration at its best lr
        part = rows_at(part, column, "tuned")
    bounds = bound_rows(part, column)
    for key in lines.order:
        sub = part[lines.series.loc[part.index] == key]
        if sub.empty:
            continue
        x = pd.to_numeric(sub["n_layers"]).to_numpy(float)
        y = pd.to_numeric(sub[column]).to_numpy(float)
        se = style.score_errors(sub, column).to_numpy(float)
        if np.isfinite(se).any():
            ax.errorbar(x, y, yerr=style.Z95 * np.nan_to_num(se), fmt="none", ecolor=lines.colors[key], alpha=0.45,
                        elinewidth=1, capsize=2, zorder=2)
        for depth in sorted(set(x)):  # marker = depth, a bound hollow: as in every plot
            at = x == depth
            style.scatter(ax, x[at], y[at], lines.colors[key], depth_marker(depth), bounds.loc[sub.index][at], s=34,
                          alpha=0.8, zorder=3, linewidths=0.5)
        exact = ~bounds.loc[sub.index].to_numpy()
        mean = sub[exact].assign(_x=x[exact], _y=y[exact]).groupby("_x")["_y"].mean()
        if len(mean) >= 2:  # a family's line through its exact values (a bound is not averaged in)
            ax.plot(mean.index, mean.values, color=lines.colors[key], lw=1.6, zorder=2, label=key)
    if part.empty:
        ax.text(0.5, 0.5, "no values", ha="center", va="center", transform=ax.transAxes, color="#777777")
    else:
        style.log2_axis(ax, pd.to_numeric(part["n_layers"]).to_numpy(float))
    style.draw_chance(ax, style.chance_value(part, column), label=True)
    ax.set_title(name_of(column), fontsize=10)
    ax.set_xlabel(style.AXIS_LABELS["n_layers"] + (", log scale" if ax.get_xscale() == "log" else ""))
    ax.set_ylabel(style.wrap_text(style.score_label(table, column), 38), fontsize=9)
    ax.grid(color="#e5e5e5", linewidth=0.6)
    ax.tick_params(labelsize=8)
    return bool(bounds.any()), tuned


def _legend(ax, keys, rows: pd.DataFrame, lines: _Lines, tuned: bool, any_bound: bool) -> None:
    """One key beside the last panel of the first row: the points' keys, the lines, a bound; where colour is a
    family and a width, its own entries for the colours."""
    extra = [(Line2D([], [], color="#777777", lw=1.6), lines.how.split(": ", 1)[1] + (
        " (each configuration at its best lr)" if tuned else ""))]
    if any_bound:
        extra.append(style.bound_handle())
    handles, labels, heads = keys.shown(rows).entries(extra)
    if lines.crossed:  # colour is a family and a width here: the key says so
        n_colour = len(keys.colours) + 1 if keys.colour and keys.colours else 0
        own = [Line2D([], [], ls="", marker="")] + [Line2D([], [], ls="", marker="o", color=lines.colors[k],
                                                           markersize=7) for k in lines.order]
        handles = own + handles[n_colour:]
        labels = [f"{lines.group or 'group'} and width (colour)", *lines.order] + labels[n_colour:]
        heads = [0] + [h - n_colour + len(own) for h in heads if h >= n_colour]
    legend = ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8, frameon=False,
                       borderaxespad=0)
    for i, text in enumerate(legend.get_texts()):
        if i in heads:
            text.set_fontweight("bold")


def _words(rows: pd.DataFrame, columns: list[str], keys, lines: _Lines, any_bound: bool
           ) -> tuple[list[str], list[str]]:
    """The depth plot's subtitle parts and captions."""
    group = lines.group
    subtitle = ["points: runs; " + lines.how + (f"; colour: {group}" if group and not lines.crossed else "")
                + ("; marker: depth" if keys.marker == "n_layers" else "")]
    captions = []
    if any(style.score_errors(rows, c).notna().any() for c in columns):
        subtitle.append("bars: 95% intervals")
        captions.append("Bars: 95% intervals (1.96 x stderr; an average's propagated from its tasks', assuming "
                        "independent tasks)")
    elif columns != [LOSS]:
        captions.append("No error bars: no per-run standard error is recorded for these scores")
    near = {name_of(c): int(style.near_chance(rows, c).sum()) for c in columns}
    if any(style.chance_value(rows, c) is not None for c in columns):
        subtitle.append("dotted: chance")
        captions.append("Dotted: chance (random guess among the choices)" + "".join(
            f"; {name}: {k} run(s) within noise of chance" for name, k in near.items() if k))
    if any_bound:
        subtitle.append("hollow: a bound")
        captions.append("Hollow: a masked-diffusion run's bound (its NELBO, or bits per byte from its Monte Carlo "
                        "ELBO), not an exact value; left out of the family's line")
    return subtitle, captions
