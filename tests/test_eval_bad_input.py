"""`slm-eval` on damaged inputs: every case is one line on stderr, `slm-eval: error: ...`, exit code 2,
no traceback, and every file of the run directory that existed before is byte-identical after (no temporary
file left). Each case damages a fresh copy of a tiny run directory (as slm-train leaves it: result.json,
model/ with config.json, model.safetensors and the char tokenizer); checkpoint checks run before any task
or model is loaded, the record and disk cases score two documents of one offline task."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
from pathlib import Path

import pytest
import torch

from slm.cli.eval import main as slm_eval
from slm.data.tokenizers import CharTokenizer
from slm.eval.offline_tasks import speeches
from slm.model import ModelConfig, Transformer
from slm.model.weights import CheckpointError, check_memory, load_model, save_model
from slm.runs.record import update_record
from slm.settings import nested

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

FAST = ["--tasks", "slm_shakespeare_mc", "--limit", "2", "--no_throughput", "--device", "cpu", "--batch_size", "8"]


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    """A finished run: result.json, model/ with weights and the char tokenizer (never damaged itself)."""
    run = tmp_path_factory.mktemp("template") / "run"
    text = "\n\n".join("\n".join(s) for s in speeches())
    tok = CharTokenizer(CharTokenizer.select(CharTokenizer.fit_counts([text]), None), unk=False, eot=False)
    model = Transformer(ModelConfig(n_layers=2, d_model=32, attention=dict(n_heads=4), vocab_size=tok.vocab_size,
                                    context_length=64))
    save_model(model, run / "model")
    tok.save(run / "model")
    update_record(run, status="completed", eval={"val_nll": 4.0})
    return run


@pytest.fixture
def run(template, tmp_path) -> Path:
    shutil.copytree(template, tmp_path / "run")
    return tmp_path / "run"


def _edit_config(run: Path, **change) -> None:
    path = run / "model" / "config.json"
    path.write_text(json.dumps(nested({**json.loads(path.read_text()), **change})))  # a dotted key: in its group


def _fail_fsync_of(fragment: str, monkeypatch) -> None:
    """A full disk: fsync of a file whose name contains `fragment` raises ENOSPC (the writer's temporary file)."""
    real = os.fsync

    def fsync(fd):
        if fragment in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd)

    monkeypatch.setattr(os, "fsync", fsync)


def _pickle(path: Path) -> None:
    torch.save({"tok_embeddings.weight": torch.zeros(3, 2)}, path)


def config_d_model(run, mp):
    _edit_config(run, d_model=64)


def config_n_layers(run, mp):
    _edit_config(run, n_layers=3)


def config_unknown_key(run, mp):
    _edit_config(run, hidden_size=64)


def config_string_n_layers(run, mp):
    _edit_config(run, n_layers="2")


def config_invalid_json(run, mp):
    path = run / "model" / "config.json"
    path.write_text(path.read_text()[:40])


def config_not_object(run, mp):
    (run / "model" / "config.json").write_text("[2, 32]\n")


def config_huge_width(run, mp):
    _edit_config(run, **{"mlp.d_ff": 1 << 40})  # 2.1e14 parameters: more than any machine's memory


def config_huge_depth(run, mp):
    _edit_config(run, n_layers=100_000, d_model=65536)


def weights_pickle(run, mp):
    _pickle(run / "model" / "model.safetensors")


def weights_bin_only(run, mp):
    (run / "model" / "model.safetensors").unlink()
    _pickle(run / "model" / "pytorch_model.bin")


def weights_garbage(run, mp):
    (run / "model" / "model.safetensors").write_bytes(b"\x00\x01not a safetensors file" * 40)


def weights_truncated(run, mp):
    path = run / "model" / "model.safetensors"
    path.write_bytes(path.read_bytes()[:-100])


def path_is_ckpt(run, mp):
    _pickle(run / "last.ckpt")
    return [str(run / "last.ckpt")]


def path_is_file(run, mp):
    return [str(run / "result.json")]


def no_config(run, mp):
    (run / "model" / "config.json").unlink()


def empty_model_dir(run, mp):
    shutil.rmtree(run / "model")
    (run / "model").mkdir()


def tokenizer_garbage(run, mp):
    (run / "model" / "slm_tokenizer.json").write_text("{not json")


def bad_device(run, mp):
    return [str(run), "--device", "tpu7"]


def record_invalid_json(run, mp):
    path = run / "result.json"
    path.write_text(path.read_text()[:-30])


def record_not_object(run, mp):
    (run / "result.json").write_text("[1, 2, 3]\n")


def disk_full_results(run, mp):
    (run / "eval").mkdir()
    (run / "eval" / "results.json").write_text('{"from": "an earlier evaluation"}\n')  # must survive
    _fail_fsync_of("results.json", mp)


def disk_full_record(run, mp):
    _fail_fsync_of("result.json", mp)


