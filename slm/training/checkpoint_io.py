"""AtomicCheckpointIO: Lightning's checkpoint IO saving through slm.training.checkpoints (atomic, fsynced, the
previous checkpoint kept as previous.ckpt)."""

from __future__ import annotations

from typing import Any

from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

from slm.atomic import remove_stale  # noqa: F401 - the trainer clears the temporary files of killed saves
from slm.training.checkpoints import atomic_torch_save


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's torch checkpoint IO with atomic, fsynced writes (see the module docstring)."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        if storage_options is not None:
            raise TypeError("AtomicCheckpointIO.save_checkpoint takes no storage_options")
        atomic_torch_save(checkpoint, path)
