"""The study's plots (seven kinds), from a results table (analysis.collect). Matplotlib, no display needed.

    fig = plot_tiers(table)                                  # a matplotlib Figure
    paths = save(fig, "out/plots", "tiers")                  # out/plots/tiers.png and .svg
    drawn = draw_all(table, "out/plots")                     # each kind that has data, PNG and SVG
    print(drawn_line(skipped(drawn)))                        # "Figures: 6 of 7 plots drawn; not drawn: ..."

KINDS:
  tiers       runs sorted by score, tiers shaded, the gap annotated (analysis.tiers; refusals say so)
  threshold   score against hidden size d_model, the threshold line (analysis.thresholds)
  depth       score against depth, one panel per lm-eval task (and per suite average of more than one task)
  throughput  score against batch-1 decode speed, marker size = peak GPU memory (a CPU run's peak memory is
              its process's cumulative RSS, so it is left out and the caption says so); the subtitle states
              the device, that a CPU may have been shared with other jobs, and each decoder's settings
  pareto      validation NLL against training FLOPs with the Pareto frontier (analysis.thresholds.nll_frontier:
              a diffusion bound is never on it), every point labelled in a small study
  heatmap     runs x tasks, coloured by rank within each task, values (± 95% interval) written in the cells
  lr          score against learning rate, one curve per configuration, best lr starred, edges ringed
              (analysis.tuning; a placeholder when every configuration ran at one lr)

Keys: colour = family (objective where only that varies), marker = depth (or the axis the sweep varies), one
legend for both (style.PointKeys), so a family and a depth look the same in every plot; where a plot must colour
otherwise (the depth plot of a grid crossing depth with width, the lr plot when two configurations share a family
and depth) its key says so. A value that is a bound (a masked-diffusion run's NELBO, or its bits per byte from a
Monte Carlo ELBO: analysis.metrics.bound_rows, by the metric's rule in slm.metrics) is drawn hollow in every plot
(≤ in the heatmap's cells). Titles are one line and a subtitle that says how to read the figure; statistics (p-values, T, D, counts within noise of chance)
are the figure's caption (fig.slm_caption, style.set_caption), which the report prints under it. With no
score given, the score is the study's headline metric (style.choose_score -> analysis.headline).

Uncertainty and chance, in every score plot: error bars (or ± in the heatmap's cells) are 95% intervals,
1.96 x the score's standard error (lm-eval's for a task; for a suite average the propagated
sqrt(sum se_i^2) / k, assuming independent tasks); the caption says when none is recorded. A multiple-
choice accuracy gets its chance level as a dotted line (analysis.records.chance_of) and the caption
counts the runs within noise of it (score - chance <= 1.96 stderr).

Each plot degrades instead of failing: with no lm-eval scores the score is the validation NLL (and the
caption says so); without the columns a plot needs (no throughput measured, no d_model, one lr per
configuration, no completed run) it is not drawn: a style.placeholder names what is missing, draw saves
nothing for it, and the report and slm-plot name it in one line (drawn_line).
Figures are made with matplotlib.figure.Figure (no pyplot state), so this works headless (Agg) and in
notebooks alike.
"""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter

import analysis.plot_style as style
from analysis.labels import run_labels
from analysis.metrics import bound_rows, bounds_left_out, comparable_rows, higher_is_better, name_of, nll_column
from analysis.plot_style import choose_score, score_label  # noqa: F401  (re-exported: report, notebook)
from analysis.schema import keys_of
from analysis.thresholds import find_threshold, nll_frontier
from analysis.tiers import find_tiers, units_of
from analysis.tuning import at_best_lr, lr_curves, lr_labels, lr_varies, rows_at
from slm.eval.score_lines import near_chance
from slm.metrics import LOSS

log = logging.getLogger(__name__)

KINDS = ("tiers", "threshold", "lr", "depth", "throughput", "pareto", "heatmap")
FORMATS = ("png", "svg")


# ---------------------------------------------------------------------------------------------- labels


# ---------------------------------------------------------------------------------------------- plots


