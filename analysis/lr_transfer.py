"""Learning-rate transfer: does the best learning rate stay put as the shape changes, under each parametrization?

    curves = lr_curves(table)      # mean validation loss per (study, parametrization, shape, lr), seeds pooled
    best = optima(curves)          # per (study, parametrization, shape): the best lr on the grid, a finer estimate
    moves = shifts(best)           # per (study, parametrization): how far the optimum moved across shapes
    write(table, "out/")           # out/lr_transfer.md + figures/lr_transfer_<study>.png/.svg

A study is one run group (sweeps/lr_transfer_width.yaml, lr_transfer_depth.yaml) whose shape axis is the one
of d_model or n_layers that takes several values. The finer estimate is the vertex of a parabola through the
grid's best point and its two neighbours in log2(lr); a best lr at either end of the grid is flagged (the optimum
may lie beyond it) and never refined. A run that diverged, failed or has no finite loss counts as infinitely bad.
Reads the results table only (slm-collect's columns).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from analysis.document import markdown_table
from analysis.metrics import LOSS, axis_label
from analysis.plot_style import format_number, new_figure

SHAPE_AXES = {"d_model": "width (d_model)", "n_layers": "depth (n_layers)"}


def _study_axis(runs: pd.DataFrame) -> str | None:
    for axis in SHAPE_AXES:
        if axis in runs and runs[axis].nunique(dropna=True) > 1:
            return axis
    return None


def lr_curves(table: pd.DataFrame) -> pd.DataFrame:
    """Rows (study, axis, parametrization, shape, lr, loss, loss_std, seeds, runs): the mean validation loss over
    seeds of every grid point; a point with a run that did not finish with a finite loss has loss = inf."""
    rows = []
    if "sweep" not in table or LOSS not in table:
        return pd.DataFrame(columns=["study", "axis", "parametrization", "shape", "lr", "loss", "loss_std", "seeds",
                                     "runs"])
    scheme = table["parametrization"].fillna("sp") if "parametrization" in table else pd.Series("sp", table.index)
    table = table.assign(parametrization=scheme)
    for study, runs in table.groupby("sweep", sort=True):
        axis = _study_axis(runs)
        if axis is None or "lr" not in runs:
            continue
        for (name, shape, lr), point in runs.groupby(["parametrization", axis, "lr"], sort=True):
            loss = pd.to_numeric(point[LOSS], errors="coerce")
            ok = (point["status"] == "completed") & np.isfinite(loss)
            mean = float(loss[ok].mean()) if ok.all() else math.inf
            std = float(loss[ok].std()) if ok.all() and ok.sum() > 1 else math.nan
            seeds = point["seed"].nunique() if "seed" in point else len(point)
            rows.append({"study": study, "axis": axis, "parametrization": name, "shape": shape, "lr": float(lr),
                         "loss": mean, "loss_std": std, "seeds": seeds, "runs": len(point)})
    return pd.DataFrame(rows)


def _vertex(lrs: np.ndarray, losses: np.ndarray, i: int) -> float:
    """The lr at the vertex of the parabola through points i-1, i, i+1 in log2(lr) (the grid's lr if flat)."""
    x = np.log2(lrs[i - 1:i + 2])
    a, b, _ = np.polyfit(x, losses[i - 1:i + 2], 2)
    if a <= 0:
        return float(lrs[i])
    return float(2 ** np.clip(-b / (2 * a), x[0], x[-1]))


def optima(curves: pd.DataFrame) -> pd.DataFrame:
    """Per (study, parametrization, shape): best_lr (grid), best_loss, lr_estimate (parabola vertex; the grid's lr
    at an edge), edge (the best lr is the smallest or largest tried), runner_up_gap (loss of the second-best lr
    minus the best's: how flat the minimum is)."""
    rows = []
    for (study, axis, name, shape), curve in curves.groupby(["study", "axis", "parametrization", "shape"], sort=True):
        curve = curve.sort_values("lr")
        lrs, losses = curve["lr"].to_numpy(float), curve["loss"].to_numpy(float)
        if not np.isfinite(losses).any():
            rows.append({"study": study, "axis": axis, "parametrization": name, "shape": shape, "best_lr": math.nan,
                         "best_loss": math.inf, "lr_estimate": math.nan, "edge": True, "runner_up_gap": math.nan,
                         "grid": len(lrs)})
            continue
        i = int(np.nanargmin(np.where(np.isfinite(losses), losses, np.inf)))
        edge = i in (0, len(lrs) - 1)
        finite = np.isfinite(losses[max(i - 1, 0):i + 2]).all()
        estimate = float(lrs[i]) if edge or not finite else _vertex(lrs, losses, i)
        others = np.delete(losses, i)
        rows.append({"study": study, "axis": axis, "parametrization": name, "shape": shape, "best_lr": float(lrs[i]),
                     "best_loss": float(losses[i]), "lr_estimate": estimate, "edge": bool(edge),
                     "runner_up_gap": float(np.min(others) - losses[i]) if len(others) else math.nan,
                     "grid": len(lrs)})
    return pd.DataFrame(rows)


def shifts(best: pd.DataFrame) -> pd.DataFrame:
    """Per (study, parametrization): how far the optimum moved across the shapes, as factors largest / smallest
    of the grid optima (a power of 2) and of the finer estimates; `edges` counts shapes whose optimum is at the
    grid's end (then the factor is a lower bound at most)."""
    rows = []
    for (study, axis, name), group in best.groupby(["study", "axis", "parametrization"], sort=True):
        grid, est = group["best_lr"].dropna(), group["lr_estimate"].dropna()
        rows.append({"study": study, "axis": axis, "parametrization": name, "shapes": len(group),
                     "grid_factor": float(grid.max() / grid.min()) if len(grid) else math.nan,
                     "estimate_factor": float(est.max() / est.min()) if len(est) else math.nan,
                     "edges": int(group["edge"].sum()),
                     "trend": _trend(group)})
    return pd.DataFrame(rows)


def _trend(group: pd.DataFrame) -> str:
    """Which way the estimated optimum moves as the shape grows: down, up or flat (within a factor sqrt(2))."""
    group = group.dropna(subset=["lr_estimate"]).sort_values("shape")
    if len(group) < 2:
        return ""
    first, last = group["lr_estimate"].iloc[0], group["lr_estimate"].iloc[-1]
    ratio = last / first
    return "flat" if 1 / math.sqrt(2) <= ratio <= math.sqrt(2) else ("down" if ratio < 1 else "up")


def plot_study(curves: pd.DataFrame, best: pd.DataFrame, study: str) -> Figure:
    """Validation loss against lr, one panel per parametrization, one line per shape (the μP paper's Figure 1)."""
    curves, best = curves[curves["study"] == study], best[best["study"] == study]
    schemes = list(dict.fromkeys(curves["parametrization"]))
    axis = curves["axis"].iloc[0]
    shapes = sorted(curves["shape"].unique())
    fig = new_figure(figsize=(4.2 * len(schemes), 3.8), layout="constrained")
    axes = fig.subplots(1, len(schemes), sharey=True, squeeze=False)[0]
    import matplotlib

    cmap = matplotlib.colormaps["viridis"]
    finite = curves["loss"][np.isfinite(curves["loss"])]
    low = float(finite.min()) if len(finite) else 0.0
    high = float(min(finite.max(), low + 1.2)) if len(finite) else 1.0
    for ax, name in zip(axes, schemes):
        for k, shape in enumerate(shapes):
            color = cmap(k / max(1, len(shapes) - 1) * 0.9)
            curve = curves[(curves["parametrization"] == name) & (curves["shape"] == shape)].sort_values("lr")
            shown = curve["loss"].where(np.isfinite(curve["loss"]))
            ax.plot(curve["lr"], shown, marker="o", ms=3.5, color=color, label=f"{format_number(shape)}")
            point = best[(best["parametrization"] == name) & (best["shape"] == shape)]
            if len(point) and np.isfinite(point["best_loss"].iloc[0]):
                ax.plot(point["best_lr"], point["best_loss"], marker="*", ms=12, color=color, mec="black", mew=0.6)
        ax.set_xscale("log", base=2)
        ax.set_title(name)
        ax.set_xlabel("peak learning rate (train.lr)")
        ax.grid(alpha=0.3)
        ax.set_ylim(low - 0.05 * (high - low), high)
    axes[0].set_ylabel(axis_label(LOSS))
    axes[-1].legend(title=SHAPE_AXES.get(axis, axis), fontsize=8, title_fontsize=8, loc="upper right")
    fig.suptitle(f"{study}: loss against learning rate ({SHAPE_AXES.get(axis, axis)}; * best lr on the grid)",
                 fontsize=10)
    return fig


def write(table: pd.DataFrame, out_dir: str | os.PathLike) -> Path:
    """out_dir/lr_transfer.md (optimal lr per shape, how far it moves) and figures/lr_transfer_<study>.png/.svg."""
    out = Path(out_dir)
    (out / "figures").mkdir(parents=True, exist_ok=True)
    curves = lr_curves(table)
    if curves.empty:
        raise ValueError("no learning-rate study in the table: run groups whose runs vary lr and one of "
                         f"{', '.join(SHAPE_AXES)} (make lr-transfer)")
    best = optima(curves)
    moves = shifts(best)
    text = ["# Learning-rate transfer", "",
            "Validation NLL after training at each learning rate of the grid; seeds pooled (mean). best lr: the grid's "
            "argmin; estimate: the vertex of a parabola through it and its neighbours in log2(lr); edge: the best lr is "
            "the grid's smallest or largest (the optimum may lie beyond: widen the grid); gap: the second-best lr's loss "
            "minus the best's (how flat the minimum is); seeds, seed sd: the seeds at the best lr and their standard deviation.",
            ""]
    for study in sorted(curves["study"].unique()):
        fig = plot_study(curves, best, study)
        for ext in ("png", "svg"):
            fig.savefig(out / "figures" / f"lr_transfer_{study}.{ext}", dpi=150)
        axis = curves[curves["study"] == study]["axis"].iloc[0]
        shown = best[best["study"] == study].copy()
        points = curves[curves["study"] == study].set_index(["parametrization", "shape", "lr"])
        at_best = [points.loc[(r.parametrization, r.shape, r.best_lr)] if (r.parametrization, r.shape, r.best_lr)
                   in points.index else None for r in shown.itertuples()]
        shown["seeds"] = [0 if p is None else int(p["seeds"]) for p in at_best]
        shown["seed sd"] = ["" if p is None or not np.isfinite(p["loss_std"]) else f"{p['loss_std']:.4f}"
                            for p in at_best]
        shown = shown.rename(columns={"shape": axis, "best_lr": "best lr", "best_loss": "loss at best",
                                      "lr_estimate": "estimate", "runner_up_gap": "gap"})
        shown["best lr"] = shown["best lr"].map(lambda v: f"{v:.3g}")
        shown["estimate"] = shown["estimate"].map(lambda v: f"{v:.3g}")
        shown["loss at best"] = shown["loss at best"].map(lambda v: f"{v:.4f}")
        shown["gap"] = shown["gap"].map(lambda v: f"{v:.4f}")
        shown["edge"] = shown["edge"].map(lambda v: "edge" if v else "")
        text += [f"## {study}: {SHAPE_AXES.get(axis, axis)}", "",
                 markdown_table(shown[["parametrization", axis, "best lr", "estimate", "loss at best", "gap", "edge",
                                       "seeds", "seed sd"]]), ""]
        moved = moves[moves["study"] == study].copy()
        for col in ("grid_factor", "estimate_factor"):
            moved[col] = moved[col].map(lambda v: f"{v:.2f}x")
        text += ["How far the optimum moved across the shapes (largest / smallest optimal lr):", "",
                 markdown_table(moved[["parametrization", "shapes", "grid_factor", "estimate_factor", "trend",
                                       "edges"]].rename(columns={"grid_factor": "on the grid",
                                                                 "estimate_factor": "estimated",
                                                                 "trend": "as the shape grows",
                                                                 "edges": "optima at an edge"})), "",
                 f"![loss against lr](figures/lr_transfer_{study}.png)", ""]
    path = out / "lr_transfer.md"
    path.write_text("\n".join(text))
    return path
