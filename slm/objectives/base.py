"""The objective interface and its registry."""

from __future__ import annotations

import torch
from torch import nn

from slm.components.registry import Registry

OBJECTIVES: Registry[type["Objective"]] = Registry("objective")


class Objective:
    """Turns a batch of token windows (B, T + 1) into a training loss and validation NLL sums."""

    def loss(self, model: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
        """Mean training loss over the batch (a scalar with grad)."""
        raise NotImplementedError

    def nll(self, model: nn.Module, tokens: torch.Tensor) -> tuple[torch.Tensor, int]:
        """(summed negative log-likelihood in nats, number of predicted tokens) for validation."""
        raise NotImplementedError