def plot_tiers(table: pd.DataFrame, score: str | None = None, k: int | None = None, result=None,
               **tier_args) -> Figure:
    """Configurations sorted by score (best at the top), 95% intervals where known, tiers shaded and the gap
    between them annotated with its statistic; a refusal is drawn unshaded and the title gives the reason. Points
    are keyed as in every plot (colour = family, marker = depth). `result`: the tiers already found (the report's
    analysis.study), else found here by the same rule."""
    score, note = style.choose_score(table, score)
    if score is None:
        return style.placeholder("Tiers", note)
    left_out = bounds_left_out(table, score)
    if result is None:
        result = find_tiers(comparable_rows(table, score), score, k=k, **tier_args)  # exact NLLs only
    units = result.units
    if units.empty:
        return style.placeholder("Tiers", f"no completed run has a value of {score}")
    hib = result.higher_is_better
    units = units.sort_values("value", ascending=hib, kind="stable").reset_index(drop=True)  # best last = top
    n = len(units)
    row, font = (0.32, 8.5) if n <= 40 else (0.2, 6.5) if n <= 100 else (0.13, 5)
    fig = style.new_figure(figsize=(9.5, 1.8 + row * n), layout="constrained")
    ax = fig.add_subplot()
    y = np.arange(n)
    x = units["value"].to_numpy(float)
    err = 1.96 * units["se"].to_numpy(float) if "se" in units else None
    tier = units["tier"].to_numpy(int) if "tier" in units else np.ones(n, int)
    shades = ["#dbe9f6", "#fde7d3", "#e1f2dc", "#eee0f3"]
    if result.split:
        for rank in sorted(set(tier)):
            rows = np.flatnonzero(tier == rank)
            ax.axhspan(rows.min() - 0.5, rows.max() + 0.5, color=shades[(rank - 1) % len(shades)], zorder=0)
            ax.text(0.995, (rows.min() + rows.max()) / 2, f"tier {rank} ", transform=ax.get_yaxis_transform(),
                    va="center", ha="right", fontsize=9, fontweight="bold", color="#333333")
    ax.errorbar(x, y, xerr=None if err is None or np.isnan(err).all() else np.nan_to_num(err), fmt="o",
                markersize=0, color="#1f3b57", ecolor="#7a8ea3", elinewidth=1.2, capsize=2.5, zorder=2)
    keys = style.PointKeys(table)
    first = [r[0] for r in units["runs"]] if "runs" in units else []
    if len(first) == n and set(first) <= set(table.index):
        for colour, marker, part in keys.groups(table.loc[first]):
            at = [first.index(i) for i in part.index]
            style.scatter(ax, x[at], y[at], colour, marker, s=45, zorder=3)
    else:  # bare values (tiers_from_values): one colour
        ax.scatter(x, y, color="#1f3b57", s=30, zorder=3)
    ax.set_yticks(y, units["label"].tolist(), fontsize=font)
    ax.set_ylim(-0.6, n - 0.4)
    ax.set_xlabel(style.score_label(comparable_rows(table, score), score))  # the runs drawn: a bound left out
    ax.set_ylabel("configuration (best at the top)")
    ax.grid(axis="x", color="#e5e5e5", linewidth=0.6)
    name = name_of(score)
    title = f"{name}: {result.k} tiers" if result.split else f"{name}: no significant tiers"
    subtitle = ["shaded: tiers, arrows: the gaps between them"] if result.split else []
    if keys.colour and keys.marker:
        subtitle.append(f"colour: {keys.colour}; marker: {style.AXIS_NAMES.get(keys.marker, keys.marker)}")
    chance = style.chance_value(table, score)
    if chance is not None:
        style.draw_chance(ax, chance, vertical=True, label=False)
    captions = [_tier_statistics(result)]
    if err is not None and np.isfinite(err).any():
        subtitle.append("bars: 95% intervals")
        sources = []
        if result.units_source.get("stderr"):
            sources.append("stderr propagated from the tasks' (independent tasks assumed)" if score.startswith("avg_")
                           else "lm-eval stderr")
        if result.units_source.get("seeds"):
            pooled = " (pooled, for single-seed runs)" if result.units_source.get("pooled") else ""
            sources.append("seed-to-seed spread" + pooled)
        captions.append("Bars: 95% intervals from " + (" and ".join(sources) or "the runs' uncertainty"))
    elif not result.noise_known:
        subtitle.append("no bars: no per-run uncertainty known")
        captions.append("No per-run uncertainty is known (single seed, no stderr)")
    if chance is not None:
        subtitle.append(f"dotted: chance {chance:.3g}")
        se = units["se"].to_numpy(float) if "se" in units else np.zeros(n)
        near = int(np.sum(near_chance(x, chance, np.nan_to_num(se))))
        captions.append(f"Dotted: chance {chance:.3g} (random guess among the choices)" + (
            f"; {near} of {n} configurations within noise of chance" if near else ""))
    if len(left_out):
        captions.append(f"Left out: {len(left_out)} diffusion run(s) whose val_nll is a NELBO, an upper bound not "
                        "comparable with an exact NLL")
    if note:
        captions.append(f"Score: {note}")
    style.set_title(fig, title, style.wrap_text("; ".join(subtitle), 100))
    style.set_caption(fig, *captions)
    if keys.colour:
        keys.shown(table.loc[first] if len(first) == n and set(first) <= set(table.index) else table).legend(ax)
    if result.split:
        style.settle_layout(fig)
        for gap in result.gaps:
            _annotate_gap(ax, gap, np.flatnonzero(tier == gap.upper + 1).max() + 0.5)
    fig.slm_result = result
    return fig


