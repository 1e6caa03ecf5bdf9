"""What the run ran on: versions, device, host and the git revision of the slm source (slm.eval.provenance, whose git
lookups lm-eval's results use too)."""

from __future__ import annotations

import platform
import socket
from importlib import metadata

import torch

from slm.eval.provenance import git_revision

PACKAGES = ("slm", "torch", "lightning", "hydra-core", "omegaconf", "tiktoken", "datasets", "transformers", "lm-eval")


def environment(device: torch.device | None = None) -> dict:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    device = device or torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return {
        "python": platform.python_version(),
        "packages": versions,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu ({torch.get_num_threads()} thread{'' if torch.get_num_threads() == 1 else 's'})",
        "cuda": torch.version.cuda,
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "git_revision": git_revision(),
    }
