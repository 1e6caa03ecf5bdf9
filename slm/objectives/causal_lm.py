"""Next-token prediction: predict tokens[:, 1:] from tokens[:, :-1]."""

from __future__ import annotations

import torch
from torch import nn

from slm.model.networks import NETWORKS
from slm.objectives.base import OBJECTIVES, Objective, ObjectiveError, with_aux
from slm.objectives.linear_ce import LossPath


@OBJECTIVES.register("causal_lm")
class CausalLM(Objective):
    def check(self, model_cfg) -> None:
        if not NETWORKS.get(model_cfg.kind).every_position:
            raise ObjectiveError(f"train.objective=causal_lm scores every position, but model.kind="
                                 f"{model_cfg.kind!r} predicts only the token after its window: use "
                                 "train.objective=last_token")
        if not model_cfg.attention.causal:
            raise ObjectiveError("train.objective=causal_lm needs a causal model, but model.attention.causal=false: a "
                                 "bidirectional model sees the tokens it is asked to predict (masked diffusion: "
                                 "train.objective=mdlm)")

    def terms(self, model: nn.Module, tokens: torch.Tensor, seed: int | None = None) -> dict[str, torch.Tensor]:
        inputs, targets = tokens[:, :-1], tokens[:, 1:]  # (B, T) each
        return with_aux(*self._score(model, inputs, targets, self.loss_path(model, tokens.device), True))

    def nll(self, model: nn.Module, tokens: torch.Tensor, seed: int | None = None) -> tuple[torch.Tensor, int]:
        inputs, targets = tokens[:, :-1], tokens[:, 1:]
        total, _ = self._score(model, inputs, targets, self.loss_path(model, tokens.device), False)
        return total, targets.numel()

    def _score(self, model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor, path: LossPath,
               train: bool) -> tuple[torch.Tensor, dict]:
        """(the mean cross-entropy and the model's aux terms when training; the summed one and {} for validation),
        by the objective's loss path (slm.objectives.linear_ce)."""
        out, aux = path.forward(model, inputs, aux=train)
        return path(model, out, targets, reduction="mean" if train else "sum"), aux
