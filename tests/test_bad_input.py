"""The bad-input battery: every CLI answers bad input with one line, `<prog>: error: ...`, exit code 2,
no traceback, and no file changed outside the run's own directory (a single run refused before training
leaves no run directory at all).

Each case is (CLI, arguments, a fragment of the expected line). The CLIs run in this process (Hydra's
@main included), so the whole battery takes seconds; tests/test_train_cli.py runs the console scripts.
"""

from __future__ import annotations

import importlib.util
import logging
import sys
from pathlib import Path

import pytest
import torch

RUN = ["model=debug", "train.length.steps=2", "eval=none", "train.logging.progress_bar=false", "train.validation.batches=2"]


def _train(argv):
    from slm.cli.train import main

    sys.argv = ["slm-train", *argv]
    main()


def _params(argv):
    from slm.cli.params import run

    run(argv)


def _status(argv):
    from slm.cli.status import run

    run(argv)


def _analysis(name):
    def call(argv):
        import analysis.cli

        getattr(analysis.cli, f"{name}_main")(argv)

    return call


def _eval(argv):
    from slm.cli.eval import main

    main(argv)


def _import_hf(argv):
    from slm.cli.import_hf import main

    sys.argv = ["slm-import-hf", *argv]
    main()


CLIS = {"slm-train": _train, "slm-params": _params, "slm-status": _status, "slm-collect": _analysis("collect"),
        "slm-plot": _analysis("plot"), "slm-report": _analysis("report"), "slm-ladder": _analysis("ladder"),
        "slm-eval": _eval, "slm-import-hf": _import_hf}

CASES = [
    # Hydra's own errors: the override named, the closest valid name offered
    ("slm-train", [*RUN, "model.n_layer=4"], "model.n_layer=4: model has no field 'n_layer' (did you mean model.n_layers?)"),
    ("slm-train", [*RUN, "train.tokns=1e5"], "did you mean train.length.tokens?"),
    ("slm-train", [*RUN, "+train.tokns=1e5"], "train.tokns is not a training field (did you mean train.length.tokens?)"),
    ("slm-train", [*RUN, "+model.n_layer=4"], "model.n_layer is not a model field (did you mean model.n_layers?)"),
    ("slm-train", ["modle=debug"], "modle=debug: there is no config group or field 'modle' (did you mean model?)"),
    ("slm-train", ["model=debg"], "model=debg: there is no conf/model/debg.yaml (did you mean model=debug?)"),
    ("slm-train", ["-m", "sweep=smok"], "sweep=smok: there is no sweeps/smok.yaml (did you mean sweep=smoke?)"),
    ("slm-train", [*RUN, "model.n_layers=[1"], "cannot parse the override 'model.n_layers=[1'"),
    ("slm-train", [*RUN, "model.n_layers"], "cannot parse the override 'model.n_layers'"),
    # values of the wrong type, non-finite, or out of range
    ("slm-train", [*RUN, "model.position.rope_theta=abc"], "model.position.rope_theta='abc' is invalid"),
    ("slm-train", [*RUN, "model.n_layers=2.5"], "model.n_layers=2.5 is invalid"),
    ("slm-train", [*RUN, "train.batch_size=abc"], "train.batch_size='abc' is invalid"),
    ("slm-train", [*RUN, "train.lr=inf"], "train.lr=inf is invalid"),
    ("slm-train", [*RUN, "train.lr=0"], "train.lr=0 is invalid"),
    ("slm-train", ["model=debug", "eval=none", "train.length.tokens=inf"], "train.length.tokens=inf is invalid"),
    ("slm-train", ["model=debug", "eval=none", "train.length.tokens=100"], "train.length.tokens=100 is invalid"),
    ("slm-train", [*RUN, "train.grad_clip=-1"], "train.grad_clip=-1 is invalid"),
    ("slm-train", [*RUN, "train.schedule.warmup_steps=-1"], "train.schedule.warmup_steps=-1 is invalid"),
    ("slm-train", [*RUN, "train.schedule.warmup_steps=100"], "train.schedule.warmup_steps=100 is invalid"),
    ("slm-train", [*RUN, "train.optim.adamw.betas=[2,0.9]"], "train.optim.adamw.betas=[2, 0.9] is invalid"),
    ("slm-train", [*RUN, "train.optim.adamw.betas=abc"], "train.optim.adamw.betas='abc' is invalid"),
    ("slm-train", [*RUN, "train.optim.adamw.eps=0"], "train.optim.adamw.eps=0 is invalid"),
    ("slm-train", [*RUN, "train.seed=-1"], "train.seed=-1 is invalid"),
    ("slm-train", [*RUN, "train.parallel.accelerator=tpu"], "train.parallel.accelerator='tpu' is invalid"),
    ("slm-train", [*RUN, "train.precision=16"], "train.precision='16' is invalid"),
    ("slm-train", [*RUN, "model.param_budget=10"], "model.param_budget=10 is out of reach"),
    ("slm-train", [*RUN, "model.param_budget=1e15"], "model.param_budget=1e+15 is out of reach"),
    ("slm-train", [*RUN, "model.param_budget=abc"], "model.param_budget='abc' is invalid"),
    ("slm-train", [*RUN, "model.d_model=65536", "model.n_layers=64"], "training needs at least"),
    ("slm-train", [*RUN, "train.logging.loggers=[csv,wandb]"], "the wandb package is not installed: pip install -e '.[wandb]'"),
    # data and tokenizer
    ("slm-train", [*RUN, "tokenizer.kind=bpe"], "tokenizer.kind='bpe' is invalid: one of: char, word"),
    ("slm-train", [*RUN, "data.sources.0.kind=ftp"], "data.sources.0.kind='ftp' is invalid: one of: tiny"),
    ("slm-train", [*RUN, "data=local", "data.sources.0.paths=[{tmp}/missing.txt]"], "file not found:"),
    ("slm-train", [*RUN, "data=local", "data.sources.0.paths=[{tmp}/binary.txt]"], "invalid UTF-8 at byte 10"),
    ("slm-train", [*RUN, "data=fineweb_edu"], "HuggingFaceFW/fineweb-edu"),
    # the other CLIs
    ("slm-params", ["model=gpt2", "model.n_layer=4"], "did you mean model.n_layers?"),
    ("slm-params", ["model=gpt22"], "did you mean model=gpt2?"),
    ("slm-params", ["model=llama3", "model.param_budget=10"], "model.param_budget=10 is out of reach"),
    ("slm-params", ["model=llama3", "model.norm.eps=nan"], "model.norm.eps=nan is invalid"),
    ("slm-status", ["{tmp}/nowhere"], "nowhere: no such run group or directory"),
    ("slm-status", ["--bogus"], "(see slm-status --help)"),
    ("slm-collect", ["{tmp}/nowhere"], "nowhere"),
    ("slm-collect", ["{tmp}", "-o", "{tmp}/table.xlsx"], "expected a .parquet or .csv file name"),
    ("slm-plot", ["--kind", "pie", "{tmp}"], "pie"),
    ("slm-report", ["{tmp}/nowhere"], "nowhere"),
    ("slm-ladder", ["{tmp}/nowhere"], "nowhere"),
    ("slm-eval", ["{tmp}/nowhere"], "nowhere"),
    ("slm-import-hf", ["{tmp}/nowhere", "{tmp}/out"], "nowhere"),
]


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under root: (size, mtime)."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()}


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SLM_RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv("SLM_CACHE", str(tmp_path.parent / "slm-cache"))  # shared by the cases: tokenised once
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    (tmp_path / "binary.txt").write_bytes(b"fine text\n\xff\xfe broken")
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield tmp_path
    root.handlers[:] = handlers  # Hydra's job logging points at this test's captured streams
    root.setLevel(level)


