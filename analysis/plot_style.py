"""What the seven plots share: colours and markers, axis labels with units, the score column to plot,
number formats, figure and title helpers, label placement and legends (analysis.plots draws the plots).

Figures are matplotlib.figure.Figure objects with their own Agg canvas (no pyplot state), so everything
works headless and in notebooks alike.
"""

from __future__ import annotations

import logging
import math

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from analysis.metrics import (  # noqa: F401 (completed_runs, nll_column re-exported: plots, report, notebook)
    average_members, axis_label, chance_column, completed_runs, higher_is_better, metric, metric_of, name_of,
    nll_column, score_columns, single_task_average, stderr_column, task_names, value_kinds)
from slm.eval.score_lines import Z95, near_chance as _within_noise_of_chance
from slm.metrics import BOUND, EXACT, LM_EVAL

log = logging.getLogger("analysis.plots")  # one logger for the plots and their placeholders


DPI = 150


PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf"]


MARKERS = ["o", "s", "^", "D", "v", "P", "X", "<", ">", "*"]


AXIS_LABELS = {
    "d_model": "hidden size d_model (channels)",
    "n_layers": "depth (layers)",
    "train_flops": "training compute (FLOPs)",
    "flops_per_token": "training FLOPs per token",
    "params_total": "parameters",
    "params_active": "active parameters (per token)",
    "params_non_embedding": "non-embedding parameters",
    "tokens": "training tokens",
    "decode_tokens_per_s": "batch-1 decode speed (tokens/s)",
    "time_to_first_token_s": "time to first token (s)",
    "train_tokens_per_s": "training throughput (tokens/s)",
}
"""Axis labels of the columns plotted against a score (a metric's label and unit are its entry's, slm.metrics)."""


HOLLOW = {"facecolors": "none", "linewidths": 1.4}
"""How every plot draws a point whose value is a bound (bound_rows): hollow, its edge in its colour."""


