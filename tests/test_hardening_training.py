"""Hardening of training: a full disk while a checkpoint is written, memory that runs out mid-run, an
enormous batch, both checkpoints damaged, a read-only run directory and damaged data-cache metadata each end
with one line naming the problem and what to do (exit 2), the run recorded `failed` with that line where it had
started, the last good checkpoint intact, and nothing written outside the run directory.

The runs train in this process (Hydra's @main included) with the fault injected by a monkeypatch: torch's zip
writer failing as it does on a full disk (its RuntimeError, the system's ENOSPC in its context), the model's
forward raising what the allocators raise.
"""

from __future__ import annotations

import errno
import json
import logging
import os
from pathlib import Path

import pytest
import torch

from tests.test_bad_input import RUN, _train, snapshot, workdir  # noqa: F401 - workdir is a fixture
from tests.test_checkpoint_io import _checkpoint, _truncate

CKPT = [*(a for a in RUN if not a.startswith("train.length.steps=")), "train.length.steps=4", "train.checkpoint.interval=2"]



def one_line_exit_2(capsys, argv) -> str:
    """Run slm-train; assert exit 2, no traceback and exactly one error line; return that line."""
    with pytest.raises(SystemExit) as exit_:
        _train(argv)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert exit_.value.code == 2, err[-3000:]
    assert "Traceback" not in err
    assert len([line for line in lines if ": error:" in line]) == 1 and lines[-1].startswith("slm-train: error: ")
    return lines[-1].removeprefix("slm-train: error: ")


def the_run(workdir: Path) -> Path:
    (run,) = (workdir / "runs" / "train").iterdir()
    return run


def record(run: Path) -> dict:
    return json.loads((run / "result.json").read_text())


def outside(workdir: Path) -> dict:
    """Every file under workdir outside the runs directory."""
    return {k: v for k, v in snapshot(workdir).items() if not k.startswith("runs")}


# -- a full disk ---------------------------------------------------------------------------------------------------

def fill_disk_after(monkeypatch, saves: int, code: int = errno.ENOSPC) -> None:
    """torch.save in slm.training.checkpoints fails like torch's zip writer on a full disk after `saves` saves: some
    bytes written, the system's OSError, then the writer's own RuntimeError raised while handling it."""
    from slm.training import checkpoints

    real, done = torch.save, []

    def save(obj, f, *args, **kwargs):
        if len(done) < saves:
            done.append(1)
            return real(obj, f, *args, **kwargs)
        f.write(b"PK\x03\x04 a checkpoint cut short")
        try:
            raise OSError(code, os.strerror(code))
        except OSError:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 924928 vs 924820")

    monkeypatch.setattr(checkpoints.torch, "save", save)


def test_a_full_disk_while_checkpointing_is_one_line_and_the_last_checkpoint_survives(workdir, capsys, monkeypatch):
    from slm.training.checkpoints import inspect_checkpoint

    before = outside(workdir)
    fill_disk_after(monkeypatch, saves=1)  # the step-2 checkpoint is written, the step-4 one is not
    line = one_line_exit_2(capsys, CKPT)
    run = the_run(workdir)
    assert line.startswith(f"no space left on device writing checkpoints/last.ckpt in {run}"), line
    assert "free space on that disk" in line and "resumes from checkpoints/last.ckpt (step 2), which is intact" in line
    assert record(run)["status"] == "failed" and record(run)["error"] == line
    assert inspect_checkpoint(run / "checkpoints" / "last.ckpt") == (2, None)
    assert not [p for p in (run / "checkpoints").iterdir() if ".tmp-" in p.name]  # the cut-short file is gone
    assert outside(workdir) == before
    monkeypatch.undo()  # room again: the same command resumes from step 2 and completes
    monkeypatch.chdir(workdir)
    monkeypatch.setenv("SLM_RUNS", str(workdir / "runs"))
    monkeypatch.setenv("SLM_CACHE", str(workdir.parent / "slm-cache"))
    _train(CKPT)
    assert record(run)["status"] == "completed" and record(run)["training"]["resumed_from"] == "checkpoints/last.ckpt"


