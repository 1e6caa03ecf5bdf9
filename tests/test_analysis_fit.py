"""slm-fit: approach 3 recovers known constants inside its bootstrap intervals, approach 2 recovers the IsoFLOP
exponent, the objective's gradient and the compute-optimal closed form are right, the CLI writes fit.json and fit.png
from a collected table, and refuses too few sizes, token counts or runs in one line."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from analysis import collect, save_results
from analysis.cli import fit_main
from analysis.fit import FitData, FitError, approach2, compute_groups, fit, fit_data, objective, optimal, predict
from analysis.fit_output import to_json
from tests.test_analysis_collect import make_record, write as write_record

TRUE = {"E": 1.5, "A": 300.0, "B": 400.0, "alpha": 0.35, "beta": 0.3}
HOFFMANN = {"E": 1.69, "A": 406.4, "B": 410.7, "alpha": 0.34, "beta": 0.28}


def _grid(law=TRUE, noise=0.01, seed=0):
    """A 5 x 5 grid of N in 1e6..1e8 and D in 1e8..1e10, L from `law` with multiplicative noise."""
    N, D = (g.ravel() for g in np.meshgrid(np.logspace(6, 8, 5), np.logspace(8, 10, 5), indexing="ij"))
    L = predict(law, N, D) * np.exp(np.random.default_rng(seed).normal(0, noise, N.size))
    return FitData([f"run{i}" for i in range(N.size)], N, D, L, 6 * N * D, "params_total", 6.0, "6 N D")


def test_approach3_recovers_known_constants_inside_its_intervals():
    result = fit(_grid(), draws=50, seed=0)
    content = to_json(result)
    a3 = content["approach3"]
    for name, true in TRUE.items():
        lo, hi = a3["intervals"][name]
        assert lo <= true <= hi, (name, true, lo, hi)
    est = a3["constants"]
    assert est["alpha"] == pytest.approx(TRUE["alpha"], abs=0.03)
    assert est["beta"] == pytest.approx(TRUE["beta"], abs=0.03)
    assert est["E"] == pytest.approx(TRUE["E"], rel=0.1)
    for name in ("A", "B"):  # the prefactors trade off against E and the exponents: within a factor 1.5
        assert abs(np.log(est[name] / TRUE[name])) < np.log(1.5), name
    assert a3["a"] == pytest.approx(TRUE["beta"] / (TRUE["alpha"] + TRUE["beta"]), abs=0.03)
    assert a3["intervals"]["alpha"][1] - a3["intervals"]["alpha"][0] < 0.2  # informative, not just wide
    assert a3["failed_draws"] == 0 and len(a3["samples"]["E"]) == 50
    # the compute-optimal N*(C) of the fit brackets the true one inside the data
    row = content["allocation"][1]
    true_n, _ = optimal(TRUE, row["C"])
    assert row["N_interval"][0] <= true_n <= row["N_interval"][1]
    assert content["allocation"][-1]["beyond_data"] and not content["allocation"][0]["beyond_data"]


def test_noise_free_data_is_fitted_exactly():
    data = _grid(noise=0.0)
    result = fit(data, draws=0)
    for name, true in TRUE.items():
        assert result.law[name] == pytest.approx(true, rel=1e-3), name


def test_objective_gradient_matches_finite_differences():
    data = _grid(seed=3)
    logN, logD, logL = np.log(data.N), np.log(data.D), np.log(data.L)
    theta = np.array([0.3, 5.5, 6.2, 0.33, 0.31])
    _, grad = objective(theta, logN, logD, logL)
    for i in range(5):
        step = np.zeros(5)
        step[i] = 1e-6
        numeric = (objective(theta + step, logN, logD, logL)[0] - objective(theta - step, logN, logD, logL)[0]) / 2e-6
        assert grad[i] == pytest.approx(numeric, rel=1e-4, abs=1e-6)


def test_optimal_allocation_minimises_loss_at_fixed_compute():
    C = 1e21
    n_opt, d_opt = optimal(HOFFMANN, C)
    assert 6 * n_opt * d_opt == pytest.approx(C)
    ns = n_opt * np.exp(np.linspace(-1, 1, 201))
    losses = predict(HOFFMANN, ns, C / (6 * ns))
    assert ns[np.argmin(losses)] == pytest.approx(n_opt, rel=0.01)
    n_k, d_k = optimal(HOFFMANN, C, k=8.0)  # another FLOPs-per-parameter-token convention: the same N at C * 6/8
    assert n_k == pytest.approx(optimal(HOFFMANN, C * 6 / 8)[0]) and 8 * n_k * d_k == pytest.approx(C)


def test_approach2_recovers_the_isoflop_exponent():
    rng = np.random.default_rng(0)
    N, D, C = [], [], []
    for c in np.logspace(18, 22, 5):
        n0, _ = optimal(HOFFMANN, c)
        sizes = n0 * 2.0 ** np.arange(-3, 4)
        N += list(sizes)
        D += list(c / (6 * sizes))
        C += [c] * len(sizes)
    N, D, C = map(np.asarray, (N, D, C))
    L = predict(HOFFMANN, N, D) * np.exp(rng.normal(0, 0.001, N.size))
    out = approach2(N, D, L, C)
    alpha, beta = HOFFMANN["alpha"], HOFFMANN["beta"]
    assert out["a"] == pytest.approx(beta / (alpha + beta), abs=0.02)
    assert out["b"] == pytest.approx(alpha / (alpha + beta), abs=0.02)
    assert out["a_groups"] == 5
    for group in out["groups"]:
        assert group["N_opt"] == pytest.approx(optimal(HOFFMANN, group["C"])[0], rel=0.2)


def test_approach2_leaves_out_a_group_whose_minimum_is_off_its_sizes():
    n0, _ = optimal(HOFFMANN, 1e20)
    sizes = n0 * 2.0 ** np.arange(2, 6)  # all larger than the optimum: the loss rises across the group
    out = approach2(sizes, 1e20 / (6 * sizes), predict(HOFFMANN, sizes, 1e20 / (6 * sizes)), np.full(4, 1e20))
    assert out["groups"][0]["N_opt"] is None and "outside" in out["groups"][0]["N_note"]
    assert out["a"] is None


def test_compute_groups_split_at_the_tolerance():
    C = np.array([1.0, 1.3, 2.2, 2.0, 4.1, 1.1])
    groups = compute_groups(C, tol=1.5)
    assert [sorted(C[g].tolist()) for g in groups] == [[1.0, 1.1, 1.3], [2.0, 2.2], [4.1]]


def _records(root, law=TRUE, sizes=(64, 96, 128, 192), tokens=(1e5, 2e5, 4e5, 8e5), noise=0.005):
    """Fabricated result.json files of a size x tokens grid whose val_nll follows `law` (N: params_non_embedding)."""
    rng = np.random.default_rng(1)
    for d in sizes:
        for t in tokens:
            record = make_record(d_model=d, tokens=t)
            n = record["model"]["params_non_embedding"]
            record["eval"]["val_nll"] = float(predict(law, n * 1e2, t * 1e3) * np.exp(rng.normal(0, noise)))
            write_record(root / f"model.d_model={d},train.length.tokens={t}", record)
    write_record(root / "model.d_model=32,train.length.tokens=1e5", make_record("diverged", d_model=32, tokens=1e5))


def test_fit_main_writes_fit_json_and_png_from_a_results_csv(tmp_path, capsys):
    _records(tmp_path / "runs" / "scaling")
    table = collect(tmp_path / "runs")
    csv = save_results(table, tmp_path / "results.csv")
    out = tmp_path / "fit"
    fit_main([str(csv), "-o", str(out), "--bootstrap", "20", "--keep", "10"])
    captured = capsys.readouterr()
    printed = captured.out
    # what it is doing while it bootstraps: plain lines on stderr (not a terminal), every 10% with counts
    progress = [line for line in captured.err.splitlines() if line.startswith("slm-fit: ")]
    assert progress[0] == "slm-fit: fitted 16 runs; bootstrap: 20 refits on resampled runs"
    assert [line.split(" refits")[0] for line in progress[1:]] == [f"slm-fit: bootstrap {k} of 20" for k in
                                                                     range(2, 21, 2)]
    assert "(100%)" in progress[-1] and "left" not in progress[-1] and "\r" not in captured.err
    assert "approach 3" in printed and "approach 2" in printed and "alpha" in printed
    assert "10x beyond the data" in printed and "16 completed runs" in printed and "1 not completed" in printed
    content = json.loads((out / "fit.json").read_text())
    assert content["kind"] == "slm-fit" and content["N"] == "params_non_embedding"
    assert len(content["data"]) == 16 and len(content["approach3"]["samples"]["alpha"]) == 10
    assert content["approach3"]["draws"] == 20
    assert content["flops_per_param_token"] > 0 and "train_flops" in content["compute_convention"]
    assert set(content["approach3"]["constants"]) == set(TRUE)
    assert (out / "fit.png").stat().st_size > 10_000
    assert not list(out.glob(".*tmp*"))  # the atomic write left no temporary file


@pytest.mark.parametrize("rows, needle", [
    ([{"d": d, "t": t} for d in (64, 128) for t in (1e5, 2e5, 4e5, 8e5)], "2 distinct model sizes"),
    ([{"d": d, "t": t} for d in (64, 96, 128, 192) for t in (1e5, 2e5)], "2 distinct token counts"),
    ([{"d": d, "t": 1e5 * (i + 1)} for i, d in enumerate((64, 96, 128, 192, 256))], "at least 6"),
])
def test_too_few_sizes_token_counts_or_runs_are_refused_in_one_line(tmp_path, capsys, rows, needle):
    table = pd.DataFrame([{"run": f"r{i}", "status": "completed", "val_nll": 2.0 + 1 / r["d"] + 1e4 / r["t"],
                           "params_non_embedding": 100 * r["d"] ** 2, "tokens": r["t"]} for i, r in enumerate(rows)])
    csv = tmp_path / "results.csv"
    table.to_csv(csv, index=False)
    with pytest.raises(SystemExit) as exc:
        fit_main([str(csv), "-o", str(tmp_path / "fit"), "--bootstrap", "0"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err and err.startswith("slm-fit: error:")
    assert "at least 3" in err or "at least 6" in err
    assert not (tmp_path / "fit" / "fit.json").exists()


def test_no_completed_run_with_a_validation_nll_is_refused(tmp_path, capsys):
    table = pd.DataFrame([{"run": "a", "status": "failed", "val_nll": None, "params_non_embedding": 1e5,
                           "tokens": 1e5}, {"run": "b", "status": "completed", "val_nll": 2.0, "val_nll_kind": "nelbo",
                                            "params_non_embedding": 1e5, "tokens": 1e5}])
    with pytest.raises(FitError, match="no completed run with a validation NLL"):
        fit_data(table)
    csv = tmp_path / "results.csv"
    table.to_csv(csv, index=False)
    with pytest.raises(SystemExit) as exc:
        fit_main([str(csv)])
    assert exc.value.code == 2 and "no completed run with a validation NLL" in capsys.readouterr().err


def test_compute_falls_back_to_6nd_and_params_choice(tmp_path):
    table = pd.DataFrame([{"status": "completed", "val_nll": float(predict(TRUE, 1e2 * d * d, t)),
                           "params_non_embedding": 1e2 * d * d, "params_total": 1.1e2 * d * d, "tokens": t}
                          for d in (10, 20, 40) for t in (1e8, 2e8, 4e8)])
    data = fit_data(table)
    assert data.flops_per_param_token == 6.0 and data.compute_source.startswith("6 N D")
    assert np.allclose(data.C, 6 * data.N * data.D)
    assert fit_data(table, "total").params_column == "params_total"
    with pytest.raises(FitError, match="params=bogus"):
        fit_data(table, "bogus")


def test_the_shipped_cpu_scaling_records_give_the_readme_fit():
    """The 25 real runs of `make scaling` in docs/scaling/ refit to the constants of docs/scaling/fit.json (the
    README's numbers): the end-to-end path from records to the law, on data no test generated."""
    from pathlib import Path

    docs = Path(__file__).resolve().parents[1] / "docs" / "scaling"
    shipped = json.loads((docs / "fit.json").read_text())
    data = fit_data(collect(docs / "runs" / "cpu_scaling"))
    assert len(data.L) == 25 and len(set(data.N)) == 5 and len(set(data.D)) == 5
    result = fit(data, draws=0)
    for name in ("A", "B", "alpha", "beta"):
        assert result.law[name] == pytest.approx(shipped["approach3"]["constants"][name], rel=1e-3)
    assert 0.44 < shipped["approach3"]["a_interval"][0] < shipped["approach3"]["a"] < shipped["approach3"]["a_interval"][1]


def test_fit_progress_is_one_redrawn_line_on_a_terminal():
    """On a terminal the bootstrap's progress redraws one line (\\r) after every refit and ends it once."""
    import io

    from analysis.cli import _Progress

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    stream = Terminal()
    report = _Progress("slm-fit", 25, stream=stream)
    for done in range(0, 6):
        report(done, 5)
    text = stream.getvalue()
    assert text.count("\r") == 6 and text.count("\n") == 2 and text.endswith("(100%), 0s\n")
    assert "bootstrap 3 of 5 refits (60%)" in text
