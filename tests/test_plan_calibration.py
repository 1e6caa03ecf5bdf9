"""The dry run's GPU-hours calibrated from measurement: the median MFU of completed runs of the same family,
measured on a GPU at the estimate's peak, under $SLM_RUNS; the fixed assumption only without such runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from slm.sweeps.jobs import Job
from slm.sweeps.plan import print_plan
from slm.cli.config import compose_config
from slm.runs.record import write_json_atomic
from tests.test_sweep_grid import slm

H100 = "NVIDIA H100 80GB HBM3"
ESTIMATE = OmegaConf.to_container(OmegaConf.load(Path(__file__).parents[1] / "conf/hydra/sweeper/grid.yaml").estimate)


def run(root: Path, name: str, family: str = "gpt2", mfu=0.2, status: str = "completed", device: str = H100,
        peak: float = 989.4e12) -> None:
    write_json_atomic(root / name / "result.json", {
        "schema_version": 1, "status": status, "model": {"family": family},
        "training": {"tokens_per_s": 1e5, "mfu": mfu, "peak_flops": peak, "precision": "bf16-mixed"},
        "environment": {"device": device}})


def plan(tmp_path, monkeypatch, capsys, *models: str, estimate: dict = ESTIMATE) -> tuple[dict, str]:
    monkeypatch.setenv("SLM_RUNS", str(tmp_path / "runs"))
    jobs = [Job([m], tmp_path / "plan" / m, compose_config([f"model={m}", "model.n_layers=2", "model.d_model=384",
                                                            "tokenizer=gpt2", "train.length.tokens=1e7"])) for m in models]
    rows = print_plan("t", tmp_path / "plan", jobs, estimate)
    return {r["family"]: r for r in rows}, capsys.readouterr().out


def hours(row: dict, mfu: float) -> float:
    return row["flops"] / (mfu * 989.4e12) / 3600


def test_without_measured_runs_the_assumed_mfu(tmp_path, monkeypatch, capsys):
    rows, out = plan(tmp_path, monkeypatch, capsys, "gpt2", "llama3")
    assert ESTIMATE["mfu"] is None and ESTIMATE["assumed_mfu"] == 0.153  # docs/benchmarks.md's measured MFU
    assert rows["gpt2"]["gpu_hours"] == pytest.approx(hours(rows["gpt2"], 0.153))
    assert "(15.3% MFU x 989.4 TFLOP/s, H100 SXM, bf16 dense)" in out
    assert re.search(r"^MFU of gpt2, llama3: 15\.3%, assumed .*: the one measured figure \(llama3 70M, .*docs/benchmarks"
                     r"\.md.*\); no completed run under .*runs/ measured at 989\.4", out, re.M), out


def test_measured_mfu_of_the_family_sets_the_gpu_hours(tmp_path, monkeypatch, capsys):
    root = tmp_path / "runs"
    run(root, "depth/a", mfu=0.1)
    run(root, "depth/b", mfu=0.2)
    run(root, "other/c", mfu=0.3)
    # none of these is used: another family, a failed run, a run on a CPU, another precision (TF32 peak),
    # a run still going, an MFU that is not a number, and a result.json that cannot be read
    run(root, "depth/llama", family="llama3", mfu=0.9)
    run(root, "depth/failed", mfu=0.01, status="failed")
    run(root, "cpu/c1", mfu=0.01, device="cpu (2 threads)")
    run(root, "tf32/t1", mfu=0.01, peak=494.7e12)
    run(root, "depth/going", mfu=0.01, status="running")
    run(root, "depth/nan", mfu="nan")
    (root / "depth" / "broken").mkdir()
    (root / "depth" / "broken" / "result.json").write_text("{not json")

    rows, out = plan(tmp_path, monkeypatch, capsys, "gpt2")
    assert rows["gpt2"]["gpu_hours"] == pytest.approx(2 * hours(rows["gpt2"], 0.4))  # median 20%: twice 40%'s
    line = next(x for x in out.splitlines() if x.startswith("MFU of gpt2"))
    assert line == f"MFU of gpt2: 20.0%, measured: median of 3 completed gpt2 runs on {H100}: depth/a, depth/b, other/c"
    assert "(20% MFU x 989.4 TFLOP/s" in out
    for unused in ("llama", "failed", "c1", "t1", "going", "nan", "broken"):
        assert unused not in line


def test_a_family_without_runs_takes_the_median_of_every_family(tmp_path, monkeypatch, capsys):
    root = tmp_path / "runs"
    for i, mfu in enumerate((0.1, 0.2, 0.25, 0.3, 0.5)):
        run(root / "g", f"r{i}", mfu=mfu)
    run(root / "g", "llama", family="llama3", mfu=0.1)
    rows, out = plan(tmp_path, monkeypatch, capsys, "gpt2", "llama3", "qwen3")
    assert rows["gpt2"]["gpu_hours"] == pytest.approx(hours(rows["gpt2"], 0.25))
    assert rows["llama3"]["gpu_hours"] == pytest.approx(hours(rows["llama3"], 0.1))
    assert rows["qwen3"]["gpu_hours"] == pytest.approx(hours(rows["qwen3"], 0.225))  # the median of all six
    assert "(MFU below x 989.4 TFLOP/s" in out
    assert "MFU of gpt2: 25.0%, measured: median of 5 completed gpt2 runs on" in out
    assert "g/r0, g/r1, g/r2 (+2 more)" in out
    assert f"MFU of llama3: 10.0%, measured: median of 1 completed llama3 run on {H100}: g/llama" in out
    assert "MFU of qwen3: 22.5%, measured: median of 6 completed runs of any family on" in out


def test_runs_at_another_peak_are_counted_not_used(tmp_path, monkeypatch, capsys):
    run(tmp_path / "runs", "a100/a", mfu=0.3, device="NVIDIA A100-SXM4-80GB", peak=312e12)
    rows, out = plan(tmp_path, monkeypatch, capsys, "gpt2")
    assert rows["gpt2"]["gpu_hours"] == pytest.approx(hours(rows["gpt2"], 0.153))
    assert "15.3%, assumed" in out and "(1 at other peaks: set hydra.sweeper.estimate.peak_flops to theirs)" in out
    a100 = {**ESTIMATE, "peak_flops": 312e12, "device": "A100 SXM, bf16 dense"}
    rows, out = plan(tmp_path, monkeypatch, capsys, "gpt2", estimate=a100)
    assert rows["gpt2"]["gpu_hours"] == pytest.approx(rows["gpt2"]["flops"] / (0.3 * 312e12) / 3600)
    assert "MFU of gpt2: 30.0%, measured: median of 1 completed gpt2 run on NVIDIA A100-SXM4-80GB: a100/a" in out


def test_a_cpu_sweep_gets_its_cpu_wall_time_from_the_cpu_runs_measured_here(tmp_path, monkeypatch, capsys):
    """A sweep that trains on this machine's CPU: the GPU-hours are not its time; the dry run adds the CPU wall time at
    the training FLOP/s (tokens_per_s x flops_per_token) of the completed CPU runs of its family (a GPU run is not
    one of them), and says when no CPU run has measured it yet."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # the same on a machine with a GPU
    _, out = plan(tmp_path, monkeypatch, capsys, "gpt2")
    assert "CPU: 1 job would train on this machine's CPU, where the GPU-hours do not apply; no completed CPU run" in out
    root = tmp_path / "runs"
    for name, speed in (("cpu/a", 1e4), ("cpu/b", 3e4), ("cpu/c", 2e4)):
        write_json_atomic(root / name / "result.json", {
            "schema_version": 1, "status": "completed", "model": {"family": "gpt2", "flops_per_token": 1e6},
            "training": {"tokens_per_s": speed}, "environment": {"device": "cpu (1 threads)"}})
    run(root, "gpu/g")  # measured on a GPU: not a CPU speed
    rows, out = plan(tmp_path, monkeypatch, capsys, "gpt2")
    line = next(x for x in out.splitlines() if x.startswith("CPU:"))
    from slm.durations import duration

    assert line.startswith(f"CPU: about {duration(rows['gpt2']['flops'] / 2e10)} of training for the 1 job not "
                           "completed, one after another") and "median 20 GFLOP/s on cpu (1 threads); run group cpu)" \
        in line, line