@pytest.mark.parametrize("code, said", [(errno.EDQUOT, "disk quota exceeded"), (errno.ENOSPC, "no space left on device")])
def test_a_full_disk_before_any_checkpoint_says_step_0(workdir, capsys, monkeypatch, code, said):
    fill_disk_after(monkeypatch, saves=0, code=code)
    line = one_line_exit_2(capsys, CKPT)
    assert line.startswith(f"{said} writing checkpoints/last.ckpt") and "starts again from step 0 (no checkpoint was written yet)" in line, line
    assert record(the_run(workdir))["error"] == line


def test_a_failed_checkpoint_write_names_the_file_and_keeps_the_old_one(tmp_path, monkeypatch):
    from slm.training.checkpoints import CheckpointWriteError, atomic_torch_save

    path = tmp_path / "last.ckpt"
    atomic_torch_save({"global_step": 1, "state_dict": {}}, path)
    fill_disk_after(monkeypatch, saves=0)
    with pytest.raises(CheckpointWriteError) as err:
        atomic_torch_save({"global_step": 2, "state_dict": {}}, path)
    assert err.value.errno == errno.ENOSPC and err.value.path == path
    assert str(err.value) == f"[Errno 28] No space left on device while saving {path} (the previous one is kept)"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt"]
    assert torch.load(path, weights_only=True)["global_step"] == 1


def test_an_error_that_is_not_the_disk_still_propagates(tmp_path, monkeypatch):
    from slm.training import checkpoints

    def broken(obj, f, *args, **kwargs):
        raise RuntimeError("a bug in a writer")

    monkeypatch.setattr(checkpoints.torch, "save", broken)
    with pytest.raises(RuntimeError, match="a bug in a writer"):
        checkpoints.atomic_torch_save({}, tmp_path / "last.ckpt")


# -- memory that runs out ------------------------------------------------------------------------------------------

OOMS = {
    "cuda": lambda: torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB"),
    "cpu": lambda: RuntimeError("[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: not enough memory: "
                                "you tried to allocate 1073741824 bytes."),
    "python": lambda: MemoryError(),
}


def run_out_of_memory_at(monkeypatch, calls: int, kind: str) -> None:
    """The model's forward raises `kind`'s out-of-memory error from its `calls`-th call on."""
    from slm.model.transformer import Transformer

    real, done = Transformer.forward, []

    def forward(self, *args, **kwargs):
        done.append(1)
        if len(done) >= calls:
            raise OOMS[kind]()
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Transformer, "forward", forward)


@pytest.mark.parametrize("kind", sorted(OOMS))
def test_out_of_memory_mid_run_is_one_line_and_recorded_failed(workdir, capsys, monkeypatch, kind):
    before = outside(workdir)
    run_out_of_memory_at(monkeypatch, 4, kind)  # steps 1-3 train, step 2 is checkpointed, step 4 runs out
    line = one_line_exit_2(capsys, CKPT)
    run = the_run(workdir)
    assert line.startswith("out of memory ("), line
    assert "with 16 sequences per forward: set train.parallel.micro_batch_size below 16" in line
    assert line.endswith("it resumes from checkpoints/last.ckpt (step 2), which is intact"), line
    assert record(run)["status"] == "failed" and record(run)["error"] == line
    assert outside(workdir) == before


def test_a_sweep_job_out_of_memory_is_recorded_and_the_sweep_goes_on(workdir, monkeypatch):
    from omegaconf import OmegaConf

    from slm.cli.config import compose_config
    from slm.runs.job import train_run

    run_out_of_memory_at(monkeypatch, 1, "cpu")
    cfg = OmegaConf.to_container(compose_config([*RUN, "train.batch_size=2", "train.parallel.micro_batch_size=1"]),
                                 resolve=True)
    rec = train_run(cfg, workdir / "runs" / "g" / "job", sweep=True)
    assert rec["status"] == "failed" and rec["error"].startswith("out of memory (RuntimeError: ")
    assert "with 1 sequence per forward: make the model or model.context_length smaller" in rec["error"]
    assert "starts again from step 0" in rec["error"]


