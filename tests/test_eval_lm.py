"""The `slm` lm-eval model, the offline tasks and `slm-eval` (slm.eval, slm.cli.eval), on a tiny char-level
checkpoint. Scores are checked against the model's own whole-sequence forward; agreement with lm-eval's
`hf` model is tests/test_eval_parity.py."""

from __future__ import annotations

import json
import time

import pytest
import torch
from lm_eval.api.instance import Instance

from slm.cli.eval import main as slm_eval
from slm.data.tokenizers import CharTokenizer
from slm.eval.lm import SLMLM
from slm.eval.offline_tasks import mc_documents, ppl_documents, speeches
from slm.eval.checks import EvalError
from slm.eval.run import load_tasks, task_manager
from slm.model import ModelConfig, Transformer
from slm.model.weights import save_model
from slm.runs.record import load_record, update_record

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

CTX = 64



@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A finished run as slm-train leaves it: result.json, model/ with weights and the char tokenizer."""
    run = tmp_path_factory.mktemp("run")
    text = "\n\n".join("\n".join(s) for s in speeches())
    tok = CharTokenizer(CharTokenizer.select(CharTokenizer.fit_counts([text]), None), unk=False, eot=False)
    torch.manual_seed(0)
    model = Transformer(ModelConfig(n_layers=2, d_model=48, attention=dict(n_heads=4, n_kv_heads=2),
                                    vocab_size=tok.vocab_size, context_length=CTX, canon=dict(set="AC")))
    save_model(model, run / "model")
    tok.save(run / "model")
    update_record(run, status="completed", eval={"val_nll": 4.0, "val_ppl": 54.6})
    return run


@pytest.fixture(scope="module")
def lm(run_dir):
    return SLMLM(pretrained=str(run_dir), batch_size=8, device="cpu")


def _requests(kind: str, args: list[tuple]) -> list[Instance]:
    return [Instance(kind, {}, a, i) for i, a in enumerate(args)]


def _reference_logprob(lm: SLMLM, ids: list[int], scored: int) -> float:
    """log p of the last `scored` of `ids` given the ones before, from one whole-sequence forward."""
    with torch.no_grad():
        logp = lm.model(torch.tensor([ids[:-1]])).log_softmax(-1)[0]
    return float(sum(logp[t - 1, ids[t]] for t in range(len(ids) - scored, len(ids))))


def test_offline_tasks_are_deterministic_and_load_without_network(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    assert mc_documents() == mc_documents() and ppl_documents() == ppl_documents()
    docs = mc_documents()
    assert len(docs) == 445 and all(d["choices"].count(d["choices"][d["label"]]) == 1 for d in docs)
    assert all(len(d["choices"]) == 4 and all(c.startswith(" ") for c in d["choices"]) for d in docs)
    assert min(len(d["text"]) for d in ppl_documents()[:-1]) >= 1000
    started = time.time()
    tasks = load_tasks(task_manager(["slm_shakespeare_bpb", "slm_shakespeare_mc"], []),
                       ["slm_shakespeare_bpb", "slm_shakespeare_mc"])
    assert time.time() - started < 30
    assert {t.task_name: len(t.eval_docs) for t in tasks} == {"slm_shakespeare_bpb": 100, "slm_shakespeare_mc": 445}


def test_hub_task_fails_fast_offline(tmp_path, monkeypatch):
    """A task whose dataset lives on the hub: one clear line, before any model is loaded."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    (tmp_path / "hub_task.yaml").write_text(
        "task: hub_task\ndataset_path: slm-test/not-a-local-dataset\noutput_type: multiple_choice\n"
        "test_split: test\ndoc_to_text: '{{q}}'\ndoc_to_choice: '{{c}}'\ndoc_to_target: 0\n")
    started = time.time()
    with pytest.raises(EvalError, match="hub_task needs its dataset from the Hugging Face hub") as err:
        load_tasks(task_manager(["hub_task"], [str(tmp_path)]), ["hub_task"])
    assert time.time() - started < 30 and "\n" not in str(err.value)


