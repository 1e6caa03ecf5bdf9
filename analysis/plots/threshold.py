"""The threshold plot: score against hidden size d_model, the threshold line where one is found
(analysis.thresholds)."""

from __future__ import annotations

import math

import pandas as pd
from matplotlib.figure import Figure

import analysis.plot_style as style
from analysis.metrics import bound_rows, bounds_left_out, comparable_rows, name_of
from analysis.thresholds import find_threshold


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
    title, captions = _threshold_line(ax, result, axis, name_of(score))
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


def _threshold_line(ax, result, axis: str, name: str) -> tuple[str, list[str]]:
    """The threshold's dashed line and label where one was found; the title and the first caption."""
    if not result.found:
        return (f"{name} against {style.AXIS_NAMES.get(axis, axis)}: no threshold",
                [f"No threshold: {result.reason}"])
    xline = math.sqrt(result.below * result.threshold) if ax.get_xscale() == "log" else \
        (result.below + result.threshold) / 2
    ax.axvline(xline, color="#b22222", ls="--", lw=1.5, zorder=1)
    side = "≥" if result.better_side == "above" else "<"
    ax.text(xline, 1.0, f" {axis} {side} {style.format_number(result.threshold)}",
            transform=ax.get_xaxis_transform(), ha="left", va="bottom", color="#b22222", fontsize=9, clip_on=False)
    caption = (f"Threshold: {axis} {side} {style.format_number(result.threshold)}, D = {result.effect:.2f} "
               f"(standardised mean difference), permutation p {style.p_text(result.p_value)}, "
               + ("a clean split" if result.clean else "the sides overlap"))
    return (f"{name} against {style.AXIS_NAMES.get(axis, axis)}: threshold at "
            f"{style.format_number(result.threshold)}", [caption])
