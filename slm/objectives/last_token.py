"""Predict only the token after each window (arXiv 2512.20877's protocol): a batch (B, T + 1) is B windows
of T tokens and their next tokens; the loss is the cross-entropy of the last position's logits. Works for
every network kind: a transformer's output is read at its last position (on the plain path its logits; on the
chunked or liger path its hidden states, the head applied to that position only), a window model (linear, mlp)
gives that position only.
"""

from __future__ import annotations

import torch
from torch import nn

from slm.objectives.base import OBJECTIVES, Objective, ObjectiveError, with_aux
from slm.objectives.linear_ce import LossPath


@OBJECTIVES.register("last_token")
class LastToken(Objective):
    def check(self, model_cfg) -> None:
        if not model_cfg.attention.causal:
            raise ObjectiveError("train.objective=last_token needs a causal model, but model.attention.causal=false: "
                                 "the window's last position would see nothing it is not allowed to, but the rest "
                                 "of a bidirectional model is trained for masked diffusion (train.objective=mdlm)")

    def scored_rows(self, batch: int, context: int) -> int:
        return batch

    def terms(self, model: nn.Module, tokens: torch.Tensor, seed: int | None = None) -> dict[str, torch.Tensor]:
        return with_aux(*self._score(model, tokens, self.loss_path(model, tokens.device), True))

    def nll(self, model: nn.Module, tokens: torch.Tensor, seed: int | None = None) -> tuple[torch.Tensor, int]:
        total, _ = self._score(model, tokens, self.loss_path(model, tokens.device), False)
        return total, tokens.shape[0]

    def _score(self, model: nn.Module, tokens: torch.Tensor, path: LossPath, train: bool) -> tuple[torch.Tensor, dict]:
        """(mean cross-entropy of the last position and the model's aux terms when training; the summed one and {}
        for validation), by the objective's loss path: the model's output read at the last position of each window
        (B, T) and scored against the token after it."""
        out, aux = path.forward(model, tokens[:, :-1], aux=train)  # windows (B, T)
        return path(model, out[:, -1], tokens[:, -1], reduction="mean" if train else "sum"), aux
