"""`RoutingLoad`: a mixture of experts' routing load, logged while it trains and kept for the run record."""

from __future__ import annotations

import lightning as L
import torch

CHECKPOINT_KEY = "slm_routing_load"
"""The checkpoint's entry: (the sum of the window's per-step loads, or None; the window's micro-batches)."""


class RoutingLoad(L.Callback):
    """Reads the step's routing load, (layers, experts) shares of the routed pairs, from the training step's output
    (`moe_load`, which LanguageModelModule.training_step returns beside the loss for a model with moe layers;
    nothing happens for the others). On the steps whose metrics reach the loggers (the output's `logging_step`)
    it logs each expert's share averaged over the layers (moe/load_e<i>) and the largest share relative to
    uniform (train/moe_max_load, 1 = balanced). It keeps the sum over the current logging window (restarted at
    each step that is a multiple of `log_interval`), checkpointed as `slm_routing_load`, so that `summary()` (the
    record's training.moe_load) is the same after a resume. No value is read back from the device until
    `summary()`."""

    def __init__(self, log_interval: int):
        self.log_interval = log_interval
        self.load_sum: torch.Tensor | None = None
        self.steps = 0  # micro-batches in the window
        self._step = 0  # the optimizer step of the batch being trained
        self._window: int | None = None  # the step whose first micro-batch began the window (None: resumed)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._step = trainer.global_step  # the step training_step sees (on_train_batch_end comes after the update)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        load = outputs.get("moe_load") if isinstance(outputs, dict) else None
        if load is None:
            return
        if outputs.get("logging_step"):
            n_experts = load.shape[-1]
            pl_module.log_dict({f"moe/load_e{i}": share for i, share in enumerate(load.mean(dim=0))})
            pl_module.log("train/moe_max_load", load.max() * n_experts)
        starts = self._step % self.log_interval == 0 and self._step != self._window  # its first micro-batch only
        if starts or self.load_sum is None:
            self.load_sum, self.steps, self._window = torch.zeros_like(load), 0, self._step
        self.load_sum += load
        self.steps += 1

    def summary(self) -> dict | None:
        """Mean routing load of the last logging window, for the run record (None without moe layers):
        per_layer (layers x experts shares), max_load and min_load (largest and smallest share x experts:
        1 = balanced, 0 = an expert no token reaches), steps averaged."""
        if self.load_sum is None or not self.steps:
            return None
        load = self.load_sum / self.steps
        n_experts = load.shape[-1]
        return {"per_layer": [[round(v, 6) for v in row] for row in load.tolist()],
                "max_load": float(load.max()) * n_experts, "min_load": float(load.min()) * n_experts,
                "steps": self.steps}

    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict) -> None:
        checkpoint[CHECKPOINT_KEY] = (self.load_sum, self.steps)

    def on_load_checkpoint(self, trainer, pl_module, checkpoint: dict) -> None:
        self.load_sum, self.steps = checkpoint.get(CHECKPOINT_KEY, (None, 0))