def test_loglikelihood_matches_the_model_with_and_without_prefix_sharing(lm):
    docs = mc_documents()[:6]
    args = [(d["context"], c) for d in docs for c in d["choices"]]
    args += [("ROMEO:\n" * 20, "But soft!")]  # longer than the context: truncated from the left, as hf does
    shared = lm.loglikelihood(_requests("loglikelihood", args), disable_tqdm=True)
    lm.prefix_sharing = False
    try:
        plain = lm.loglikelihood(_requests("loglikelihood", args), disable_tqdm=True)
    finally:
        lm.prefix_sharing = True
    for (context, cont), (a, greedy_a), (b, greedy_b) in zip(args, shared, plain):
        ctx_ids, cont_ids = lm._encode_pair(context, cont)  # lm-eval moves trailing spaces into cont
        ids = (ctx_ids + cont_ids)[-(CTX + 1):]
        assert a == pytest.approx(b, abs=1e-4) and greedy_a == greedy_b
        assert a == pytest.approx(_reference_logprob(lm, ids, len(cont_ids)), abs=1e-4)


def test_loglikelihood_rolling_scores_every_token_once(lm):
    texts = ["Hark!", ppl_documents()[0]["text"][:150]]  # one window, and three (150 chars, context 64)
    got = lm.loglikelihood_rolling(_requests("loglikelihood_rolling", [(t,) for t in texts]), disable_tqdm=True)
    for text, total in zip(texts, got):
        ids, expected, done = lm.tok_encode(text), 0.0, 0
        while done < len(ids):  # each window scores the next CTX tokens
            n = min(CTX, len(ids) - done)
            expected += _window_logprob(lm, ids, done, n)
            done += n
        assert total == pytest.approx(expected, rel=1e-5)
    assert lm.prefix_token_id == lm.tok_encode("\n")[0]  # char tokenizer without eot: the newline


def _window_logprob(lm: SLMLM, ids: list[int], done: int, n: int) -> float:
    """log p(ids[done:done+n]) given the (at most CTX) tokens before them, the prefix token first."""
    seq = [lm.prefix_token_id] + ids
    inputs = seq[max(0, done + n - CTX):done + n]  # CTX inputs ending right before the last scored token
    with torch.no_grad():
        logp = lm.model(torch.tensor([inputs])).log_softmax(-1)[0]
    targets = ids[done:done + n]
    return float(sum(logp[len(inputs) - n + j, t] for j, t in enumerate(targets)))


def test_generate_until_cuts_at_stop_strings(lm):
    context = "KING RICHARD III:\n"
    free = lm.generate_until(_requests("generate_until", [(context, {"until": [], "max_gen_toks": 20})]),
                             disable_tqdm=True)[0]
    assert len(free) == 20  # char tokenizer: one character per token, no stop string met
    stop = free[5:7]
    cut = lm.generate_until(_requests("generate_until", [(context, {"until": [stop], "max_gen_toks": 20}),
                                                         ("A", {"until": [stop], "max_gen_toks": 20})]),
                            disable_tqdm=True)
    assert cut[0] == free[:free.index(stop)]
    assert stop not in cut[1]


