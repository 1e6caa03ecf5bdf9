"""lm-eval the way its users call it: `slm-lm-eval` / `python -m slm.eval run` on a run directory
whose name holds commas (a job key), results in lm-eval's own layout and in the run's result.json; a bad
run directory and a hub task while offline are one line in seconds; `slm-import-hf` carries the tokenizer
so that `slm-eval` can score the imported model; `tokenizer=gpt2` names the shipped GPT-2 BPE."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import time
from importlib import resources
from pathlib import Path

import pytest
import torch

from slm.cli.eval import main as slm_eval
from slm.cli.import_hf import main as import_hf
from slm.cli.lm_eval import main as slm_lm_eval
from slm.data.tokenizers import CharTokenizer
from slm.eval.lm_args import parse_model_args
from slm.eval.offline_tasks import speeches
from slm.model import ModelConfig, Transformer
from slm.model.weights import save_model
from slm.runs.record import load_record, update_record

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

JOB_KEY = "model.d_model=32,model.n_layers=2,tokenizer=char"  # `tokenizer=` is also one of the model's arguments
BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """A finished run as slm-train leaves it, in a directory named after a job key with commas."""
    run = tmp_path_factory.mktemp("runs") / "train" / JOB_KEY
    text = "\n\n".join("\n".join(s) for s in speeches())
    tok = CharTokenizer(CharTokenizer.select(CharTokenizer.fit_counts([text]), None), unk=False, eot=False)
    torch.manual_seed(0)
    model = Transformer(ModelConfig(n_layers=2, d_model=32, attention=dict(n_heads=4), vocab_size=tok.vocab_size,
                                    context_length=64))
    save_model(model, run / "model")
    tok.save(run / "model")
    update_record(run, status="completed", eval={"val_nll": 4.0})
    return run


@pytest.fixture(autouse=True)
def _lm_eval_logging(monkeypatch):
    """lm-eval's CLI, run in this process, hangs a handler on the stderr of the moment (pytest's capture) on
    its logger: keep that to the test."""
    import lm_eval.utils

    logger = logging.getLogger("lm_eval")
    for attr in ("handlers", "propagate", "level"):
        value = getattr(logger, attr)
        monkeypatch.setattr(logger, attr, list(value) if attr == "handlers" else value)
    monkeypatch.setattr(lm_eval.utils, "_LOGGING_CONFIGURED", lm_eval.utils._LOGGING_CONFIGURED)


def _env() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def _one_line_error(capsys, prog: str) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert err and err[-1].startswith(f"{prog}: error: "), err[-5:]
    assert not any(line.startswith("Traceback") for line in err), "\n".join(err)
    return err[-1]


# --------------------------------------------------------------------------------------------- model_args
def test_model_args_keep_a_path_with_commas_whole(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "a=1,b=2").mkdir(parents=True)
    (tmp_path / "runs" / "a=1,b=2,tokenizer=gpt2").mkdir()
    names = frozenset({"pretrained", "tokenizer", "batch_size", "device"})
    assert parse_model_args("pretrained=runs/a=1,b=2,batch_size=8", names=names) == \
        {"pretrained": "runs/a=1,b=2", "batch_size": 8}
    # the longest existing path wins; quoting or putting the argument first means the shorter one
    assert parse_model_args("pretrained=runs/a=1,b=2,tokenizer=gpt2", names=names) == \
        {"pretrained": "runs/a=1,b=2,tokenizer=gpt2"}
    assert parse_model_args("pretrained='runs/a=1,b=2',tokenizer=gpt2", names=names) == \
        {"pretrained": "runs/a=1,b=2", "tokenizer": "gpt2"}
    assert parse_model_args('tokenizer=gpt2,pretrained="runs/a=1,b=2",device=cpu', names=names) == \
        {"tokenizer": "gpt2", "pretrained": "runs/a=1,b=2", "device": "cpu"}
    # a path that does not exist runs up to the next argument of the model, so the error names all of it
    assert parse_model_args("pretrained=runs/x=1,y=2,batch_size=4", names=names) == \
        {"pretrained": "runs/x=1,y=2", "batch_size": 4}
    with pytest.raises(ValueError, match="expected key=value"):
        parse_model_args("pretrained=runs/a=1,b=2,,oops", names=names)


def test_lm_eval_python_api_keeps_the_path_whole(run):
    from lm_eval.api.registry import get_model

    import slm.eval.lm  # noqa: F401 - registers the `slm` model

    lm = get_model("slm").create_from_arg_string(f"pretrained={run},batch_size=4,device=cpu")
    assert lm.model_dir == run / "model" and lm.batch_size == 4


# --------------------------------------------------------------------------------------------- lm-eval CLI
def test_slm_lm_eval_scores_a_comma_run_into_lm_evals_layout_and_the_record(run, tmp_path):
    from lm_eval.utils import sanitize_model_name

    out = tmp_path / "out"
    started = time.time()
    proc = subprocess.run([str(BIN / "slm-lm-eval"), "--model", "slm", "--model_args", f"pretrained={run},batch_size=4",
                           "--tasks", "slm_shakespeare_mc", "--limit", "6", "--device", "cpu", "--output_path", str(out)],
                          capture_output=True, text=True, timeout=300, env=_env(), check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert time.time() - started < 120
    files = list((out / sanitize_model_name(str(run))).glob("results_*.json"))
    assert len(files) == 1, sorted(p.relative_to(out) for p in out.rglob("*"))
    saved = json.loads(files[0].read_text())
    assert saved["config"]["model_args"]["pretrained"] == str(run)
    assert saved["config"]["model_args"]["batch_size"] == 4
    lm = load_record(run)["eval"]["lm_eval"]
    assert lm["scores"]["slm_shakespeare_mc"] == saved["results"]["slm_shakespeare_mc"]["acc_norm,none"]
    assert lm["details"]["slm_shakespeare_mc"]["samples"] == 6 and lm["details"]["slm_shakespeare_mc"]["limit"] == 6
    assert Path(lm["results_file"]) == files[0].resolve()
    assert load_record(run)["eval"]["val_nll"] == 4.0  # merged, not replaced
    assert f"{run / 'result.json'}: eval updated" in proc.stdout and "slm_shakespeare_mc" in proc.stdout


def test_python_m_slm_eval_run_takes_the_comma_run(run, tmp_path, monkeypatch, capsys):
    """`python -m slm.eval run ...`, run as `python -m` runs it (runpy), in this process to save a start-up."""
    import runpy

    copy = tmp_path / "runs" / JOB_KEY
    shutil.copytree(run, copy)
    monkeypatch.setattr(sys, "argv", ["python -m slm.eval", "run", "--model", "slm", "--model_args",
                                      f"pretrained={copy}", "--tasks", "slm_offline", "--limit", "3", "--device",
                                      "cpu", "--output_path", str(tmp_path / "out.json")])
    runpy.run_module("slm.eval", run_name="__main__", alter_sys=True)
    out = capsys.readouterr().out
    assert "slm_shakespeare_bpb" in out and "bits_per_byte" in out and f"{copy / 'result.json'}: eval updated" in out
    written = list(tmp_path.glob("out_*.json"))  # lm-eval's layout for an --output_path ending in .json
    assert len(written) == 1
    lm = load_record(copy)["eval"]["lm_eval"]
    assert set(lm["scores"]) >= {"slm_shakespeare_bpb", "slm_shakespeare_mc"}
    assert lm["metrics"]["slm_shakespeare_bpb"] == "bits_per_byte,none"  # the suites' headline metrics
    assert lm["scores"]["slm_shakespeare_bpb"] == json.loads(written[0].read_text())["results"][
        "slm_shakespeare_bpb"]["bits_per_byte,none"]


@pytest.mark.parametrize("damage", ["missing", "config"])
def test_a_bad_run_directory_is_one_line_before_lm_eval_starts(run, tmp_path, capsys, damage):
    target = tmp_path / "runs" / JOB_KEY
    if damage == "config":
        shutil.copytree(run, target)
        config = target / "model" / "config.json"
        config.write_text(json.dumps({**json.loads(config.read_text()), "d_model": 64}))
    started = time.time()
    with pytest.raises(SystemExit) as exit_:
        slm_lm_eval(["--model_args", f"pretrained={target},batch_size=2", "--tasks", "slm_offline", "--limit", "2"],
                    prog="python -m slm.eval")
    line = _one_line_error(capsys, "python -m slm.eval")
    assert exit_.value.code == 2 and time.time() - started < 10
    if damage == "missing":  # no prefix exists: the path runs up to the first of the model's arguments
        assert f"{str(target).removesuffix(',tokenizer=char')}: no such run or checkpoint directory" in line
    else:
        assert str(target) in line
    if damage == "config":
        assert "[32] in the file, [64] in the model" in line


# --------------------------------------------------------------------------------------------- hub offline
def _no_hub(monkeypatch, tmp_path, offline: bool) -> None:
    """Offline mode (the env vars CI sets), or no offline vars and a hub endpoint nothing listens on; an
    empty HF cache either way."""
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_DATASETS_CACHE"):
        monkeypatch.delenv(var, raising=False)
    if offline:
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    else:
        for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
            monkeypatch.delenv(var, raising=False)
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
        monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")  # the probe is refused at once


@pytest.mark.parametrize("offline", [True, False], ids=["offline_vars", "no_network"])
def test_hub_task_while_offline_fails_in_seconds(run, tmp_path, monkeypatch, capsys, offline):
    _no_hub(monkeypatch, tmp_path, offline)
    why = "HF_HUB_OFFLINE=1 (offline mode)" if offline else "no connection to http://127.0.0.1:9 within 3 s"

    started = time.time()  # lm-eval's CLI, a task of lm-eval's own
    with pytest.raises(SystemExit) as exit_:
        slm_lm_eval(["--model_args", f"pretrained={run}", "--tasks", "hellaswag", "--limit", "2", "--device", "cpu"])
    line = _one_line_error(capsys, "slm-lm-eval")
    assert exit_.value.code == 2 and time.time() - started < 10, line
    assert "task hellaswag is not one of the offline tasks" in line and why in line

    (tmp_path / "tasks").mkdir()  # slm-eval, a task of --include_path whose data is on the hub
    (tmp_path / "tasks" / "hub_task.yaml").write_text(
        "task: hub_task\ndataset_path: slm-test/not-a-local-dataset\noutput_type: multiple_choice\n"
        "test_split: test\ndoc_to_text: '{{q}}'\ndoc_to_choice: '{{c}}'\ndoc_to_target: 0\n")
    started = time.time()
    with pytest.raises(SystemExit) as exit_:
        slm_eval([str(run), "--tasks", "hub_task", "--include_path", str(tmp_path / "tasks"), "--no_throughput",
                  "--no_record"])
    line = _one_line_error(capsys, "slm-eval")
    assert exit_.value.code == 2 and time.time() - started < 10, line
    assert "task hub_task needs its dataset from the Hugging Face hub (slm-test/not-a-local-dataset)" in line
    assert why in line


# --------------------------------------------------------------------------------------------- import-hf
def _small_bpe():
    """A PreTrainedTokenizerFast that is not GPT-2's: a 120-id BPE trained on Shakespeare (eos <|endoftext|>)."""
    import transformers as tf
    from tokenizers import Tokenizer, decoders, models, trainers

    text = resources.files("slm.data").joinpath("corpora/tiny_shakespeare/train.txt").read_text()[:100_000]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.decoder = decoders.Fuse()
    trainer = trainers.BpeTrainer(vocab_size=120, special_tokens=["<|endoftext|>", "<unk>"], show_progress=False)
    tok.train_from_iterator(text.splitlines(keepends=True), trainer)
    return tf.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", unk_token="<unk>")