# -- an enormous batch ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("extra, said", [
    (["train.batch_size=10000000"], "train.batch_size=10000000 is too large for this cpu: one forward/backward of "
                                    "10,000,000 x 128 tokens holds at least"),
    (["train.batch_size=20000000", "train.parallel.micro_batch_size=10000000"], "train.parallel.micro_batch_size=10000000 is too large"),
])
def test_an_enormous_batch_is_refused_up_front(workdir, capsys, extra, said):
    before = snapshot(workdir)
    line = one_line_exit_2(capsys, [*RUN, *extra])
    assert line.startswith(said), line
    assert "GiB of activations" in line and ("or set train.parallel.micro_batch_size" in line) == ("micro" not in said)
    assert snapshot(workdir) == before  # no run directory left behind


def test_the_activation_bound_is_the_layer_inputs_and_the_ids():
    from types import SimpleNamespace

    from slm.runs.preflight import activation_bytes

    cfg = SimpleNamespace(context_length=128, n_layers=2, d_model=64)
    assert activation_bytes(cfg, 16) == 16 * 128 * (2 * 2 * 64 + 16)


def test_a_batch_that_fits_passes_the_check(monkeypatch):
    from types import SimpleNamespace

    from slm.model import weights
    from slm.runs import preflight
    from slm.training.config import TrainConfigError

    train = SimpleNamespace(parallel=SimpleNamespace(accelerator="cpu", micro_batch_size=None), micro_batch=lambda: 16,
                            batch_size=16, world_size=1)
    model = SimpleNamespace(context_length=128, n_layers=2, d_model=64)
    need = 1000 * preflight.TRAIN_BYTES_PER_PARAM + preflight.activation_bytes(model, 16)
    monkeypatch.setattr(weights, "available_memory", lambda device: need)
    preflight._check_memory(train, 1000, model)
    monkeypatch.setattr(weights, "available_memory", lambda device: need - 1)
    with pytest.raises(TrainConfigError, match="train.batch_size=16 is too large"):
        preflight._check_memory(train, 1000, model)


# -- both checkpoints damaged --------------------------------------------------------------------------------------

def test_both_checkpoints_damaged_says_so_and_that_restart_is_left(tmp_path):
    from slm.training.checkpoints import ResumeError, resume_checkpoint

    path = tmp_path / "last.ckpt"
    _checkpoint(path, 10)
    _checkpoint(path, 20)
    _truncate(path)
    _truncate(tmp_path / "previous.ckpt")
    for policy in ("previous", "fail"):
        with pytest.raises(ResumeError) as err:
            resume_checkpoint(tmp_path, policy)
        text = str(err.value)
        assert text.startswith(f"both checkpoints are damaged: {path} (not a complete checkpoint"), text
        assert f"and {tmp_path / 'previous.ckpt'} (not a complete checkpoint" in text
        assert "bad_checkpoint=restart is left: run again with it to train from step 0" in text
        assert ("bad_checkpoint=previous cannot resume" in text) == (policy == "previous")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt", "previous.ckpt"]  # nothing moved


def test_a_damaged_checkpoint_with_no_previous_says_restart_is_left(tmp_path):
    from slm.training.checkpoints import ResumeError, resume_checkpoint

    path = tmp_path / "last.ckpt"
    _checkpoint(path, 10)
    _truncate(path)
    with pytest.raises(ResumeError, match="there is no previous.ckpt to fall back on; bad_checkpoint=previous cannot "
                                          "resume; bad_checkpoint=restart is left"):
        resume_checkpoint(tmp_path, "previous")


def test_both_checkpoints_damaged_through_the_command(workdir, capsys):
    _train(CKPT)
    run = the_run(workdir)
    for name in ("last.ckpt", "previous.ckpt"):
        _truncate(run / "checkpoints" / name)
    (run / "result.json").write_text(json.dumps({**record(run), "status": "running"}))
    line = one_line_exit_2(capsys, [*CKPT, "bad_checkpoint=previous"])
    assert line.startswith("both checkpoints are damaged: ") and "bad_checkpoint=restart is left" in line, line
    assert record(run)["status"] == "failed" and record(run)["error"].endswith(line)


# -- a read-only run directory -------------------------------------------------------------------------------------