def test_slm_eval_cli_merges_scores_into_the_run(run_dir, capsys):
    slm_eval([str(run_dir), "--tasks", "offline", "--limit", "6", "--batch_size", "4"])
    out = capsys.readouterr().out
    record = load_record(run_dir)["eval"]
    assert record["val_nll"] == 4.0  # training's numbers are kept
    lm_eval = record["lm_eval"]
    assert set(lm_eval["scores"]) == {"slm_shakespeare_bpb", "slm_shakespeare_mc"}
    assert lm_eval["metrics"]["slm_shakespeare_mc"] == "acc_norm,none"
    assert lm_eval["averages"] == {} and lm_eval["average_tasks"] == {}  # one task is no average
    assert lm_eval["details"]["slm_shakespeare_mc"]["samples"] == 6
    results = json.loads((run_dir / lm_eval["results_file"]).read_text())
    assert results["results"]["slm_shakespeare_bpb"]["bits_per_byte,none"] == lm_eval["scores"]["slm_shakespeare_bpb"]
    throughput = record["throughput"]
    assert throughput["decode_tokens_per_s"] > 0 and throughput["batch_size"] == 1
    assert "average" not in out and "tokens/s" in out
    mc = lm_eval["details"]["slm_shakespeare_mc"]
    assert f"slm_shakespeare_bpb: bits_per_byte {lm_eval['scores']['slm_shakespeare_bpb']:.4f}\n" in out
    assert (f"slm_shakespeare_mc: acc_norm {lm_eval['scores']['slm_shakespeare_mc']:.4f} ± "
            f"{mc['acc_norm_stderr,none']:.4f} (stderr); chance 0.2500") in out


@pytest.mark.parametrize("argv, message", [
    (["{missing}"], "no such run or checkpoint directory"),
    (["{run}", "--include_path", "{missing}"], "no such directory"),
    (["{run}", "--batch_size", "0"], "--batch_size 0: must be >= 1"),
    (["{run}", "--bogus"], "unrecognized arguments: --bogus"),
])
def test_slm_eval_bad_input_is_one_line(run_dir, tmp_path, capsys, argv, message):
    argv = [a.format(run=run_dir, missing=tmp_path / "missing") for a in argv]
    with pytest.raises(SystemExit) as exit_:
        slm_eval(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.startswith("slm-eval: error:") and err.count("\n") == 1
    assert message in err


@pytest.mark.slow  # indexes all of lm-eval's task files (about 10 s)
def test_slm_eval_unknown_task_is_one_line(run_dir, capsys):
    with pytest.raises(SystemExit) as exit_:
        slm_eval([str(run_dir), "--tasks", "offline,no_such_task_anywhere"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1 and "unknown task(s) no_such_task_anywhere" in err


@pytest.mark.slow  # lm-eval's CLI indexes all of its task files
def test_lm_eval_cli_runs_the_slm_model(run_dir):
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "slm.eval", "run", "--model", "slm", "--model_args",
                          f"pretrained={run_dir}", "--tasks", "slm_offline", "--limit", "3", "--device", "cpu"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "slm_shakespeare_mc" in out.stdout and "bits_per_byte" in out.stdout


def test_a_sweeps_diffusion_args_are_silent_on_an_autoregressive_run(run_dir, caplog, capsys):
    """The cpu_default sweep gives every job eval.model_args.mc_num for its one diffusion point: an AR job scored
    after training (evaluate_config) leaves it out without a word; slm-eval --model_args mc_num=... on an AR run
    (asked for this model) says once that it does not apply."""
    import logging

    from slm.eval.run import evaluate_config

    node = {"tasks": ["slm_shakespeare_mc"], "limit": 2, "batch_size": 4, "device": "cpu", "throughput": False,
            "per_document": False, "model_args": {"mc_num": 16}}
    with caplog.at_level(logging.INFO):
        summary = evaluate_config(run_dir, node, log_file=run_dir / "eval" / "quiet.log")
    assert summary["scores"]["slm_shakespeare_mc"] is not None and summary["estimator"] == {"kind": "exact"}
    assert "mc_num" not in summary["results"]["config"]["model_args"]  # left out, not passed and ignored
    assert "do not apply" not in caplog.text and "do not apply" not in (run_dir / "eval" / "quiet.log").read_text()
    caplog.clear()
    with caplog.at_level(logging.INFO):
        slm_eval([str(run_dir), "--tasks", "slm_shakespeare_mc", "--limit", "2", "--no_throughput", "--no_record",
                  "--model_args", "mc_num=8"])
    assert caplog.text.count("mc_num ignored: diffusion model_args do not apply to an autoregressive model") == 1
    capsys.readouterr()
