"""Checkpoint writes that survive faults: a save that fails midway (a full disk) and a save killed midway
both leave the previous checkpoint loadable and unchanged; the temporary file a kill leaves is removed on
the next start."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from slm.atomic import remove_stale
from slm.training.checkpoint_io import AtomicCheckpointIO
from slm.training.checkpoints import ResumeError, atomic_torch_save, inspect_checkpoint, resume_checkpoint


def test_a_failed_save_leaves_the_previous_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / "last.ckpt"
    io = AtomicCheckpointIO()
    io.save_checkpoint({"step": 1, "w": torch.arange(4.0)}, path)
    real_save = torch.save

    def disk_full(obj, f, *args, **kwargs):
        f.write(b"half a checkpoint")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", disk_full)
    with pytest.raises(OSError) as err:
        io.save_checkpoint({"step": 2, "w": torch.zeros(4)}, path)
    assert err.value.errno == errno.ENOSPC
    assert str(err.value) == f"[Errno 28] No space left on device while saving {path} (the previous one is kept)"
    monkeypatch.setattr(torch, "save", real_save)
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]  # no temporary file left
    kept = torch.load(path, weights_only=True)
    assert kept["step"] == 1 and torch.equal(kept["w"], torch.arange(4.0))


KILLED_SAVE = """
import sys, torch
from slm.training.checkpoints import atomic_torch_save
atomic_torch_save({"step": 2, "w": torch.ones(24_000_000)}, sys.argv[1])  # ~96 MB: the kill lands midway
"""


def test_a_killed_save_leaves_the_previous_checkpoint(tmp_path):
    path = tmp_path / "last.ckpt"
    AtomicCheckpointIO().save_checkpoint({"step": 1}, path)
    before = path.read_bytes()
    proc = subprocess.Popen([sys.executable, "-c", KILLED_SAVE, str(path)])
    deadline = time.time() + 60
    while time.time() < deadline and proc.poll() is None:
        temps = list(tmp_path.glob(".last.ckpt.tmp-*"))
        if temps and temps[0].stat().st_size > 1 << 20:
            break
        time.sleep(0.005)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the save finished before it could be killed"
    assert path.read_bytes() == before and torch.load(path, weights_only=True) == {"step": 1}
    stale = remove_stale(tmp_path)
    assert [p.name for p in stale] == [f".last.ckpt.tmp-{proc.pid}"]
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]


def _checkpoint(path, step: int) -> None:
    """A file shaped like a Lightning checkpoint at `step`, saved the way the trainer saves."""
    atomic_torch_save({"global_step": step, "state_dict": {"w": torch.full((256,), float(step))}}, path)


def test_each_save_keeps_the_one_before_as_previous(tmp_path):
    path = tmp_path / "last.ckpt"
    _checkpoint(path, 10)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt"]
    _checkpoint(path, 20)
    _checkpoint(path, 30)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt", "previous.ckpt"]
    assert inspect_checkpoint(path) == (30, None) and inspect_checkpoint(tmp_path / "previous.ckpt") == (20, None)


def _truncate(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _zero_a_record(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 3: len(data) // 3 + 64] = bytes(64)  # inside a tensor record: torch.load alone misses it
    path.write_bytes(bytes(data))


class _Evil:
    def __reduce__(self):
        return (os.system, ("echo unsafe",))


@pytest.mark.parametrize("damage, reason", [
    (_truncate, "not a complete checkpoint"),
    (lambda p: p.write_bytes(b""), "not a complete checkpoint"),
    (_zero_a_record, "fails its CRC check"),
    (lambda p: torch.save({"x": _Evil()}, p), "pickled objects that weights-only loading refuses"),
    (lambda p: torch.save({"weights": torch.ones(2)}, p), "not a Lightning training checkpoint"),
])
def test_a_damaged_last_checkpoint_is_one_line_and_the_choice_is_the_users(tmp_path, damage, reason, capsys):
    path = tmp_path / "last.ckpt"
    _checkpoint(path, 10)
    _checkpoint(path, 20)
    damage(path)
    damaged = path.read_bytes()
    with pytest.raises(ResumeError) as err:
        resume_checkpoint(tmp_path)  # bad_checkpoint=fail: nothing moved
    line = str(err.value)
    assert "\n" not in line and str(path) in line and reason in line
    assert "bad_checkpoint=previous to resume from previous.ckpt (step 10)" in line and "bad_checkpoint=restart" in line
    assert path.read_bytes() == damaged
    assert resume_checkpoint(tmp_path, "previous") == tmp_path / "previous.ckpt"
    assert (tmp_path / "last.ckpt.bad").read_bytes() == damaged and not path.exists()
    assert "resuming from previous.ckpt (step 10)" in capsys.readouterr().out


def test_restart_keeps_both_files_aside(tmp_path, capsys):
    path = tmp_path / "last.ckpt"
    _checkpoint(path, 10)
    _checkpoint(path, 20)
    _truncate(path)
    assert resume_checkpoint(tmp_path, "restart") is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt.bad", "previous.ckpt.old"]
    assert "training from step 0" in capsys.readouterr().out


def test_previous_that_is_damaged_too_is_refused(tmp_path):
    path = tmp_path / "last.ckpt"
    _checkpoint(path, 10)
    _checkpoint(path, 20)
    _truncate(path)
    _truncate(tmp_path / "previous.ckpt")
    with pytest.raises(ResumeError, match="both checkpoints are damaged: .*bad_checkpoint=restart is left"):
        resume_checkpoint(tmp_path, "previous")
    assert path.exists()  # nothing moved
    with pytest.raises(ResumeError, match="bad_checkpoint=.nope. is invalid: choose one of: fail, previous, restart"):
        resume_checkpoint(tmp_path, "nope")
