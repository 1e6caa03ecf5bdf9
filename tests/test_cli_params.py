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


def test_budget_shows_width(capsys):
    run(["model=gpt2", "model.n_layers=24", "model.param_budget=70e6"])
    report = json.loads(capsys.readouterr().out)
    assert report["param_budget"] == 70e6 and report["d_model"] == 384 and report["n_heads"] == 6
    assert report["budget_error"] == pytest.approx((report["params_total"] - 70e6) / 70e6)


@pytest.mark.parametrize(
    "args, line",
    [
        (["model.norm=rsmnorm"], "slm-params: error: unknown norm 'rsmnorm'; choose one of: layernorm, rmsnorm, rmsnorm_gemma"),
        (["model.n_kv_heads=3"], "slm-params: error: model.n_kv_heads=3 is invalid: must divide n_heads=8"),
        (["model=gpt3"], "slm-params: error: In 'config': Could not find 'model/gpt3' Available options in 'model':"),
    ],
)
def test_bad_input_is_one_line(args, line):
    out = slm_params(*args)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.count("\n") == 1 and out.stderr.startswith(line)


def test_full_error_shows_traceback():
    out = slm_params("model.norm=rsmnorm", env={"HYDRA_FULL_ERROR": "1"})
    assert out.returncode != 0 and "Traceback" in out.stderr
