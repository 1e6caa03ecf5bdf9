"""Logs that say only true things, once, in one format: no `\\r` progress bars in a file, no "fatal: not a git
repository" from lm-eval, no diffusion-argument notice on every autoregressive job of a sweep, Lightning's
lines as slm's own, "1 layer" and "1 thread". The last test runs slm-train and slm-eval as a sweep's job runs
them, with stdout and stderr going to a file."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tqdm import tqdm

from slm.plain_progress import PlainLines, plain_lines, plain_stderr


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


# ---------------------------------------------------------------------------------------------- plain lines


def test_plain_lines_keep_what_a_terminal_shows_last():
    out = io.StringIO()
    stream = PlainLines(out)
    stream.write("\rtokenize:   0%| 0/9")
    stream.write("\rtokenize:  50%| 4/9")
    assert out.getvalue() == ""  # a line being redrawn waits for its end
    stream.write("\rtokenize: 100%| 9/9   \n")
    stream.write("plain text, ")
    stream.write("at once\n")
    stream.write("\rcleared:  10%|\r          \r")  # a bar with leave=False
    stream.write("next\n")
    stream.write("a\rb\nc\n")
    assert out.getvalue() == "tokenize: 100%| 9/9\nplain text, at once\nnext\nb\nc\n"


def test_a_terminal_keeps_its_bars():
    terminal = _Terminal()
    assert plain_lines(terminal) is terminal
    wrapped = plain_lines(io.StringIO())
    assert isinstance(wrapped, PlainLines) and plain_lines(wrapped) is wrapped


def test_tqdm_into_a_file_writes_no_carriage_returns(tmp_path):
    path = tmp_path / "log.txt"
    with open(path, "w") as log:
        bare = tqdm(range(50), file=log, mininterval=0, desc="bare")
        for _ in bare:
            pass
        log.flush()
        assert b"\r" in path.read_bytes()  # what a bar does to a file: the test can fail
        log.truncate(0)
        log.seek(0)
        stderr = sys.stderr
        sys.stderr = log
        try:
            with plain_stderr():
                for _ in tqdm(range(50), mininterval=0, desc="work"):
                    pass
                for _ in tqdm(range(5), mininterval=0, desc="gone", leave=False):
                    pass
        finally:
            sys.stderr = stderr
    text = path.read_bytes().decode()  # read_text would turn each \r into a newline
    assert "\r" not in text and text.count("\n") == 1 and text.startswith("work: 100%") and "50/50" in text


# ---------------------------------------------------------------------------------------------- lm-eval's git lookup


def test_lm_evals_git_lookup_says_nothing_outside_a_repository(tmp_path, monkeypatch, capfd):
    import lm_eval.evaluator

    from slm.eval.provenance import git_commit_hash, quiet_git_lookup

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "not-a-repository"))
    original = lm_eval.evaluator.get_git_commit_hash
    original()
    assert "fatal: not a git repository" in capfd.readouterr().err  # lm-eval's own lookup, unchanged
    with quiet_git_lookup():
        assert lm_eval.evaluator.get_git_commit_hash is git_commit_hash
        assert lm_eval.evaluator.get_git_commit_hash() is None
    assert capfd.readouterr().err == ""
    assert lm_eval.evaluator.get_git_commit_hash is original
    monkeypatch.delenv("GIT_DIR")
    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    if head.returncode == 0:  # this checkout is a git repository: the same answer as lm-eval's
        assert git_commit_hash().startswith(head.stdout.strip()[:7])


# ---------------------------------------------------------------------------------------------- Lightning, wording


@pytest.fixture
def root_handlers():
    """The root logger as Hydra configures a job's: a console handler and the job's log file."""
    root = logging.getLogger()
    saved = list(root.handlers), root.level
    lightning = logging.getLogger("lightning")
    saved_lightning = list(lightning.handlers), lightning.propagate
    yield root
    root.handlers[:] = saved[0]
    root.setLevel(saved[1])
    lightning.handlers[:] = saved_lightning[0]
    lightning.propagate = saved_lightning[1]


def _hydra_like(root, path: Path) -> tuple[io.StringIO, logging.FileHandler]:
    console = io.StringIO()
    handlers = [logging.StreamHandler(console), logging.FileHandler(path)]
    for h in handlers:
        h.setFormatter(logging.Formatter("[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"))
    root.handlers[:] = handlers
    root.setLevel(logging.INFO)
    return console, handlers[1]


def test_lightnings_lines_read_like_slms(root_handlers, tmp_path, capsys):
    from slm.training.logs import tidy_lightning_logging

    console, file_handler = _hydra_like(root_handlers, tmp_path / "job1.log")
    tidy_lightning_logging()
    rank_zero = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    rank_zero.info("GPU available: False, used: False")  # slm's start line names the device: off the console
    rank_zero.info("Checkpoint directory exists")
    logging.getLogger("lightning.pytorch.trainer").warning("something odd")
    file_handler.flush()
    assert capsys.readouterr().out == ("slm-train: Checkpoint directory exists\n"
                                       "slm-train: warning: something odd\n")
    assert console.getvalue() == ""  # not a second time, in Hydra's format
    assert "[INFO] - GPU available" in (tmp_path / "job1.log").read_text()  # the job's log keeps its timestamps
    # a sweep's next job: Hydra's new handlers replace the last job's
    _, second = _hydra_like(root_handlers, tmp_path / "job2.log")
    tidy_lightning_logging()
    tidy_lightning_logging()  # idempotent
    rank_zero.info("`Trainer.fit` stopped")  # slm's `trained to step N of M` says it
    rank_zero.info("Another line")
    second.flush()
    assert capsys.readouterr().out == "slm-train: Another line\n"
    assert "Trainer.fit" in (tmp_path / "job2.log").read_text()
    assert "Trainer.fit" not in (tmp_path / "job1.log").read_text()


def test_numbers_named_for_what_they_are():
    import torch

    from slm.training.progress import device_name, perplexity

    assert perplexity("nll", 9.2) == "ppl 9.2"
    assert perplexity("nelbo", 11.36) == "ppl <= 11.36, a bound"
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert device_name(torch.device("cpu")) == "cpu (1 thread)"
        torch.set_num_threads(2)
        assert device_name(torch.device("cpu")) == "cpu (2 threads)"
    finally:
        torch.set_num_threads(threads)


# ---------------------------------------------------------------------------------------------- the real path


def test_a_sweep_job_and_slm_eval_write_quiet_logs(tmp_path):
    """slm-train as a job of the cpu_default sweep runs (stdout and stderr to a file, outside a git repository,
    the sweep's eval.model_args.mc_num on an autoregressive model, a cold data cache), then slm-eval on it."""
    env = {**os.environ, "SLM_RUNS": str(tmp_path / "runs"), "SLM_CACHE": str(tmp_path / "cache"),
           "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "OMP_NUM_THREADS": "1",
           "GIT_DIR": str(tmp_path / "not-a-repository")}
    log = tmp_path / "train.log"
    with open(log, "w") as out:
        done = subprocess.run([sys.executable, "-m", "slm.cli.train", "run_group=q", "model=debug", "model.n_layers=1",
                               "train.length.steps=4", "train.validation.batches=2", "eval.limit=8", "+eval.model_args.mc_num=16",
                               "eval.throughput.prompt_tokens=8", "eval.throughput.new_tokens=8"],
                              cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=300)
    text = log.read_bytes().decode()  # read_text would turn each \r into a newline
    assert done.returncode == 0, text[-3000:]
    (run,) = (tmp_path / "runs" / "q").iterdir()
    assert "\r" not in text and b"\r" not in (run / "eval" / "lm_eval.log").read_bytes()
    assert "tokenize tiny_shakespeare/train: " in text  # the data's bar, as one plain line
    assert "fatal" not in text and "do not apply" not in text and "[INFO]" not in text
    assert "GPU available" not in text and "Trainer.fit" not in text  # slm's own lines say the device and the end
    assert "GPU available: False, used: False" in (run / "train.log").read_text()  # the job's log keeps them
    assert "slm-train: model debug: 1 layer, " in text and "training on cpu (1 thread)" in text
    assert "val nll " in text and "(ppl " in text
    evaluated = next(line for line in text.splitlines() if line.startswith("slm-train: evaluated"))
    assert "slm_shakespeare_bpb bits_per_byte " in evaluated and "slm_shakespeare_mc acc_norm " in evaluated
    lm = json.loads((run / "result.json").read_text())["eval"]["lm_eval"]
    assert lm["averages"] == {} and set(lm["scores"]) == {"slm_shakespeare_bpb", "slm_shakespeare_mc"}

    eval_log = tmp_path / "eval.log"
    with open(eval_log, "w") as out:
        done = subprocess.run([sys.executable, "-m", "slm.cli.eval", str(run), "--limit", "8", "--no_throughput",
                               "--model_args", "mc_num=8"],
                              cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=300)
    text = eval_log.read_bytes().decode()
    assert done.returncode == 0, text[-3000:]
    assert "\r" not in text and "fatal" not in text and "average" not in text
    assert "Running loglikelihood requests: 100%" in text  # lm-eval's bar, as one plain line
    assert text.count("mc_num ignored: diffusion model_args do not apply to an autoregressive model") == 1
    assert "slm_shakespeare_bpb: bits_per_byte " in text and "slm_shakespeare_mc: acc_norm " in text
    assert "chance 0.2500" in text