@pytest.mark.parametrize("prog, argv, fragment", CASES, ids=[f"{c[0]}:{' '.join(c[1][-1:])}" for c in CASES])
def test_bad_input_is_one_line_exit_2_and_changes_nothing(workdir, capsys, prog, argv, fragment):
    if "accelerator=gpu" in " ".join(argv) and torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    if "wandb" in " ".join(argv) and importlib.util.find_spec("wandb") is not None:
        pytest.skip("wandb is installed")
    argv = [a.replace("{tmp}", str(workdir)) for a in argv]
    before = snapshot(workdir)
    with pytest.raises(SystemExit) as exit_:
        CLIS[prog](argv)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert exit_.value.code == 2, err
    assert "Traceback" not in err
    assert lines and lines[-1].startswith(f"{prog}: error: ") and fragment in lines[-1], lines[-1:]
    assert len([line for line in lines if ": error:" in line]) == 1
    assert snapshot(workdir) == before, "a refused command left files behind"


def test_a_full_traceback_on_request(workdir, monkeypatch):
    """HYDRA_FULL_ERROR=1 shows Hydra's exception instead of the one line."""
    from hydra.errors import ConfigCompositionException

    monkeypatch.setenv("HYDRA_FULL_ERROR", "1")
    monkeypatch.delenv("SLM_FULL_ERROR", raising=False)
    with pytest.raises(ConfigCompositionException):
        _train([*RUN, "model.n_layer=4"])


def test_an_unavailable_gpu_is_refused_before_the_run(workdir, capsys):
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    with pytest.raises(SystemExit) as exit_:
        _train([*RUN, "train.parallel.accelerator=gpu"])
    assert exit_.value.code == 2
    assert "train.parallel.accelerator='gpu' is invalid" in capsys.readouterr().err
    assert not (workdir / "runs" / "train").exists() or not any((workdir / "runs" / "train").iterdir())