def scatter(ax, x, y, colour: str, marker: str, hollow=None, s: float = 55, **kwargs) -> None:
    """Points in one colour and marker, those flagged in `hollow` (a bound) drawn hollow: the one way every plot
    draws a bound."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    hollow = np.zeros(len(x), bool) if hollow is None else np.asarray(hollow, bool)
    filled = {"color": colour, "edgecolors": kwargs.pop("edgecolors", "white"),
              "linewidths": kwargs.pop("linewidths", 0.8)}
    for flag in (False, True):
        if (hollow == flag).any():
            ax.scatter(x[hollow == flag], y[hollow == flag], s=s, marker=marker,
                       **({**HOLLOW, "edgecolors": colour} if flag else filled), **kwargs)


def bound_handle() -> tuple:
    """The legend entry of a bound, the same in every plot."""
    return (Line2D([], [], ls="", marker="o", mfc="none", mec="#555555", markersize=7), "hollow: a bound (NELBO)")


def score_label(table: pd.DataFrame, column: str, direction: bool = True) -> str:
    """Axis label of a score column with its unit and which way is better (slm.metrics: its label and unit; a task
    score: the task and its lm-eval metric; a suite average: how many tasks it averages); a metric whose rows hold
    bounds says so (its entry's bound_label where every value is one, its mixed_label where some are). A column
    that is no metric: its AXIS_LABELS label."""
    entry = metric(column)
    kinds = value_kinds(table, column) if entry is not None else set()
    if entry is not None and entry.bound_label and kinds == {BOUND}:
        text = entry.bound_label
    elif entry is not None and entry.mixed_label and kinds == {EXACT, BOUND}:
        text = entry.mixed_label
    elif entry is not None and entry.lm_metric:
        lm = (metric_of(table, column) or "").split(",")[0]
        known = LM_EVAL.get(lm)
        text = f"{name_of(column)}: {known.label if known is not None else lm or 'score'}" + (
            " (fraction)" if known is not None and known.fraction else "")
    elif entry is not None and entry.name == "avg_<suite>":
        members = average_members(table, column)
        text = f"{column[len('avg_'):]} suite: mean " + (f"of {len(members)} task scores" if members else "score")
    elif entry is not None and entry.label:
        text = axis_label(column)
    else:
        text = AXIS_LABELS.get(column, column)
    if direction:
        text += ", higher is better" if higher_is_better(table, column) else ", lower is better"
    return text


def choose_score(table: pd.DataFrame, score: str | None = None) -> tuple[str | None, str]:
    """(score column, note): the requested one, else the study's headline metric (analysis.headline: the first
    metric, suite average, accuracy, validation loss, other task scores, on which the configurations differ
    beyond noise and from chance); note is "" or says why the metric was taken."""
    from analysis.headline import choose_headline

    if score and score not in table:
        raise KeyError(f"no column {score!r} in the results (columns: {', '.join(score_columns(table))})")
    if score:
        return score, ""
    headline = choose_headline(table)
    return headline.column, headline.note


def group_colors(values: pd.Series) -> tuple[dict, dict]:
    keys = sorted(values.dropna().astype(str).unique())
    return ({k: PALETTE[i % len(PALETTE)] for i, k in enumerate(keys)},
            {k: MARKERS[i % len(MARKERS)] for i, k in enumerate(keys)})


def group_column(table: pd.DataFrame) -> str | None:
    """What colours the points: family when it varies, else objective when it varies (causal vs diffusion),
    else family. (A diffusion run is marked apart in the plots that need it: hollow, ringed.)"""
    for column in ("family", "objective"):
        if column in table and table[column].dropna().astype(str).nunique() > 1:
            return column
    return "family" if "family" in table else None


SWEEP_AXES = ("n_layers", "d_model", "context_length", "layer_repeat", "window_hidden", "n_heads")
AXIS_NAMES = {"n_layers": "depth", "d_model": "width", "context_length": "context length",
              "layer_repeat": "layer repeat", "window_hidden": "window MLP", "n_heads": "heads"}


def sweep_axis(rows: pd.DataFrame, exclude: tuple = ()) -> str | None:
    """The axis the sweep varies besides the colour: depth when it varies, else width, else another
    architecture axis (SWEEP_AXES) with 2 to 10 values."""
    for column in SWEEP_AXES:
        if column in rows and column not in exclude:
            values = rows[column].dropna().astype(str)
            if 2 <= values.nunique() <= 10:
                return column
    return None


def _axis_order(value: str):
    try:
        return (0, float(value))
    except ValueError:
        return (1, value)


class PointKeys:
    """Colour by family (group_column) and marker by the swept axis (sweep_axis), from the whole table so every
    plot of a study keys a family and a depth the same way."""

    def __init__(self, table: pd.DataFrame, exclude: tuple = ()):
        self.colour = group_column(table)
        self.colours = group_colors(table[self.colour])[0] if self.colour else {}
        # the marker means one axis in every plot: where a plot's own axis is that one (`exclude`), no marker,
        # rather than another axis (width in one plot and heads in the next)
        marker = sweep_axis(style_rows(table), exclude=(self.colour,))
        self.marker = None if marker in exclude else marker
        values = sorted(set(_axis_text(style_rows(table)[self.marker])) - {""}, key=_axis_order) if self.marker else []
        self.markers = {v: MARKERS[i % len(MARKERS)] for i, v in enumerate(values)}

    def shown(self, rows: pd.DataFrame) -> "PointKeys":
        """The same keys with only the colours and markers that `rows` (the points a plot drew) have: a legend never
        lists a family with no point."""
        import copy

        out = copy.copy(self)
        if self.colour and self.colour in rows:
            present = set(rows[self.colour].astype(str))
            out.colours = {k: v for k, v in self.colours.items() if k in present}
        if self.marker and self.marker in rows:
            present = set(_axis_text(rows[self.marker]))
            out.markers = {k: v for k, v in self.markers.items() if k in present}
        return out

    def colour_of(self, row) -> str:
        return self.colours.get(str(row[self.colour]), PALETTE[0]) if self.colour else PALETTE[0]

    def marker_of(self, row) -> str:
        return self.markers.get(_axis_text(pd.Series([row[self.marker]])).iloc[0], "o") if self.marker else "o"

    def groups(self, rows: pd.DataFrame):
        """(colour, marker, rows) for each colour x marker group of `rows`."""
        colour = rows[self.colour].astype(str) if self.colour else pd.Series("", rows.index)
        marker = _axis_text(rows[self.marker]) if self.marker else pd.Series("", rows.index)
        for (c, m), part in rows.groupby([colour, marker], sort=True):
            yield self.colours.get(c, PALETTE[0]), self.markers.get(m, "o"), part

    def entries(self, extra: list | None = None, colour_heading: str | None = None) -> tuple[list, list, list]:
        """(handles, labels, heading positions) of the key: colour (family) and marker (the swept axis) each under
        a bold heading, then `extra` (handle, label) entries under "also"."""
        handles, labels, heads = [], [], []

        def heading(text):
            heads.append(len(labels))
            handles.append(Line2D([], [], ls="", marker=""))
            labels.append(text)

        if self.colour and self.colours:
            heading(colour_heading or f"{self.colour} (colour)")
            for key, colour in self.colours.items():
                handles.append(Line2D([], [], ls="", marker="o", color=colour, markersize=7))
                labels.append(key)
        if self.marker and self.markers:
            heading(f"{AXIS_NAMES.get(self.marker, self.marker)} (marker)")
            for key, marker in self.markers.items():
                handles.append(Line2D([], [], ls="", marker=marker, color="#555555", markersize=7))
                labels.append(key)
        if extra:
            heading("also")
            for handle, label in extra:
                handles.append(handle)
                labels.append(label)
        return handles, labels, heads

    def legend(self, ax, extra: list | None = None, size_legend=None) -> None:
        """One legend to the right of the axes (entries); the marker-size legend, if any, below it."""
        handles, labels, heads = self.entries(extra)
        first = ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8,
                          framealpha=0.9, borderaxespad=0, handletextpad=0.5)
        for i, text in enumerate(first.get_texts()):
            if i in heads:
                text.set_fontweight("bold")
        if size_legend is not None:
            ax.add_artist(first)
            first.set_clip_on(False)
            _size_legend(ax, *size_legend)


def style_rows(table: pd.DataFrame) -> pd.DataFrame:
    """The completed runs, or every row when none is completed (for keys that stay the same across plots)."""
    rows = completed_runs(table)
    return rows if len(rows) else table


def _axis_text(values: pd.Series) -> pd.Series:
    def one(v):
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return ""
        if isinstance(v, float) and v.is_integer():
            return str(int(v))
        return str(v)
    return values.map(one)


def format_number(value: float) -> str:
    if value is None or not math.isfinite(value):
        return "n/a"
    if float(value).is_integer() and abs(value) < 1e6:
        return f"{int(value)}"
    return f"{value:.3g}"


def si_ticks(value, _pos=None) -> str:
    for scale, suffix in ((1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:g}{suffix}"
    return f"{value:g}"


def new_figure(**kwargs) -> Figure:
    """A Figure with an Agg canvas of its own (no pyplot, no global state)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = Figure(**kwargs)
    FigureCanvasAgg(fig)
    return fig


