"""A forecast of a larger scale from a ladder: each configuration's loss extrapolated along its ladder to a target
compute, with seed-bootstrap intervals, and the method checked by predicting the top rung from the others, the
error OLMo's model ladder reports at its target (Bhagia et al. 2024, arXiv 2412.04403).

    result = forecast(table, target_params=1e6, draws=1000)
    print(markdown(result))
    print(markdown(held_out(table)))

The table has one row per run: `config`, `rung`, `seed` (optional; it orders the runs of a cell), `flops` (the
run's training FLOPs), `value` (the loss to forecast: lower is better, > 0) and, for a target in parameters,
`params`. Rows whose rung, flops or value is not finite are left out; a configuration with fewer than two rungs
is left out and named in the notes. A cell is one (configuration, rung): its loss is the mean over its seeds and
its compute C the mean of its runs' flops.

The law, per configuration c, with C in units of the ladder's smallest cell compute (`unit`, for conditioning):

    L_c(C) = E + A_c (C / unit)^(-alpha_c)

fitted to the cells' means by least squares on log L (minimising sum (log fit - log mean)^2), in one of two forms:

- "shared" (offset): E, the irreducible loss of the data, is common to all configurations, 0 <= E < the smallest
  mean (E = min mean x sigmoid(e)), A_c = exp(a_c), alpha_c = exp(s_c). scipy's least_squares (analytic Jacobian)
  runs from three starts, E at 1%, 50% and 90% of the smallest mean with A_c, alpha_c from a line through
  log(L - E) against log C; the lowest cost wins;
- "none" (E = 0): a pure power law, a straight line per configuration in log-log, fitted exactly by linear
  regression (alpha_c may then come out negative).

offset="auto" takes the shared offset where every configuration has at least 3 rungs and the means outnumber the
form's 1 + 2 x configurations parameters by at least 2, else the pure power law; the fit says which and why.

A target in parameters becomes FLOPs per configuration by the ladder's own token rule: a straight line of
log flops on log params over that configuration's runs.

Bootstrap: rng = numpy.random.default_rng(seed); in each draw, for each configuration (sorted by name) and each
of its rungs (increasing), rng.integers(0, n, n) picks n of the cell's n runs (in seed order, else table order)
with replacement; the new means are refitted in the full fit's form (the shared offset starting from the full
fit's optimum), the cells keeping their compute. The 95% interval is the 2.5 and 97.5 percentiles over the draws
that fitted; P(best) is the share of those draws in which a configuration's prediction is the lowest (ties split).
Draws whose fit fails are dropped and counted.

held_out(): the fit on every rung but the top one predicts each configuration at its compute at the top rung;
reported: the error against the observed mean (absolute and relative), the mean absolute relative error, the
pairwise order agreement (analysis.decide.agreement, a tie counting one half) and whether the predicted best is
the observed best.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy.optimize import least_squares
from scipy.special import expit, logit

from analysis.decide import agreement

COLUMNS = ("config", "rung", "flops", "value")
OFFSETS = ("auto", "shared", "none")
LAWS = {"shared": "L_c(C) = E + A_c (C / unit)^-alpha_c, E shared", "none": "L_c(C) = A_c (C / unit)^-alpha_c"}
STARTS = (0.01, 0.5, 0.9)
"""Starts of the shared offset, as fractions of the smallest mean."""


P_BEST = {"shared": "P(best): the share of the draws in which the configuration is lowest. Each draw refits every "
                    "curve at once, and the shared offset E moves them together, so the draws are correlated: a "
                    "P(best) near 1 beside overlapping intervals says the fitted curves' order is stable under the "
                    "seeds, not that the target will follow the curves.",
          "none": "P(best): the share of the draws in which the configuration is lowest (each curve refitted on its "
                  "own seeds' redraw). It says the fitted curves' order is stable under the seeds, not that the "
                  "target will follow the curves."}
"""What P(best) means, printed where it is."""


class ForecastError(ValueError):
    """A table or target the forecast cannot use: one line naming the value and what is allowed."""


@dataclass
class Fit:
    """The curves of a ladder: L_c(C) = E + A[c] (C / unit)^-alpha[c]."""

    form: str
    """"shared" (one offset E for all configurations) or "none" (E = 0: a line per configuration in log-log)."""
    unit: float
    """The FLOPs C is measured in: the smallest cell's mean flops."""
    E: float
    A: dict[str, float]
    alpha: dict[str, float]
    rungs: dict[str, int]
    rms: float
    """Root mean square of log(fit) - log(mean) over the cells."""
    notes: list[str] = field(default_factory=list)
    theta: np.ndarray | None = field(default=None, repr=False)
    """The optimiser's parameters (e, a_c, s_c, ...) of the shared form; the bootstrap starts there."""

    def predict(self, config: str, flops):
        return self.E + self.A[config] * (np.asarray(flops, dtype=float) / self.unit) ** -self.alpha[config]


