"""Hardening battery for the commands around a run: slm-eval, slm-import-hf and the hf tokenizer,
slm-report, slm-collect, slm-export-hf, slm-params, slm-workers. Each bad input is one line, `<prog>: error:`,
exit 2, and nothing already recorded changes. In-process, tiny models, CPU."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pytest
import torch

from tests.test_cli_verbs import _fails, _run_dir


def _tree(root: Path) -> dict[str, bytes]:
    """Every file under root and its bytes."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# ===================================================================================================== slm-eval
@pytest.fixture
def finished_run(tmp_path):
    """A run directory as slm-eval finds it: model/ (weights, config, tokenizer) and a result.json."""
    run_dir = _run_dir(tmp_path / "run")
    (run_dir / "result.json").write_text(json.dumps({"status": "completed", "eval": {"lm_eval": {"scores": {"x": 0.5}}}}))
    return run_dir


@pytest.mark.parametrize("argv, needles", [
    (["--num_fewshot", "-1"], ["num_fewshot=-1", "integer >= 0"]),
    (["--limit", "nan"], ["--limit nan", "limit must be a finite number > 0"]),
    (["--limit", "inf"], ["--limit inf", "finite"]),
    (["--limit", "0"], ["--limit 0.0", "> 0"]),
    (["--device", "cuda"], ["device='cuda'", "no CUDA device is visible"]),
    (["--device", "cuda:1x"], ["device='cuda:1x'"]),
], ids=["num_fewshot", "limit_nan", "limit_inf", "limit_0", "cuda", "cuda_index"])
def test_eval_bad_argument_is_refused_before_the_record_changes(finished_run, capsys, argv, needles):
    from slm.cli.eval import main

    if argv[-1] == "cuda" and torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    before = _tree(finished_run)
    _fails(main, [str(finished_run), "--no_throughput", *argv], capsys, *needles, prog="slm-eval")
    assert _tree(finished_run) == before  # result.json byte-identical, no eval/ directory


def test_eval_spec_checks_apply_to_config_nodes_too():
    """The same rule for an `eval` config node: preflight (before training) refuses it."""
    from slm.eval.checks import check_available
    from slm.eval.run import preflight
    from slm.eval.spec import spec_from_config
    from slm.settings import SettingsError

    for node, needle in (({"tasks": [], "num_fewshot": -2}, "num_fewshot=-2"),
                         ({"tasks": [], "limit": float("nan")}, "limit=nan"),
                         ({"tasks": [], "limit": -1}, "limit=-1"),
                         ({"tasks": [], "num_fewshot": 1.5}, "num_fewshot=1.5")):
        with pytest.raises(SettingsError, match=f"^eval.{needle} is invalid"):
            preflight(node)
    check_available(spec_from_config({"tasks": [], "num_fewshot": 0, "limit": 0.5, "device": "cpu"}))  # fine as it is


# ============================================================================ slm-import-hf and the hf tokenizer
def _hf_model_dir(path: Path) -> Path:
    import transformers as tf

    cfg = tf.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32)
    torch.manual_seed(0)
    tf.LlamaForCausalLM(cfg).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def hf_source(tmp_path_factory):
    return _hf_model_dir(tmp_path_factory.mktemp("hf") / "model")


def _import_fails(argv, capsys, *needles) -> str:
    from slm.cli.import_hf import main

    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert exit_.value.code == 2 and last.startswith("slm-import-hf: error:") and "Traceback" not in err, err
    assert err.count("\n") == 1, err  # our line only (transformers' load report is not printed)
    for needle in needles:
        assert needle in last, last
    return last


@pytest.mark.parametrize("weights, needle", [
    (b"\x10\x00\x00\x00\x00\x00\x00\x00{garbage header}" + b"x" * 64, "invalid JSON in header"),
    (b"\xff" * 64, "header too large"),
    (b"\x01\x00", "not a readable safetensors file"),
    (b"\x02\x00\x00\x00\x00\x00\x00\x00{}", "the weights lack 12 of the model's tensors"),  # random init otherwise
])
def test_import_hf_damaged_weights_are_one_line(tmp_path, hf_source, capsys, weights, needle):
    import shutil

    source = tmp_path / "in"
    shutil.copytree(hf_source, source)
    (source / "model.safetensors").write_bytes(weights)
    last = _import_fails([str(source), str(tmp_path / "out")], capsys, needle)
    assert str(source) in last
    assert not (tmp_path / "out").exists()


