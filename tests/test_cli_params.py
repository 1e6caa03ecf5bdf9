"""`slm-params` as a user runs it: a short summary on stdout, every field as JSON with --json; bad input is one
line on stderr and exit 2; it imports no more than counting needs."""

import json
import os
import re
import subprocess
import sys

import pytest

from slm.cli.params import run


def slm_params(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "slm.cli.params", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=120)


def test_gpt2_count():
    out = slm_params("model=gpt2", "tokenizer=gpt2", "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["params_total"] == 124_439_808
    assert report["params_embedding"] + report["params_non_embedding"] == report["params_total"]
    assert "PaLM" in report["flops_convention"]


@pytest.mark.parametrize("preset, total, active", [("lfm2", 79_235_136, 79_235_136), ("moe", 327_371_136, 67_258_752)])
def test_new_family_counts(capsys, preset, total, active):
    run([f"model={preset}", "tokenizer=gpt2", "tokenizer.pad_vocab_multiple=64", "--json"])  # the preset's 50,304
    report = json.loads(capsys.readouterr().out)
    assert (report["params_total"], report["params_active"]) == (total, active)
    if preset == "moe":
        moe = report["moe"]
        assert (moe["n_experts"], moe["top_k"], moe["expert_d_ff"], report["n_layers"]) == (16, 2, 672, 24)
    else:
        assert report["layer_types"] == ["conv", "conv", "attn"] and "moe" not in report


def test_notes_say_when_a_window_does_nothing(capsys):
    run(["model=gemma3", "--json"])
    assert any("sliding window has no effect" in note for note in json.loads(capsys.readouterr().out)["notes"])
    run(["model=gemma3", "model.attention.sliding_window=512", "--json"])
    assert json.loads(capsys.readouterr().out)["notes"] == []
    run(["model=gemma3"])
    assert "  note: attention.sliding_window=1024 >= context_length=1024: the sliding window has no effect" in \
        capsys.readouterr().out


def test_budget_shows_width(capsys):
    run(["model=gpt2", "model.n_layers=24", "model.param_budget=70e6", "tokenizer=gpt2", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert report["param_budget"] == 70e6 and report["d_model"] == 384 and report["attention"]["n_heads"] == 6
    assert report["budget_error"] == pytest.approx((report["params_total"] - 70e6) / 70e6)


@pytest.mark.parametrize(
    "args, line",
    [
        (["model.norm.kind=rsmnorm"], "slm-params: error: model.norm.kind='rsmnorm' is invalid: one of: layernorm, rmsnorm, "),
        (["model=llama3", "model.attention.n_kv_heads=3"], "slm-params: error: model.attention.n_kv_heads=3 is invalid: must divide n_heads=8"),
        (["model=gpt3"], "slm-params: error: model=gpt3: there is no conf/model/gpt3.yaml (did you mean model=gpt2?); choose one of: debug,"),
        (["model=base"], "slm-params: error: model=base: there is no conf/model/base.yaml; choose one of: debug,"),
        (["model=lfm2", "model.n_layers=2"], "slm-params: error: model.layer_types=['conv', 'conv', 'attn'] is invalid: "
                                             "has 3 entries for n_layers=2"),
        (["model.layer_types=[attn,mamba]"], "slm-params: error: model.layer_types=['attn', 'mamba'] is invalid: "
                                             "every item one of: attn, local_attn, conv, mac"),
        (["model=moe", "model.moe.top_k=17"], "slm-params: error: model.moe.top_k=17 is invalid: must be an integer in 1..n_experts=16"),
        (["model=moe", "model.moe.n_experts=0"], "slm-params: error: model.moe.n_experts=0 is invalid: model.mlp_types ['moe'] has moe "
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
    out = slm_params("model=llama3", "model.attention.n_kv_heads=3")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr == "slm-params: error: model.attention.n_kv_heads=3 is invalid: must divide n_heads=8\n"


def test_full_error_shows_traceback():
    out = slm_params("model.norm.kind=rsmnorm", env={"HYDRA_FULL_ERROR": "1"})
    assert out.returncode != 0 and "Traceback" in out.stderr


def test_the_default_output_is_a_short_summary(capsys):
    run(["model=gpt2", "tokenizer=gpt2"])
    assert capsys.readouterr().out.splitlines() == [
        "gpt2: 12 layers, d_model 768, 12 heads of 64, d_ff 3072, context 1024, vocabulary 50,257",
        "  vocabulary     50,257: the gpt2 tokenizer's",
        "  parameters     124,439,808 (124.4M)",
        "  active         124,439,808 (124.4M) per token",
        "  non-embedding  85,056,000 (85.06M)",
        "  FLOPs/token    8.552e+08 (training: forward + backward, PaLM convention)",
        "  (--json: every field, the parameters by part, the FLOPs convention)"]
    run(["model=moe", "tokenizer=gpt2", "tokenizer.pad_vocab_multiple=64"])
    out = capsys.readouterr().out
    assert "16 experts of 672, top-2" in out and "parameters     327,371,136 (327.4M)" in out
    assert "active         67,258,752 (67.26M) per token" in out and "budget" not in out
    run(["model=llama3", "model.n_layers=4", "model.param_budget=30e6", "model.attention.head_dim=32", "model.attention.n_kv_heads=2",
         "tokenizer=gpt2"])
    (budget,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  budget")]
    assert re.fullmatch(r"  budget         30,000,000 total parameters: [+-]\d\.\d\d% \(solved: d_model, mlp.d_ff \d+→\d+\)",
                        budget), budget
    run(["model=titans_mac"])
    assert "mixers 4 mac + 24 attn" in capsys.readouterr().out
    run(["model=ladder_linear"])
    assert capsys.readouterr().out.startswith("ladder_linear: a linear window model over 128 tokens")


def test_it_imports_no_more_than_counting_needs():
    """Counting needs the model layer (and torch, which its components are built on), not torch._dynamo (the MoE's
    eager-only expert loop imports it lazily), Lightning, lm-eval or the analysis code."""
    probe = ("import sys, runpy\nsys.argv = ['slm-params', 'model=moe']\n"
             "runpy.run_module('slm.cli.params', run_name='__main__')\n"
             "print(sorted(m for m in ('torch._dynamo', 'lightning', 'lm_eval', 'pandas', 'analysis', 'transformers') "
             "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"
