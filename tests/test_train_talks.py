"""Training talks: the start and resume lines, progress lines where there is no terminal and a bar of
the run's steps where there is one, Ctrl-C / SIGTERM stopping at a step boundary with a checkpoint, the step
checkpoints kept on request (and train.init_from taking one), and a missing wandb package named in one line."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from omegaconf import OmegaConf

from slm.training.config import TrainConfig, TrainConfigError
from tests.test_train_cli import FAST, assert_same_run, record, run_dir, slm_train


# ---------------------------------------------------------------- config
@pytest.mark.parametrize(
    "bad, key, value",
    [
        (dict(print_interval=-1), "train.logging.print_interval", -1),
        (dict(print_interval=2.5), "train.logging.print_interval", 2.5),
        (dict(keep_every=0), "train.checkpoint.keep_every", 0),
        (dict(checkpoint={"keep_steps": [100, 0]}), "train.checkpoint.keep_steps", [100, 0]),
        (dict(keep_steps=["x"]), "train.checkpoint.keep_steps", ["x"]),
    ],
)
def test_invalid_talk_and_keep_settings(bad, key, value):
    with pytest.raises(TrainConfigError) as err:
        TrainConfig.from_node(bad)
    assert (err.value.key, err.value.value) == (key, value)


def test_print_cadence_and_kept_steps():
    logging = TrainConfig().logging
    assert logging.print_every(10_000) == 100 and logging.print_every(12) == 1  # about 1% of the run
    assert TrainConfig(logging={"print_interval": 7}).logging.print_every(10_000) == 7
    assert TrainConfig(logging={"print_interval": 0}).logging.print_every(9) == 0
    cfg = TrainConfig(checkpoint={"keep_every": 1000, "keep_steps": [1500]})
    assert [s for s in range(1, 3001) if cfg.checkpoint.keeps(s)] == [1000, 1500, 2000, 3000]
    assert not any(TrainConfig().checkpoint.keeps(s) for s in range(100))
    TrainConfig(checkpoint={"keep_steps": [50]}).check_length(50)
    with pytest.raises(TrainConfigError) as err:
        TrainConfig(checkpoint={"keep_steps": [10, 60]}).check_length(50)
    assert (err.value.key, err.value.value) == ("train.checkpoint.keep_steps", [10, 60]) and "60" in str(err.value)


def test_a_missing_wandb_is_named_with_its_fix(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    TrainConfig(logging={"loggers": ["csv"]}).logging.check_installed()
    with pytest.raises(TrainConfigError) as err:
        TrainConfig(logging={"loggers": ["csv", "wandb"]}).logging.check_installed()
    assert err.value.key == "train.logging.loggers" and "pip install -e '.[wandb]'" in str(err.value)


def test_slm_train_refuses_a_missing_wandb_before_preparing_data(tmp_path, monkeypatch, capsys):
    """One line, exit 2, before the data is prepared (slm.data.prepare is never called) and with no run directory."""
    import importlib.util

    import slm.data
    from slm.cli.train import main

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    monkeypatch.setattr(slm.data, "prepare", lambda *a, **k: pytest.fail("data prepared before the logger check"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SLM_RUNS", str(tmp_path / "runs"))
    monkeypatch.setattr(sys, "argv", ["slm-train", "model=debug", "eval=none", "train.length.steps=2",
                                      "train.logging.loggers=[csv,wandb]"])
    with pytest.raises(SystemExit) as exit_:
        main()
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "Traceback" not in err
    assert err.strip().splitlines()[-1] == ("slm-train: error: train.logging.loggers has wandb, but the wandb package is not "
                                            "installed: pip install -e '.[wandb]' in the slm checkout (the package "
                                            "named slm on PyPI is another project), or leave wandb out of "
                                            "train.logging.loggers")
    assert not [p for p in (tmp_path / "runs").rglob("*") if p.is_file()] if (tmp_path / "runs").exists() else True


# ---------------------------------------------------------------- a run in a file: lines, kept checkpoints
KEPT = ["model=debug", "eval=none", "train.validation.batches=2", "train.length.steps=12", "train.validation.interval=6",
        "train.logging.print_interval=4", "train.checkpoint.keep_every=5", "train.checkpoint.keep_steps=[12]",
        "train.logging.progress_bar=true"]  # a bar asked for, but stdout is not a terminal: lines


def train_here(root: Path, overrides: list[str], stdout, name: str = "run") -> tuple[dict, Path]:
    """Compose and train a run in this process (no interpreter start), stdout going to `stdout`."""
    from slm.cli.config import compose_config
    from slm.runs.job import train_run

    cfg = OmegaConf.to_container(compose_config(overrides), resolve=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SLM_CACHE", str(root.parent / "slm-cache"))
        mp.setattr(sys, "stdout", stdout)
        return train_run(cfg, root / name), root / name


@pytest.fixture(scope="module")
def kept_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("kept")
    out = io.StringIO()  # a file, not a terminal
    rec, path = train_here(tmp, KEPT, out)
    assert rec["status"] == "completed"
    return tmp, path, SimpleNamespace(stdout=out.getvalue())


def test_a_run_in_a_file_prints_its_settings_and_progress_lines(kept_run):
    _, path, out = kept_run
    r = record(path)
    lines = out.stdout.splitlines()
    assert "\r" not in out.stdout and "Epoch" not in out.stdout and "v_num" not in out.stdout  # no bar in a pipe
    assert lines[0] == f"slm-train: run {path}"
    assert lines[1] == (f"slm-train: model debug: 2 layers, d_model 64, context 128, vocabulary 65; "
                        f"{r['model']['params_total']:,} parameters ({r['model']['params_non_embedding']:,} "
                        "non-embedding)")
    assert lines[2].startswith("slm-train: 12 steps of 16 x 128 tokens = 24,576 tokens; causal_lm, adamw lr 0.001 "
                               "(cosine, warmup 0 steps), parametrization sp, precision 32")
    assert "slm-train: training on cpu (" in out.stdout and "step 0 of 12" in out.stdout
    log = {row["step"]: row for row in map(json.loads, (path / "train_log.jsonl").read_text().splitlines())}
    steps = [line for line in lines if re.match(r"step +\d+/12 \| loss", line)]
    assert [int(re.match(r"step +(\d+)", line).group(1)) for line in steps] == [1, 4, 8, 12]  # first, every 4, last
    for line in steps:
        step = int(re.match(r"step +(\d+)", line).group(1))
        assert f"| loss {log[step]['loss']:.4f} | lr {log[step]['lr']:.2e} | " in line, line
        assert re.search(r"\| [\d.]+k? tok/s", line) and "mfu" not in line  # no made-up MFU on a CPU
    assert "eta " in steps[2] and "done in " in steps[-1]
    vals = [line for line in lines if "| val nll" in line]
    assert len(vals) == 2 and vals[0].startswith("step  6/12 | val nll ")
    assert vals[1].startswith(f"step 12/12 | val nll {r['eval']['val_nll']:.4f}")


def test_kept_checkpoints_stay_beside_last(kept_run):
    _, path, _ = kept_run
    names = sorted(p.name for p in (path / "checkpoints").iterdir())
    assert names == ["last.ckpt", "step-10.ckpt", "step-12.ckpt", "step-5.ckpt"]  # no previous.ckpt from a step-N save
    for step in (5, 10, 12):
        ckpt = torch.load(path / "checkpoints" / f"step-{step}.ckpt", weights_only=True, mmap=True)
        assert ckpt["global_step"] == step and ckpt["slm_meta"]["model_config"]["family"] == "debug"
        assert ckpt["slm_meta"]["tokenizer"]["name"] == "char" and ckpt["slm_meta"]["tokenizer"]["ids"] == 65


def test_init_from_takes_a_kept_checkpoint(kept_run, tmp_path):
    """train.init_from=<run>/checkpoints/step-5.ckpt: found, checked (shapes, tokenizer) and loaded exactly; a run
    started from it records where its weights came from."""
    from slm.data import load_tokenizer
    from slm.model import build_model, config_from_spec
    from slm.training.init_from import (
        InitFromError,
        check_tokenizer,
        find_source,
        load_weights,
    )

    _, path, _ = kept_run
    ckpt = path / "checkpoints" / "step-5.ckpt"
    source = find_source(ckpt)
    assert source.checkpoint == ckpt and source.run_dir == path and source.model_dir is None and source.step() == 5
    assert source.config()["family"] == "debug"
    check_tokenizer(source, load_tokenizer(path / "model"))
    model = build_model(config_from_spec(source.config()))
    load_weights(model, source)
    state = {k: v for k, v in torch.load(ckpt, weights_only=True)["state_dict"].items() if k.startswith("model.")}
    got = model.state_dict()
    assert got.keys() == {k.removeprefix("model.") for k in state}
    assert all(torch.equal(got[k.removeprefix("model.")], v) for k, v in state.items())
    damaged = tmp_path / "damaged.ckpt"
    damaged.write_bytes(ckpt.read_bytes()[: ckpt.stat().st_size // 2])
    with pytest.raises(InitFromError, match=r"damaged.ckpt: not a complete checkpoint"):
        find_source(damaged)

    rec, _ = train_here(tmp_path, ["model=debug", "eval=none", "train.logging.progress_bar=false", "train.length.steps=2",
                                   "train.validation.batches=1", f"train.init_from='{ckpt}'"], io.StringIO())
    init = rec["training"]["init_from"]
    assert rec["status"] == "completed" and init["checkpoint"] == str(ckpt) and init["checkpoint_step"] == 5
    assert init["model_dir"] is None and init["run_dir"] == str(path) and init["source_run"]["steps"] == 12
    assert init["source_model"]["family"] == "debug" and len(init["weights_sha256"]) == 64


# ---------------------------------------------------------------- the bar
class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_interactive_means_a_terminal():
    from slm.training.progress import interactive

    assert interactive(Terminal()) and not interactive(io.StringIO()) and not interactive(object())


def _bar_trainer(step: int, max_steps: int):
    return SimpleNamespace(global_step=step, max_steps=max_steps, current_epoch=0, loggers=[])


def test_the_bar_counts_the_runs_steps_from_a_resumed_step(monkeypatch):
    """Lightning's bar said `Epoch 0` over an epoch's batches, `1464/1213` after a resume and `v_num: csv`; this one
    counts optimizer steps of max_steps from the restored step, and shows loss and tokens/s."""
    from slm.training.progress import StepsBar

    screen = Terminal()
    monkeypatch.setattr(sys, "stdout", screen)
    throughput = SimpleNamespace(tokens_per_step=2048, flops_per_token=1, peak=None)
    bar = StepsBar(throughput)
    module = SimpleNamespace(last_train_loss=None, val_metrics={})
    trainer = _bar_trainer(1464, 2000)
    bar.on_train_start(trainer, module)
    bar.on_train_epoch_start(trainer, module)
    tqdm = bar.train_progress_bar
    assert (tqdm.n, tqdm.total, tqdm.initial, tqdm.desc) == (1464, 2000, 1464, "train")
    time.sleep(0.01)
    module.last_train_loss = 2.5
    trainer.global_step = 1465
    bar.on_train_batch_end(trainer, module, None, None, 0)
    assert tqdm.n == 1465 and tqdm.postfix.startswith("loss=2.5000, tok/s=")
    module.val_metrics = {"val_nll": 2.25, "val_step": 1465}
    assert bar.get_metrics(trainer, module)["val"] == "2.2500"
    bar.on_train_end(trainer, module)
    shown = screen.getvalue()
    assert "1465/2000" in shown and "Epoch" not in shown and "v_num" not in shown


def test_a_bar_on_a_terminal_and_no_progress_lines(tmp_path):
    """In this process with stdout a terminal: the bar of the run's steps, and none of the progress lines."""
    screen = Terminal()
    rec, _ = train_here(tmp_path, ["model=debug", "eval=none", "train.length.steps=6", "train.validation.batches=1",
                                   "train.logging.print_interval=1"], screen)
    assert rec["status"] == "completed"
    shown = screen.getvalue()
    assert "train: 100%" in shown and "6/6" in shown and "loss=" in shown and "tok/s=" in shown
    assert "Epoch" not in shown and "v_num" not in shown and not re.search(r"^step +\d", shown, re.MULTILINE)


