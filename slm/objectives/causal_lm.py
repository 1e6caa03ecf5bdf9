"""Next-token prediction: predict tokens[:, 1:] from tokens[:, :-1]."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from slm.objectives.base import OBJECTIVES, Objective


@OBJECTIVES.register("causal_lm")
class CausalLM(Objective):
    def _logits(self, model: nn.Module, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        inputs, targets = tokens[:, :-1], tokens[:, 1:]  # (B, T) each
        return model(inputs).float(), targets  # logits (B, T, V) in float32 for a stable softmax

    def loss(self, model: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
        logits, targets = self._logits(model, tokens)
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())

    def nll(self, model: nn.Module, tokens: torch.Tensor) -> tuple[torch.Tensor, int]:
        logits, targets = self._logits(model, tokens)
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="sum"), targets.numel()
