"""The forecast of a larger scale from a ladder (analysis/forecast.py): fits against known parameters and
numpy.polyfit, the held-out check and the bootstrap against computations written out here."""

import math

import numpy as np
import pandas as pd
import pytest

from analysis.forecast import ForecastError, fit_curves, forecast, held_out, markdown

RUNGS = [2.5e4, 5e4, 1e5, 2e5, 4e5]


def flops(rung: float) -> float:
    return 6 * rung * 20 * rung


def ladder(curves: dict, rungs=RUNGS, E: float = 0.0, seeds: int = 3, noise: float = 0.0, rng_seed: int = 0):
    """Runs of L = E + A (C / C0)^-alpha per configuration ({name: (A, alpha)}), C0 the smallest rung's FLOPs,
    times exp(noise x normal) per run."""
    rng = np.random.default_rng(rng_seed)
    rows = []
    for rung in rungs:
        for name, (A, alpha) in curves.items():
            for s in range(seeds):
                value = (E + A * (flops(rung) / flops(rungs[0])) ** -alpha) * math.exp(noise * rng.standard_normal())
                rows.append({"config": name, "rung": rung, "seed": s, "flops": flops(rung), "params": rung,
                             "value": value})
    return pd.DataFrame(rows)


def loglog_lines(table: pd.DataFrame) -> dict:
    """{config: (slope, intercept)} of numpy.polyfit through the cells' log mean loss against log(C / C0)."""
    means = table.groupby(["config", "rung"])[["flops", "value"]].mean()
    unit = means["flops"].min()
    return {c: np.polyfit(np.log(g["flops"] / unit), np.log(g["value"]), 1) for c, g in means.groupby(level=0)}


def test_the_shared_offset_fit_recovers_known_parameters():
    curves = {"a": (2.0, 0.3), "b": (1.0, 0.5), "c": (3.0, 0.25)}
    fit = fit_curves(ladder(curves, E=1.5))
    assert fit.form == "shared" and fit.unit == flops(RUNGS[0]) and fit.rms < 1e-10
    assert fit.E == pytest.approx(1.5, rel=1e-6)
    for name, (A, alpha) in curves.items():
        assert fit.A[name] == pytest.approx(A, rel=1e-6) and fit.alpha[name] == pytest.approx(alpha, rel=1e-6)
        assert fit.predict(name, 1e20) == pytest.approx(1.5 + A * (1e20 / fit.unit) ** -alpha, rel=1e-6)


def test_the_pure_power_law_is_the_log_log_regression():
    exact = fit_curves(ladder({"a": (2.0, 0.3), "b": (1.0, 0.5)}), offset="none")
    assert exact.form == "none" and exact.E == 0
    assert exact.A["a"] == pytest.approx(2.0, rel=1e-12) and exact.alpha["b"] == pytest.approx(0.5, rel=1e-12)
    # two configurations at three rungs: 6 means for the shared offset's 5 parameters, so auto takes the power law
    table = ladder({"a": (2.0, 0.3), "b": (1.0, 0.5)}, rungs=RUNGS[:3], E=1.0, noise=0.02)
    fit = fit_curves(table)
    assert fit.form == "none" and "pure power law" in fit.notes[0]
    for name, (slope, intercept) in loglog_lines(table).items():
        assert fit.alpha[name] == pytest.approx(-slope, rel=1e-10)
        assert fit.A[name] == pytest.approx(math.exp(intercept), rel=1e-10)


def test_held_out_against_a_line_through_two_points():
    # a falls faster at first and then flattens: its line predicts it below b at the top, where it is above
    values = {"a": [4.0, 3.0, 2.8], "b": [3.6, 3.0, 2.6]}
    rows = [{"config": c, "rung": r, "seed": 0, "flops": flops(r), "value": v[i]}
            for c, v in values.items() for i, r in enumerate(RUNGS[:3])]
    result = held_out(pd.DataFrame(rows), draws=10)
    assert result.fit.form == "none" and result.top == RUNGS[2]
    x = np.log([flops(r) for r in RUNGS[:3]])
    expected = {}
    for check in result.checks:
        y = np.log(values[check.config])
        expected[check.config] = math.exp(y[1] + (y[1] - y[0]) / (x[1] - x[0]) * (x[2] - x[1]))
        assert check.predicted == pytest.approx(expected[check.config], rel=1e-12)
        assert check.observed == values[check.config][2] and check.flops == flops(RUNGS[2])
        assert check.error == pytest.approx(expected[check.config] - values[check.config][2], rel=1e-12)
        assert check.relative == pytest.approx(check.error / values[check.config][2], rel=1e-12)
        assert check.low == pytest.approx(check.predicted) and check.high == pytest.approx(check.predicted)
    assert expected["a"] == pytest.approx(4.0 * (3.0 / 4.0) ** 2) and expected["a"] < expected["b"]
    assert result.mare == pytest.approx(np.mean([abs(c.relative) for c in result.checks]))
    assert (result.agreement, result.pairs) == (0.0, 1)
    assert (result.best_predicted, result.best_observed, result.best_matches) == ("a", "b", False)
    text = markdown(result)
    assert "| a |" in text and "order agreement 0.000 (1 pair)" in text and "no match" in text
    # the form's reason says what was fitted (2 parameters per configuration), not "5 parameters" fitted to 4 means
    assert ("a pure power law, A and alpha per configuration: the shared offset would add E to 4 of them (5 "
            "parameters for 2 configurations) and needs 7 means and 3 rungs per configuration; the ladder has 4 means "
            "and 2 rungs for its shortest configuration") in text


