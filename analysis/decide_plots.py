"""The figures of a ladder (slm-decide --plot, the report's Rankings across scale section): decision accuracy against
the share of the target's compute (DataDecide's figure) and the rank flow (each configuration's rank at each rung)."""

from __future__ import annotations

import pandas as pd

from analysis.decide import DecideResult, _num, ranks

MARKERS = ("o", "s", "^", "D", "v", "P")
STYLES = ("-", "--", "-.", ":")


def _log_axis(ax) -> None:
    """A log x axis labelled in plain numbers (1, 2, 5, 10, 20, 50, 100), no minor labels."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.set_xscale("log")
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())


def accuracy_plot(result: DecideResult, level: float | None = 0.8):
    """Decision accuracy against the rung's share of the target's compute (the rung itself where train_flops is
    missing), one line per proxy with its 95% interval drawn from its low to its high end (a percentile interval may
    leave out its point), the noise ceiling dotted and `level` dashed: the figure DataDecide draws. A proxy whose
    points are another's is said in the legend (the two lines coincide); a noise ceiling of 0 is said, not drawn on
    the axis. Returns a matplotlib Figure (its own Agg canvas)."""
    from analysis.plot_style import new_figure

    fig = new_figure(figsize=(6.4, 4.2))
    ax = fig.add_subplot()
    by_share = all(r.share is not None for r in result.rows)
    drawn: dict = {}
    for i, proxy in enumerate(result.proxies):
        rows = sorted((r for r in result.rows if r.proxy == proxy), key=lambda r: (r.share or 0, r.rung))
        if not rows:
            continue
        x = [100 * r.share if by_share else r.rung for r in rows]
        y = [r.accuracy for r in rows]
        points = tuple(zip(x, y, (r.low for r in rows), (r.high for r in rows)))
        same = drawn.setdefault(points, proxy)
        label = proxy if same == proxy else f"{proxy} (the same points as {same}: the lines coincide)"
        line, = ax.plot(x, y, marker=MARKERS[i % len(MARKERS)], linestyle=STYLES[i % len(STYLES)], label=label,
                        alpha=0.85)
        spans = [(xi, r.low, r.high) for xi, r in zip(x, rows) if r.low is not None]
        if spans:
            ax.vlines([s[0] for s in spans], [s[1] for s in spans], [s[2] for s in spans], color=line.get_color(),
                      alpha=0.85)
            ax.plot([s[0] for s in spans] * 2, [s[1] for s in spans] + [s[2] for s in spans], linestyle="none",
                    marker="_", markersize=8, color=line.get_color(), alpha=0.85)
    if result.ceiling:
        ax.axhline(result.ceiling, color="black", linestyle=":", linewidth=1,
                   label=f"noise ceiling ({result.truth} at the target)")
    elif result.ceiling == 0:
        ax.plot([], [], color="black", linestyle=":", linewidth=1,
                label=f"noise ceiling 0 ({result.truth} at the target: seeds disagree on every pair; not drawn)")
    if level is not None:
        ax.axhline(level, color="grey", linestyle="--", linewidth=1, label=f"level {level:g}")
    _log_axis(ax)
    ax.set_xlabel("% of the target's training compute" if by_share else f"rung ({result.rung})")
    ax.set_ylabel("decision accuracy")
    ax.set_ylim(0, 1.05)
    ax.set_title(f"Decision accuracy against {result.truth} at {result.rung} = {_num(result.target)}")
    ax.legend(fontsize=8)
    return fig


def rank_flow(ladder: pd.DataFrame, rung: str = "rung", shares: dict | None = None):
    """Each configuration's rank (1: best mean value) at each rung of a ladder_table, one line per configuration: where
    the order changes on the way up. x: the rung's share of the top rung's compute where `shares` gives it, else the
    rung. Returns a matplotlib Figure."""
    from analysis.plot_style import new_figure

    table = ranks(ladder)
    fig = new_figure(figsize=(6.4, 4.2))
    ax = fig.add_subplot()
    rungs = list(table.columns)
    x = [100 * shares[r] if shares and shares.get(r) is not None else r for r in rungs]
    by_share = bool(shares) and all(shares.get(r) is not None for r in rungs)
    for name, row in table.iterrows():
        ax.plot(x, row.values, marker="o", label=str(name))
        last = row.dropna()
        if len(last):
            ax.annotate(str(name), (x[rungs.index(last.index[-1])], last.iloc[-1]), xytext=(4, 0),
                        textcoords="offset points", va="center", fontsize=8)
    _log_axis(ax)
    ax.invert_yaxis()
    ax.set_yticks(range(1, len(table) + 1))
    ax.set_xlabel("% of the top rung's training compute" if by_share else f"rung ({rung})")
    ax.set_ylabel("rank (1: best)")
    ax.set_title(f"Rank of each configuration at each rung ({rung})")
    ax.legend(fontsize=8, loc="best")
    return fig
