"""The tiers plot: configurations sorted by score, tiers shaded, the gaps between them annotated (analysis.tiers)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

import analysis.plot_style as style
from analysis.metrics import bounds_left_out, comparable_rows, name_of
from analysis.tiers import find_tiers
from slm.eval.score_lines import near_chance

SHADES = ["#dbe9f6", "#fde7d3", "#e1f2dc", "#eee0f3"]
"""The tiers' background colours, in rank order (repeating)."""


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
    units = units.sort_values("value", ascending=result.higher_is_better, kind="stable").reset_index(drop=True)
    n = len(units)  # best last = top
    row, font = (0.32, 8.5) if n <= 40 else (0.2, 6.5) if n <= 100 else (0.13, 5)
    fig = style.new_figure(figsize=(9.5, 1.8 + row * n), layout="constrained")
    ax = fig.add_subplot()
    y = np.arange(n)
    x = units["value"].to_numpy(float)
    err = 1.96 * units["se"].to_numpy(float) if "se" in units else None
    tier = units["tier"].to_numpy(int) if "tier" in units else np.ones(n, int)
    if result.split:
        _shade_tiers(ax, tier)
    ax.errorbar(x, y, xerr=None if err is None or np.isnan(err).all() else np.nan_to_num(err), fmt="o",
                markersize=0, color="#1f3b57", ecolor="#7a8ea3", elinewidth=1.2, capsize=2.5, zorder=2)
    keys = style.PointKeys(table)
    first = [r[0] for r in units["runs"]] if "runs" in units else []
    keyed = len(first) == n and set(first) <= set(table.index)
    if keyed:
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
    chance = style.chance_value(table, score)
    if chance is not None:
        style.draw_chance(ax, chance, vertical=True, label=False)
    title, subtitle, captions = _tier_words(result, units, score, keys, err, chance, left_out, note)
    style.set_title(fig, title, style.wrap_text("; ".join(subtitle), 100))
    style.set_caption(fig, *captions)
    if keys.colour:
        keys.shown(table.loc[first] if keyed else table).legend(ax)
    if result.split:
        style.settle_layout(fig)
        for gap in result.gaps:
            _annotate_gap(ax, gap, np.flatnonzero(tier == gap.upper + 1).max() + 0.5)
    fig.slm_result = result
    return fig


def _shade_tiers(ax, tier: np.ndarray) -> None:
    """Each tier's rows shaded, its name at the right."""
    for rank in sorted(set(tier)):
        rows = np.flatnonzero(tier == rank)
        ax.axhspan(rows.min() - 0.5, rows.max() + 0.5, color=SHADES[(rank - 1) % len(SHADES)], zorder=0)
        ax.text(0.995, (rows.min() + rows.max()) / 2, f"tier {rank} ", transform=ax.get_yaxis_transform(),
                va="center", ha="right", fontsize=9, fontweight="bold", color="#333333")


def _tier_words(result, units: pd.DataFrame, score: str, keys, err, chance, left_out, note: str
                ) -> tuple[str, list[str], list[str]]:
    """The tier plot's title, the parts of its subtitle, and its captions."""
    name = name_of(score)
    title = f"{name}: {result.k} tiers" if result.split else f"{name}: no significant tiers"
    subtitle = ["shaded: tiers, arrows: the gaps between them"] if result.split else []
    if keys.colour and keys.marker:
        subtitle.append(f"colour: {keys.colour}; marker: {style.AXIS_NAMES.get(keys.marker, keys.marker)}")
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
        n = len(units)
        subtitle.append(f"dotted: chance {chance:.3g}")
        se = units["se"].to_numpy(float) if "se" in units else np.zeros(n)
        near = int(np.sum(near_chance(units["value"].to_numpy(float), chance, np.nan_to_num(se))))
        captions.append(f"Dotted: chance {chance:.3g} (random guess among the choices)" + (
            f"; {near} of {n} configurations within noise of chance" if near else ""))
    if len(left_out):
        captions.append(f"Left out: {len(left_out)} diffusion run(s) whose val_nll is a NELBO, an upper bound not "
                        "comparable with an exact NLL")
    if note:
        captions.append(f"Score: {note}")
    return title, subtitle, captions


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