def settle_layout(fig: Figure) -> None:
    """Run the layout now, so that positions in display space are final (for label placement)."""
    engine = fig.get_layout_engine()
    if engine is not None:
        engine.execute(fig)


def set_title(fig: Figure, title: str, subtitle: str = "") -> None:
    """A one-line title and a short subtitle that says how to read the figure (what colour, markers and lines
    mean); statistics go to the caption (set_caption), not here."""
    fig.suptitle(title + (f"\n{subtitle}" if subtitle else ""), fontsize=11, fontweight="normal")


def set_caption(fig: Figure, *parts: str) -> None:
    """The figure's caption (fig.slm_caption): what the statistics behind it are; the report prints it under
    the figure. Empty parts are dropped."""
    fig.slm_caption = " ".join(p.strip()[0].upper() + p.strip()[1:].rstrip(".") + "." for p in parts
                               if p and p.strip())


def caption(fig: Figure) -> str:
    return getattr(fig, "slm_caption", "")


def figure_text(fig: Figure) -> str:
    """Title, subtitle and caption in one line (what a reader gets from the figure and its caption)."""
    title = fig._suptitle.get_text() if fig._suptitle is not None else ""
    return " ".join((title + " " + caption(fig)).split())


def placeholder(title: str, reason: str, size=(7.5, 3.0)) -> Figure:
    """A figure that says which plot is missing and why: analysis.plots.draw does not save it, and the report and
    slm-plot name it in their one line of what was not drawn."""
    fig = new_figure(figsize=size, layout="constrained")
    ax = fig.add_subplot()
    ax.set_axis_off()
    ax.text(0.5, 0.5, reason, ha="center", va="center", wrap=True, fontsize=10, color="#444444",
            transform=ax.transAxes)
    set_title(fig, f"{title}: not drawn")
    fig.slm_placeholder = reason
    log.info("%s: not drawn: %s", title, reason)
    return fig


