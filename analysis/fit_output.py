"""A scaling-law fit's outputs (slm-fit): fit.json (atomic), fit.png, the summary printed, the allocation table, and
reading fit.json back (slm-plan). The fit itself is analysis.fit.

    result = fit(fit_data(table))               # analysis.fit
    write(result, "out/")                       # out/fit.json and out/fit.png
    print(summary(result))
"""

from __future__ import annotations

import math
import os
import warnings
from pathlib import Path

import numpy as np
from matplotlib.ticker import FuncFormatter

import analysis.plot_style as style
from analysis.fit import BOUNDS, LAW, NAMES, FitResult, on_bound, optimal, predict
from analysis.metrics import LOSS, axis_label
from analysis.readers import BadFile, is_number, read_json, shown




def _clean(value):
    """JSON-safe: NaN/inf -> None, numpy scalars -> Python numbers."""
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [_clean(v) for v in value]
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    return value


def allocation(result: FitResult, computes=None) -> list[dict]:
    """Rows per compute value: approach 3's N*, D* with intervals, tokens per parameter, predicted loss; approach 2's
    N_opt, D_opt (exp(const) C^a) with intervals where available."""
    computes = result.compute_grid() if computes is None else np.asarray(computes, float)
    k = result.data.flops_per_param_token
    draws = result.sample_laws()
    rows = []
    for c in computes:
        n, d = optimal(result.law, c, k)
        row = {"C": float(c), "N": float(n), "D": float(d), "tokens_per_param": float(d / n),
               "L": float(predict(result.law, n, d)), "beyond_data": bool(c > result.data.C.max() * 1.0001)}
        if len(draws["E"]):
            ns, ds = optimal(draws, c, k)
            row["N_interval"], row["D_interval"] = result.interval(ns), result.interval(ds)
            row["L_interval"] = result.interval(predict(draws, ns, ds))
        for key, name in (("a", "N2"), ("b", "D2")):
            if result.a2.get(key) is not None:
                row[name] = float(math.exp(result.a2[f"{key}_const"]) * c ** result.a2[key])
                j = 0 if key == "a" else 2
                with np.errstate(over="ignore", invalid="ignore"):
                    values = np.exp(result.a2_samples[:, j + 1]) * c ** result.a2_samples[:, j]
                row[f"{name}_interval"] = result.interval(values)
        rows.append(row)
    return rows


def _share(exponent: float, law: dict) -> float:
    """exponent / (alpha + beta): the compute-optimal exponents a and b; NaN when both exponents are 0 (no optimum)."""
    total = law["alpha"] + law["beta"]
    return exponent / total if total > 0 else math.nan


def to_json(result: FitResult, keep: int = 200) -> dict:
    """fit.json's content."""
    draws = result.samples[np.all(np.isfinite(result.samples), axis=1)][:keep]
    law, alpha, beta = result.law, result.samples[:, 3], result.samples[:, 4]
    with np.errstate(divide="ignore", invalid="ignore"):
        a_draws, b_draws = beta / (alpha + beta), alpha / (alpha + beta)
    approach3 = {
        "law": LAW, "constants": law,
        "intervals": {name: result.interval(result.samples[:, i]) for i, name in enumerate(NAMES)},
        "a": _share(law["beta"], law), "b": _share(law["alpha"], law),
        "a_interval": result.interval(a_draws), "b_interval": result.interval(b_draws),
        "objective": result.objective, "at_bound": result.at_bound,
        "draws": int(len(result.samples)), "failed_draws": int((~np.all(np.isfinite(result.samples), axis=1)).sum()),
        "draws_on_bound": int(on_bound(result.samples).sum()),
        "samples": {name: [float(f"{v:.6g}") for v in draws[:, i]] for i, name in enumerate(NAMES)},
    }
    a2 = dict(result.a2)
    a2["a_interval"] = result.interval(result.a2_samples[:, 0])
    a2["b_interval"] = result.interval(result.a2_samples[:, 2])
    a2["draws_with_a"] = int(np.isfinite(result.a2_samples[:, 0]).sum())
    a2["draws_with_b"] = int(np.isfinite(result.a2_samples[:, 2]).sum())
    data = result.data
    return _clean({
        "kind": "slm-fit", "version": 1, "law": LAW, "approach3": approach3, "approach2": a2,
        "flops_per_param_token": data.flops_per_param_token, "compute_convention": data.compute_source,
        "N": data.params_column, "D": "tokens", "L": f"{LOSS} (nats/token)",
        "allocation": allocation(result),
        "data": [{"run": r, "N": n, "D": d, "L": l, "C": c}
                 for r, n, d, l, c in zip(data.runs, data.N, data.D, data.L, data.C)],
        "skipped": data.skipped, "mixed": data.mixed, "settings": result.settings,
    })