def test_the_bootstrap_is_the_documented_resampling():
    table = ladder({"a": (2.0, 0.3), "b": (2.1, 0.32), "c": (1.8, 0.28)}, rungs=RUNGS[:3], seeds=4, noise=0.05)
    table = table.sample(frac=1, random_state=3)  # the runs of a cell are taken in seed order, whatever the rows'
    target = 1e15
    result = forecast(table, target_flops=target, draws=150, seed=7, offset="none")
    assert result.fit.form == "none" and result.draws == 150 and result.failed == 0

    rng = np.random.default_rng(7)
    cells = {c: [g.sort_values("seed") for _, g in sorted(runs.groupby("rung"))]
             for c, runs in sorted(table.groupby("config"))}
    unit = table["flops"].min()
    boot = []
    for _ in range(150):
        row = []
        for name, by_rung in cells.items():
            x = [np.log(g["flops"].mean() / unit) for g in by_rung]
            y = []
            for g in by_rung:
                values = g["value"].to_numpy()
                y.append(np.log(values[rng.integers(0, len(values), len(values))].mean()))
            slope, intercept = np.polyfit(x, y, 1)
            row.append(math.exp(intercept + slope * math.log(target / unit)))
        boot.append(row)
    boot = np.array(boot)
    best = boot.argmin(axis=1)
    for p in result.predictions:
        k = sorted(cells).index(p.config)
        assert p.low == pytest.approx(np.percentile(boot[:, k], 2.5), rel=1e-9)
        assert p.high == pytest.approx(np.percentile(boot[:, k], 97.5), rel=1e-9)
        assert p.p_best == pytest.approx(np.mean(best == k))
        assert p.low <= p.loss <= p.high
    assert sum(p.p_best for p in result.predictions) == pytest.approx(1.0)


def test_p_best_sums_to_one_and_finds_a_clear_winner():
    table = ladder({"a": (2.0, 0.3), "b": (1.0, 0.3), "c": (2.2, 0.3)}, E=1.0, seeds=3, noise=0.01)
    result = forecast(table, target_params=1e6, draws=100)
    assert result.fit.form == "shared" and result.ranking[0] == "b"
    assert sum(p.p_best for p in result.predictions) == pytest.approx(1.0)
    assert result.predictions[0].p_best > 0.99
    assert all(k == pytest.approx(2.0) for k, _ in result.token_rule.values())  # flops = 120 params^2
    assert result.predictions[0].flops == pytest.approx(120 * 1e6 ** 2)
    text = markdown(result)
    assert "| 1 | b | 5 |" in text and "token rule" in text and "E = " in text
    # a tie splits: one seed per cell, so every draw is the full sample and a and b tie in each
    same = ladder({"a": (2.0, 0.3), "b": (2.0, 0.3)}, rungs=RUNGS[:3], seeds=1)
    assert [p.p_best for p in forecast(same, target_flops=1e16, draws=20).predictions] == [0.5, 0.5]


def test_bad_input_names_the_value():
    table = ladder({"a": (2.0, 0.3), "b": (1.0, 0.5)}, rungs=RUNGS[:2])
    with pytest.raises(ForecastError, match="at least two rungs; the table has 1"):
        forecast(table[table["rung"] == RUNGS[0]], target_flops=1e16)
    with pytest.raises(ForecastError, match="needs at least 3 rungs: 2 to fit, 1 to check; the table has 2"):
        held_out(table)
    for bad in (0, -1.0, float("nan"), "big"):
        with pytest.raises(ForecastError, match=f"target_flops = {bad!r}: the target must be a positive number"):
            forecast(table, target_flops=bad)
    with pytest.raises(ForecastError, match="target_params = -5: the target must be a positive"):
        forecast(table, target_params=-5)
    with pytest.raises(ForecastError, match="give exactly one"):
        forecast(table)
    with pytest.raises(ForecastError, match="no column 'params'"):
        forecast(table.drop(columns="params"), target_params=1e6)
    with pytest.raises(ForecastError, match="offset = 'linear': allowed are 'auto', 'shared', 'none'"):
        fit_curves(table, offset="linear")
    with pytest.raises(ForecastError, match="offset = 'shared': 5 parameters for 4 means"):
        fit_curves(table, offset="shared")
    with pytest.raises(ForecastError, match="no column 'value'"):
        fit_curves(table.drop(columns="value"))
    # below the largest rung's compute: an interpolation, said; a configuration with one rung: left out, named
    lonely = pd.DataFrame([{"config": "c", "rung": RUNGS[0], "seed": 0, "flops": flops(RUNGS[0]), "value": 3.0},
                           {"config": "a", "rung": RUNGS[1], "seed": 9, "flops": np.nan, "value": 1.0}])
    result = forecast(pd.concat([table, lonely]), target_flops=flops(RUNGS[0]) * 2, draws=10)
    assert sorted(result.ranking) == ["a", "b"]  # c (one rung) is not ranked
    assert any("'c' left out: it has one rung" in note for note in result.notes)
    assert sum("an interpolation" in note for note in result.notes) == 2
    assert "'c' left out" in markdown(result)