def p_text(p: float) -> str:
    return "< 0.001" if p < 0.001 else f"= {p:.2g}"


def wrap_text(text: str, width: int) -> str:
    import textwrap

    return "\n".join(textwrap.fill(line, width) for line in text.split("\n"))


def log2_axis(ax, values) -> None:
    values = sorted({float(v) for v in values if np.isfinite(v) and v > 0})
    if len(values) >= 2 and values[-1] / values[0] >= 4:
        ax.set_xscale("log", base=2)
        ax.set_xticks(values)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _p: format_number(v)))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlim(values[0] / 1.25, values[-1] * 1.25)
    else:
        ax.set_xticks(values)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _p: format_number(v)))


def log_ticks(ax, values) -> None:
    """Log x axis: labelled ticks at 1-2-5 steps when the data span under two decades, else at decades."""
    values = np.asarray(values, float)
    values = values[np.isfinite(values) & (values > 0)]
    span = values.max() / values.min() if len(values) else 1.0
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0) if span < 100 else (1.0,)))
    ax.xaxis.set_minor_locator(LogLocator(base=10, subs=tuple(range(1, 10))))
    ax.xaxis.set_major_formatter(FuncFormatter(si_ticks))
    ax.xaxis.set_minor_formatter(NullFormatter())


def pad_y(ax, frac=0.12) -> None:
    lo, hi = ax.get_ylim()
    span = hi - lo or 1.0
    ax.set_ylim(lo - frac * span, hi + frac * span)