# ---------------------------------------------------------------- signals in this process
def test_a_stop_signal_checkpoints_at_the_step_boundary_and_a_second_stops_at_once(tmp_path):
    from slm.training.callbacks import SignalCheckpoint

    saved = []
    trainer = SimpleNamespace(global_step=7, save_checkpoint=lambda path, weights_only: saved.append(path), world_size=1,
                              accumulate_grad_batches=1)
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR2)}
    cb = SignalCheckpoint(tmp_path / "last.ckpt")
    try:
        cb.on_train_start(trainer, None)
        cb.on_train_batch_end(trainer, None, None, None, 0)
        assert saved == []  # no signal, no save
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)
        with pytest.raises(SystemExit) as exit_:
            cb.on_train_batch_end(trainer, None, None, None, 0)
        assert exit_.value.code == 143 and saved == [tmp_path / "last.ckpt"]
        assert (cb.step, cb.signal_name, cb.aborted) == (7, "SIGTERM", None)
        assert {s: signal.getsignal(s) for s in before} == before  # put back
        cb = SignalCheckpoint(tmp_path / "last.ckpt")
        cb.on_train_start(trainer, None)
        os.kill(os.getpid(), signal.SIGINT)  # noted, no KeyboardInterrupt
        time.sleep(0.05)
        with pytest.raises(SystemExit) as exit_:
            os.kill(os.getpid(), signal.SIGINT)  # the second: at once
            time.sleep(0.5)
        assert exit_.value.code == 130 and cb.aborted == "SIGINT" and cb.step is None and len(saved) == 1
        cb.on_exception(trainer, None, exit_.value)
        assert {s: signal.getsignal(s) for s in before} == before
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)


