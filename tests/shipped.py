"""What the project ships, as opposed to what a user has added to the checkout (the README sends a user's own sweeps
to sweeps/): tests that check every shipped file must not fail because a user put a file beside them."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def shipped_sweeps(root: Path = ROOT) -> list[Path]:
    """The sweep files of `root`/sweeps that git tracks; every one where `root` is not a git checkout."""
    every = sorted((root / "sweeps").glob("*.yaml"))
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--", "sweeps"], cwd=root, capture_output=True, text=True,
                             timeout=60)
    except (OSError, subprocess.SubprocessError):
        return every
    if out.returncode != 0:
        return every
    tracked = {(root / name).resolve() for name in out.stdout.split("\0") if name}
    return [p for p in every if p.resolve() in tracked]
