"""The heatmap: configurations x tasks, coloured by rank within each task, each cell's value (± its 95% interval)
written in it."""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

import analysis.plot_style as style
from analysis.metrics import bound_rows, higher_is_better
from analysis.tiers import units_of
from slm.eval.score_lines import near_chance
from slm.metrics import LOSS

log = logging.getLogger(__name__)


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
    found = _grid(table, rows, columns, keys, style.choose_score(rows, score)[0], max_rows)
    if found is None:
        return style.placeholder("Per-task heatmap", "no completed run has a score")
    grid, spread, ranks, chance, bounded = found
    nr, nc = grid.shape
    two_lines = bool(np.isfinite(spread.to_numpy(float)).any())
    fig = style.new_figure(figsize=(max(6.0, 1.25 * nc + 4.0), 1.6 + (0.42 if two_lines else 0.3) * nr),
                           layout="constrained")
    ax = fig.add_subplot()
    image = ax.imshow(ranks.to_numpy(float), aspect="auto", cmap="viridis", vmin=0, vmax=1)
    near_cells, bound_cells = _cells(ax, grid, spread, ranks, chance, bounded, two_lines)
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


def _grid(table: pd.DataFrame, rows: pd.DataFrame, columns: list[str], keys, order_by: str | None, max_rows: int):
    """(values, their standard errors, ranks within each task (1 = best), each task's chance level, the cells that
    are bounds) per configuration (seeds pooled) x task, best on `order_by` first, at most `max_rows`
    configurations; None where no completed run has a score."""
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
        return None
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
    return grid, spread.loc[grid.index], ranks, chance, bounded


def _cells(ax, grid: pd.DataFrame, spread: pd.DataFrame, ranks: pd.DataFrame, chance: dict, bounded: dict,
           two_lines: bool) -> tuple[int, int]:
    """Each cell's value (≤ for a bound, ± its 95% interval, ° within noise of chance); (cells near chance, bound
    cells)."""
    near_cells = bound_cells = 0
    nr, nc = grid.shape
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
    return near_cells, bound_cells
