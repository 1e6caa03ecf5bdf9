"""What the run ran on: versions, device, host and the git revision of the slm source."""

from __future__ import annotations

import platform
import socket
import subprocess
from importlib import metadata
from pathlib import Path

import torch

PACKAGES = ("slm", "torch", "lightning", "hydra-core", "omegaconf", "tiktoken", "datasets", "transformers", "lm-eval")


def git_revision() -> str | None:
    """HEAD of the repository holding the slm package (with -dirty if it has local changes), or None."""
    src = Path(__file__).resolve().parents[2]
    try:
        rev = subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        if rev.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", str(src), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return rev.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


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
