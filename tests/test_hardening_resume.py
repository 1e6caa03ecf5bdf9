"""Resuming a run directory that was copied elsewhere, and a train_log.jsonl with a damaged line (issue 38, classes 4
and 6): the run keeps checkpointing into its own last.ckpt and ends with an uninterrupted run's weights; a damaged log
line is named and repaired from the checkpoint's step, or the resume is refused before anything changes."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import torch

from slm.runs.record import load_record, update_record
from slm.training.checkpoints import resume_checkpoint
from slm.training.train_log import TrainLogError, kept_lines
from tests.test_checkpoint_io import _checkpoint, _truncate
from tests.test_train_cli import FAST, assert_same_run, curve, kill_at_step, run_dir, slm_train

ARGS = [*(a for a in FAST if not a.startswith("train.logging.interval=")), "train.logging.interval=1",  # a log line a step
        "train.length.steps=40", "train.checkpoint.interval=5", "train.checkpoint.keep_every=10", "train.validation.interval=40",
        "train.seed=3"]


def step_of(path: Path) -> int:
    return torch.load(path, map_location="cpu", weights_only=True, mmap=True)["global_step"]


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """An uninterrupted run of ARGS (its kept step-10/20/30/40.ckpt are full training states)."""
    root = tmp_path_factory.mktemp("ref")
    out = slm_train(root, *ARGS)
    assert out.returncode == 0, out.stderr[-2000:]
    return run_dir(root)


def test_a_copied_run_keeps_checkpointing_into_its_own_last_ckpt(reference, tmp_path):
    """Killed, copied to another runs directory (`cp -a` to project storage), resumed there, killed again, resumed
    again: every resume starts from the latest step, no last-v<N>.ckpt appears, and the weights, log and curve are an
    uninterrupted run's."""
    first = kill_at_step(tmp_path / "scratch", ARGS, 12)
    first_step = step_of(first / "checkpoints" / "last.ckpt")
    (tmp_path / "project" / "runs").mkdir(parents=True)
    shutil.copytree(first.parent, tmp_path / "project" / "runs" / "t", symlinks=True)
    shutil.rmtree(tmp_path / "scratch")  # the old place is gone
    moved = kill_at_step(tmp_path / "project", ARGS, first_step + 11)  # line N+1 is written after checkpoint N
    ckpts = moved / "checkpoints"
    assert not list(ckpts.glob("last-v*")), sorted(p.name for p in ckpts.iterdir())
    step = step_of(ckpts / "last.ckpt")
    assert step >= first_step + 10  # last.ckpt itself went on after the move
    assert step_of(ckpts / "previous.ckpt") == step - 5
    kept = first_step // 10 * 10 + 10  # train.checkpoint.keep_every=10: the first one kept after the move, in the new place
    assert step_of(ckpts / f"step-{kept}.ckpt") == kept
    state = torch.load(ckpts / "last.ckpt", map_location="cpu", weights_only=True, mmap=True)["callbacks"]
    assert str(tmp_path) not in json.dumps(state, default=str)  # no path of either place in the checkpoint
    out = slm_train(tmp_path / "project", *ARGS)
    assert out.returncode == 0, out.stderr[-2000:]
    assert f"resumed from step {step} of 40 (checkpoints/last.ckpt)" in out.stdout + out.stderr
    assert load_record(moved)["training"]["resumed_from"] == "checkpoints/last.ckpt"
    assert_same_run(reference, moved)
    assert curve(reference) == curve(moved)
    assert sorted(p.name for p in ckpts.iterdir()) == ["last.ckpt", "previous.ckpt", "step-10.ckpt", "step-20.ckpt",
                                                       "step-30.ckpt", "step-40.ckpt"]