def test_a_read_only_run_directory_is_named(workdir, capsys, monkeypatch):
    run = workdir / "runs" / "train" / "mine"
    run.mkdir(parents=True)
    real_open = logging.FileHandler._open

    def denied(self):  # as root chmod does not stop a write: refuse the way a read-only directory does
        if Path(self.baseFilename).is_relative_to(run):
            raise PermissionError(errno.EACCES, "Permission denied", self.baseFilename)
        return real_open(self)

    monkeypatch.setattr(logging.FileHandler, "_open", denied)
    line = one_line_exit_2(capsys, [*RUN, f"hydra.run.dir={run}"])
    assert line.startswith(f"run directory {run} is not writable (Permission denied): make it writable"), line
    assert "Unable to configure handler" not in line
    assert list(run.iterdir()) == []


# -- damaged data-cache metadata -----------------------------------------------------------------------------------

@pytest.fixture
def prepared_cache(tmp_path, monkeypatch):
    from omegaconf import OmegaConf

    from slm.cli.config import compose_config
    from slm.data import prepare

    cfg = OmegaConf.to_container(compose_config(list(RUN)), resolve=True)
    monkeypatch.setenv("SLM_CACHE", str(tmp_path / "cache"))
    prepare(cfg["data"], cfg["tokenizer"])
    return tmp_path / "cache", lambda: prepare(cfg["data"], cfg["tokenizer"])


@pytest.mark.parametrize("content, problem", [
    (b"{\"n_tokens\": 12", "not JSON"), (b"\xff\xfe garbage", "not JSON"), (b"[1, 2]", "a JSON list, not an object"),
    (b"{}", "n_tokens=None, expected int"), (b"{\"n_tokens\": 10, \"dtype\": \"float64\"}", "dtype='float64'"),
])
def test_damaged_shard_metadata_names_the_file_and_how_to_clear_it(prepared_cache, content, problem):
    from slm.data.errors import DataError

    cache, prepare_again = prepared_cache
    meta = sorted((cache / "tokens").glob("*.train.*.json"))[0]
    meta.write_bytes(content)
    with pytest.raises(DataError) as err:
        prepare_again()
    text = str(err.value)
    assert text.startswith(f"data cache metadata {meta} is damaged (") and problem in text, text
    assert f"delete it (rm {meta} {meta.with_suffix('.bin')}) and run again" in text
    meta.unlink()
    meta.with_suffix(".bin").unlink()
    prepare_again()  # as the message says: the entry is built again
    assert json.loads(meta.read_text())["n_tokens"] > 0


@pytest.mark.parametrize("content, problem", [(b"\x00\x01", "not JSON"), (b"{\"kind\": \"char\"}", "KeyError")])
def test_damaged_vocabulary_metadata_names_the_file(prepared_cache, content, problem):
    from slm.data.errors import DataError

    cache, prepare_again = prepared_cache
    (meta,) = (cache / "vocab").glob("*.json")
    meta.write_bytes(content)
    with pytest.raises(DataError, match=f"data cache metadata {meta} is damaged \\({problem}.*delete it \\(rm {meta}\\)"):
        prepare_again()
    meta.unlink()
    prepare_again()


def test_damaged_cache_metadata_through_the_command(workdir, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("SLM_CACHE", str(tmp_path / "own-cache"))
    _train(RUN)
    (meta,) = sorted((tmp_path / "own-cache" / "tokens").glob("*.valid.*.json"))
    meta.write_text("garbage")
    line = one_line_exit_2(capsys, [*RUN, "train.seed=1"])
    assert line.startswith(f"data cache metadata {meta} is damaged (not JSON") and "delete it (rm " in line, line


def test_validation_follows_optimizer_steps_when_micro_batches_accumulate(workdir):
    """train.validation.interval counts optimizer steps: with 2 micro-batches a step, an interval of 3 validates at
    steps 3 and 6 (Lightning's val_check_interval counts micro-batches, so it is scaled by the accumulation)."""
    from omegaconf import OmegaConf

    from slm.cli.config import compose_config
    from slm.runs.job import train_run

    cfg = OmegaConf.to_container(compose_config([*[a for a in RUN if "length.steps" not in a],
                                                 "train.batch_size=4", "train.parallel.micro_batch_size=2",
                                                 "train.length.steps=6", "train.validation.interval=3"]), resolve=True)
    rec = train_run(cfg, workdir / "runs" / "g" / "micro")
    assert rec["status"] == "completed", rec.get("error")
    assert [step for step, _ in rec["eval"]["val_curve"]] == [3, 6]
