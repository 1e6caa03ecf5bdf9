"""Scaling-law fits from a results table (slm-fit): L(N, D) = E + A / N^alpha + B / D^beta.

    data = fit_data(table)                       # completed runs: N, D, L = val_nll, C (FLOPs)
    result = fit(data, draws=200, seed=0)        # approach 3 and approach 2, bootstrap intervals
    write(result, "out/")                        # analysis.fit_output: out/fit.json (atomic) and out/fit.png
    print(summary(result))                       # analysis.fit_output

What is fitted:
  L  `val_nll`, the validation NLL in nats/token (exact NLLs only: masked-diffusion NELBO bounds are left out).
  N  `params_non_embedding` by default (params=total: `params_total`, as Hoffmann et al. count; params=active:
     `params_active`, a mixture of experts' per-token count). Kaplan et al. 2020 found the non-embedding count
     gives the cleaner law at small sizes; in the character-level cpu_scaling sweep the embedding is 2-7% of the total.
  D  `tokens`, the training tokens seen.
  C  `train_flops` (= flops_per_token x tokens, PaLM's convention: 6 N + attention, see slm.model.counting) where
     the records have it, else 6 N D. The compute-optimal allocation is solved under C = k N D with
     k = the median of train_flops / (N D) over the runs (6 when no run has train_flops), recorded in fit.json as
     `flops_per_param_token` so that slm-plan turns a budget into tokens the same way.

Approach 3 (Hoffmann et al. 2022, "Training Compute-Optimal Large Language Models", arXiv:2203.15556, sec. 3.3,
App. D.2), as redone by Besiroglu et al. 2024, "Chinchilla Scaling: A replication attempt" (arXiv:2404.10102,
github.com/epoch-research/analyzing-chinchilla): with E = exp(e), A = exp(a), B = exp(b), minimise over runs i

    sum_i Huber_delta( LSE(a - alpha log N_i, b - beta log D_i, e) - log L_i ),   delta = 1e-3,

summed, not averaged (Besiroglu et al. trace the original's too-early stop to averaging), and divided by delta
(a constant factor: the same minimiser) so L-BFGS's tolerances are far below the objective's scale. L-BFGS-B
(scipy, analytic gradient) runs from the best `GRID_STARTS` points of Hoffmann et al.'s grid of initialisations
(alpha, beta in {0, 0.5, ..., 2}, e in {-1, -0.5, ..., 1}, a, b in {0, 5, ..., 25}: 4500 points, all evaluated,
the best by objective optimised) and from the best `VP_STARTS` variable-projection starts (for alpha, beta on a
grid, E, A, B by least squares on L); the lowest final objective wins. Loose bounds (alpha, beta in [0, 3]) keep a
degenerate bootstrap draw finite; an estimate on a bound is reported.

Approach 2 (Hoffmann et al. sec. 3.2, IsoFLOP profiles): runs are grouped by compute (each group: runs within a
factor `tol` of its smallest C, taken in increasing C); in each group with >= 3 distinct N a parabola of L against
log N gives N_opt at its minimum (likewise D_opt against log D); a group whose parabola opens downwards or whose
minimum lies outside the sizes it tried is not used (and listed). Then log N_opt = a log C + const and
log D_opt = b log C + const by least squares over the groups used (>= 2 needed), C the group's geometric mean.
The cpu_scaling sweep's grid (sizes and token counts both ~2x apart) puts each anti-diagonal in one group.

Bootstrap (both approaches): `draws` resamples of the runs with replacement, each refitted (approach 3 from the
full fit's optimum and from the resample's best variable-projection start); 95% intervals are the 2.5 and 97.5
percentiles of the successful draws. fit.json keeps up to `keep` draws of the constants (slm-plan's intervals).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy.optimize import minimize

from analysis.metrics import LOSS, bound_rows

LAW = "L(N, D) = E + A / N^alpha + B / D^beta"
NAMES = ("E", "A", "B", "alpha", "beta")
PARAMS = {"non_embedding": "params_non_embedding", "total": "params_total", "active": "params_active"}
"""params=... -> the table column used as N."""
HUBER_DELTA = 1e-3
MIN_DISTINCT = 3
"""Distinct model sizes and distinct token counts approach 3 needs (each term's curvature needs three)."""
MIN_RUNS = 6
"""Completed runs approach 3 needs: more than its five constants."""
HOFFMANN_GRID = np.array(list(itertools.product(
    np.arange(-1.0, 1.01, 0.5),       # e
    np.arange(0.0, 25.01, 5.0),       # a
    np.arange(0.0, 25.01, 5.0),       # b
    np.arange(0.0, 2.01, 0.5),        # alpha
    np.arange(0.0, 2.01, 0.5),        # beta
)))
"""Hoffmann et al.'s grid of initialisations, as (e, a, b, alpha, beta): 5 x 6 x 6 x 5 x 5 = 4500 points."""
GRID_STARTS = 8
VP_STARTS = 4
BOUNDS = [(-10.0, 5.0), (-20.0, 80.0), (-20.0, 80.0), (0.0, 3.0), (0.0, 3.0)]
"""L-BFGS-B bounds on (e, a, b, alpha, beta): E in [4.5e-5, 148]; exponents in [0, 3]."""
CONFIDENCE = 0.95
MIXED_COLUMNS = ("family", "kind", "objective", "tokenizer", "data")
"""What one law assumes the runs share; the summary warns when they differ (select one sweep or family)."""
COMPUTE_TOL = 1.5
"""Approach 2: a compute group holds runs within this factor of its smallest compute."""


class FitError(ValueError):
    """The table cannot be fitted (too few runs, sizes or token counts): one line saying what is needed."""


# ---------------------------------------------------------------------------------------------- data


@dataclass
class FitData:
    runs: list[str]
    N: np.ndarray
    D: np.ndarray
    L: np.ndarray
    C: np.ndarray
    params_column: str
    flops_per_param_token: float
    compute_source: str
    skipped: dict = field(default_factory=dict)
    mixed: dict = field(default_factory=dict)   # column -> its values, where the runs differ in more than N and D


def fit_data(table: pd.DataFrame, params: str = "non_embedding") -> FitData:
    """The runs to fit: completed, with a finite exact val_nll, N > 0 and D > 0 (the others are left out, counted
    in `skipped` by what is wrong: missing or NaN, not a number, infinite, <= 0). Raises FitError (one line) when
    there are none, or fewer than MIN_RUNS (naming the runs left out and why), or fewer than MIN_DISTINCT
    distinct N or D values."""
    if params not in PARAMS:
        raise FitError(f"params={params}: choose one of {', '.join(PARAMS)}")
    column = PARAMS[params]
    if column not in table and params == "non_embedding" and "params_total" in table:
        column = "params_total"
    for name in (LOSS, column, "tokens"):
        if name not in table:
            raise FitError(f"the results have no {name} column: no completed run with a validation NLL to fit"
                           if name == LOSS else f"the results have no {name} column (slm-collect writes it)")
    rows = table
    skipped: dict = {}
    if "status" in rows:
        done = rows["status"] == "completed"
        if (~done).any():
            skipped["not completed"] = int((~done).sum())
        rows = rows[done]
    bound = bound_rows(rows, LOSS)  # a NELBO (slm.metrics: val_nll of val_nll_kind nelbo) is not an NLL
    if bound.any():
        skipped["NELBO bound, not an NLL"] = int(bound.sum())
    rows = rows[~bound]
    names = rows["run"].astype(str).tolist() if "run" in rows else [str(i) for i in rows.index]
    numeric, ok, bad = {}, np.ones(len(rows), bool), {}
    for name in (LOSS, column, "tokens"):
        numeric[name] = pd.to_numeric(rows[name], errors="coerce").to_numpy(float)
        for reason, where in _bad_values(rows[name], numeric[name]).items():
            bad[f"{name} {reason}"] = [n for n, w in zip(names, where & ok) if w]
            ok &= ~where
    bad = {reason: runs for reason, runs in bad.items() if runs}
    skipped.update({reason: len(runs) for reason, runs in bad.items()})
    rows, names = rows[ok], [n for n, keep in zip(names, ok) if keep]
    L, N, D = numeric[LOSS][ok], numeric[column][ok], numeric["tokens"][ok]
    if len(rows) < MIN_RUNS:
        need = f"{LAW} needs {LOSS}, {column} and tokens finite and > 0"
        why = "; ".join(f"{len(runs)} run{' has' if len(runs) == 1 else 's have'} {reason}: {_names(runs)}"
                        for reason, runs in bad.items())
        if not len(rows):
            raise FitError(f"no completed run to fit: {need}; {why}" if bad else
                           f"no completed run with a validation NLL ({LOSS}) and {column}, tokens to fit")
        raise FitError(f"{len(rows)} completed run{'' if len(rows) == 1 else 's'} with {LOSS}: the fit needs at least "
                       f"{MIN_RUNS} (five constants)" + (f"; left out, as {need}: {why}" if bad else ""))
    for name, values, what in ((column, N, "model sizes"), ("tokens", D, "token counts")):
        distinct = len(np.unique(values))
        if distinct < MIN_DISTINCT:
            raise FitError(f"{distinct} distinct {what} ({name}) among {len(rows)} completed runs: the fit needs at "
                           f"least {MIN_DISTINCT} distinct model sizes and {MIN_DISTINCT} distinct token counts")
    flops = (pd.to_numeric(rows["train_flops"], errors="coerce").to_numpy(float) if "train_flops" in rows
             else np.full(len(rows), np.nan))
    measured = np.isfinite(flops) & (flops > 0)
    k = float(np.median(flops[measured] / (N[measured] * D[measured]))) if measured.any() else 6.0
    C = np.where(measured, flops, k * N * D)
    source = ("train_flops (flops_per_token x tokens, PaLM convention)" if measured.all() else
              "6 N D (no run has train_flops)" if not measured.any() else
              f"train_flops where recorded, else {k:.3g} N D")
    mixed = {name: sorted(rows[name].dropna().astype(str).unique()) for name in MIXED_COLUMNS if name in rows}
    mixed = {name: values for name, values in mixed.items() if len(values) > 1}
    return FitData(names, N, D, L, C, column, k, source, skipped, mixed)


def _bad_values(raw: pd.Series, numbers: np.ndarray) -> dict[str, np.ndarray]:
    """{what is wrong: mask} of a column the fit needs finite and > 0: missing (empty or NaN), not a number,
    infinite, <= 0."""
    missing = raw.isna().to_numpy()
    text = ~missing & np.isnan(numbers)  # a value pandas cannot read as a number ("NaN" text reads as NaN)
    return {"missing or NaN": missing, "not a number": text, "infinite": np.isinf(numbers),
            "<= 0": np.isfinite(numbers) & (numbers <= 0)}


def _names(runs: list[str], limit: int = 5) -> str:
    return ", ".join(runs[:limit]) + (f", ... ({len(runs) - limit} more)" if len(runs) > limit else "")


# ---------------------------------------------------------------------------------------------- approach 3


def _huber(r: np.ndarray, delta: float) -> tuple[np.ndarray, np.ndarray]:
    """Huber_delta(r) and its derivative."""
    size = np.abs(r)
    small = size <= delta
    value = np.where(small, 0.5 * r * r, delta * (size - 0.5 * delta))
    slope = np.where(small, r, delta * np.sign(r))
    return value, slope


def _terms(theta: np.ndarray, logN: np.ndarray, logD: np.ndarray) -> np.ndarray:
    """(..., 3, n): e, a - alpha log N, b - beta log D for parameter rows theta (..., 5)."""
    theta = np.asarray(theta, float)
    e, a, b, alpha, beta = (theta[..., i, None] for i in range(5))
    return np.stack(np.broadcast_arrays(e + 0 * logN, a - alpha * logN, b - beta * logD), axis=-2)


def objective(theta: np.ndarray, logN: np.ndarray, logD: np.ndarray, logL: np.ndarray,
              delta: float = HUBER_DELTA) -> tuple[float, np.ndarray]:
    """Approach 3's objective (sum of Huber losses on log L, / delta) and its gradient in (e, a, b, alpha, beta)."""
    e, a, b, alpha, beta = theta
    t1, t2 = a - alpha * logN, b - beta * logD
    top = np.maximum(np.maximum(t1, t2), e)
    w0, w1, w2 = np.exp(e - top), np.exp(t1 - top), np.exp(t2 - top)
    total = w0 + w1 + w2
    r = top + np.log(total) - logL
    value, slope = _huber(r, delta)
    slope = slope / total  # dHuber/dr x dLSE/dterm, per term below
    g1, g2 = w1 * slope, w2 * slope
    grad = np.array([w0 @ slope, g1.sum(), g2.sum(), -(g1 @ logN), -(g2 @ logD)])
    return float(value.sum() / delta), grad / delta


def _objectives(thetas: np.ndarray, logN, logD, logL, delta: float = HUBER_DELTA) -> np.ndarray:
    """The objective at many parameter rows at once (no gradient): for ranking starting points."""
    t = _terms(thetas, logN, logD)
    top = t.max(axis=-2)
    r = top + np.log(np.exp(t - top[..., None, :]).sum(axis=-2)) - logL
    return _huber(r, delta)[0].sum(axis=-1) / delta


def _vp_starts(N, D, L, count: int) -> np.ndarray:
    """Variable-projection starts: for (alpha, beta) on a grid, (E, A, B) by least squares on L (clipped positive);
    the `count` best by objective, as (e, a, b, alpha, beta) rows."""
    grid = np.linspace(0.05, 1.5, 24)
    alpha, beta = (g.ravel() for g in np.meshgrid(grid, grid, indexing="ij"))
    X = np.stack(np.broadcast_arrays(np.ones_like(N)[None, :], N[None, :] ** -alpha[:, None],
                                     D[None, :] ** -beta[:, None]), axis=-1)  # (P, n, 3)
    XtX = np.einsum("pni,pnj->pij", X, X) + 1e-12 * np.eye(3)
    Xty = np.einsum("pni,n->pi", X, L)
    try:
        coef = np.linalg.solve(XtX, Xty[..., None])[..., 0]
    except np.linalg.LinAlgError:
        return np.empty((0, 5))
    floor = 1e-3 * float(np.min(L))
    coef = np.maximum(coef, floor)
    thetas = np.column_stack([np.log(coef[:, 0]), np.log(coef[:, 1]), np.log(coef[:, 2]), alpha, beta])
    thetas = thetas[np.all(np.isfinite(thetas), axis=1)]
    values = _objectives(thetas, np.log(N), np.log(D), np.log(L))
    return thetas[np.argsort(values, kind="stable")[:count]]


def _grid_starts(logN, logD, logL, count: int) -> np.ndarray:
    values = _objectives(HOFFMANN_GRID, logN, logD, logL)
    values = np.where(np.isfinite(values), values, np.inf)
    return HOFFMANN_GRID[np.argsort(values, kind="stable")[:count]]


def fit_law(N, D, L, starts: np.ndarray | None = None, grid_starts: int = GRID_STARTS,
            vp_starts: int = VP_STARTS, delta: float = HUBER_DELTA) -> tuple[np.ndarray, float]:
    """Approach 3 on one data set: the best (e, a, b, alpha, beta) over the starting points, and its objective.
    starts: extra starting points (tried first)."""
    N, D, L = (np.asarray(v, float) for v in (N, D, L))
    logN, logD, logL = np.log(N), np.log(D), np.log(L)
    candidates = [np.asarray(starts, float).reshape(-1, 5)] if starts is not None else []
    if grid_starts:
        candidates.append(_grid_starts(logN, logD, logL, grid_starts))
    if vp_starts:
        candidates.append(_vp_starts(N, D, L, vp_starts))
    best, best_value = None, math.inf
    for x0 in np.concatenate(candidates):
        x0 = np.clip(x0, [lo for lo, _ in BOUNDS], [hi for _, hi in BOUNDS])
        res = minimize(objective, x0, args=(logN, logD, logL, delta), jac=True, method="L-BFGS-B", bounds=BOUNDS,
                       options={"maxiter": 2000, "ftol": 1e-15, "gtol": 1e-10})
        if np.isfinite(res.fun) and res.fun < best_value - 1e-12:
            best, best_value = res.x, float(res.fun)
    if best is None:
        raise FitError("the fit found no finite optimum")
    return best, best_value


def on_bound(samples: np.ndarray) -> np.ndarray:
    """Rows of constants (E, A, B, alpha, beta) with a parameter on its fitting bound (BOUNDS, in e, a, b space)."""
    samples = np.asarray(samples, float).reshape(-1, 5)
    with np.errstate(divide="ignore", invalid="ignore"):
        theta = np.column_stack([np.log(samples[:, :3]), samples[:, 3:]])
    lo, hi = np.array([b[0] for b in BOUNDS]), np.array([b[1] for b in BOUNDS])
    return np.any((np.abs(theta - lo) < 1e-6) | (np.abs(theta - hi) < 1e-6), axis=1)


def constants(theta) -> dict:
    e, a, b, alpha, beta = (float(v) for v in theta)
    return {"E": math.exp(e), "A": math.exp(a), "B": math.exp(b), "alpha": alpha, "beta": beta}


def predict(law: dict, N, D) -> np.ndarray:
    """L(N, D) for a dict of constants (arrays broadcast; NaN N or D give NaN)."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return (law["E"] + law["A"] / np.asarray(N, float) ** law["alpha"]
                + law["B"] / np.asarray(D, float) ** law["beta"])


def optimal(law: dict, C, k: float = 6.0) -> tuple[np.ndarray, np.ndarray]:
    """Compute-optimal (N*, D*) minimising L subject to C = k N D (Hoffmann et al. eq. 4, with k for 6):
    N* = G (C/k)^(beta/(alpha+beta)), G = (alpha A / (beta B))^(1/(alpha+beta)), D* = (C/k) / N*.
    Constants may be arrays (bootstrap draws); C broadcasts against them."""
    alpha, beta = np.asarray(law["alpha"], float), np.asarray(law["beta"], float)
    A, B = np.asarray(law["A"], float), np.asarray(law["B"], float)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        G = (alpha * A / (beta * B)) ** (1.0 / (alpha + beta))
        scaled = np.asarray(C, float) / k
        N = G * scaled ** (beta / (alpha + beta))
        N = np.where((alpha > 0) & (beta > 0) & np.isfinite(N) & (N > 0), N, np.nan)  # an exponent of 0: no optimum
        return N, scaled / N


# ---------------------------------------------------------------------------------------------- approach 2


def compute_groups(C, tol: float = COMPUTE_TOL) -> list[np.ndarray]:
    """Indices of runs grouped by compute: in increasing C, a group holds the runs within `tol` of its smallest."""
    order = np.argsort(np.asarray(C, float), kind="stable")
    groups, current, start = [], [], None
    for i in order:
        if current and C[i] > start * tol:
            groups.append(np.array(current))
            current = []
        if not current:
            start = C[i]
        current.append(i)
    if current:
        groups.append(np.array(current))
    return groups


def _vertex(x: np.ndarray, y: np.ndarray) -> tuple[float | None, float | None, str]:
    """Minimum of the parabola y ~ x: (x_min, y_min, "") or (None, None, why not)."""
    if len(np.unique(x)) < 3:
        return None, None, f"{len(np.unique(x))} distinct values (3 needed)"
    p2, p1, p0 = np.polyfit(x, y, 2)
    if p2 <= 0:
        return None, None, "parabola opens downwards (no minimum)"
    xv = -p1 / (2 * p2)
    if not x.min() <= xv <= x.max():
        return None, None, "minimum outside the range tried"
    return float(xv), float(p0 - p1 * p1 / (4 * p2)), ""


def approach2(N, D, L, C, tol: float = COMPUTE_TOL) -> dict:
    """IsoFLOP parabolas: per compute group N_opt, D_opt; then the exponents a (N_opt ~ C^a) and b (D_opt ~ C^b).
    Returns {"groups": [...], "a", "b", "log_n_const", "log_d_const"} (exponents None when < 2 groups usable)."""
    N, D, L, C = (np.asarray(v, float) for v in (N, D, L, C))
    groups = []
    for idx in compute_groups(C, tol):
        c = float(np.exp(np.log(C[idx]).mean()))
        xn, ln, why_n = _vertex(np.log(N[idx]), L[idx])
        xd, _, why_d = _vertex(np.log(D[idx]), L[idx])
        groups.append({"C": c, "runs": int(len(idx)), "sizes": int(len(np.unique(N[idx]))),
                       "N_opt": math.exp(xn) if xn is not None else None, "L_opt": ln, "N_note": why_n,
                       "D_opt": math.exp(xd) if xd is not None else None, "D_note": why_d})
    out: dict = {"groups": groups, "tol": tol}
    for key, name in (("N_opt", "a"), ("D_opt", "b")):
        used = [g for g in groups if g[key] is not None]
        if len(used) >= 2 and len({g["C"] for g in used}) >= 2:
            slope, const = np.polyfit(np.log([g["C"] for g in used]), np.log([g[key] for g in used]), 1)
            out[name], out[f"{name}_const"], out[f"{name}_groups"] = float(slope), float(const), len(used)
        else:
            out[name], out[f"{name}_const"], out[f"{name}_groups"] = None, None, len(used)
    return out


# ---------------------------------------------------------------------------------------------- the fit


@dataclass
class FitResult:
    data: FitData
    theta: np.ndarray
    objective: float
    law: dict
    at_bound: list[str]
    samples: np.ndarray                    # (draws, 5) constants E, A, B, alpha, beta (NaN rows: failed draws)
    a2: dict
    a2_samples: np.ndarray                 # (draws, 4): a, a_const, b, b_const (NaN where unavailable)
    settings: dict

    def interval(self, values: np.ndarray) -> tuple[float, float]:
        values = np.asarray(values, float)
        values = values[np.isfinite(values)]
        if not len(values):
            return (math.nan, math.nan)
        tail = 100 * (1 - CONFIDENCE) / 2
        lo, hi = np.percentile(values, [tail, 100 - tail])
        return float(lo), float(hi)

    def sample_laws(self) -> dict:
        ok = np.all(np.isfinite(self.samples), axis=1)
        return {name: self.samples[ok, i] for i, name in enumerate(NAMES)}

    def compute_grid(self) -> np.ndarray:
        """Compute values for the allocation table: across the data, then 10x beyond its largest."""
        lo, hi = float(self.data.C.min()), float(self.data.C.max())
        return np.array([lo, math.sqrt(lo * hi), hi, 10 * hi])


def fit(data: FitData, draws: int = 200, seed: int = 0, tol: float = COMPUTE_TOL, delta: float = HUBER_DELTA,
        source: str | None = None, progress=None) -> FitResult:
    """Approach 3 and approach 2 on `data`, with `draws` bootstrap resamples of the runs; `progress(done, draws)`,
    if given, is called after the full fit (done 0) and after each bootstrap refit."""
    theta, value = fit_law(data.N, data.D, data.L, delta=delta)
    at_bound = [name for name, v, (lo, hi) in zip(("E", "A", "B", "alpha", "beta"), theta, BOUNDS)
                if min(abs(v - lo), abs(v - hi)) < 1e-6]
    a2 = approach2(data.N, data.D, data.L, data.C, tol)
    rng = np.random.default_rng(seed)
    n = len(data.L)
    samples = np.full((draws, 5), np.nan)
    a2_samples = np.full((draws, 4), np.nan)
    if progress is not None:
        progress(0, draws)
    for j in range(draws):
        idx = rng.integers(0, n, n)
        N, D, L, C = data.N[idx], data.D[idx], data.L[idx], data.C[idx]
        try:
            t, _ = fit_law(N, D, L, starts=theta, grid_starts=0, vp_starts=1, delta=delta)
            samples[j] = list(constants(t).values())
        except (FitError, np.linalg.LinAlgError, ValueError, FloatingPointError):
            pass
        with np.errstate(all="ignore"):
            try:
                b2 = approach2(N, D, L, C, tol)
            except (np.linalg.LinAlgError, ValueError):
                b2 = None
        if b2 is not None:
            a2_samples[j] = [np.nan if b2[k] is None else b2[k] for k in ("a", "a_const", "b", "b_const")]
        if progress is not None:
            progress(j + 1, draws)
    settings = {"loss": LOSS, "params": data.params_column, "tokens": "tokens", "compute": data.compute_source,
                "flops_per_param_token": data.flops_per_param_token, "huber_delta": delta, "bootstrap_draws": draws,
                "seed": seed, "confidence": CONFIDENCE, "compute_tol": tol, "grid_starts": GRID_STARTS,
                "vp_starts": VP_STARTS, "bootstrap_starts": "the full fit's optimum + 1 variable-projection start", "bounds": {k: list(b) for k, b in zip(("e", "a", "b", "alpha", "beta"),
                                                                              BOUNDS)},
                "source": source}
    return FitResult(data, theta, value, constants(theta), at_bound, samples, a2, a2_samples, settings)