def _gpt2_bpe():
    """GPT-2's tokenizer as transformers saves it, built offline from the BPE ranks shipped with slm."""
    import transformers as tf
    from tiktoken_ext import openai_public
    from transformers.convert_slow_tokenizer import TikTokenConverter

    ranks = str(resources.files("slm.data").joinpath("tokenizers_assets/gpt2.tiktoken"))
    converted = TikTokenConverter(vocab_file=ranks, pattern=openai_public.r50k_pat_str,
                                  extra_special_tokens=["<|endoftext|>"]).converted()
    return tf.PreTrainedTokenizerFast(tokenizer_object=converted, eos_token="<|endoftext|>")


def _hf_gpt2(path: Path, vocab_size: int, tokenizer=None) -> Path:
    import transformers as tf

    torch.manual_seed(0)
    tf.GPT2LMHeadModel(tf.GPT2Config(vocab_size=vocab_size, n_positions=64, n_embd=16, n_layer=1, n_head=2,
                                     bos_token_id=0, eos_token_id=0)).save_pretrained(path)
    if tokenizer is not None:
        tokenizer.save_pretrained(path)
    return path


FAST = ["--tasks", "slm_shakespeare_mc", "--limit", "3", "--no_throughput", "--device", "cpu", "--batch_size", "8"]


