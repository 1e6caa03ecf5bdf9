"""AtomicCheckpointIO: Lightning's checkpoint IO saving through slm.training.checkpoints (atomic, fsynced, the
previous checkpoint kept as previous.ckpt)."""

from __future__ import annotations

from typing import Any

from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

from slm.atomic import remove_stale  # noqa: F401 - the trainer clears the temporary files of killed saves
from slm.training.checkpoints import atomic_torch_save


NOT_WRITTEN = "slm_not_written"
"""A checkpoint dict holding this key (its value says why: "diverged") is not written: the previous good copy stays
(LanguageModelModule.on_save_checkpoint sets it for a diverged run or non-finite parameters)."""


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's torch checkpoint IO with atomic, fsynced writes (see the module docstring); a checkpoint marked
    NOT_WRITTEN is skipped."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        if storage_options is not None:
            raise TypeError("AtomicCheckpointIO.save_checkpoint takes no storage_options")
        if checkpoint.get(NOT_WRITTEN):
            return
        atomic_torch_save(checkpoint, path)