@dataclass
class Prediction:
    config: str
    flops: float
    """The target compute of this configuration."""
    loss: float
    low: float | None
    high: float | None
    p_best: float | None
    """Share of the bootstrap draws in which this configuration's prediction is the lowest (None without draws)."""
    rank: int


@dataclass
class ForecastResult:
    fit: Fit
    target: str
    """How the target was given: "target_flops = ..." or "target_params = ..."."""
    predictions: list[Prediction]
    """Best (lowest predicted loss) first."""
    token_rule: dict[str, tuple[float, float]]
    """Per configuration, (slope, intercept) of log flops on log params; empty for a target in FLOPs."""
    draws: int
    """Bootstrap draws that fitted."""
    failed: int
    notes: list[str] = field(default_factory=list)
    span: dict[str, tuple[float, float]] = field(default_factory=dict)
    """Per configuration, the mean FLOPs of its lowest and its highest rung: how far the ladder reaches."""

    @property
    def ranking(self) -> list[str]:
        return [p.config for p in self.predictions]


@dataclass
class Check:
    """One configuration's prediction of the top rung against its observed mean."""

    config: str
    flops: float
    predicted: float
    low: float | None
    high: float | None
    observed: float
    error: float
    """predicted - observed."""
    relative: float
    """error / observed."""


@dataclass
class HeldOutResult:
    fit: Fit
    """The fit on every rung but the top one."""
    top: float
    checks: list[Check]
    mare: float
    """Mean absolute relative error."""
    agreement: float
    """Share of the pairs of configurations whose predicted order is their observed order (a tie counts one half)."""
    pairs: int
    best_predicted: str
    best_observed: str
    draws: int
    failed: int
    notes: list[str] = field(default_factory=list)

    @property
    def best_matches(self) -> bool:
        return self.best_predicted == self.best_observed


def _cells(table: pd.DataFrame):
    """({configuration: [(rung, mean flops, values in seed order), ...] by increasing rung}, rungs, rows, notes)."""
    for column in COLUMNS:
        if column not in table:
            raise ForecastError(f"the table has no column {column!r}; needed: {', '.join(COLUMNS)} (seed, params)")
    rows = table.assign(**{f"_{c}": pd.to_numeric(table[c], errors="coerce") for c in ("rung", "flops", "value")})
    for column in ("flops", "value"):
        if len(rows) and rows[f"_{column}"].isna().all():
            raise ForecastError(f"{column}: no run has a value (the forecast needs each run's training FLOPs, "
                                "train_flops, and its loss)")
    rows = rows[np.isfinite(rows[["_rung", "_flops", "_value"]].to_numpy(dtype=float)).all(axis=1)]
    if "seed" in rows:
        rows = rows.sort_values("seed", kind="stable")
    rungs = sorted(set(rows["_rung"].astype(float)))
    if len(rungs) < 2:
        raise ForecastError(f"rung: a forecast needs at least two rungs; the table has {len(rungs)}")
    for column in ("value", "flops"):
        if (rows[f"_{column}"] <= 0).any():
            raise ForecastError(f"{column} = {rows[f'_{column}'].min():g}: must be positive (the fit is in log-log)")
    cells, notes = {}, []
    for name, group in rows.groupby(rows["config"].astype(str), sort=True):
        by = [(float(r), float(g["_flops"].mean()), g["_value"].to_numpy(dtype=float))
              for r, g in group.groupby("_rung", sort=True)]
        if len(by) < 2:
            notes.append(f"configuration {name!r} left out: it has one rung ({by[0][0]:g}); a curve needs two")
        else:
            cells[name] = by
    if not cells:
        raise ForecastError("config: no configuration has two rungs; a curve needs at least two")
    return cells, rungs, rows, notes