def test_import_hf_carries_a_hf_tokenizer_and_slm_eval_scores_it(tmp_path, capsys):
    hf = _hf_gpt2(tmp_path / "hf", 128, _small_bpe())
    import_hf([str(hf), str(tmp_path / "ckpt")])
    assert capsys.readouterr().out.strip().endswith("; tokenizer hf:hf")
    meta = json.loads((tmp_path / "ckpt" / "slm_tokenizer.json").read_text())
    assert meta["kind"] == "hf" and meta["eot"] and (tmp_path / "ckpt" / "hf_tokenizer" / "tokenizer.json").is_file()
    slm_eval([str(tmp_path / "ckpt"), *FAST, "--output_path", str(tmp_path / "scores.json")])
    results = json.loads((tmp_path / "scores.json").read_text())
    assert results["config"]["tokenizer"] == "hf:hf" and 0 <= results["results"]["slm_shakespeare_mc"]["acc,none"] <= 1


def test_import_hf_without_a_tokenizer_warns_and_slm_eval_takes_tokenizer_gpt2(tmp_path, capsys):
    hf = _hf_gpt2(tmp_path / "hf", 50257)
    capsys.readouterr()
    import_hf([str(hf), str(tmp_path / "ckpt")])
    captured = capsys.readouterr()
    assert "no tokenizer" in captured.err and captured.err.count("\n") == 1
    assert not (tmp_path / "ckpt" / "slm_tokenizer.json").exists()
    with pytest.raises(SystemExit) as exit_:
        slm_eval([str(tmp_path / "ckpt"), *FAST])
    assert exit_.value.code == 2 and "tokenizer=gpt2" in _one_line_error(capsys, "slm-eval")
    slm_eval([str(tmp_path / "ckpt"), *FAST, "--model_args", "tokenizer=gpt2", "--output_path", str(tmp_path / "s.json")])
    assert json.loads((tmp_path / "s.json").read_text())["config"]["tokenizer"] == "gpt2"

    # a tokenizer that cannot be had offline, or too large for the model, is one line and nothing is written
    for spec, message in ((str(tmp_path / "nowhere"), "no such directory"), ("gpt2", None)):
        with pytest.raises(SystemExit) as exit_:
            import_hf([str(_hf_gpt2(tmp_path / "small", 128)), str(tmp_path / f"out_{spec[-4:]}"), "--tokenizer", spec])
        line = _one_line_error(capsys, "slm-import-hf")
        assert exit_.value.code == 2 and (message or "has 50257 ids but the model only 128") in line
        assert not (tmp_path / f"out_{spec[-4:]}").exists()


@pytest.mark.slow  # building GPT-2's tokenizer from its 50k ranks takes ~6 s, the 50257-row model more
def test_import_hf_maps_gpt2s_bpe_to_the_shipped_tokenizer(tmp_path, capsys):
    from slm.eval.lm import SLMLM

    hf = _hf_gpt2(tmp_path / "hf", 50257, _gpt2_bpe())
    import_hf([str(hf), str(tmp_path / "ckpt")])
    assert capsys.readouterr().out.strip().endswith("; tokenizer gpt2")
    meta = json.loads((tmp_path / "ckpt" / "slm_tokenizer.json").read_text())
    assert meta["kind"] == "gpt2" and meta["eot"] and not (tmp_path / "ckpt" / "hf_tokenizer").exists()
    slm_eval([str(tmp_path / "ckpt"), *FAST, "--output_path", str(tmp_path / "s.json")])
    assert json.loads((tmp_path / "s.json").read_text())["config"]["tokenizer"] == "gpt2"
    lm = SLMLM(pretrained=str(tmp_path / "ckpt"), device="cpu")
    assert lm.prefix_token_id == 50256 and lm.tok_encode(" Hello world") == [18435, 995]
