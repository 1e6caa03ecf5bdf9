"""Sweeps as a user runs them (`slm-train -m`): failures recorded per job while the others complete,
re-runs that skip finished jobs, the experiment files of sweeps/ and their dry run."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from slm.model.params_report import params_report
from tests.conftest import compose_model_node

# a 1-layer, 32-wide model: a few seconds per job on a CPU
TINY = ["model=debug", "eval=none", "model.n_layers=1", "model.d_model=32", "train.validation.batches=1", "train.logging.interval=2",
        "train.logging.progress_bar=false"]


def tiny_but(*keys: str) -> list[str]:
    """TINY without the settings `keys`, which the test gives itself (a setting is given once)."""
    return [a for a in TINY if a.split("=")[0] not in keys]


def slm(tmp_path: Path, *args: str, module: str = "slm.cli.train", timeout: int = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "SLM_RUNS": str(tmp_path / "runs"), "SLM_CACHE": str(tmp_path.parent / "slm-cache"),
           "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", module, *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


def records(sweep: Path) -> dict[str, dict]:
    return {p.parent.name: json.loads(p.read_text()) for p in sweep.glob("*/result.json")}


def test_failed_diverged_and_invalid_jobs_are_recorded_and_the_others_complete(tmp_path):
    args = ["-m", "run_group=mixed", *tiny_but("model"), "train.length.steps=12", "train.grad_clip=null", "train.schedule.warmup_steps=0",
            "model=debug,nosuch", "train.lr=1e-3,1e4,-1"]
    out = slm(tmp_path, *args)
    assert out.returncode == 1, out.stderr[-3000:]  # a job failed: the sweep says so, after running all
    sweep = tmp_path / "runs" / "mixed"
    recs = records(sweep)
    by_lr = {k: r for k, r in recs.items() if ",model=debug," in k}
    status = {re.search(r"train.lr=([^,]+)", k).group(1): r["status"] for k, r in by_lr.items()}
    assert status == {"0.001": "completed", "10000.0": "diverged", "-1.0": "failed"}, status
    ok, = (r for r in by_lr.values() if r["status"] == "completed")
    assert 0 < ok["eval"]["val_nll"] < 10 and (sweep / next(k for k in by_lr if "0.001" in k) / "model").is_dir()
    bad, = (r for r in by_lr.values() if r["status"] == "failed")
    assert bad["error"].startswith("SettingsError: train.lr=-1 is invalid")
    assert bad["config"]["train"]["lr"] == -1  # the job's config is kept with its error
    nosuch = [r for k, r in recs.items() if ",model=nosuch," in k]
    assert len(nosuch) == 3 and all(r["status"] == "failed" and "model/nosuch" in r["error"] for r in nosuch)
    assert "sweep mixed: 6 jobs: 1 completed, 1 diverged, 4 failed" in out.stdout

    status_out = slm(tmp_path, str(sweep), module="slm.cli.status")
    assert status_out.returncode == 0
    assert "6 jobs: 4 failed, 1 diverged, 1 completed" in status_out.stdout
    assert "non-finite training loss" in status_out.stdout and "train.lr=-1 is invalid" in status_out.stdout

    # the same sweep again: nothing is launched, nothing is rewritten
    before = {k: r["updated_at"] for k, r in records(sweep).items()}
    again = slm(tmp_path, *args)
    assert again.returncode == 1 and "launching 0 of 6 jobs" in again.stdout, again.stdout[-2000:]
    assert ("launching 0 of 6 jobs; the others: 4 failed, 1 completed, 1 diverged (rerun_failed=true runs failed, "
            "diverged and invalid jobs again)") in again.stdout  # counted, not "completed, unreadable, or failed…"
    assert "Launching 1 jobs locally" not in again.stdout + again.stderr
    assert "Trainer.fit" not in again.stderr
    assert {k: r["updated_at"] for k, r in records(sweep).items()} == before

    # rerun_failed=true runs the failed and diverged ones again (those that compose: 2), records the
    # invalid ones again, and leaves the completed one alone
    rerun = slm(tmp_path, *args, "rerun_failed=true")
    assert "launching 2 of 6 jobs" in rerun.stdout, rerun.stdout[-2000:]
    assert "Launching 1 jobs locally" not in rerun.stdout + rerun.stderr  # Hydra's line per job: slm's says it
    after = {k: r["updated_at"] for k, r in records(sweep).items()}
    assert [k for k in after if after[k] == before[k]] == [k for k in by_lr if "0.001" in k]


def test_dry_run_prints_exact_counts_and_gpu_hours_and_writes_nothing(tmp_path):
    out = slm(tmp_path, "-m", "sweep=depth_width_gpt2_70m", "hydra.sweeper.dry_run=true")
    assert out.returncode == 0, out.stderr[-3000:]
    rows = {m.group(1): m.groups() for m in re.finditer(
        r"^(model\.d_model=(\d+),model\.n_layers=(\d+))\s+\d+\s+\d+\s+([\d,]+)\s+([\d,]+)\s+[\d,]+\s+(\d+)\s+(\S+)\s+(\S+)\s+(\S+)",
        out.stdout, re.M)}
    assert len(rows) == 7, out.stdout
    shapes = {(int(g[2]), int(g[1])) for g in rows.values()}
    assert shapes == {(4, 768), (12, 512), (16, 448), (24, 384), (32, 384), (48, 320), (64, 256)}
    key, d, layers, params, _, steps, tokens, flops, gpu_h = rows["model.d_model=384,model.n_layers=32"]
    report = params_report(compose_model_node("model=gpt2", "model.n_layers=32", "model.d_model=384",
                                              "model.vocab_size=50304"))  # GPT-2 BPE padded to 64
    assert int(params.replace(",", "")) == report["params_total"]
    tokens_run = int(steps) * 64 * 1024
    assert int(steps) == int(1e9 // (64 * 1024))
    expected_h = tokens_run * report["flops_per_token"] / (0.153 * 989.4e12) / 3600  # docs/benchmarks.md's MFU
    assert float(gpu_h) == pytest.approx(expected_h, abs=0.006)
    assert "15.3% MFU x 989.4 TFLOP/s" in out.stdout
    assert not (tmp_path / "runs").exists()  # nothing trained, no run directory


def test_sweep_files_compose_as_documented(tmp_path):
    seeds = slm(tmp_path, "-m", "sweep=[families_70m,seeds]", "hydra.sweeper.dry_run=true")
    assert seeds.returncode == 0, seeds.stderr[-3000:]
    keys = re.findall(r"^(model=\w+,train\.seed=\d)\s", seeds.stdout, re.M)
    assert len(keys) == 18 and "runs/families_70m/" in seeds.stdout
    assert len({k.split(",")[0] for k in keys}) == 6  # and gpt2, whose key names its unpadded vocabulary:
    gpt2 = re.findall(r"^model=gpt2,tokenizer\.pad_vocab_multiple=1,train\.seed=\d\s+32\s+384\s+([\d,]+)", seeds.stdout,
                      re.M)
    assert gpt2 == ["76,475,520"] * 3  # the study's 76.48M (padded to 50,304 rows: 76,493,568)
    dllm_canon = re.findall(r"^model=dllm_canon,tokenizer\.pad_vocab_multiple=1,train\.objective=mdlm,train\.seed=\d"
                            r"\s+32\s+384\s+([\d,]+)", seeds.stdout, re.M)
    assert dllm_canon == ["76,045,440"] * 3  # the study's 76.05M
    # every dense family at the shared 32 x 384 shape; the MoE at its own 24 layers, 67M active of 327M
    assert set(re.findall(r"^model=\w+,train\.seed=\d\s+(\d+)\s+(\d+)", seeds.stdout, re.M)) == {("32", "384")}
    moe = re.findall(r"^model\.n_layers=24,model=moe,train\.seed=\d\s+24\s+384\s+([\d,]+)\s+[\d,]+\s+([\d,]+)",
                     seeds.stdout, re.M)
    assert moe == [("327,371,136", "67,258,752")] * 3
    lfm2 = re.findall(r"^model=lfm2,train\.seed=\d\s+32\s+384\s+([\d,]+)", seeds.stdout, re.M)
    assert lfm2 == ["79,235,136"] * 3
    titans = re.findall(r"^model\.n_layers=28,model=titans_mac,train\.seed=\d\s+28\s+384\s+([\d,]+)", seeds.stdout,
                        re.M)
    assert titans == ["67,757,964"] * 3
    assert "note: attention.sliding_window=1024 >= context_length=1024: the sliding window has no effect" in seeds.stdout

    cpu = slm(tmp_path, "-m", "sweep=cpu_default", "hydra.sweeper.dry_run=true")
    assert cpu.returncode == 0, cpu.stderr[-3000:]
    rows = re.findall(r"^(\S*model=(gpt2|llama3_canon|llama3))\s+(\d+)\s+(\d+)\s+([\d,]+) ", cpu.stdout, re.M)
    assert len(rows) == 9 and {(r[1], r[2]) for r in rows} == {(f, n) for f in ("gpt2", "llama3", "llama3_canon")
                                                                for n in ("2", "4", "8")}
    for _, family, layers, width, params in rows:  # the width solved for the budget, with the char vocabulary
        assert abs(int(params.replace(",", "")) - 5e5) < 0.25 * 5e5, (family, layers, width, params)
    # one LFM2 and one MoE point at depth 4; the MoE sized by its active parameters
    extra = dict(re.findall(r"^\S*model=(lfm2|moe)\s+4\s+\d+\s+[\d,]+\s+[\d,]+\s+([\d,]+) ", cpu.stdout, re.M))
    assert set(extra) == {"lfm2", "moe"} and all(abs(int(v.replace(",", "")) - 5e5) < 0.25 * 5e5 for v in extra.values())


def test_lr_search_adds_an_lr_axis_per_point_and_the_report_ranks_at_the_best_lr(tmp_path):
    """hydra.sweeper.lr_search: each point at its lr x each multiplier (x1 keeps the point's own job key, so a
    sweep that adds a search reuses what ran), sweep.json says which multiplier each job is, the table and
    report take each configuration at its best lr and flag a best lr at the edge of the grid."""
    args = ["-m", "run_group=lrs", *tiny_but("model.n_layers"), "train.length.steps=6", "train.lr=2e-3", "model.n_layers=1,2",
            "hydra.sweeper.lr_search=[0.5,2]"]
    out = slm(tmp_path, *args)
    assert out.returncode == 0, out.stderr[-3000:]
    sweep = tmp_path / "runs" / "lrs"
    keys = sorted(records(sweep))
    assert len(keys) == 6 and sum("train.lr=0.001," in k or k.endswith("train.lr=0.001") for k in keys) == 2
    listing = json.loads((sweep / "sweep.json").read_text())
    assert sorted(listing["lr_multipliers"].values()) == [0.5, 0.5, 1.0, 1.0, 2.0, 2.0]
    ev = next(iter(records(sweep).values()))["eval"]  # every run: its loss in bits per byte (characters: 1 byte)
    assert ev["val_bytes_per_token"] == pytest.approx(1.0, abs=0.01)
    assert ev["val_bpb"] == pytest.approx(ev["val_nll"] / math.log(2) / ev["val_bytes_per_token"])
    from analysis import collect
    from analysis.report import lr_blocks
    from analysis.tuning import at_best_lr

    table = collect(sweep)
    assert sorted(table["lr"].unique()) == [1e-3, 2e-3, 4e-3]
    best = at_best_lr(table, "val_nll")
    assert len(best) == 2 and (best["shared_lr"] == 2e-3).all() and (best["n_lrs"] == 3).all()
    assert all(b == table.loc[table["val_nll"][table["lr"] == b].index, "lr"].iloc[0] for b in best["best_lr"])
    text = " ".join(b for b in lr_blocks(table, "val_nll") if isinstance(b, str))
    assert "at the shared lr" in text and ("best at the edge of the lr grid" in text or "inside its grid" in text)
    # a bad search is one line, before anything runs
    bad = slm(tmp_path, "-m", "run_group=lrs_bad", *TINY, "hydra.sweeper.lr_search=[0.5,-1]")
    assert bad.returncode != 0 and "hydra.sweeper.lr_search=[0.5, -1] is invalid" in bad.stderr
    assert not (tmp_path / "runs" / "lrs_bad").exists()


def test_bits_per_byte_of_a_character_model_and_of_gpt2_bpe(tmp_path):
    """bytes per token of a split, against the shipped raw text of that split: its UTF-8 bytes over the number
    of tokens (one document; an end-of-text token at most apart)."""
    from importlib import resources

    from slm.data import prepare

    raw = resources.files("slm.data").joinpath("corpora/tiny_shakespeare/valid.txt").read_bytes()
    for kind in ("char", "gpt2"):
        prepared = prepare({"cache_dir": str(tmp_path / "cache")}, {"kind": kind})
        n = prepared.sources[0].valid.n_tokens
        assert prepared.bytes_per_token("valid") == pytest.approx(len(raw) / n, rel=2 / n + 1e-6), kind
    assert prepared.bytes_per_token("valid") > 3.0  # GPT-2 BPE: ~4 bytes per token of English