def _fmt(value, digits: int = 4) -> str:
    if value is None or not isinstance(value, (int, float)) or not math.isfinite(value):
        return "n/a"
    return f"{value:.{digits}g}"


def _interval(pair, digits: int = 3) -> str:
    if not pair or any(v is None or not math.isfinite(v) for v in pair):
        return "n/a"
    return f"[{_fmt(pair[0], digits)}, {_fmt(pair[1], digits)}]"


def summary(result: FitResult, content: dict | None = None) -> str:
    """The text slm-fit prints: constants with intervals, the exponents of both approaches, the allocation."""
    content = content or to_json(result)
    data, a3, a2 = result.data, content["approach3"], content["approach2"]
    lines = [f"{len(data.L)} completed runs: N = {data.params_column} ({len(np.unique(data.N))} sizes, "
             f"{_fmt(data.N.min(), 3)}..{_fmt(data.N.max(), 3)}), D = tokens ({len(np.unique(data.D))} counts, "
             f"{_fmt(data.D.min(), 3)}..{_fmt(data.D.max(), 3)}), L = {LOSS} (nats/token)"]
    if data.skipped:
        lines.append("left out: " + ", ".join(f"{n} {why}" for why, n in data.skipped.items()))
    for name, values in data.mixed.items():
        shown = ", ".join(values[:6]) + (", ..." if len(values) > 6 else "")
        lines.append(f"warning: the runs differ in {name} ({shown}): one law assumes one architecture and data; "
                     "fit one sweep or family at a time")
    ok = a3["draws"] - a3["failed_draws"]
    lines += ["", f"approach 3: {LAW}  (Huber delta {result.settings['huber_delta']:g} on log L, L-BFGS; "
              f"95% bootstrap intervals over runs, {ok} of {a3['draws']} draws)",
              f"  {'constant':<24}{'estimate':>12}   95% interval"]
    for name in NAMES:
        lines.append(f"  {name:<24}{_fmt(a3['constants'][name]):>12}   {_interval(a3['intervals'][name])}")
    lines.append(f"  {'a = beta/(alpha+beta)':<24}{_fmt(a3['a']):>12}   {_interval(a3['a_interval'])}   N* ~ C^a")
    lines.append(f"  {'b = alpha/(alpha+beta)':<24}{_fmt(a3['b']):>12}   {_interval(a3['b_interval'])}   D* ~ C^b")
    if a3["at_bound"]:
        lines.append(f"  warning: {', '.join(a3['at_bound'])} at its fitting bound (E >= {math.exp(BOUNDS[0][0]):.3g}, "
                     f"exponents in [{BOUNDS[3][0]:g}, {BOUNDS[3][1]:g}]): the data do not pin it down")
    if a3["draws_on_bound"] > 0.05 * max(ok, 1):
        lines.append(f"  warning: {a3['draws_on_bound']} of {ok} bootstrap draws ended on a fitting bound (E near 0, or "
                     "an exponent at 0 or 3): the intervals are wide because the data allow degenerate fits")
    groups = a2["groups"]
    lines += ["", f"approach 2: IsoFLOP parabolas, {len(groups)} compute groups (runs within {a2['tol']:g}x), "
              f"{a2['a_groups']} with a minimum in N, {a2['b_groups']} in D"]
    for g in groups:
        if g["runs"] >= 3:
            what = (f"N_opt {_fmt(g['N_opt'], 3)}" if g["N_opt"] else f"N: {g['N_note']}") + "; " + (
                f"D_opt {_fmt(g['D_opt'], 3)}" if g["D_opt"] else f"D: {g['D_note']}")
            lines.append(f"  C {_fmt(g['C'], 3):>9}  {g['runs']} runs, {g['sizes']} sizes: {what}")
    if a2["a"] is not None:
        lines.append(f"  a = {_fmt(a2['a'])} {_interval(a2['a_interval'])}   (N_opt ~ C^a; interval over the "
                     f"{a2['draws_with_a']} draws where approach 2 could be fitted)")
    else:
        lines.append("  a: not available (needs >= 2 compute groups whose parabola has its minimum among the sizes)")
    if a2["b"] is not None:
        lines.append(f"  b = {_fmt(a2['b'])} {_interval(a2['b_interval'])}   (D_opt ~ C^b; interval over the "
                     f"{a2['draws_with_b']} draws where approach 2 could be fitted)")
    else:
        lines.append("  b: not available (needs >= 2 compute groups whose parabola has its minimum among the token "
                     "counts)")
    lines += ["", f"compute-optimal allocation under C = {_fmt(data.flops_per_param_token, 3)} N D "
              f"(compute: {data.compute_source})",
              f"  {'C (FLOPs)':>10}  {'N* (approach 3)':>28}  {'D* (approach 3)':>28}  {'D*/N*':>7}  "
              f"{'L*':>6}  {'N_opt (approach 2)':>28}"]
    for row in content["allocation"]:
        note = "  (10x beyond the data)" if row["beyond_data"] else ""
        n2 = f"{_fmt(row['N2'], 3)} {_interval(row.get('N2_interval'), 2)}" if "N2" in row else "n/a"
        lines.append(f"  {_fmt(row['C'], 3):>10}  {_fmt(row['N'], 3) + ' ' + _interval(row.get('N_interval'), 2):>28}"
                     f"  {_fmt(row['D'], 3) + ' ' + _interval(row.get('D_interval'), 2):>28}  "
                     f"{_fmt(row['tokens_per_param'], 3):>7}  {_fmt(row['L'], 3):>6}  {n2:>28}{note}")
    return "\n".join(lines)