def test_an_mfu_given_is_used_as_given(tmp_path, monkeypatch, capsys):
    run(tmp_path / "runs", "g/a", mfu=0.1)
    rows, out = plan(tmp_path, monkeypatch, capsys, "gpt2", estimate={**ESTIMATE, "mfu": 0.3})
    assert rows["gpt2"]["gpu_hours"] == pytest.approx(hours(rows["gpt2"], 0.3))
    assert "MFU of gpt2: 30.0%, as given (hydra.sweeper.estimate.mfu): the one measured figure is 15.3%" in out
    assert "g/a" not in out


def test_the_cli_dry_run_calibrates_from_runs_under_slm_runs(tmp_path):
    run(tmp_path / "runs" / "earlier", "a", mfu=0.2)
    out = slm(tmp_path, "-m", "sweep=depth_width_gpt2_70m", "hydra.sweeper.dry_run=true")
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"MFU of gpt2: 20.0%, measured: median of 1 completed gpt2 run on {H100}: earlier/a" in out.stdout
    given = slm(tmp_path, "-m", "sweep=depth_width_gpt2_70m", "hydra.sweeper.dry_run=true",
                "hydra.sweeper.estimate.mfu=0.4")
    assert "MFU of gpt2: 40.0%, as given (hydra.sweeper.estimate.mfu)" in given.stdout, given.stdout[-2000:]
    total = [float(re.search(r"^total\s.*?\s(\S+)\s+\(", o.stdout, re.M).group(1)) for o in (out, given)]
    assert total[0] == pytest.approx(2 * total[1], rel=0.01)
