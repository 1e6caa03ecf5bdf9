"""An slm checkpoint directory: `config.json` (the ModelConfig fields) + `model.safetensors`.

Loading uses safetensors only, so no pickle is ever executed. Tied weights are stored once.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import safetensors.torch
from torch import nn

from slm.model.config import ModelConfig
from slm.model.networks import build_model

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"


def save_model(model: nn.Module, directory: str | os.PathLike) -> Path:
    """Write config and weights into `directory` (created if missing); each file is written to a
    temporary name and renamed, so a reader never sees half a file."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / (WEIGHTS_FILE + ".tmp")
    safetensors.torch.save_model(model, str(tmp))
    os.replace(tmp, out / WEIGHTS_FILE)
    tmp = out / (CONFIG_FILE + ".tmp")
    tmp.write_text(json.dumps(model.cfg.to_dict(), indent=2) + "\n")
    os.replace(tmp, out / CONFIG_FILE)
    return out


def resolve_model_dir(path: str | os.PathLike) -> Path:
    """The checkpoint directory of a run directory (`<run>/model`) or of a checkpoint directory itself."""
    path = Path(path).expanduser()
    for candidate in (path / "model", path):
        if (candidate / CONFIG_FILE).is_file():
            return candidate
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such run or checkpoint directory")
    raise FileNotFoundError(f"{path}: not a run directory (no model/{CONFIG_FILE}) nor a checkpoint directory "
                            f"(no {CONFIG_FILE})")


def load_config(directory: str | os.PathLike) -> ModelConfig:
    path = Path(directory) / CONFIG_FILE
    if not path.is_file():
        raise FileNotFoundError(f"no {CONFIG_FILE} in {directory}: not an slm checkpoint directory")
    return ModelConfig.from_dict(json.loads(path.read_text()))


def load_model(directory: str | os.PathLike, device: str = "cpu"):
    """Build the model from `config.json` and load `model.safetensors` strictly."""
    model = build_model(load_config(directory))
    safetensors.torch.load_model(model, str(Path(directory) / WEIGHTS_FILE), strict=True, device=device)
    return model