def plot(result: FitResult):
    """Three panels: L against N with one curve per token count; L against compute with the compute-optimal
    frontier; N_opt against compute (both approaches). Shaded: 95% bootstrap bands; dashed region: extrapolation
    (up to 10x the data's largest N and compute)."""
    data, law, draws = result.data, result.law, result.sample_laws()
    fig = style.new_figure(figsize=(15, 4.8), layout="constrained")
    axes = fig.subplots(1, 3)
    k = data.flops_per_param_token

    def band(ax, x, values, color):
        values = np.where(np.isfinite(values), values, np.nan)
        if values.shape[0] >= 10 and np.isfinite(values).any():
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN column: no band there
                lo, hi = np.nanpercentile(values, [2.5, 97.5], axis=0)
            ax.fill_between(x, lo, hi, color=color, alpha=0.18, lw=0)

    # 1: L against N, a curve per token count
    ax = axes[0]
    tokens = np.unique(data.D)
    shown = tokens if len(tokens) <= 8 else np.exp(np.linspace(np.log(tokens[0]), np.log(tokens[-1]), 6))
    n_grid = np.exp(np.linspace(np.log(data.N.min() / 1.5), np.log(data.N.max() * 10), 120))
    for i, d in enumerate(shown):
        color = style.PALETTE[i % len(style.PALETTE)]
        near = np.abs(np.log(data.D) - np.log(d)) == np.min(np.abs(np.log(data.D)[:, None] - np.log(shown)[None, :]),
                                                            axis=1)
        ax.scatter(data.N[near], data.L[near], color=color, s=22, zorder=3, label=f"D = {d:.3g}")
        ax.plot(n_grid, predict(law, n_grid, d), color=color, lw=1.3)
        if len(draws["E"]):
            band(ax, n_grid, predict({k_: v[:, None] for k_, v in draws.items()}, n_grid[None, :], d), color)
    ax.axvspan(data.N.max(), n_grid[-1], color="#eeeeee", zorder=0)
    ax.set_xscale("log")
    style.log_ticks(ax, n_grid)
    ax.set_xlabel(f"N: {style.AXIS_LABELS.get(data.params_column, data.params_column)}")
    ax.set_ylabel(axis_label(LOSS))
    ax.legend(fontsize=7.5, title="tokens", title_fontsize=8)
    ax.set_title("loss against model size (grey: extrapolation)", fontsize=9)

    # 2: L against compute, the compute-optimal frontier
    ax = axes[1]
    c_grid = np.exp(np.linspace(np.log(data.C.min() / 2), np.log(data.C.max() * 10), 120))
    n_opt, d_opt = optimal(law, c_grid, k)
    ax.scatter(data.C, data.L, c="#777777", s=18, zorder=3, label="runs")
    ax.plot(c_grid, predict(law, n_opt, d_opt), color=style.PALETTE[0], lw=1.6, label="approach 3: compute-optimal L*")
    if len(draws["E"]):
        ns, ds = optimal({k_: v[:, None] for k_, v in draws.items()}, c_grid[None, :], k)
        band(ax, c_grid, predict({k_: v[:, None] for k_, v in draws.items()}, ns, ds), style.PALETTE[0])
    minima = [g for g in result.a2["groups"] if g["N_opt"] is not None]
    if minima:
        ax.scatter([g["C"] for g in minima], [g["L_opt"] for g in minima], marker="D", color=style.PALETTE[1], s=30,
                   zorder=4, label="approach 2: IsoFLOP minima")
    ax.axvspan(data.C.max(), c_grid[-1], color="#eeeeee", zorder=0)
    ax.set_xscale("log")
    style.log_ticks(ax, c_grid)
    ax.set_xlabel(style.AXIS_LABELS["train_flops"])
    ax.set_ylabel(axis_label(LOSS))
    ax.legend(fontsize=7.5)
    ax.set_title("loss against compute", fontsize=9)

    # 3: N_opt against compute
    ax = axes[2]
    ax.plot(c_grid, n_opt, color=style.PALETTE[0], lw=1.6, label=f"approach 3: a = {_share(law['beta'], law):.3f}")
    if len(draws["E"]):
        band(ax, c_grid, ns, style.PALETTE[0])
    if minima:
        ax.scatter([g["C"] for g in minima], [g["N_opt"] for g in minima], marker="D", color=style.PALETTE[1], s=30,
                   zorder=4, label="approach 2: IsoFLOP minima")
    if result.a2.get("a") is not None:
        ax.plot(c_grid, np.exp(result.a2["a_const"]) * c_grid ** result.a2["a"], color=style.PALETTE[1], lw=1.2,
                ls="--", label=f"approach 2: a = {result.a2['a']:.3f}")
        with np.errstate(over="ignore", invalid="ignore"):
            s = result.a2_samples
            s = s[np.isfinite(s[:, 0])]
            band(ax, c_grid, np.exp(s[:, 1:2]) * c_grid[None, :] ** s[:, 0:1], style.PALETTE[1])
    ax.scatter(data.C, data.N, c="#bbbbbb", s=10, zorder=2, label="runs")
    ax.axvspan(data.C.max(), c_grid[-1], color="#eeeeee", zorder=0)
    ax.set_xscale("log")
    style.log_ticks(ax, c_grid)
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(style.si_ticks))
    ax.set_xlabel(style.AXIS_LABELS["train_flops"])
    ax.set_ylabel(f"compute-optimal N ({style.AXIS_LABELS.get(data.params_column, data.params_column)})")
    ax.legend(fontsize=7.5)
    ax.set_title("compute-optimal model size", fontsize=9)

    ok = len(draws["E"])
    style.set_title(fig, f"Scaling-law fit: {LAW}",
                    f"E={law['E']:.3g}, A={law['A']:.3g}, B={law['B']:.3g}, alpha={law['alpha']:.3g}, "
                    f"beta={law['beta']:.3g} (approach 3); bands: 95% bootstrap over runs ({ok} draws); "
                    f"C = {k:.3g} N D")
    return fig