def _tier_statistics(result) -> str:
    """The tiers' statistics in words, for the caption."""
    if not result.split:
        return f"No split: {result.reason}"
    parts = []
    for gap in result.gaps:
        sep = "" if gap.separation is None else f", separation {gap.separation:.2f}"
        parts.append(f"gap {gap.size:.3g} between tiers {gap.upper} and {gap.upper + 1}: T = {gap.t:.1f} "
                     f"(gap / within-tier sd), p {style.p_text(gap.p_value)} against one population{sep}")
    return "; ".join(parts)


def _annotate_gap(ax, gap, yb: float, fontsize: float = 8) -> None:
    """A double arrow across the gap at the boundary between two tiers, and its numbers: centred above the
    arrow when they fit inside it, else beside it on a side with room, else centred in the axes."""
    ax.annotate("", xy=(gap.high, yb), xytext=(gap.low, yb),
                arrowprops=dict(arrowstyle="<->", color="#b22222", lw=1.4), zorder=4)
    text = f"gap {gap.size:.3g}"
    box = ax.get_window_extent()
    xmin, xmax = ax.get_xlim()
    per_pixel = (xmax - xmin) / max(box.width, 1.0)
    width = 0.56 * fontsize * len(text) * ax.figure.dpi / 72.0 * per_pixel + 8 * per_pixel  # in data units
    lo_x, hi_x = sorted((gap.low, gap.high))
    text_style = dict(fontsize=fontsize, color="#b22222", zorder=5, textcoords="offset points",
                 bbox=dict(boxstyle="round,pad=0.15", fc="white", ec="none", alpha=0.85))
    if hi_x - lo_x >= width:
        ax.annotate(text, xy=((lo_x + hi_x) / 2, yb), xytext=(0, 2), ha="center", va="bottom", **text_style)
    elif xmax - hi_x >= width:
        ax.annotate(text, xy=(hi_x, yb), xytext=(5, 0), ha="left", va="center", **text_style)
    elif lo_x - xmin >= width:
        ax.annotate(text, xy=(lo_x, yb), xytext=(-5, 0), ha="right", va="center", **text_style)
    else:
        ax.annotate(text, xy=((xmin + xmax) / 2, yb), xytext=(0, 2), ha="center", va="bottom", **text_style)


