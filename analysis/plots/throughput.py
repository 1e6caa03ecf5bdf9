"""The throughput plot: score against batch-1 decode speed, marker size = peak GPU memory, the decode conditions in
the subtitle (analysis.decode_conditions)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

import analysis.plot_style as style
from analysis.labels import run_labels
from analysis.metrics import bound_rows, name_of

MEMORY_WORDS = {"cuda_max_memory_allocated": "GPU allocated"}
"""A peak-memory measure's name in the key."""


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
    mem, measure, cumulative = _memory(rows)
    mmax = float(mem.max()) if mem.notna().any() else 1.0

    def to_size(v):
        return 30 + 400 * (v / mmax) if np.isfinite(v) and mmax > 0 else 60

    diffusion = rows["decoder"].astype(str).eq("masked_diffusion") if "decoder" in rows \
        else pd.Series(False, rows.index)
    errors = style.score_errors(rows, score)
    bounds = bound_rows(rows, score)
    _points(ax, rows, keys, score, errors, bounds, mem, to_size, diffusion)
    speeds = rows["decode_tokens_per_s"].astype(float)
    if speeds.max() / max(speeds.min(), 1e-9) >= 3:
        ax.set_xscale("log")
        style.log_ticks(ax, speeds)
    ax.set_xlabel(style.AXIS_LABELS["decode_tokens_per_s"] + (", log scale" if ax.get_xscale() == "log" else ""))
    ax.set_ylabel(style.wrap_text(style.score_label(table, score), 48))
    ax.grid(color="#e5e5e5", linewidth=0.6)
    _legend(ax, keys, rows, mem, measure, to_size, bounds, diffusion)
    style.pad_y(ax)
    style.draw_chance(ax, style.chance_value(rows, score))
    ax.margins(x=0.08)
    measured = conditions(rows)
    sub, captions = _words(rows, score, note, measured, mem, cumulative, errors, bounds)
    style.set_title(fig, f"{name_of(score)} against decode speed",
                    "\n".join(style.wrap_text(line, 110) for line in sub))
    style.set_caption(fig, *captions)
    if len(rows) <= 12:  # beyond that the labels crowd out the points (colour and marker still key them)
        style.settle_layout(fig)
        style.label_points(ax, speeds.to_numpy(), rows[score].astype(float).to_numpy(), run_labels(rows).tolist(),
                           [to_size(v) for v in mem.loc[rows.index]])
    fig.slm_memory_left_out = int(cumulative.sum())
    fig.slm_conditions = measured
    return fig


def _memory(rows: pd.DataFrame) -> tuple[pd.Series, pd.Series, pd.Series]:
    """(peak memory in MiB where it is a per-run measure, each run's measure, which runs' peak memory is left out).
    A CPU run's peak memory is the process's peak RSS (ru_maxrss): it only grows over every job one process ran (a
    local sweep), so as a marker size it would show job order, not the model. Only per-run measures (CUDA:
    max_memory_allocated after a reset) size the markers."""
    mem = pd.to_numeric(rows.get("peak_memory_bytes"), errors="coerce") / 2 ** 20 if "peak_memory_bytes" in rows \
        else pd.Series(np.nan, rows.index)
    measure = rows["peak_memory_measure"].astype(object) if "peak_memory_measure" in rows \
        else pd.Series(None, rows.index, dtype=object)
    cumulative = measure.eq("process_peak_rss") & mem.notna()
    return mem.where(~cumulative), measure, cumulative


def _points(ax, rows: pd.DataFrame, keys, score: str, errors: pd.Series, bounds: pd.Series, mem: pd.Series,
            to_size, diffusion: pd.Series) -> None:
    """Each run's point (sized by memory, a bound hollow) with its 95% interval, and a black ring around each run
    decoded by masked diffusion."""
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


def _legend(ax, keys, rows: pd.DataFrame, mem: pd.Series, measure: pd.Series, to_size, bounds: pd.Series,
            diffusion: pd.Series) -> None:
    """The points' keys, a bound and the diffusion ring where drawn, and the marker sizes' memory where measured."""
    sized = measure[mem.notna()].dropna().astype(str).unique()
    mem_title = "peak memory\n(marker size, MiB" + (",\n" + "/".join(MEMORY_WORDS.get(m, m) for m in sized)
                                                    if len(sized) else "") + ")"
    extra = [style.bound_handle()] if bounds.any() else []
    if diffusion.any():
        extra.append((Line2D([], [], ls="", marker="o", mfc="none", mec="black", mew=1.2, markersize=11),
                      "ringed: masked diffusion decoder"))
    keys.shown(rows).legend(ax, extra, (mem.dropna().to_numpy(), to_size, mem_title, lambda v: f"{v:,.0f}")
                            if mem.notna().any() else None)


def _words(rows: pd.DataFrame, score: str, note: str, measured, mem: pd.Series, cumulative: pd.Series,
           errors: pd.Series, bounds: pd.Series) -> tuple[list[str], list[str]]:
    """The throughput plot's subtitle lines (the decode conditions, then the marks) and its captions."""
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
    return sub, captions