def write(result: FitResult, out_dir: str | os.PathLike, keep: int = 200) -> tuple[Path, Path, dict]:
    """out_dir/fit.json (atomic) and out_dir/fit.png; returns their paths and fit.json's content."""
    from analysis.plots import save
    from slm.runs.record import write_json_atomic

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    content = to_json(result, keep)
    path = out_dir / "fit.json"
    write_json_atomic(path, content)  # slm.atomic: a temporary file beside it, fsync, rename
    png = save(plot(result), out_dir, "fit", formats=("png",))[0]
    return path, png, content


def load_fit(path: str | os.PathLike) -> dict:
    """A fit.json written by slm-fit (its directory also accepted): FileNotFoundError when there is none, else
    BadFile (a ValueError, one line naming the file and the field) for one that cannot be read or planned
    with: approach3.constants finite numbers, approach3.samples lists of numbers (null: a failed draw),
    flops_per_param_token a positive number when present."""
    path = Path(path)
    if path.is_dir():
        path = path / "fit.json"
    if not path.exists():
        raise FileNotFoundError(f"no such file: {path}")
    content = read_json(path, dict)
    if content.get("kind") != "slm-fit" or "approach3" not in content:
        raise BadFile(f"{path}: not a fit.json written by slm-fit (no \"kind\": \"slm-fit\" with an approach3)")

    def bad(field: str, value, what: str) -> BadFile:
        return BadFile(f"{path}: {field} is {shown(value)}, not {what}")

    a3 = content["approach3"]
    if not isinstance(a3, dict) or not isinstance(a3.get("constants"), dict):
        field, value = ("approach3", a3) if not isinstance(a3, dict) else ("approach3.constants", a3.get("constants"))
        raise bad(field, value, f"an object with {', '.join(NAMES)}")
    for name in NAMES:
        if not is_number(a3["constants"].get(name), finite=True):
            raise bad(f"approach3.constants.{name}", a3["constants"].get(name), "a finite number")
    samples = a3.get("samples") or {}
    if not isinstance(samples, dict):
        raise bad("approach3.samples", samples, f"an object of {', '.join(NAMES)} -> draws")
    for name, draws in samples.items():
        if not isinstance(draws, list) or not all(v is None or is_number(v) for v in draws):
            raise bad(f"approach3.samples.{name}", draws, "a list of numbers")
    k = content.get("flops_per_param_token")
    if k is not None and not (is_number(k, finite=True) and k > 0):
        raise bad("flops_per_param_token", k, "a positive number")
    return content