def test_an_ignored_stop_signal_stays_ignored(tmp_path):
    from slm.training.callbacks import SignalCheckpoint

    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a job started in the background by a script
    try:
        cb = SignalCheckpoint(tmp_path / "last.ckpt")
        cb.on_train_start(None, None)
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN and signal.getsignal(signal.SIGTERM) == cb._note
        cb.on_train_end(None, None)
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN and signal.getsignal(signal.SIGTERM) != cb._note
    finally:
        signal.signal(signal.SIGINT, previous)


# ---------------------------------------------------------------- signals through slm-train
STOPPED = [*FAST, "model.d_model=128", "model.attention.head_dim=32", "train.length.steps=60", "train.checkpoint.interval=1000",
           "train.validation.interval=30", "train.seed=3", "train.logging.print_interval=10"]


def _logged_step(path: Path) -> int:
    log = path / "train_log.jsonl"
    lines = log.read_text().splitlines() if log.exists() else []
    return json.loads(lines[-1])["step"] if lines else 0


def signal_at_step(root: Path, args, step: int, signum: int) -> tuple[subprocess.Popen, Path]:
    """Start slm-train under `root`, send `signum` once its log reaches `step`, wait for it to end."""
    env = {**os.environ, "SLM_RUNS": str(root / "runs"), "SLM_CACHE": str(root.parent / "slm-cache"),
           "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "slm.cli.train", "run_group=t", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    runs, deadline = root / "runs" / "t", time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        if runs.exists() and any(runs.iterdir()) and _logged_step(run_dir(root)) >= step:
            break
        time.sleep(0.02)
    proc.send_signal(signum)
    proc.out, proc.err = proc.communicate(timeout=240)
    return proc, run_dir(root)


def _assert_stopped_with_a_checkpoint(proc, path: Path, signum: int) -> int:
    name = signal.Signals(signum).name
    assert proc.returncode == 128 + signum, proc.err[-2000:]
    r = record(path)
    stopped = r["training"]["interrupted"]["step"]
    assert r["status"] == "running" and r["training"]["interrupted"]["signal"] == name
    assert r["training"]["interruptions"] == 1 and 3 <= stopped < 60
    assert torch.load(path / "checkpoints" / "last.ckpt", weights_only=True, mmap=True)["global_step"] == stopped
    assert _logged_step(path) == stopped  # the step it stopped at is the one checkpointed
    assert f"slm-train: {name}: stopping after this step, with a checkpoint" in proc.err
    assert (f"slm-train: stopped by {name} at step {stopped} of 60, checkpointed in checkpoints/last.ckpt: the same "
            "command resumes the run") in proc.err
    assert "Traceback" not in proc.err
    return stopped


def test_ctrl_c_stops_at_a_step_boundary_with_a_checkpoint(tmp_path):
    proc, path = signal_at_step(tmp_path, STOPPED, 3, signal.SIGINT)
    _assert_stopped_with_a_checkpoint(proc, path, signal.SIGINT)


@pytest.mark.slow  # three training runs, twice if the platform's AdamW flaw strikes (~90 s); make test-slow runs it
def test_sigterm_stops_with_a_checkpoint_and_the_same_command_resumes_exactly(tmp_path):
    """SIGTERM after a few steps: exit 143, the record `running` with the signal and the step, last.ckpt of that
    step; the same command then says where it resumes and ends with the weights of an uninterrupted run.

    One retry of the whole comparison: about 1 fresh process in 10-30 on the CI machine computes AdamW's
    exp_avg_sq.sqrt() slightly differently (see tests/test_train_cli.py::test_resume_with_the_ladder_protocol_is_exact),
    so two uninterrupted runs are not always bit-identical there; a resume bug fails both attempts."""
    for attempt in (1, 2):
        ref_dir, cut_dir = tmp_path / f"ref{attempt}", tmp_path / f"cut{attempt}"
        assert slm_train(ref_dir, *STOPPED).returncode == 0
        proc, cut = signal_at_step(cut_dir, STOPPED, 3, signal.SIGTERM)
        stopped = _assert_stopped_with_a_checkpoint(proc, cut, signal.SIGTERM)
        out = slm_train(cut_dir, *STOPPED)
        assert out.returncode == 0, out.stderr[-2000:]
        assert f"slm-train: resumed from step {stopped} of 60 (checkpoints/last.ckpt)" in out.stdout
        r = record(cut)
        assert r["status"] == "completed" and r["training"]["resumed_from"] == "checkpoints/last.ckpt"
        try:
            assert_same_run(run_dir(ref_dir), cut)
            break
        except AssertionError:
            if attempt == 2:
                raise


def test_a_run_directory_of_another_model_is_refused_not_resumed(tmp_path):
    """The same job key for another model (the default model changed, a preset was edited): one line, exit 2,
    the record untouched; a sweep job skips it."""
    from slm.runs.job import RunConfigClash, train_run
    from slm.runs.record import write_json_atomic

    run = tmp_path / "r"
    run.mkdir()
    record = {"schema_version": 1, "status": "completed", "error": None,
              "config": {"model": {"name": "llama3", "n_layers": 28, "d_model": 384}}}
    write_json_atomic(run / "result.json", record)
    before = (run / "result.json").read_bytes()
    cfg = {"model": {"name": "debug", "n_layers": 2, "d_model": 64}, "train": {}}
    with pytest.raises(RunConfigClash, match=r"model.d_model: 384 recorded, 64 asked"):
        train_run(cfg, run)
    assert train_run(cfg, run, sweep=True)["status"] == "completed"
    assert (run / "result.json").read_bytes() == before
