"""A shared SLM_RUNS stays readable: every file slm writes atomically gets 0666 less the umask (not mkstemp's
0600), so a colleague can read a run's record, weights and checkpoints."""

import os
import stat
from pathlib import Path

import pytest
import torch

from slm.model import ModelConfig, build_model
from slm.model.weights import CONFIG_FILE, WEIGHTS_FILE, save_model
from slm.runs.record import write_json_atomic
from slm.sweeps.store import SWEEP_FILE, list_jobs
from slm.training.checkpoints import atomic_torch_save


@pytest.fixture(params=[0o022, 0o002, 0o077], ids=["umask022", "umask002", "umask077"])
def umask(request):
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_records_weights_sweep_lists_and_checkpoints_respect_the_umask(tmp_path, umask):
    expected = 0o666 & ~umask
    run = tmp_path / "group" / "model=debug"
    write_json_atomic(run / "result.json", {"status": "completed"})
    list_jobs(tmp_path / "group", {"model=debug": ["model=debug"]})
    model = build_model(ModelConfig(n_layers=1, d_model=16, attention=dict(n_heads=2), vocab_size=32,
                                    context_length=8))
    save_model(model, run / "model")
    atomic_torch_save({"step": 1}, run / "checkpoints" / "last.ckpt")
    atomic_torch_save({"step": 2}, run / "checkpoints" / "last.ckpt")  # the kept previous copy, too
    written = [run / "result.json", tmp_path / "group" / SWEEP_FILE, run / "model" / WEIGHTS_FILE,
               run / "model" / CONFIG_FILE, run / "checkpoints" / "last.ckpt"]
    written += [p for p in (run / "checkpoints").iterdir() if p.name != "last.ckpt"]
    assert len(written) >= 6
    for path in written:
        assert mode(path) == expected, f"{path.name}: {oct(mode(path))} under umask {oct(umask)}"
    assert torch.load(run / "checkpoints" / "last.ckpt")["step"] == 2
