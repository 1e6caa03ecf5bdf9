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

from slm.training.checkpoint_io import AtomicCheckpointIO, remove_stale


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
from slm.training.checkpoint_io import atomic_torch_save
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