CASES = [  # (damage, fragment of the one-line message); a damage may return the argv's path (and more)
    (config_d_model, "{model}/model.safetensors does not match {model}/config.json: blocks.0.attn_norm.weight has "
                     "shape [32] in the file, [64] in the model"),
    (config_n_layers, "the model has 6 tensor(s) the file lacks, e.g. blocks.2."),
    (config_unknown_key, "{model}/config.json: unknown field(s) 'hidden_size'"),
    (config_string_n_layers, "{model}/config.json: model.n_layers='2' is invalid"),
    (config_invalid_json, "{model}/config.json: not valid JSON"),
    (config_not_object, "{model}/config.json: a JSON list, not an object of ModelConfig fields"),
    (config_huge_width, "{model}/config.json describes a model of 2.1e+14 parameters (768.0 TiB in float32, about "
                        "1.5 PiB to load); the cpu has "),
    (config_huge_depth, "n_layers=100000 in the config, but the file holds only 14 tensors"),
    (weights_pickle, "{model}/model.safetensors is a PyTorch pickle (torch.save), not an slm checkpoint: slm "
                     "loads safetensors only"),
    (weights_bin_only, "no model.safetensors in {model}, only pytorch_model.bin: slm loads safetensors only"),
    (weights_garbage, "{model}/model.safetensors: not a valid safetensors file"),
    (weights_truncated, "{model}/model.safetensors: not a valid safetensors file"),
    (path_is_ckpt, "{run}/last.ckpt is a PyTorch pickle"),
    (path_is_file, "{run}/result.json: a file, not a run or checkpoint directory"),
    (no_config, "{model} has no config.json: restore the file slm-train wrote"),
    (empty_model_dir, "{model} is empty: the run saved no model"),
    (tokenizer_garbage, "{model}: cannot load the tokenizer"),
    (bad_device, "device='tpu7'"),
    (record_invalid_json, "{run}/result.json is unreadable: not valid JSON"),
    (record_not_object, "{run}/result.json is unreadable: not a JSON object"),
    (disk_full_results, "cannot write {run}/eval/results.json: No space left on device (results.json is left as it was"),
    (disk_full_record, "cannot write {run}/result.json: No space left on device; it was left as it was and the "
                       "scores were written to lm-eval's results file {run}/eval/results.json only"),
]


PROGRESS = re.compile(r"\d+%\|")  # lm-eval's progress bars (tqdm) while it scores


def _snapshot(run: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("damage, message", CASES, ids=[d.__name__ for d, _ in CASES])
def test_bad_input_is_one_line_and_exit_2(run, capsys, monkeypatch, damage, message):
    path, *more = damage(run, monkeypatch) or [str(run)]
    before = _snapshot(run)
    with pytest.raises(SystemExit) as exit_:
        slm_eval([path, *FAST, "--output_path", str(run / "eval" / "results.json"), *more])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip() and not PROGRESS.search(line)]
    assert exit_.value.code == 2, err
    assert len(lines) == 1 and lines[0].startswith("slm-eval: error:") and "Traceback" not in err, err
    assert message.format(run=run, model=run / "model") in lines[0]
    after = _snapshot(run)
    assert {name: after.get(name) for name in before} == before  # nothing lost or overwritten
    assert set(after) - set(before) <= {"eval/results.json", "eval/results_documents.jsonl"}  # no temporary file
    if damage.__name__.startswith("record_") or damage is disk_full_record:  # the scores ran and were saved
        assert f"lm-eval's results file {run}/eval/results.json only" in lines[0]
        results = json.loads((run / "eval" / "results.json").read_text())
        assert results["results"]["slm_shakespeare_mc"]["acc,none"] >= 0
    elif "eval/results.json" not in before:
        assert "eval/results.json" not in after


def test_full_traceback_with_hydra_full_error(run, monkeypatch):
    """HYDRA_FULL_ERROR=1 keeps the exception for debugging."""
    config_d_model(run, monkeypatch)
    monkeypatch.setenv("HYDRA_FULL_ERROR", "1")
    with pytest.raises(CheckpointError, match=r"attn_norm.weight has shape \[32\] in the file"):
        slm_eval([str(run), *FAST])


def test_memory_check_counts_the_load_and_the_device(run, monkeypatch):
    """The check refuses a model whose float32 weights fit the free memory but not twice over (built, then
    read from the file), and accepts one that fits."""
    import slm.model.weights as weights

    model = load_model(run / "model")
    need = model.num_params() * 4
    monkeypatch.setattr(weights, "available_memory", lambda device: need + 1)
    with pytest.raises(CheckpointError, match=r"about .* to load\); the cpu has .* available"):
        check_memory(model.cfg)
    monkeypatch.setattr(weights, "available_memory", lambda device: 2 * need)
    check_memory(model.cfg)


def test_available_memory_is_plausible():
    from slm.model.weights import available_memory

    free = available_memory("cpu")
    assert free is not None and 1 << 20 < free < 1 << 50


@pytest.mark.slow  # lm-eval's CLI indexes all of its task files
def test_lm_eval_cli_bad_checkpoint_is_one_line(run):
    import subprocess
    import sys

    config_d_model(run, None)
    out = subprocess.run([sys.executable, "-m", "slm.eval", "run", "--model", "slm", "--model_args",
                          f"pretrained={run}", "--tasks", "slm_shakespeare_mc", "--limit", "2", "--device", "cpu"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert out.stderr.strip().splitlines()[-1].startswith("python -m slm.eval: error: ")
    assert "blocks.0.attn_norm.weight has shape [32] in the file, [64] in the model" in out.stderr


def test_a_safetensors_header_length_ending_in_0x80_is_not_a_pickle(tmp_path):
    """A bare pickle starts with 0x80; so does a safetensors file whose header length's low byte is 0x80. The
    JSON header's "{" after the 8-byte length tells them apart (this once refused a valid model)."""
    import safetensors.torch

    from slm.model.weights import _is_pickle, read_header

    for n in range(1, 300):  # tensor names of growing length until the header's length ends in 0x80
        path = tmp_path / f"w{n}.safetensors"
        safetensors.torch.save_file({"x" * n: torch.zeros(2)}, str(path))
        if path.read_bytes()[0] == 0x80:
            break
    else:
        pytest.fail("no header length ending in 0x80 was produced")
    assert not _is_pickle(path) and read_header(path) == {"x" * n: [2]}
    pickled = tmp_path / "p.safetensors"
    torch.save({"x": torch.zeros(2)}, pickled, _use_new_zipfile_serialization=False)  # a bare pickle: 0x80 first
    assert pickled.read_bytes()[0] == 0x80 and _is_pickle(pickled)