def _means(cells: dict, rng: np.random.Generator | None = None) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{configuration: (compute, mean loss) per rung}; with rng, each cell's runs redrawn (the documented order)."""
    out = {}
    for name in sorted(cells):
        means = []
        for _, _, values in cells[name]:
            if rng is not None:
                values = values[rng.integers(0, len(values), len(values))]
            means.append(values.mean())
        out[name] = (np.array([c[1] for c in cells[name]]), np.array(means))
    return out


def _line(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(slope, intercept) of the least-squares line of y on x."""
    dx = x - x.mean()
    slope = float(dx @ (y - y.mean()) / (dx @ dx)) if dx @ dx > 0 else math.nan
    return slope, float(y.mean() - slope * x.mean())


def _form(cells: dict, offset: str) -> tuple[str, str]:
    """(form, why) for offset = "auto", "shared" or "none"."""
    if offset not in OFFSETS:
        raise ForecastError(f"offset = {offset!r}: allowed are {', '.join(map(repr, OFFSETS))}")
    means, params = sum(len(v) for v in cells.values()), 1 + 2 * len(cells)
    fewest = min(len(v) for v in cells.values())
    if offset == "shared" and means < params:
        raise ForecastError(f"offset = 'shared': {params} parameters for {means} means; use offset='none'")
    if offset != "auto":
        return offset, f"offset = {offset!r} as asked"
    if fewest >= 3 and means >= params + 2:
        return "shared", f"{means} means for the shared offset's {params} parameters"
    n = len(cells)
    return "none", (f"a pure power law, A and alpha per configuration: the shared offset would add E to "
                    f"{2 * n} of them ({params} parameters for {n} configuration{'s' if n != 1 else ''}) and needs "
                    f"{params + 2} means and 3 rungs per configuration; the ladder has {means} means and "
                    f"{fewest} rung{'s' if fewest != 1 else ''} for its shortest configuration")


def _fit(means: dict, form: str, unit: float, start: np.ndarray | None = None) -> Fit:
    """The curves through `means` ({configuration: (compute, mean loss)}) in `form`."""
    names = list(means)
    xs = [np.log(means[c][0] / unit) for c in names]
    ys = [np.log(means[c][1]) for c in names]
    rungs = {c: len(means[c][0]) for c in names}
    if form == "none":
        lines = [_line(x, y) for x, y in zip(xs, ys)]
        if not np.all(np.isfinite(lines)):
            raise ForecastError("flops: a configuration's rungs share one compute; a line needs two")
        rms = math.sqrt(np.mean(np.concatenate([y - (s * x + i) for (s, i), x, y in zip(lines, xs, ys)]) ** 2))
        return Fit(form, unit, 0.0, {c: math.exp(i) for c, (_, i) in zip(names, lines)},
                   {c: -s for c, (s, _) in zip(names, lines)}, rungs, rms)
    least = float(np.exp(min(y.min() for y in ys)))

    def terms(theta):
        return [np.exp(theta[1 + 2 * k] - np.exp(theta[2 + 2 * k]) * x) for k, x in enumerate(xs)]

    def residuals(theta):
        E = least * expit(theta[0])
        return np.concatenate([np.log(E + t) - y for t, y in zip(terms(theta), ys)])

    def jacobian(theta):
        sig = expit(theta[0])
        J = np.zeros((sum(map(len, xs)), len(theta)))
        row = 0
        for k, (t, x) in enumerate(zip(terms(theta), xs)):
            p = least * sig + t
            rows = slice(row, row + len(x))
            J[rows, 0] = least * sig * (1 - sig) / p
            J[rows, 1 + 2 * k] = t / p
            J[rows, 2 + 2 * k] = -np.exp(theta[2 + 2 * k]) * x * t / p
            row += len(x)
        return J

    starts = [start] if start is not None else []
    for f in STARTS if start is None else ():
        theta = [logit(f)]
        for x, y in zip(xs, ys):
            slope, intercept = _line(x, np.log(np.exp(y) - f * least))
            theta += [intercept, math.log(-slope if slope < -1e-3 else 0.5)]
        starts.append(np.array(theta))
    best = None
    for theta in starts:
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            out = least_squares(residuals, theta, jac=jacobian, ftol=1e-14, xtol=1e-14, gtol=1e-14)
        if np.isfinite(out.cost) and np.all(np.isfinite(out.x)) and (best is None or out.cost < best.cost):
            best = out
    if best is None:
        raise ForecastError("the shared-offset fit did not converge from any start; try offset='none'")
    theta = best.x  # e, a_1, s_1, a_2, s_2, ...
    fit = Fit(form, unit, float(least * expit(theta[0])), dict(zip(names, np.exp(theta[1::2]).tolist())),
              dict(zip(names, np.exp(theta[2::2]).tolist())), rungs, math.sqrt(2 * best.cost / len(best.fun)),
              theta=theta)
    if not 1e-3 < fit.E / least < 0.999:
        fit.notes.append(f"the offset E = {fit.E:.4g} sits at a bound of [0, {least:.4g}) (the smallest mean)")
    return fit


def _fit_cells(cells: dict, offset: str) -> Fit:
    form, why = _form(cells, offset)
    unit = min(c[1] for by in cells.values() for c in by)
    fit = _fit(_means(cells), form, unit)
    fit.notes.insert(0, f"form: {LAWS[form]} ({why})")
    return fit


def fit_curves(table: pd.DataFrame, offset: str = "auto") -> Fit:
    """Every configuration's curve of mean loss against compute (see the module docstring for the forms)."""
    cells, _, _, notes = _cells(table)
    fit = _fit_cells(cells, offset)
    fit.notes += notes
    return fit


def _bootstrap(cells: dict, fit: Fit, flops: dict[str, float], draws: int, seed: int,
               progress=None) -> tuple[np.ndarray, int]:
    """(predictions at `flops`, draws x configurations in fit order, of the draws that fitted; failed draws);
    `progress(done, draws)` before the first draw and after each."""
    rng = np.random.default_rng(seed)
    names, out, failed = list(fit.A), [], 0
    if progress is not None and draws:
        progress(0, draws)
    for done in range(1, draws + 1):
        if progress is not None and done > 1:
            progress(done - 1, draws)
        means = _means(cells, rng)
        try:
            again = _fit(means, fit.form, fit.unit, start=fit.theta)
            with np.errstate(all="ignore"):
                predicted = np.array([again.predict(c, flops[c]) for c in names], dtype=float)
        except (ValueError, ArithmeticError, np.linalg.LinAlgError):
            failed += 1
            continue
        if np.all(np.isfinite(predicted)):
            out.append(predicted)
        else:
            failed += 1
    if progress is not None and draws:
        progress(draws, draws)
    return np.array(out).reshape(-1, len(names)), failed


def _interval(boot: np.ndarray, k: int) -> tuple[float | None, float | None]:
    if not len(boot):
        return None, None
    return float(np.percentile(boot[:, k], 2.5)), float(np.percentile(boot[:, k], 97.5))


def _positive(name: str, given) -> float:
    try:
        value = float(given)
    except (TypeError, ValueError):
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ForecastError(f"{name} = {given!r}: the target must be a positive number")
    return value


def forecast(table: pd.DataFrame, target_flops: float | None = None, target_params: float | None = None,
             draws: int = 1000, seed: int = 0, offset: str = "auto", progress=None) -> ForecastResult:
    """Every configuration's loss at the target compute (or size), its 95% interval, the ranking and P(best);
    `progress(done, draws)` as the draws are made."""
    if (target_flops is None) == (target_params is None):
        raise ForecastError(f"target_flops = {target_flops!r}, target_params = {target_params!r}: give exactly one")
    name = "target_flops" if target_params is None else "target_params"
    target = _positive(name, target_flops if target_params is None else target_params)
    cells, _, rows, notes = _cells(table)
    fit = _fit_cells(cells, offset)
    flops, rule = {}, {}
    for c in fit.A:
        if target_params is None:
            flops[c] = target
            continue
        if "params" not in rows:
            raise ForecastError(f"target_params = {target:g}: the table has no column 'params'; give target_flops")
        runs = rows[rows["config"].astype(str) == c]
        params = pd.to_numeric(runs["params"], errors="coerce").to_numpy(dtype=float)
        ok = np.isfinite(params) & (params > 0)
        if len(set(params[ok])) < 2:
            raise ForecastError(f"params: configuration {c!r} has {len(set(params[ok]))} distinct positive sizes; "
                                f"the token rule needs two")
        rule[c] = _line(np.log(params[ok]), np.log(runs["_flops"].to_numpy(dtype=float)[ok]))
        flops[c] = math.exp(rule[c][0] * math.log(target) + rule[c][1])
    for c in fit.A:
        largest = cells[c][-1][1]
        if flops[c] < largest:
            notes.append(f"configuration {c!r}: the target ({flops[c]:.3g} FLOPs) is below its largest rung's compute "
                         f"({largest:.3g} FLOPs): an interpolation, not an extrapolation")
    boot, failed = _bootstrap(cells, fit, flops, draws, seed, progress)
    if len(boot):
        low = boot == boot.min(axis=1, keepdims=True)
        p_best = (low / low.sum(axis=1, keepdims=True)).mean(axis=0)
    predictions = []
    for k, c in enumerate(fit.A):
        predictions.append(Prediction(c, flops[c], float(fit.predict(c, flops[c])), *_interval(boot, k),
                                      float(p_best[k]) if len(boot) else None, 0))
    predictions.sort(key=lambda p: (p.loss, p.config))
    for rank, p in enumerate(predictions, 1):
        p.rank = rank
    span = {c: (cells[c][0][1], cells[c][-1][1]) for c in fit.A}
    return ForecastResult(fit, f"{name} = {target:g}", predictions, rule, len(boot), failed, fit.notes[1:] + notes,
                          span)


def held_out(table: pd.DataFrame, draws: int = 1000, seed: int = 0, offset: str = "auto",
             progress=None) -> HeldOutResult:
    """The fit on every rung but the top one against the top rung's observed means (see the module docstring);
    `progress(done, draws)` as the draws are made."""
    cells, rungs, _, notes = _cells(table)
    if len(rungs) < 3:
        raise ForecastError(f"rung: the held-out check needs at least 3 rungs: 2 to fit, 1 to check; "
                            f"the table has {len(rungs)}")
    top = rungs[-1]
    lower, at, observed = {}, {}, {}
    for c, by in cells.items():
        if by[-1][0] != top:
            notes.append(f"configuration {c!r} not checked: it has no run at the top rung {top:g}")
        elif len(by) < 3:
            notes.append(f"configuration {c!r} not checked: it has one rung below the top; a curve needs two")
        else:
            lower[c], at[c], observed[c] = by[:-1], by[-1][1], float(by[-1][2].mean())
    if not lower:
        raise ForecastError(f"rung: no configuration has two rungs below the top rung {top:g} and a run at it")
    fit = _fit_cells(lower, offset)
    boot, failed = _bootstrap(lower, fit, at, draws, seed, progress)
    checks = []
    for k, c in enumerate(fit.A):
        predicted = float(fit.predict(c, at[c]))
        error = predicted - observed[c]
        checks.append(Check(c, at[c], predicted, *_interval(boot, k), observed[c], error, error / observed[c]))
    predicted = {ch.config: ch.predicted for ch in checks}
    share, pairs = agreement(predicted, observed)
    best = min(predicted, key=lambda c: (predicted[c], c))
    truth = min(observed, key=lambda c: (observed[c], c))
    mare = float(np.mean([abs(ch.relative) for ch in checks]))
    return HeldOutResult(fit, top, checks, mare, share, pairs, best, truth, len(boot), failed, fit.notes[1:] + notes)


def _interval_text(low, high) -> str:
    return "" if low is None else f"{low:.4g}-{high:.4g}"


def _heading(fit: Fit) -> str:
    law = fit.notes[0].removeprefix("form: ")
    return f"{law}; unit = {fit.unit:.4g} FLOPs" + ("" if fit.form == "none" else f"; E = {fit.E:.4g}")


def check_rows(result: HeldOutResult) -> list[dict[str, str]]:
    """The held-out check's rows, each cell formatted as slm-decide prints it (the report shows the same)."""
    fit = result.fit
    return [{"configuration": ch.config, "A": f"{fit.A[ch.config]:.4g}", "alpha": f"{fit.alpha[ch.config]:.4g}",
             "FLOPs": f"{ch.flops:.3g}", "predicted": f"{ch.predicted:.4g}",
             "95% interval": _interval_text(ch.low, ch.high), "observed": f"{ch.observed:.4g}",
             "error": f"{ch.error:+.3g}", "relative error": f"{100 * ch.relative:+.2f}%"} for ch in result.checks]


def markdown(result: ForecastResult | HeldOutResult) -> str:
    """The forecast's table (fit, prediction with its interval, P(best)) or the held-out check's, as Markdown."""
    fit = result.fit
    plural = "" if result.draws == 1 else "s"
    redraws = (f"95% intervals from {result.draws} seed redraw{plural} ({result.failed} failed)"
               if result.draws or result.failed else "no bootstrap draws")
    if isinstance(result, HeldOutResult):
        lines = [f"Held-out check: rungs below {result.top:g} predict the top rung {result.top:g}. "
                 f"{_heading(fit)}. {redraws}.", "",
                 "| configuration | A | alpha | FLOPs | predicted | 95% interval | observed | error | relative error |",
                 "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        lines += ["| " + " | ".join(row.values()) + " |" for row in check_rows(result)]
        pairs = f"{result.pairs} pair{'' if result.pairs == 1 else 's'}"
        lines += ["", f"- mean absolute relative error {100 * result.mare:.2f}%; order agreement "
                  f"{result.agreement:.3f} ({pairs}); best predicted {result.best_predicted}, observed "
                  f"{result.best_observed} ({'match' if result.best_matches else 'no match'})"]
    else:
        lines = [f"Forecast at {result.target}. {_heading(fit)}. {redraws}"
                 + (f"; {P_BEST[fit.form]}" if result.draws else "."), "",
                 "| rank | configuration | rungs | A | alpha | target FLOPs | predicted loss | 95% interval "
                 "| P(best) |",
                 "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for p in result.predictions:
            best = "" if p.p_best is None else f"{p.p_best:.3f}"
            lines.append(f"| {p.rank} | {p.config} | {fit.rungs[p.config]} | {fit.A[p.config]:.4g} | "
                         f"{fit.alpha[p.config]:.4g} | {p.flops:.3g} | {p.loss:.4g} | {_interval_text(p.low, p.high)} "
                         f"| {best} |")
        lines.append("")
        if result.token_rule:
            lines.append("- target FLOPs from params by each configuration's token rule: " + "; ".join(
                f"{c}: log C = {k:.4g} log N {b:+.4g}" for c, (k, b) in result.token_rule.items()))
    lines += [f"- {note}" for note in result.notes]
    return "\n".join(lines) + "\n"


__all__ = ["Check", "Fit", "ForecastError", "ForecastResult", "HeldOutResult", "Prediction", "fit_curves",
           "forecast", "held_out", "markdown"]