def _tokenizer_dir(path: Path, files: dict[str, bytes]) -> Path:
    path.mkdir(parents=True)
    for name, data in files.items():
        (path / name).write_bytes(data)
    return path


BAD_TOKENIZERS = [
    ({"tokenizer.json": b'{"version": "\xff\xfe"}'}, ["tokenizer.json: cannot be read as a tokenizer", "UTF-8"]),
    ({"tokenizer.json": b"{not json"}, ["tokenizer.json: cannot be read as a tokenizer"]),
    ({"tokenizer_config.json": b'{"eos_token": "<e>"}'}, ["is incomplete", "lacks its vocabulary", "tokenizer.json"]),
    ({"tokenizer_config.json": b"{}", "vocab.json": b"{}"}, ["is incomplete", "lacks merges.txt"]),
    ({"tokenizer_config.json": b"\xff\xfe{", "vocab.txt": b"a\nb\n"}, ["tokenizer_config.json: cannot be read"]),
]


@pytest.mark.parametrize("files, needles", BAD_TOKENIZERS, ids=range(len(BAD_TOKENIZERS)))
def test_hf_tokenizer_directory_problems_name_the_file(tmp_path, files, needles):
    from slm.data.errors import DataError
    from slm.data.tokenizers import HFTokenizer

    directory = _tokenizer_dir(tmp_path / "tok", files)
    with pytest.raises(DataError) as err:
        HFTokenizer(directory, eot=False)
    message = str(err.value)
    assert "\n" not in message and str(directory) in message, message
    for needle in needles:
        assert needle in message, message


@pytest.mark.parametrize("files, needles", BAD_TOKENIZERS[:1] + BAD_TOKENIZERS[3:4], ids=["not_utf8", "missing"])
def test_import_hf_with_a_bad_tokenizer_directory(tmp_path, hf_source, capsys, files, needles):
    directory = _tokenizer_dir(tmp_path / "tok", files)
    last = _import_fails([str(hf_source), str(tmp_path / "out"), "--tokenizer", str(directory)], capsys, *needles)
    assert str(directory) in last and not (tmp_path / "out").exists()


def test_a_saved_tokenizer_missing_its_files_names_them(tmp_path):
    from slm.data.errors import DataError
    from slm.data.tokenizers import HF_SUBDIR, HFTokenizer, load_tokenizer

    source = _tokenizer_dir(tmp_path / "src", {})
    from tokenizers import Tokenizer, models

    Tokenizer(models.WordLevel({"a": 0, "<e>": 1}, unk_token="a")).save(str(source / "tokenizer.json"))
    (source / "tokenizer_config.json").write_text('{"eos_token": "<e>"}')
    saved = tmp_path / "saved"
    HFTokenizer(source, eot=True).save(saved)
    assert load_tokenizer(saved).vocab_size == 2
    (saved / HF_SUBDIR / "tokenizer.json").unlink()
    with pytest.raises(DataError, match=r"saved is incomplete: .*hf_tokenizer lacks tokenizer.json"):
        load_tokenizer(saved)
    (saved / "slm_tokenizer.json").write_bytes(b"\xff{")
    with pytest.raises(DataError, match=r"slm_tokenizer.json: cannot be read as a tokenizer"):
        load_tokenizer(saved)


def test_train_with_an_hf_tokenizer_that_is_not_utf8_is_one_line(tmp_path, monkeypatch, capsys):
    """tokenizer=hf on a directory with a non-UTF-8 tokenizer.json: slm-train's one line, no run directory."""
    from slm.cli.train import main

    directory = _tokenizer_dir(tmp_path / "tok", {"tokenizer.json": b'{"version": "\xff\xfe"}'})
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SLM_RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv("SLM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(sys, "argv", ["slm-train", "model=debug", "train.length.steps=2", "eval=none",
                                      "train.logging.progress_bar=false", "tokenizer=hf", f"tokenizer.path={directory}"])
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        with pytest.raises(SystemExit) as exit_:
            main()
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert exit_.value.code == 2 and "Traceback" not in err, err
    assert lines[-1].startswith("slm-train: error:") and "tokenizer.json: cannot be read as a tokenizer" in lines[-1]
    runs = tmp_path / "runs"
    assert not runs.exists() or not any(p.is_file() for p in runs.rglob("*"))


# =================================================================================== slm-report and slm-collect
def _report(argv):
    from analysis.cli import report_main

    report_main(argv)


