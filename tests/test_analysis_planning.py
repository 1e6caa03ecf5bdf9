"""slm-plan: tokens and predicted loss under the published fits by hand, the compute-optimal allocation, MFU from
the user's GPU runs (CPU runs ignored) or assumed, an slm-fit result with intervals, and one-line refusals."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from analysis.cli import plan_main
from analysis.fit import FitData, fit, optimal, predict
from analysis.fit_output import write
from analysis.planning import GPU_PEAK_FLOPS, PUBLISHED, PlanError, parse, plan
from tests.test_analysis_collect import make_record, write as write_record

EXAMPLE = ["gpu_hours=184", "gpu=v100", "n_gpus=8", "mfu=0.35", "params=40e6"]


@pytest.fixture(autouse=True)
def _no_runs_dir(tmp_path, monkeypatch):
    """No runs/ or $SLM_RUNS to measure MFU from unless a test makes one."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SLM_RUNS", raising=False)


def test_published_fits_by_hand():
    result = plan(parse(EXAMPLE))
    compute = 184 * 3600 * 8 * 0.35 * 125e12
    assert result["compute"] == pytest.approx(compute)
    tokens = compute / (6 * 40e6)
    hoffmann, epoch = result["fits"]
    assert hoffmann["key"] == "hoffmann" and epoch["key"] == "epoch"
    assert hoffmann["tokens"] == pytest.approx(tokens) and hoffmann["tokens_per_param"] == pytest.approx(tokens / 40e6)
    assert hoffmann["loss_at"] == pytest.approx(1.69 + 406.4 / 40e6 ** 0.34 + 410.7 / tokens ** 0.28)
    assert epoch["loss_at"] == pytest.approx(1.8172 + 482.01 / 40e6 ** 0.3478 + 2085.43 / tokens ** 0.3658)
    assert "loss_interval" not in hoffmann  # point estimates: no interval
    # compute-optimal: 6 N* D* = C and N* minimises the loss along it
    assert 6 * hoffmann["N_opt"] * hoffmann["D_opt"] == pytest.approx(compute)
    ns = hoffmann["N_opt"] * np.exp(np.linspace(-1, 1, 401))
    law = {k: PUBLISHED["hoffmann"][k] for k in ("E", "A", "B", "alpha", "beta")}
    assert ns[np.argmin(predict(law, ns, compute / (6 * ns)))] == pytest.approx(hoffmann["N_opt"], rel=0.01)
    n, d = optimal(law, compute)
    assert (n, d) == pytest.approx((hoffmann["N_opt"], hoffmann["D_opt"]))


def test_output_names_the_fits_and_the_units(capsys):
    plan_main(EXAMPLE)
    out = capsys.readouterr().out
    assert "Hoffmann et al. 2022" in out and "Besiroglu et al. 2024" in out
    assert "MFU 0.35: as given" in out and "MassiveText" in out and "nats/token" in out
    assert "1472 GPU-hours" in out and "V100" in out


