"""A model preset brings its training objective: `slm-train model=dllm` trains masked diffusion with
no train.objective, a contradicting train.objective is refused in one line, and the sweeps that name the objective
keep their job keys."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from slm.cli.config import compose_config
from slm.objectives import ObjectiveError, check_preset
from tests.test_train_cli import FAST, record, run_dir, slm_train


def objective_of(*overrides: str) -> str:
    return OmegaConf.to_container(compose_config(list(overrides)), resolve=True)["train"]["objective"]


@pytest.mark.parametrize("preset, objective", [
    ("dllm", "mdlm"), ("dllm_canon", "mdlm"), ("dllm_recursive", "mdlm"), ("dhara", "mdlm"),
    ("ladder_linear", "last_token"), ("ladder_mlp", "last_token"),
    ("debug", "causal_lm"), ("llama3", "causal_lm"), ("ladder_transformer", "causal_lm"),
])
def test_train_objective_follows_the_preset(preset, objective):
    assert objective_of(f"model={preset}") == objective
    check_preset(OmegaConf.to_container(compose_config([f"model={preset}"]).model, resolve=True), objective)


def test_an_explicit_objective_is_kept_and_a_sweep_file_may_set_it():
    assert objective_of("model=dllm", "train.objective=mdlm") == "mdlm"
    assert objective_of("model=ladder_transformer", "train.objective=last_token") == "last_token"  # no preset's
    assert objective_of("sweep=arxiv2512_table1") == "last_token"  # arxiv2512_protocol's train.objective
    assert objective_of("sweep=ladder_table1") == "last_token"  # its former name still works


def test_a_contradicting_objective_is_refused_naming_both():
    dllm = OmegaConf.to_container(compose_config(["model=dllm"]).model, resolve=True)
    with pytest.raises(ObjectiveError, match=r"train.objective=causal_lm contradicts the model preset \(dllm\), which "
                                             r"trains with mdlm \(model.objective=mdlm\): leave train.objective out"):
        check_preset(dllm, "causal_lm")
    check_preset({**dllm, "objective": "causal_lm"}, "causal_lm")  # model.objective=causal_lm: the user's choice
    with pytest.raises(ObjectiveError, match=r"model.objective=mdlx: unknown objective 'mdlx'"):
        check_preset({**dllm, "objective": "mdlx"}, "mdlx")


def test_the_diffusion_sweeps_keep_their_job_keys():
    """The sweeps name train.objective=mdlm in their points: it stays in the key, so their runs resume."""
    from slm.cli.job_keys import key_from_overrides

    assert key_from_overrides(["model=dllm", "model.attention.n_kv_heads=2", "model.n_layers=4", "train.objective=mdlm"]) == \
        "model.attention.n_kv_heads=2,model.n_layers=4,model=dllm,train.objective=mdlm"
    points = OmegaConf.load("sweeps/cpu_default.yaml").hydra.sweeper.points
    assert ["model=dllm", "model.attention.n_kv_heads=2", "model.n_layers=4", "train.objective=mdlm"] in \
        [list(point) for point in points]


TINY_DLLM = ["model=dllm", "model.n_layers=2", "model.d_model=64", "model.attention.head_dim=16", "model.attention.n_kv_heads=2",
             "model.context_length=32", "train.length.steps=3", "train.batch_size=4"]


def test_slm_train_model_dllm_trains_masked_diffusion_as_it_is(tmp_path):
    out = slm_train(tmp_path, *FAST[1:], *TINY_DLLM, "train.validation.windows=4")
    assert out.returncode == 0, out.stderr[-2000:]
    r = record(run_dir(tmp_path))
    assert r["status"] == "completed" and r["config"]["train"]["objective"] == "mdlm"
    assert r["eval"]["val_nll_kind"] == "nelbo" and r["model"]["embedding"]["mask_token_id"] is not None
    # exp(a NELBO) is a bound on the perplexity, and is named so in the record and on the command line
    assert {"val_ppl_bound", "test_ppl_bound"} <= set(r["eval"]) and not {"val_ppl", "test_ppl"} & set(r["eval"])
    assert "train.objective" not in run_dir(tmp_path).name  # the key is the command's: model=dllm, ...


def test_slm_train_refuses_a_contradicting_objective_in_one_line(tmp_path):
    out = slm_train(tmp_path, *FAST[1:], *TINY_DLLM, "train.objective=causal_lm")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines()[-1].startswith(
        "slm-train: error: train.objective=causal_lm contradicts the model preset (dllm), which trains with mdlm")
    assert not list((tmp_path / "runs").rglob("*.json"))  # nothing written, no run directory left


def test_the_dry_run_marks_a_contradicting_job_invalid(tmp_path, capsys):
    from slm.sweeps.jobs import Job
    from slm.sweeps.plan import plan_row

    estimate = {"mfu": 0.4, "peak_flops": 1e15}
    bad = plan_row(Job([], tmp_path / "bad", compose_config([*TINY_DLLM, "train.objective=causal_lm"])), estimate)
    assert bad["error"].startswith("train.objective=causal_lm contradicts the model preset (dllm)")
    good = plan_row(Job([], tmp_path / "good", compose_config(TINY_DLLM)), estimate)
    assert good["error"] is None and good["params"] > 0


def test_a_sweep_records_a_contradicting_job_failed_and_goes_on(tmp_path):
    env = {**os.environ, "SLM_RUNS": str(tmp_path / "runs"), "SLM_CACHE": str(tmp_path.parent / "slm-cache")}
    out = subprocess.run([sys.executable, "-m", "slm.cli.train", "-m", "run_group=t", *FAST[1:], *TINY_DLLM,
                          "train.objective=causal_lm,mdlm"], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 1, out.stderr[-2000:]  # a sweep with a failed job exits 1, after every job
    runs = {p.name: record(p) for p in (tmp_path / "runs" / "t").iterdir() if (p / "result.json").exists()}
    (bad,) = [r for r in runs.values() if r["config"]["train"]["objective"] == "causal_lm"]  # a long key is cut:
    (good,) = [r for r in runs.values() if r["config"]["train"]["objective"] == "mdlm"]  # read the record
    assert bad["status"] == "failed" and "contradicts the model preset (dllm)" in bad["error"]
    assert good["status"] == "completed"