def label_points(ax, x, y, labels, sizes=None, fontsize=7.5) -> None:
    """Labels next to points, each put at whichever of eight spots around its point overlaps least with the
    labels already placed and with the other points (estimated in display space, no renderer needed)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    sizes = np.full(len(x), 40.0) if sizes is None else np.asarray(sizes, float)
    pts = ax.transData.transform(np.column_stack([x, y]))
    scale = ax.figure.dpi / 72.0
    radius = np.sqrt(np.maximum(sizes, 1.0)) / 2 * scale          # marker radius in pixels
    placed: list[tuple[float, float, float, float]] = []
    points = [(px - r, py - r, px + r, py + r) for (px, py), r in zip(pts, radius)]

    def overlap(a, b) -> float:
        w = min(a[2], b[2]) - max(a[0], b[0])
        h = min(a[3], b[3]) - max(a[1], b[1])
        return w * h if w > 0 and h > 0 else 0.0

    axes_box = ax.get_window_extent()
    for i in np.argsort(-pts[:, 1]):
        w = 0.58 * fontsize * len(str(labels[i])) * scale
        h = 1.2 * fontsize * scale
        gap = radius[i] + 2 * scale
        best = None
        for dx, dy, ha, va in ((gap, gap * 0.5, "left", "bottom"), (gap, -gap * 0.5, "left", "top"),
                               (-gap, gap * 0.5, "right", "bottom"), (-gap, -gap * 0.5, "right", "top"),
                               (0, gap, "center", "bottom"), (0, -gap, "center", "top"),
                               (gap, 0, "left", "center"), (-gap, 0, "right", "center")):
            px, py = pts[i][0] + dx, pts[i][1] + dy
            x0 = px if ha == "left" else px - w if ha == "right" else px - w / 2
            y0 = py if va == "bottom" else py - h if va == "top" else py - h / 2
            box = (x0, y0, x0 + w, y0 + h)
            cost = sum(overlap(box, b) for b in placed) * 3
            cost += sum(overlap(box, b) for j, b in enumerate(points) if j != i)
            outside = max(0, axes_box.x0 - box[0]) + max(0, box[2] - axes_box.x1) + \
                max(0, axes_box.y0 - box[1]) + max(0, box[3] - axes_box.y1)
            cost += outside * h * 4
            cx, cy = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
            own = math.hypot(cx - pts[i][0], cy - pts[i][1])
            others = [math.hypot(cx - q[0], cy - q[1]) for j, q in enumerate(pts) if j != i]
            if others and min(others) < own:  # the label would read as another point's
                cost += w * h * 0.75
            if best is None or cost < best[0] - 1e-9:
                best = (cost, dx, dy, ha, va, box)
        _, dx, dy, ha, va, box = best
        placed.append(box)
        ax.annotate(str(labels[i]), (x[i], y[i]), xytext=(dx / scale, dy / scale), textcoords="offset points",
                    ha=ha, va=va, fontsize=fontsize, color="#333333", zorder=5)


def legends_outside(ax, group, size_legend=None) -> None:
    """Group legend and (optionally) the marker-size legend, stacked to the right of the axes."""
    handles, labels = ax.get_legend_handles_labels()
    first = ax.legend(handles, labels, title=group, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8,
                      title_fontsize=8, framealpha=0.9, markerscale=0.7, borderaxespad=0)
    if size_legend is None:
        return
    ax.add_artist(first)
    first.set_clip_on(False)  # add_artist clips to the axes, which also cut it out of a tight bounding box
    _size_legend(ax, *size_legend)


def _size_legend(ax, values, to_size, title, fmt) -> None:
    """The marker-size legend (three sizes: smallest, median, largest), below the legend to the right."""
    values = np.asarray([v for v in values if np.isfinite(v)], float)
    if not len(values):
        return
    picks = sorted({values.min(), float(np.median(values)), values.max()})
    marks = [Line2D([], [], ls="", marker="o", color="#999999", alpha=0.6, markersize=math.sqrt(to_size(v)),
                    label=fmt(v)) for v in picks]
    ax.legend(handles=marks, title=title, loc="lower left", bbox_to_anchor=(1.01, 0.0), fontsize=8,
              title_fontsize=8, labelspacing=1.3, borderpad=0.9, framealpha=0.9, borderaxespad=0)


def column_title(table: pd.DataFrame, column: str) -> str:
    lm = (metric_of(table, column) or "").split(",")[0]
    arrow = " ↑" if higher_is_better(table, column) else " ↓"
    return name_of(column) + (f"\n{LM_EVAL[lm].label if lm in LM_EVAL else lm}" if lm else "") + arrow


def score_columns_to_show(table: pd.DataFrame, tasks: list[str] | None = None) -> list[str]:
    """Score columns for per-task panels and cells: each task's, then the suite averages that hold more
    than one task (a one-task average would repeat its task; an average whose tasks are unknown is kept)."""
    columns = [f"score_{t}" for t in (tasks or task_names(table))]
    if not tasks:
        columns += [c for c in table.columns if c.startswith("avg_") and table[c].notna().any()
                    and not single_task_average(table, c)]
    return columns


# ---------------------------------------------------------------------------------------------- noise, chance

def score_errors(table: pd.DataFrame, column: str) -> pd.Series:
    """Each row's standard error of `column` (lm-eval's for a task, the propagated one for an average); NaN
    where unknown."""
    name = stderr_column(table, column)
    if name is None:
        return pd.Series(np.nan, index=table.index, dtype=float)
    return pd.to_numeric(table[name], errors="coerce").astype(float)


def chance_value(table: pd.DataFrame, column: str) -> float | None:
    """The chance level of a score column (random-guess accuracy of a multiple-choice task, or the mean of an
    average's members'), or None when it has none. One value for the plot: the median over the rows."""
    name = chance_column(table, column)
    if name is None:
        return None
    values = pd.to_numeric(table.loc[pd.to_numeric(table[column], errors="coerce").notna(), name],
                           errors="coerce").dropna()
    return float(values.median()) if len(values) else None


def near_chance(table: pd.DataFrame, column: str) -> pd.Series:
    """Rows whose score is within noise of chance (slm.eval.score_lines.near_chance: score - chance <= 1.96
    stderr, at or below chance when the stderr is unknown). False where there is no chance level or no score."""
    name = chance_column(table, column)
    if name is None or column not in table:
        return pd.Series(False, index=table.index)
    value = pd.to_numeric(table[column], errors="coerce")
    chance = pd.to_numeric(table[name], errors="coerce")
    se = score_errors(table, column).fillna(0.0)
    return (value.notna() & chance.notna() & _within_noise_of_chance(value, chance, se)).astype(bool)


def draw_chance(ax, level: float | None, vertical: bool = False, label: bool = True) -> None:
    """The chance level as a dotted line across the axes (horizontal: score on y; vertical: score on x)."""
    if level is None:
        return
    style = {"color": "#8b0000", "ls": ":", "lw": 1.4, "zorder": 1.5}
    if vertical:
        ax.axvline(level, **style)
        if label:
            ax.text(level, 1.0, f" chance {level:.3g}", transform=ax.get_xaxis_transform(), ha="left", va="bottom",
                    fontsize=8, color="#8b0000", clip_on=False)
    else:
        ax.axhline(level, **style)
        if label:
            ax.text(1.0, level, f"chance {level:.3g} ", transform=ax.get_yaxis_transform(), ha="right",
                    va="bottom", fontsize=8, color="#8b0000")
    lo, hi = ax.get_xlim() if vertical else ax.get_ylim()
    if not lo <= level <= hi:  # keep the line in view
        span = max(hi, level) - min(lo, level)
        lo, hi = min(lo, level) - 0.04 * span, max(hi, level) + 0.04 * span
        (ax.set_xlim if vertical else ax.set_ylim)(lo, hi)


def chance_note(table: pd.DataFrame, column: str, what: str = "runs") -> str:
    """One line for a subtitle: the chance line and how many rows are within noise of it ("" if no chance)."""
    level = chance_value(table, column)
    if level is None:
        return ""
    scored = pd.to_numeric(table[column], errors="coerce").notna()
    near = int(near_chance(table, column)[scored].sum())
    text = f"dotted: chance {level:.3g} (random guess among the choices)"
    if near:
        text += f"; {near} of {int(scored.sum())} {what} within noise of chance (score - chance <= 1.96 stderr)"
    return text


def errorbar_note(table: pd.DataFrame, column: str) -> str:
    """What the error bars are (for a subtitle), or why there are none."""
    se = score_errors(table, column)
    if not se.notna().any():
        return "no error bars: no per-run standard error is recorded for this score"
    if column.startswith("avg_"):
        return "bars: 95% interval (1.96 x stderr propagated from the tasks', assuming independent tasks)"
    return "bars: 95% interval (1.96 x lm-eval stderr)"


def cell_text(value: float) -> str:
    if abs(value) >= 1000:
        return f"{value:.3g}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.3f}"