def test_unknown_gpu_is_one_line_listing_the_names(capsys):
    with pytest.raises(SystemExit) as exc:
        plan_main(["gpu_hours=10", "gpu=b300", "params=1e8"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("slm-plan: error: gpu=b300")
    assert all(name in err for name in GPU_PEAK_FLOPS)


@pytest.mark.parametrize("argv, needle", [
    (["gpu_hours=10", "gpu=h100", "mfu=35"], "a fraction"),
    (["gpu_hours=-1", "gpu=h100"], "gpu_hours=-1"),
    (["gpu_hours=10"], "give gpu="),
    (["gpu=h100"], "give gpu_hours="),
    (["gpus=8"], "unknown key 'gpus'"),
    (["h100"], "expected key=value"),
    (["gpu_hours=1", "gpu=h100", "n_gpus=1.5"], "whole number"),
    (["flops=1e21", "gpu=h100"], "leave out gpu"),
    (["flops=1e21", "fit=nowhere.json"], "no such file"),
])
def test_bad_arguments_are_refused_in_one_line(capsys, argv, needle):
    with pytest.raises(SystemExit) as exc:
        plan_main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err


def test_help(capsys):
    plan_main(["--help"])
    out = capsys.readouterr().out
    assert out.startswith("usage: slm-plan") and all(key in out for key in ("gpu_hours", "mfu", "params", "fit"))


def _gpu_run(root, name, mfu, device="NVIDIA H100 80GB HBM3", status="completed"):
    record = make_record(status=status)
    record["environment"]["device"] = device
    if "training" in record:
        record["training"]["mfu"] = mfu
    write_record(root / name, record)


def test_mfu_defaults_to_the_median_of_completed_gpu_runs(tmp_path):
    runs = tmp_path / "runs" / "g"
    _gpu_run(runs, "a", 0.30)
    _gpu_run(runs, "b", 0.50)
    _gpu_run(runs, "c", 0.42)
    _gpu_run(runs, "cpu", 0.99, device="cpu (2 threads)")  # CPU: ignored
    _gpu_run(runs, "failed", 0.01, status="failed")        # not completed: ignored
    result = plan(parse(["gpu_hours=10", "gpu=h100"]))     # runs/ in the working directory
    assert result["compute"] == pytest.approx(10 * 3600 * 0.42 * 989.4e12)
    assert "measured: median of 3 completed GPU runs" in result["how"][1]
    explicit = plan(parse(["gpu_hours=10", "gpu=h100", f"runs={runs}"]))
    assert explicit["compute"] == pytest.approx(result["compute"])


def test_mfu_is_assumed_without_runs_and_says_so(tmp_path):
    result = plan(parse(["gpu_hours=10", "gpu=a100"]))
    assert result["compute"] == pytest.approx(10 * 3600 * 0.153 * 312e12)
    assert "assumed" in result["how"][1]
    cpu_only = tmp_path / "cpu_runs"
    _gpu_run(cpu_only, "x", None, device="cpu (2 threads)")
    result = plan(parse(["gpu_hours=10", "gpu=a100", f"runs={cpu_only}"]))
    assert "assumed (no completed GPU run with an MFU" in result["how"][1]


def test_a_fit_json_from_slm_fit_gives_intervals(tmp_path, capsys):
    law = {"E": 1.5, "A": 300.0, "B": 400.0, "alpha": 0.35, "beta": 0.3}
    N, D = (g.ravel() for g in np.meshgrid(np.logspace(6, 8, 4), np.logspace(8, 10, 4), indexing="ij"))
    L = predict(law, N, D) * np.exp(np.random.default_rng(0).normal(0, 0.01, N.size))
    data = FitData([f"r{i}" for i in range(N.size)], N, D, L, 7.0 * N * D, "params_non_embedding", 7.0, "train_flops")
    path, _, content = write(fit(data, draws=30), tmp_path / "fit")
    assert json.loads(path.read_text())["flops_per_param_token"] == 7.0
    result = plan(parse(["flops=1e19", "params=3e7", f"fit={tmp_path / 'fit'}"]))
    (row,) = result["fits"]
    assert row["key"] == "fit" and row["N"] == "params_non_embedding"
    assert row["tokens"] == pytest.approx(1e19 / (7.0 * 3e7))  # the fit's FLOPs per parameter-token, not 6
    lo, hi = row["loss_interval"]
    assert lo <= row["loss_at"] <= hi and hi - lo < 0.5
    lo, hi = row["N_opt_interval"]
    assert lo <= row["N_opt"] <= hi
    assert 7.0 * row["N_opt"] * row["D_opt"] == pytest.approx(1e19)
    plan_main(["flops=1e19", "params=3e7", f"fit={path}"])
    out = capsys.readouterr().out
    assert "your fit" in out and "95% bootstrap interval" in out and "MassiveText" not in out
    assert not math.isnan(row["loss_opt"])


def test_a_file_that_is_not_a_fit_is_refused(tmp_path):
    bad = tmp_path / "other.json"
    bad.write_text(json.dumps({"kind": "something else"}))
    with pytest.raises(PlanError, match="not a fit.json written by slm-fit"):
        plan(parse(["flops=1e19", f"fit={bad}"]))
