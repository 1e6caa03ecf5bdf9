"""The study's plots (seven kinds), from a results table (analysis.collect). Matplotlib, no display needed. One file
per kind (analysis/plots/tiers.py, threshold.py, depth.py, throughput.py, pareto.py, heatmap.py, lr.py); this one
draws them by name, saves them and says which were drawn; analysis.plot_style holds what they share.

    fig = plot_tiers(table)                                  # a matplotlib Figure (analysis.plots.tiers)
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
import os
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

import analysis.plot_style as style
from analysis.plots import depth, heatmap, lr, pareto, threshold, throughput, tiers

log = logging.getLogger(__name__)

KINDS = ("tiers", "threshold", "lr", "depth", "throughput", "pareto", "heatmap")
FORMATS = ("png", "svg")


PLOTTERS = {"tiers": tiers.plot_tiers, "threshold": threshold.plot_threshold, "depth": depth.plot_depth,
            "throughput": throughput.plot_throughput, "pareto": pareto.plot_pareto, "heatmap": heatmap.plot_heatmap,
            "lr": lr.plot_lr}
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
