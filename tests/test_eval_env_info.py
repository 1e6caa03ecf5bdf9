"""lm-eval's environment report is made once per process (slm/eval/env_info.py): a sweep's later jobs copy it
into their results JSON instead of running collect_env's subprocesses again."""

from __future__ import annotations

import json
from pathlib import Path

import lm_eval.evaluator
import pytest

from slm.data.tokenizers import CharTokenizer
from slm.eval import env_info
from slm.eval.env_info import reused_env_info
from slm.eval.offline_tasks import speeches
from slm.eval.run import evaluate
from slm.eval.spec import EvalSpec
from slm.model import ModelConfig, Transformer
from slm.model.weights import save_model

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


@pytest.fixture
def counted_reports(monkeypatch):
    """lm-eval's add_env_info, counting its calls; an empty cache of reports."""
    monkeypatch.setattr(env_info, "_REPORTS", {})
    calls = []
    real = lm_eval.evaluator.add_env_info

    def add_env_info(storage):
        calls.append(1)
        real(storage)

    monkeypatch.setattr(lm_eval.evaluator, "add_env_info", add_env_info)
    return calls


def test_the_report_is_made_once_and_copied(counted_reports, tmp_path, monkeypatch):
    first, second, elsewhere = {}, {}, {}
    with reused_env_info():
        lm_eval.evaluator.add_env_info(first)
        lm_eval.evaluator.add_env_info(second)
        first["pretty_env_info"] = "changed by a caller"
        monkeypatch.chdir(tmp_path)  # upper_git_hash is read from the directory above the working directory
        lm_eval.evaluator.add_env_info(elsewhere)
    assert len(counted_reports) == 2
    assert second["pretty_env_info"] != "changed by a caller" and set(second) >= {"pretty_env_info", "lm_eval_version"}
    lm_eval.evaluator.add_env_info({})  # outside the block: lm-eval's own again
    assert len(counted_reports) == 3


def _tiny_run(path: Path) -> Path:
    text = "\n\n".join("\n".join(s) for s in speeches())
    tok = CharTokenizer(CharTokenizer.select(CharTokenizer.fit_counts([text]), None), unk=False, eot=False)
    model = Transformer(ModelConfig(n_layers=1, d_model=32, attention=dict(n_heads=2, n_kv_heads=1),
                                    vocab_size=tok.vocab_size, context_length=64))
    save_model(model, path / "model")
    tok.save(path / "model")
    return path


def test_two_evaluations_in_one_process_write_the_same_report(counted_reports, tmp_path):
    run = _tiny_run(tmp_path / "run")
    spec = EvalSpec(tasks=["slm_shakespeare_bpb"], limit=4, throughput=False, device="cpu", batch_size=8)
    files = [evaluate(run, spec, tmp_path / f"results_{i}.json")["results_file"] for i in range(2)]
    reports = [json.loads(Path(f).read_text()) for f in files]
    keys = ("pretty_env_info", "transformers_version", "lm_eval_version", "upper_git_hash")
    assert len(counted_reports) == 1
    assert [{k: r[k] for k in keys} for r in reports][0] == {k: reports[1][k] for k in keys}
    assert reports[0]["results"] == reports[1]["results"]