def test_report_output_that_is_a_file_is_refused(tmp_path, capsys):
    table = tmp_path / "t.csv"
    table.write_text("run,status,val_nll\na,completed,3.0\n")
    existing = tmp_path / "existing"
    existing.write_text("keep me")
    _fails(_report, [str(table), "-o", str(existing)], capsys, f"-o {existing}: exists and is not a directory",
           prog="slm-report")
    _fails(_report, [str(table), "-o", str(existing / "sub")], capsys, "cannot write the report there",
           prog="slm-report")
    assert existing.read_text() == "keep me"


@pytest.mark.parametrize("csv, missing", [
    ("a,b\n1,2\n", "run, status, a metric"),
    ("run,status,d_model\nx,completed,64\n", "a metric (val_nll"),
    ("run,val_nll\nx,3.0\n", "the column(s) status (it has run, val_nll)"),
])
def test_report_on_a_table_without_its_columns_says_which(tmp_path, capsys, csv, missing):
    table = tmp_path / "t.csv"
    table.write_text(csv)
    _fails(_report, [str(table), "-o", str(tmp_path / "rep")], capsys, "not a results table", missing,
           "slm-collect", prog="slm-report")
    assert not (tmp_path / "rep").exists()


@pytest.mark.parametrize("content, reason", [(b'{"jobs": {broken', "not valid JSON"), (b"\xff\xfe", "not UTF-8"),
                                             (b"[1, 2]", "not a JSON object"),
                                             (b'{"jobs": [1]}', '"jobs" is not an object')])
def test_collect_names_a_corrupt_sweep_json(tmp_path, capsys, content, reason):
    from analysis.cli import collect_main
    from tests.test_analysis_collect import make_record, write

    root = tmp_path / "runs" / "g"
    write(root / "model.d_model=64", make_record(d_model=64))
    (root / "multirun.yaml").write_text("hydra: {sweep: {subdir: x}}\n")  # so the listed jobs are read too
    (root / "sweep.json").write_bytes(content)
    collect_main([str(root), "-o", str(tmp_path / "t.csv")])
    err = capsys.readouterr().err
    warnings = [line for line in err.splitlines() if "warning" in line]
    assert warnings and all(f"{root / 'sweep.json'}: {reason}" in line for line in warnings), err
    assert (root / "sweep.json").read_bytes() == content  # read, never rewritten by collect


# ================================================================================================ slm-export-hf
def test_export_hf_without_a_tokenizer_needs_no_tokenizer_flag(tmp_path, capsys):
    from slm.cli.export_hf import run

    run_dir = _run_dir(tmp_path / "run")
    for name in ("slm_tokenizer.json",):
        (run_dir / "model" / name).unlink()
    _fails(run, [str(run_dir), str(tmp_path / "hf")], capsys, "no tokenizer beside the model", "--no-tokenizer",
           prog="slm-export-hf")
    assert not (tmp_path / "hf").exists()
    run([str(run_dir), str(tmp_path / "hf"), "--no-tokenizer"])
    out = capsys.readouterr().out
    assert "tokenizer none (--no-tokenizer)" in out and "logits checked" in out
    assert (tmp_path / "hf" / "model.safetensors").is_file() and not (tmp_path / "hf" / "tokenizer.json").exists()


# =================================================================================== slm-params and slm-workers
@pytest.mark.parametrize("override", ["train.x=1", "train.lr=3e-4", "+train.foo=1", "seed=3"])
def test_params_refuses_settings_that_do_not_change_what_is_built(capsys, override):
    """The tokenizer and data do change the counts (the vocabulary): slm-params takes them, tests/test_first_hour_traps.py."""
    from slm.cli.params import run

    key = override.lstrip("+").split("=")[0]
    _fails(run, ["model=debug", override], capsys, f"{override}: slm-params takes the settings that change what "
           "slm-train builds", f"{key} does not change the counts", prog="slm-params")


def test_params_still_takes_model_settings(capsys):
    from slm.cli.params import run

    run(["model=debug", "model.n_layers=3"])
    assert "3 layers" in capsys.readouterr().out


@pytest.mark.parametrize("stagger", ["nan", "inf", "-1", "-inf"])
def test_workers_refuse_a_stagger_that_is_not_finite_seconds(capsys, stagger):
    from slm.cli.workers import main

    _fails(main, ["2", f"--stagger={stagger}", "--", sys.executable, "-c", "pass"], capsys, f"--stagger={float(stagger)}",
           "finite number of seconds >= 0", prog="slm-workers")
