"""`slm-params` as a user runs it: JSON on stdout; bad input is one line on stderr and exit 2."""

import json
import os
import subprocess
import sys

import pytest

from slm.cli.params import run


def slm_params(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "slm.cli.params", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=120)


def test_gpt2_count():
    out = slm_params("model=gpt2")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["params_total"] == 124_439_808
    assert report["params_embedding"] + report["params_non_embedding"] == report["params_total"]
    assert "PaLM" in report["flops_convention"]


@pytest.mark.parametrize("preset, total, active", [("lfm2", 79_235_136, 79_235_136), ("moe", 327_371_136, 67_258_752)])
def test_new_family_counts(capsys, preset, total, active):
    run([f"model={preset}"])
    report = json.loads(capsys.readouterr().out)
    assert (report["params_total"], report["params_active"]) == (total, active)
    if preset == "moe":
        assert (report["n_experts"], report["top_k"], report["expert_d_ff"], report["n_layers"]) == (16, 2, 672, 24)
    else:
        assert report["layer_types"] == ["conv", "conv", "attn"] and "n_experts" not in report


def test_notes_say_when_a_window_does_nothing(capsys):
    run(["model=gemma3"])
    assert any("sliding window has no effect" in note for note in json.loads(capsys.readouterr().out)["notes"])
    run(["model=gemma3", "model.sliding_window=512"])
    assert json.loads(capsys.readouterr().out)["notes"] == []


def test_budget_shows_width(capsys):
    run(["model=gpt2", "model.n_layers=24", "model.param_budget=70e6"])
    report = json.loads(capsys.readouterr().out)
    assert report["param_budget"] == 70e6 and report["d_model"] == 384 and report["n_heads"] == 6
    assert report["budget_error"] == pytest.approx((report["params_total"] - 70e6) / 70e6)


@pytest.mark.parametrize(
    "args, line",
    [
        (["model.norm=rsmnorm"], "slm-params: error: unknown norm 'rsmnorm'; choose one of: layernorm, rmsnorm, rmsnorm_gemma"),
        (["model=llama3", "model.n_kv_heads=3"], "slm-params: error: model.n_kv_heads=3 is invalid: must divide n_heads=8"),
        (["model=gpt3"], "slm-params: error: model=gpt3: there is no conf/model/gpt3.yaml (did you mean model=gpt2?); choose one of: debug,"),
        (["model=base"], "slm-params: error: model=base: there is no conf/model/base.yaml; choose one of: debug,"),
        (["model=lfm2", "model.n_layers=2"], "slm-params: error: model.layer_types=['conv', 'conv', 'attn'] is invalid: "
                                             "has 3 entries for n_layers=2"),
        (["model.layer_types=[attn,mamba]"], "slm-params: error: model.layer_types=['attn', 'mamba'] is invalid: "
                                             "unknown mixer 'mamba'; choose one of: attn, local_attn, conv"),
        (["model=moe", "model.top_k=17"], "slm-params: error: model.top_k=17 is invalid: must be an integer in 1..n_experts=16"),
        (["model=moe", "model.n_experts=0"], "slm-params: error: model.n_experts=0 is invalid: mlp_types ['moe'] has moe "
                                             "layers"),
        (["model=moe", "model.budget_count=experts", "model.param_budget=1e6"],
         "slm-params: error: model.budget_count='experts' is invalid: choose one of: total, active"),
    ],
)
def test_bad_input_is_one_line(capsys, args, line):
    with pytest.raises(SystemExit) as exit_:
        run(args)
    out = capsys.readouterr()
    assert exit_.value.code == 2 and out.out == ""
    assert out.err.count("\n") == 1 and out.err.startswith(line), out.err
    assert "base" not in out.err.split("choose one of:")[-1].replace(",", " ").split()  # base is not a preset


def test_bad_input_from_the_command_line_exits_2_with_one_line():
    out = slm_params("model=llama3", "model.n_kv_heads=3")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr == "slm-params: error: model.n_kv_heads=3 is invalid: must divide n_heads=8\n"


def test_full_error_shows_traceback():
    out = slm_params("model.norm=rsmnorm", env={"HYDRA_FULL_ERROR": "1"})
    assert out.returncode != 0 and "Traceback" in out.stderr
