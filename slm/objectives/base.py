"""The objective interface and its registry."""

from __future__ import annotations

import torch
from torch import nn

from slm.components.registry import Registry

OBJECTIVES: Registry[type["Objective"]] = Registry("objective")


class Objective:
    """Turns a batch of token windows (B, T + 1) into a training loss and validation NLL sums."""

    def terms(self, model: nn.Module, tokens: torch.Tensor) -> dict[str, torch.Tensor]:
        """The training loss of the batch, "loss" (a scalar with grad), and what it is made of, detached, for
        the logs: "lm_loss" and the model's auxiliary terms (e.g. a mixture of experts' balancing loss, which
        "loss" includes with its weight, and its per-expert load)."""
        raise NotImplementedError

    def loss(self, model: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
        """Mean training loss over the batch (a scalar with grad)."""
        return self.terms(model, tokens)["loss"]

    def nll(self, model: nn.Module, tokens: torch.Tensor) -> tuple[torch.Tensor, int]:
        """(summed negative log-likelihood in nats, number of predicted tokens) for validation."""
        raise NotImplementedError


def with_aux(lm_loss: torch.Tensor, aux: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """terms() from a language-modelling loss and the model's auxiliary terms: those named "loss/<name>"
    are added to the loss (logged as <name>_loss), the rest are metrics."""
    extra = [value for name, value in aux.items() if name.startswith("loss/")]
    terms = {"loss": lm_loss + sum(extra) if extra else lm_loss, "lm_loss": lm_loss.detach()}
    for name, value in aux.items():
        key = name.removeprefix("loss/") + "_loss" if name.startswith("loss/") else name
        terms[key] = value.detach()
    return terms