def plot_threshold(table: pd.DataFrame, score: str | None = None, axis: str = "d_model", result=None,
                   **threshold_args) -> Figure:
    """Score against d_model (log2 axis); colour = family, marker = depth (style.PointKeys); the threshold line
    where analysis.thresholds finds one. Its statistics (D, permutation p) go to the caption. `result`: the
    threshold already found (the report's analysis.study), else found here by the same rule."""
    score, note = style.choose_score(table, score)
    if score is None:
        return style.placeholder("Threshold", note)
    rows = style.completed_runs(table)
    if axis not in rows or pd.to_numeric(rows[axis], errors="coerce").notna().sum() == 0:
        return style.placeholder("Threshold", f"the results have no {axis} values")
    rows = rows[pd.to_numeric(rows[score], errors="coerce").notna()
                & pd.to_numeric(rows[axis], errors="coerce").notna()]
    if rows.empty:
        return style.placeholder("Threshold", f"no completed run has both {axis} and {score}")
    left_out = bounds_left_out(table, score)
    if result is None:
        result = find_threshold(comparable_rows(table, score), axis, score, **threshold_args)
    fig = style.new_figure(figsize=(8.5, 5.2), layout="constrained")
    ax = fig.add_subplot()
    keys = style.PointKeys(table, exclude=(axis,))
    errors = style.score_errors(rows, score)
    for colour, marker, part in keys.groups(rows):
        x = pd.to_numeric(part[axis]).to_numpy(float)
        y = pd.to_numeric(part[score]).to_numpy(float)
        if errors.loc[part.index].notna().any():
            ax.errorbar(x, y, yerr=style.Z95 * errors.loc[part.index].fillna(0).to_numpy(float), fmt="none",
                        ecolor=colour, alpha=0.5, elinewidth=1, capsize=2, zorder=2)
        style.scatter(ax, x, y, colour, marker, bound_rows(part, score), alpha=0.85, zorder=3)
    style.log2_axis(ax, pd.to_numeric(rows[axis]).to_numpy(float))
    ax.set_xlabel(style.AXIS_LABELS.get(axis, axis) + (", log scale" if ax.get_xscale() == "log" else ""))
    ax.set_ylabel(style.wrap_text(style.score_label(table, score), 48))
    ax.grid(color="#e5e5e5", linewidth=0.6)
    name = name_of(score)
    captions = []
    if result.found:
        xline = math.sqrt(result.below * result.threshold) if ax.get_xscale() == "log" else \
            (result.below + result.threshold) / 2
        ax.axvline(xline, color="#b22222", ls="--", lw=1.5, zorder=1)
        side = "≥" if result.better_side == "above" else "<"
        ax.text(xline, 1.0, f" {axis} {side} {style.format_number(result.threshold)}",
                transform=ax.get_xaxis_transform(), ha="left", va="bottom", color="#b22222", fontsize=9, clip_on=False)
        captions.append(f"Threshold: {axis} {side} {style.format_number(result.threshold)}, D = {result.effect:.2f} "
                        f"(standardised mean difference), permutation p {style.p_text(result.p_value)}, "
                        + ("a clean split" if result.clean else "the sides overlap"))
        title = (f"{name} against {style.AXIS_NAMES.get(axis, axis)}: threshold at "
                 f"{style.format_number(result.threshold)}")
    else:
        title = f"{name} against {style.AXIS_NAMES.get(axis, axis)}: no threshold"
        captions.append(f"No threshold: {result.reason}")
    if result.confounded_with:
        captions.append("Caution: " + ", ".join(f"{k} moves with {axis} (rho {v:+.2f})"
                                                 for k, v in result.confounded_with.items()))
    captions += [style.errorbar_note(rows, score), style.chance_note(rows, score)]
    if len(left_out):
        captions.append(f"Hollow: {len(left_out)} diffusion run(s) whose val_nll is a NELBO (an upper bound), left "
                        "out of the threshold test of exact NLLs")
    if note:
        captions.append(f"Score: {note}")
    sub = "; ".join(t for t in ("dashed: the threshold" if result.found else "",
                                "hollow: a diffusion NELBO, not in the test" if len(left_out) else "",
                                "bars: 95% intervals" if errors.notna().any() else "",
                                "dotted: chance" if style.chance_value(rows, score) is not None else "") if t)
    style.set_title(fig, title, sub)
    style.set_caption(fig, *captions)
    keys.shown(rows).legend(ax, [style.bound_handle()] if bound_rows(rows, score).any() else None)
    style.pad_y(ax)
    style.draw_chance(ax, style.chance_value(rows, score))
    fig.slm_result = result
    return fig


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
    group = keys.colour
    depth_values = pd.to_numeric(rows["n_layers"], errors="coerce")
    # A grid that crosses depth with width (several d_model at one depth): one line per width; otherwise
    # (e.g. a fixed parameter budget, where width follows depth) one line per family through the depth means.
    crossed = "d_model" in rows and rows.assign(_g=rows[group] if group else "all").groupby(
        ["_g", "n_layers"])["d_model"].nunique().max() > 1
    if crossed:
        series = (rows[group].astype(str) + " " if group else "") + "d" + \
            pd.to_numeric(rows["d_model"], errors="coerce").map(style.format_number)
        how = "lines: one per " + (f"{group} and " if group else "") + "width (d_model)"
    else:
        series = rows[group].astype(str) if group else pd.Series("all", rows.index)
        how = "lines: mean per " + (group or "group") + " at each depth"
    keys_sorted = sorted(series.unique(), key=lambda k: (k.split(" d")[0], float(k.rsplit("d", 1)[-1])
                                                         if crossed and k.rsplit("d", 1)[-1].isdigit() else 0))
    colors = ({k: style.PALETTE[i % len(style.PALETTE)] for i, k in enumerate(keys_sorted)} if crossed else
              {k: keys.colours.get(k, style.PALETTE[0]) for k in keys_sorted})  # the family's colour everywhere
    depth_marker = (lambda v: keys.markers.get(style.format_number(v), "o")) if keys.marker == "n_layers" \
        else (lambda v: "o")
    any_bound = False
    tuned = False
    for ax, column in zip(axes.flat, columns):
        part = rows[pd.to_numeric(rows[column], errors="coerce").notna() & depth_values.notna()]
        if lr_varies(part, column):  # lr a nuisance axis, as everywhere else: each configuration at its best lr
            part, tuned = rows_at(part, column, "tuned"), True
        bounds = bound_rows(part, column)
        any_bound |= bool(bounds.any())
        for key in keys_sorted:
            sub = part[series.loc[part.index] == key]
            if sub.empty:
                continue
            x = pd.to_numeric(sub["n_layers"]).to_numpy(float)
            y = pd.to_numeric(sub[column]).to_numpy(float)
            se = style.score_errors(sub, column).to_numpy(float)
            if np.isfinite(se).any():
                ax.errorbar(x, y, yerr=style.Z95 * np.nan_to_num(se), fmt="none", ecolor=colors[key], alpha=0.45,
                            elinewidth=1, capsize=2, zorder=2)
            for depth in sorted(set(x)):  # marker = depth, a bound hollow: as in every plot
                at = x == depth
                style.scatter(ax, x[at], y[at], colors[key], depth_marker(depth), bounds.loc[sub.index][at], s=34,
                              alpha=0.8, zorder=3, linewidths=0.5)
            exact = ~bounds.loc[sub.index].to_numpy()
            mean = sub[exact].assign(_x=x[exact], _y=y[exact]).groupby("_x")["_y"].mean()
            if len(mean) >= 2:  # a family's line through its exact values (a bound is not averaged in)
                ax.plot(mean.index, mean.values, color=colors[key], lw=1.6, zorder=2, label=key)
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
    for ax in list(axes.flat)[len(columns):]:
        ax.set_axis_off()
    extra = [(Line2D([], [], color="#777777", lw=1.6), how.split(": ", 1)[1] + (
        " (each configuration at its best lr)" if tuned else ""))]
    if any_bound:
        extra.append(style.bound_handle())
    handles, labels, heads = keys.shown(rows).entries(extra)
    if crossed:  # colour is a family and a width here: the key says so
        n_colour = len(keys.colours) + 1 if keys.colour and keys.colours else 0
        own = [Line2D([], [], ls="", marker="")] + [Line2D([], [], ls="", marker="o", color=colors[k], markersize=7)
                                                    for k in keys_sorted]
        handles = own + handles[n_colour:]
        labels = [f"{group or 'group'} and width (colour)", *keys_sorted] + labels[n_colour:]
        heads = [0] + [h - n_colour + len(own) for h in heads if h >= n_colour]
    legend = axes[0][-1].legend(handles, labels, loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8,
                                frameon=False, borderaxespad=0)
    for i, text in enumerate(legend.get_texts()):
        if i in heads:
            text.set_fontweight("bold")
    title = "Score against depth" + (" per task" if len(columns) > 1 else "") + (f" ({note})" if note else "")
    subtitle = ["points: runs; " + how + (f"; colour: {group}" if group and not crossed else "")
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
    style.set_title(fig, title, style.wrap_text("; ".join(subtitle), 110))
    style.set_caption(fig, *captions)
    return fig


def plot_throughput(table: pd.DataFrame, score: str | None = None) -> Figure:
    """Score against batch-1 decode speed (log axis); colour = family, marker = depth; marker area = peak memory
    where it is a per-run measure (GPU). Runs decoded by masked diffusion are ringed in black. The subtitle
    states the device, the load (a CPU may have been shared with other jobs) and each decoder's settings
    (analysis.decode_conditions)."""
    from analysis.decode_conditions import conditions

    score, note = style.choose_score(table, score)
    if score is None:
        return style.placeholder("Throughput vs accuracy", note)
    rows = style.completed_runs(table)
    if "decode_tokens_per_s" not in rows or rows["decode_tokens_per_s"].notna().sum() == 0:
        return style.placeholder("Throughput vs accuracy", "no decode throughput in the results: it is measured by "
                           "slm-eval (eval.throughput in result.json) with throughput enabled")
    rows = rows[pd.to_numeric(rows["decode_tokens_per_s"], errors="coerce").notna()
                & pd.to_numeric(rows[score], errors="coerce").notna()]
    if rows.empty:
        return style.placeholder("Throughput vs accuracy", f"no run has both a decode speed and {score}")
    fig = style.new_figure(figsize=(8.5, 5.4), layout="constrained")
    ax = fig.add_subplot()
    keys = style.PointKeys(table)
    mem = pd.to_numeric(rows.get("peak_memory_bytes"), errors="coerce") / 2 ** 20 if "peak_memory_bytes" in rows \
        else pd.Series(np.nan, rows.index)
    # A CPU run's peak memory is the process's peak RSS (ru_maxrss): it only grows over every job one process
    # ran (a local sweep), so as a marker size it would show job order, not the model. Only per-run measures
    # (CUDA: max_memory_allocated after a reset) size the markers.
    measure = rows["peak_memory_measure"].astype(object) if "peak_memory_measure" in rows \
        else pd.Series(None, rows.index, dtype=object)
    cumulative = measure.eq("process_peak_rss") & mem.notna()
    mem = mem.where(~cumulative)
    mmax = float(mem.max()) if mem.notna().any() else 1.0

    def to_size(v):
        return 30 + 400 * (v / mmax) if np.isfinite(v) and mmax > 0 else 60

    labels = run_labels(rows)
    diffusion = rows["decoder"].astype(str).eq("masked_diffusion") if "decoder" in rows \
        else pd.Series(False, rows.index)
    errors = style.score_errors(rows, score)
    bounds = bound_rows(rows, score)
    for colour, marker, part in keys.groups(rows):
        if errors.loc[part.index].notna().any():
            ax.errorbar(part["decode_tokens_per_s"].astype(float), part[score].astype(float),
                        yerr=style.Z95 * errors.loc[part.index].fillna(0).to_numpy(float), fmt="none",
                        ecolor=colour, alpha=0.45, elinewidth=1, capsize=2, zorder=2)
        for hollow, points in part.groupby(bounds[part.index]):  # a bound hollow, as in every plot
            ax.scatter(points["decode_tokens_per_s"].astype(float), points[score].astype(float),
                       s=[to_size(v) for v in mem.loc[points.index]], marker=marker, alpha=0.75, zorder=3,
                       **({**style.HOLLOW, "edgecolors": colour} if hollow else
                          {"color": colour, "edgecolors": "white", "linewidths": 0.8}))
    ringed = rows[diffusion]  # the decoder, apart from the score: a black ring around the point
    if len(ringed):
        ax.scatter(ringed["decode_tokens_per_s"].astype(float), ringed[score].astype(float),
                   s=[2.4 * to_size(v) for v in mem.loc[ringed.index]], marker="o", facecolors="none",
                   edgecolors="black", linewidths=1.2, zorder=4)
    speeds = rows["decode_tokens_per_s"].astype(float)
    if speeds.max() / max(speeds.min(), 1e-9) >= 3:
        ax.set_xscale("log")
        style.log_ticks(ax, speeds)
    ax.set_xlabel(style.AXIS_LABELS["decode_tokens_per_s"] + (", log scale" if ax.get_xscale() == "log" else ""))
    label = style.score_label(table, score)
    ax.set_ylabel(style.wrap_text(label, 48))
    ax.grid(color="#e5e5e5", linewidth=0.6)
    sized = measure[mem.notna()].dropna().astype(str).unique()
    what = {"cuda_max_memory_allocated": "GPU allocated"}
    mem_title = "peak memory\n(marker size, MiB" + (",\n" + "/".join(what.get(m, m) for m in sized)
                                                    if len(sized) else "") + ")"
    extra = [style.bound_handle()] if bounds.any() else []
    if diffusion.any():
        extra.append((Line2D([], [], ls="", marker="o", mfc="none", mec="black", mew=1.2, markersize=11),
                      "ringed: masked diffusion decoder"))
    keys.shown(rows).legend(ax, extra, (mem.dropna().to_numpy(), to_size, mem_title, lambda v: f"{v:,.0f}")
                if mem.notna().any() else None)
    style.pad_y(ax)
    style.draw_chance(ax, style.chance_value(rows, score))
    ax.margins(x=0.08)
    measured = conditions(rows)
    sub = measured.lines()
    marks = [t for t in ("hollow: a bound" if bounds.any() else "",
                         "bars: 95% intervals" if errors.notna().any() else "",
                         "dotted: chance" if style.chance_value(rows, score) is not None else "") if t]
    if marks:
        sub[-1] += "; " + "; ".join(marks)
    captions = []
    if cumulative.any():
        captions.append(("Marker size: peak GPU memory where measured; " if mem.notna().any() else "")
                        + f"peak memory of {int(cumulative.sum())} CPU run(s) left out: on a CPU it is the process's "
                        "peak RSS, which grows over every job one process ran, so it would show job order, not the "
                        "model")
    captions += [style.errorbar_note(rows, score), style.chance_note(rows, score)]
    if measured.cpu:
        captions.append(measured.load_caption())
    if note:
        captions.append(f"Score: {note}")
    style.set_title(fig, f"{name_of(score)} against decode speed",
                    "\n".join(style.wrap_text(line, 110) for line in sub))
    style.set_caption(fig, *captions)
    if len(rows) <= 12:  # beyond that the labels crowd out the points (colour and marker still key them)
        style.settle_layout(fig)
        style.label_points(ax, speeds.to_numpy(), rows[score].astype(float).to_numpy(), labels.tolist(),
                      [to_size(v) for v in mem.loc[rows.index]])
    fig.slm_memory_left_out = int(cumulative.sum())
    fig.slm_conditions = measured
    return fig


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
    extra = [(Line2D([], [], color="#222222", lw=1.4, marker="o", mfc="none", markersize=9), "Pareto frontier")]
    if paths:
        extra.append((Line2D([], [], color="#888888", lw=1.0, alpha=0.6),
                      f"a {points.colour}'s best at each {style.AXIS_NAMES.get(points.marker, points.marker)}"))
    if bound.any():
        extra.append(style.bound_handle())
    points.shown(rows).legend(ax, extra)
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


def plot_heatmap(table: pd.DataFrame, tasks: list[str] | None = None, score: str | None = None,
                 max_rows: int = 60, keys: pd.Series | None = None) -> Figure:
    """Runs (configurations, seeds pooled) x tasks. Colour: rank within each task (1 = best on that task,
    0 = worst), so tasks on different scales and directions share one colour bar; each cell shows the value.
    `keys`: the table's config_keys where the caller has them (analysis.schema.keys_of)."""
    rows = style.completed_runs(table)
    columns = style.score_columns_to_show(rows, tasks)
    note = ""
    if not columns:
        columns = [c for c in (LOSS, "val_ppl") if c in rows and rows[c].notna().any()]
        note = "no lm-eval scores: validation NLL and perplexity shown"
        if not columns:
            return style.placeholder("Per-task heatmap", "no lm-eval scores and no validation NLL in the results")
    order_by, _ = style.choose_score(rows, score)
    frames, errors, chance, bounded = [], [], {}, {}
    for column in columns:
        units, _, _ = units_of(rows, column, keys=keys)
        if len(units):
            frames.append(units.set_index("label")["value"].rename(column))
            errors.append(units.set_index("label")["se"].rename(column))
            chance[column] = style.chance_value(rows, column)
            flags = bound_rows(rows, column)
            bounded[column] = {label for label, runs in zip(units["label"], units["runs"]) if flags.loc[runs].all()}
    if not frames:
        return style.placeholder("Per-task heatmap", "no completed run has a score")
    grid = pd.concat(frames, axis=1)
    spread = pd.concat(errors, axis=1).reindex(grid.index)
    if order_by in grid:
        grid = grid.sort_values(order_by, ascending=not higher_is_better(table, order_by), na_position="last")
    if len(grid) > max_rows:
        log.info("heatmap: showing the first %d of %d configurations", max_rows, len(grid))
        grid = grid.iloc[:max_rows]
    ranks = pd.DataFrame(index=grid.index)
    for column in grid:
        values = grid[column]
        r = values.rank(ascending=higher_is_better(table, column), method="average")
        count = values.notna().sum()
        ranks[column] = (r - 1) / (count - 1) if count > 1 else 0.5
    spread = spread.loc[grid.index]
    nr, nc = grid.shape
    two_lines = bool(np.isfinite(spread.to_numpy(float)).any())
    fig = style.new_figure(figsize=(max(6.0, 1.25 * nc + 4.0), 1.6 + (0.42 if two_lines else 0.3) * nr),
                           layout="constrained")
    ax = fig.add_subplot()
    image = ax.imshow(ranks.to_numpy(float), aspect="auto", cmap="viridis", vmin=0, vmax=1)
    near_cells = bound_cells = 0
    for i in range(nr):
        for j in range(nc):
            value = grid.iat[i, j]
            if np.isfinite(value):
                shade = ranks.iat[i, j]
                se = spread.iat[i, j]
                bound = grid.index[i] in bounded.get(grid.columns[j], ())
                text = ("≤" if bound else "") + style.cell_text(value) + (
                    f"\n±{style.cell_text(style.Z95 * se)}" if np.isfinite(se) else "")
                bound_cells += bound
                level = chance[grid.columns[j]]
                if level is not None and near_chance(value, level, se if np.isfinite(se) else None):
                    text += " °"
                    near_cells += 1
                ax.text(j, i, text, ha="center", va="center", fontsize=7.5 if not two_lines else 7,
                        linespacing=1.0, color="black" if np.isfinite(shade) and shade > 0.55 else "white")
    ax.set_xticks(range(nc), [style.column_title(table, c) for c in grid],
                  fontsize=8.5, rotation=30, ha="left", rotation_mode="anchor")
    ax.set_yticks(range(nr), grid.index.tolist(), fontsize=8.5)
    ax.set_xlabel("task (↑ higher is better, ↓ lower is better)")
    ax.set_ylabel("configuration")
    ax.tick_params(top=True, bottom=False, labeltop=True, labelbottom=False)
    ax.xaxis.set_label_position("top")
    bar = fig.colorbar(image, ax=ax, shrink=0.8, pad=0.02)
    bar.set_label("rank within the task\n(1 = best, 0 = worst)")
    sub = "cells: value" + (" ± 95% interval" if two_lines else "") + "; colour: rank on that task" + (
        "; °: within noise of chance" if near_cells else "") + (
        "; ≤: a bound (hollow in the other plots)" if bound_cells else "")
    style.set_title(fig, "Per-task scores" + (f" ({note})" if note else ""), sub)
    style.set_caption(fig, "Cells: each task's headline value" + (" ± its 95% interval (1.96 x lm-eval stderr, "
                                                                   "where recorded)" if two_lines else ""),
                      "Colour: rank among the configurations on that task (1 = best), so tasks on different scales "
                      "share one colour bar",
                      f"°: within noise of the task's chance level ({near_cells} cell(s))" if near_cells else "",
                      f"≤: a masked-diffusion run's bound, not an exact value ({bound_cells} cell(s))"
                      if bound_cells else "")
    return fig


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
    hib = higher_is_better(table, score)
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


PLOTTERS = {"tiers": plot_tiers, "threshold": plot_threshold, "depth": plot_depth, "throughput": plot_throughput,
            "pareto": plot_pareto, "heatmap": plot_heatmap, "lr": plot_lr}
FILE_NAMES = {"tiers": "tiers", "threshold": "threshold_d_model", "depth": "depth_vs_score",
              "throughput": "throughput_vs_accuracy", "pareto": "pareto_nll_flops", "heatmap": "heatmap_tasks",
              "lr": "score_vs_lr"}
TITLES = {"tiers": "Tiers", "threshold": "Hidden-size threshold", "depth": "Depth against score",
          "throughput": "Decode speed against score", "pareto": "NLL against training FLOPs",
          "heatmap": "Per-task heatmap", "lr": "Score against learning rate"}


def save(fig: Figure, out_dir: str | os.PathLike, name: str, formats=FORMATS) -> list[Path]:
    """Write the figure as <out_dir>/<name>.<format> for each format; returns the paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    import matplotlib

    # SVG text stays text (searchable, smaller files); no timestamp, so a redraw of the same table is identical
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "slm"}):
        for fmt in formats:
            path = out_dir / f"{name}.{fmt}"
            # bbox_inches="tight": legends and colour-bar labels outside the axes are kept, never clipped
            fig.savefig(path, dpi=style.DPI, format=fmt, metadata={"Date": None} if fmt == "svg" else None,
                        bbox_inches="tight", pad_inches=0.12)
            paths.append(path)
    return paths


def draw(kind: str, table: pd.DataFrame, out_dir: str | os.PathLike | None = None, formats=FORMATS,
         **kwargs) -> tuple[Figure, list[Path]]:
    """Draw one plot (KINDS) and save it under out_dir if given. A plot without the data it needs is a
    style.placeholder (fig.slm_placeholder: why) and is not saved (a file of that name left by an earlier drawing
    is removed, so the folder holds only what this table draws); a plot that raises becomes one too, naming the
    error (logged as a warning), so one bad column never loses the others."""
    if kind not in PLOTTERS:
        raise ValueError(f"unknown plot kind {kind!r}; choose one of: {', '.join(KINDS)}, all")
    try:
        fig = PLOTTERS[kind](table, **kwargs)
    except KeyError:
        raise
    except Exception as err:  # noqa: BLE001 - draw the others; say what went wrong here
        log.exception("%s plot failed", kind)
        fig = style.placeholder(TITLES[kind], f"{type(err).__name__}: {err}")
    if out_dir is None:
        return fig, []
    if hasattr(fig, "slm_placeholder"):
        for fmt in formats:
            Path(out_dir, f"{FILE_NAMES[kind]}.{fmt}").unlink(missing_ok=True)
        return fig, []
    return fig, save(fig, out_dir, FILE_NAMES[kind], formats)


def draw_all(table: pd.DataFrame, out_dir: str | os.PathLike, formats=FORMATS, score: str | None = None,
             study=None) -> dict:
    """Every plot (KINDS) that has data into out_dir: {kind: (figure, paths)}, paths [] for one not drawn
    (skipped(...) says why). `study` (analysis.study): its tiers and threshold are drawn, not found again, and its
    config keys group the runs."""
    out = {}
    for kind in KINDS:
        kwargs = {"score": score} if score and kind in ("tiers", "threshold", "throughput", "heatmap", "lr") else {}
        if study is not None and kind in ("pareto", "heatmap", "lr"):
            kwargs["keys"] = study.keys_for(table)
        if study is not None and study.score and kind == "tiers":
            kwargs["result"] = study.tiers(score or study.score)
        if study is not None and study.score and kind == "threshold" and study.threshold(score) is not None:
            kwargs["result"] = study.threshold(score)
        out[kind] = draw(kind, table, out_dir, formats, **kwargs)
    return out


def skipped(drawn: dict) -> dict:
    """{kind: why} of the plots of draw_all's result that were not drawn."""
    return {kind: fig.slm_placeholder for kind, (fig, _) in drawn.items() if hasattr(fig, "slm_placeholder")}


def drawn_line(not_drawn: dict, total: int = len(KINDS)) -> str:
    """One line: how many plots were drawn, and each one not drawn with why ({kind: why})."""
    text = f"Figures: {total - len(not_drawn)} of {total} plots drawn"
    if not_drawn:
        text += "; not drawn: " + "; ".join(
            f"{TITLES[kind].lower()} ({why})" for kind, why in not_drawn.items())
    return text