def stopped_copy(reference: Path, root: Path, lines: int) -> Path:
    """The reference run as a kill at step `lines` leaves it: last.ckpt of step 20 (its kept step-20.ckpt),
    previous.ckpt of step 10, the log's first `lines` lines, the record `running`, no weights."""
    run = root / "runs" / "t" / reference.name
    shutil.copytree(reference, run)
    shutil.rmtree(run / "model")
    shutil.copy(run / "checkpoints" / "step-20.ckpt", run / "checkpoints" / "last.ckpt")
    shutil.copy(run / "checkpoints" / "step-10.ckpt", run / "checkpoints" / "previous.ckpt")
    for later in (30, 40):
        (run / "checkpoints" / f"step-{later}.ckpt").unlink()
    log = run / "train_log.jsonl"
    log.write_bytes(b"".join(log.read_bytes().splitlines(keepends=True)[:lines]))
    update_record(run, status="running")
    return run


def damage(log: Path, line: int, content: bytes | None) -> None:
    """Replace line `line` (1-based) with `content`; None: cut the last line half-way (a kill during its write)."""
    rows = log.read_bytes().splitlines(keepends=True)
    rows[line - 1] = rows[line - 1][: len(rows[line - 1]) // 2] if content is None else content + b"\n"
    log.write_bytes(b"".join(rows))


def test_damaged_log_lines_past_the_checkpoint_are_named_and_written_again(reference, tmp_path):
    """A kill cut the last line (23) short, and line 21 holds bytes that are not UTF-8: both are past the checkpoint's
    step 20, so the resume names them, writes their steps again and ends with the uninterrupted run's log."""
    run = stopped_copy(reference, tmp_path, 23)
    damage(run / "train_log.jsonl", 21, b"\xff\xfe{not a row")
    damage(run / "train_log.jsonl", 23, None)
    out = slm_train(tmp_path, *ARGS)
    assert out.returncode == 0, out.stderr[-2000:]
    said = out.stdout + out.stderr
    notes = [line for line in said.splitlines() if "train_log.jsonl" in line]
    assert len(notes) == 1 and "line" in notes[0], said[-2000:]
    assert "21 (not UTF-8 at byte 1)" in notes[0] and "23 (cut short: no newline)" in notes[0] and "step 20" in notes[0]
    assert "resumed from step 20 of 40" in said
    assert load_record(run)["status"] == "completed"
    assert_same_run(reference, run)  # one line per step 1..40, the uninterrupted run's values
    assert curve(reference) == curve(run)


@pytest.fixture
def in_process(tmp_path, monkeypatch):
    """slm-train in this process (no training happens in the tests that use it), runs under tmp_path."""
    import logging

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SLM_RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv("SLM_CACHE", str(tmp_path.parent / "slm-cache"))
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield tmp_path
    root.handlers[:] = handlers
    root.setLevel(level)


def files(run: Path) -> dict[str, bytes]:
    """Every file of the run but Hydra's own (.hydra/, its job log), with its bytes."""
    return {str(p.relative_to(run)): p.read_bytes() for p in run.rglob("*")
            if p.is_file() and ".hydra" not in p.parts and p.suffix != ".log"}


@pytest.mark.parametrize("content", [b"\x80garbage", b"{\"step\": 5, \"lo", b"not json at all"])
def test_a_damaged_log_line_before_the_checkpoint_is_refused_and_changes_nothing(reference, in_process, capsys,
                                                                                   content):
    """Line 5 (step 5) cannot be computed again from the step-20 checkpoint: one line, exit 2, naming the file, the
    line and what to do; the record stays `running`, metrics.csv and every other file as they were."""
    from tests.test_bad_input import _train

    run = stopped_copy(reference, in_process, 23)
    damage(run / "train_log.jsonl", 5, content)
    before = files(run)
    with pytest.raises(SystemExit) as exit_:
        _train(["run_group=t", *ARGS])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert exit_.value.code == 2 and len(lines) == 1, err
    assert lines[0].startswith(f"slm-train: error: {run / 'train_log.jsonl'} line 5 is damaged")
    assert "step 5" in lines[0] and "restore the file" in lines[0] and "delete that line" in lines[0]
    assert files(run) == before
    assert load_record(run)["status"] == "running"


def write_log(path: Path, rows: list[bytes]) -> None:
    path.write_bytes(b"".join(rows))


def row(step: int) -> bytes:
    return json.dumps({"step": step, "loss": 1.0 / step, "lr": 0.001}).encode() + b"\n"


def test_kept_lines_sorts_damage_by_where_it_is(tmp_path):
    log = tmp_path / "train_log.jsonl"
    write_log(log, [row(s) for s in range(1, 8)] + [b'{"step": 8, "lo'])  # a kill cut line 8 short
    kept = kept_lines(log, 5)
    assert [json.loads(line)["step"] for line in kept.lines] == [1, 2, 3, 4, 5]
    assert "line 8 (cut short" in kept.note and "step 5" in kept.note
    write_log(log, [row(s) for s in range(1, 8)])  # a clean log: nothing to say
    assert kept_lines(log, 5).note is None and len(kept_lines(log, 7).lines) == 7
    write_log(log, [row(1), row(2), b"\n", b"\xffjunk\n", row(3), row(4)])  # lines that hold no step of their own
    kept = kept_lines(log, 4)
    assert len(kept.lines) == 4 and "lines 3 (blank), 4 (not UTF-8 at byte 1)" in kept.note
    write_log(log, [row(1), row(2), b"[1, 2]\n", row(4)])  # step 3's line replaced
    with pytest.raises(TrainLogError, match=r"line 3 is damaged \(not a step's row.*it held step 3"):
        kept_lines(log, 4)
    assert kept_lines(log, 2).lines == [row(1).decode().strip(), row(2).decode().strip()]  # past step 2: dropped
    write_log(log, [row(1), b"\x00\x00"])  # a log cut short before the checkpoint's step
    with pytest.raises(TrainLogError, match="line 2 is damaged"):
        kept_lines(log, 3)
    assert kept_lines(log, 0).lines == [] and kept_lines(tmp_path / "none.jsonl", 9).lines == []


def test_a_newer_last_v_checkpoint_is_resumed_from_and_said(tmp_path, capsys):
    """A run moved and resumed before the fix checkpointed into last-v1.ckpt while last.ckpt stayed behind: the
    newest good one is resumed from, by name; older or damaged ones are named and ignored."""
    _checkpoint(tmp_path / "last.ckpt", 15)
    _checkpoint(tmp_path / "last-v1.ckpt", 30)
    _checkpoint(tmp_path / "last-v2.ckpt", 35)
    _truncate(tmp_path / "last-v2.ckpt")
    _checkpoint(tmp_path / "last-v3.ckpt", 20)
    assert resume_checkpoint(tmp_path, apply=False) == tmp_path / "last-v1.ckpt"
    assert capsys.readouterr().out == ""
    assert resume_checkpoint(tmp_path) == tmp_path / "last-v1.ckpt"
    (said,) = capsys.readouterr().out.splitlines()
    assert said.startswith(f"slm-train: resuming from {tmp_path.name}/last-v1.ckpt (step 30), newer than "
                           f"{tmp_path.name}/last.ckpt (step 15)")
    assert "last-v2.ckpt (damaged), last-v3.ckpt (step 20)" in said
    _checkpoint(tmp_path / "last.ckpt", 40)  # the resumed run has checkpointed into last.ckpt since
    assert resume_checkpoint(tmp_path) == tmp_path / "last.ckpt"
    (said,) = capsys.readouterr().out.splitlines()
    assert said.startswith("slm-train: ignoring last-v1.ckpt (step 30), last-v2.ckpt (damaged), last-v3.ckpt "
                           "(step 20)") and "none is newer than last.ckpt (step 40)" in said


def test_a_newer_last_v_checkpoint_beside_a_damaged_last_keeps_that_aside(tmp_path, capsys):
    _checkpoint(tmp_path / "last.ckpt", 15)
    _truncate(tmp_path / "last.ckpt")
    _checkpoint(tmp_path / "last-v1.ckpt", 30)
    assert resume_checkpoint(tmp_path) == tmp_path / "last-v1.ckpt"  # under bad_checkpoint=fail too: nothing lost
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last-v1.ckpt", "last.ckpt.bad"]  # not linked as previous


def test_the_checkpoint_callback_state_names_no_directory(tmp_path):
    """RunCheckpoint's state holds file names; a state written in another place (absolute paths, as Lightning's own
    and slm's before the fix) reads into the current directory, where the rolling file stays last.ckpt."""
    from slm.training.callbacks import RunCheckpoint

    here = RunCheckpoint(tmp_path / "now" / "checkpoints", 5)
    here.last_model_path = str(tmp_path / "now" / "checkpoints" / "last.ckpt")
    state = here.state_dict()
    assert "dirpath" not in state and state["last_model_path"] == "last.ckpt"
    assert str(tmp_path) not in json.dumps(state, default=str)
    assert here.state_key.startswith("ModelCheckpoint{")  # older checkpoints' state reads in
    moved = RunCheckpoint(tmp_path / "elsewhere" / "checkpoints", 5)
    moved.load_state_dict({**state, "dirpath": "/old/place/checkpoints", "last_model_path": "/old/place/checkpoints/"
                           "last.ckpt", "best_model_path": ""})
    assert moved.last_model_path == str(Path(moved.dirpath) / "last.ckpt")
    assert Path(moved.dirpath) == (tmp_path / "elsewhere" / "checkpoints").resolve()


def test_a_resume_that_fails_after_the_loggers_open_keeps_metrics_csv(reference, in_process, capsys):
    """A checkpoint whose optimizer state does not fit fails the resume inside Lightning, after its loggers opened
    (where Lightning's CSV logger removed metrics.csv): recorded failed, and the CSV and the log are as they were."""
    from tests.test_bad_input import _train

    run = stopped_copy(reference, in_process, 23)
    last = run / "checkpoints" / "last.ckpt"
    ckpt = torch.load(last, map_location="cpu", weights_only=True)
    ckpt["optimizer_states"][0]["param_groups"] = []
    torch.save(ckpt, last)
    csv_before, log_before = (run / "logs" / "csv" / "metrics.csv").read_bytes(), (run / "train_log.jsonl").read_bytes()
    with pytest.raises(SystemExit):
        _train(["run_group=t", *ARGS])
    capsys.readouterr()
    assert load_record(run)["status"] == "failed"
    assert (run / "logs" / "csv" / "metrics.csv").read_bytes() == csv_before
    assert (run / "train_log.jsonl").read_bytes() == log_before


def test_metrics_csv_keeps_its_rows_before_the_step_and_names_a_damaged_one(tmp_path, capsys):
    """Opening the CSV logger leaves metrics.csv alone; training's start rewrites it with the rows before the restored
    step, a damaged row dropped with a note naming its line."""
    from types import SimpleNamespace

    from slm.training.callbacks import CSVHistory, KeptCSVLogger

    logger = KeptCSVLogger(tmp_path, name="logs", version="csv")
    path = tmp_path / "logs" / "csv" / "metrics.csv"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"step,train/loss\n5,3.5\n\xff,2.0\n10,3.0\n15,2.5\n")
    original = path.read_bytes()
    assert logger.experiment is not None  # opens the log directory: Lightning's own logger removes metrics.csv here
    assert path.read_bytes() == original
    CSVHistory(logger).on_train_start(SimpleNamespace(global_step=15), None)
    assert path.read_text().splitlines() == ["step,train/loss", "5,3.5", "10,3.0"]
    assert f"slm-train: note: {path}: damaged row at line 3 dropped" in capsys.readouterr().out
    assert logger.experiment.metrics_keys == ["step", "train/loss"]
