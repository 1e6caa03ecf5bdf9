"""Predict only the token after each window (arXiv 2512.20877's protocol): a batch (B, T + 1) is B windows
of T tokens and their next tokens; the loss is the cross-entropy of the last position's logits. Works for
every network kind: a transformer's logits are read at its last position (with train.loss other than plain its
head is applied to that position only), a window model (linear, mlp) gives that position only.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from slm.objectives.base import OBJECTIVES, Objective, ObjectiveError, with_aux
from slm.objectives.linear_ce import head_loss


@OBJECTIVES.register("last_token")
class LastToken(Objective):
    def check(self, model_cfg) -> None:
        if not model_cfg.causal:
            raise ObjectiveError("train.objective=last_token needs a causal model, but model.causal=false: the "
                                 "window's last position would see nothing it is not allowed to, but the rest "
                                 "of a bidirectional model is trained for masked diffusion (train.objective=mdlm)")

    @staticmethod
    def _last(model: nn.Module, tokens: torch.Tensor, aux: bool):
        out = model(tokens[:, :-1], return_aux=aux)  # windows (B, T)
        logits, extra = out if aux else (out, {})
        return logits[:, -1].float(), tokens[:, -1], extra  # (B, V), (B,)

    def terms(self, model: nn.Module, tokens: torch.Tensor, seed: int | None = None) -> dict[str, torch.Tensor]:
        return with_aux(*self._score(model, tokens, self._impl(model, tokens.device), self._chunk(), True))

    def nll(self, model: nn.Module, tokens: torch.Tensor, seed: int | None = None) -> tuple[torch.Tensor, int]:
        total, _ = self._score(model, tokens, self._impl(model, tokens.device), self._chunk(), False)
        return total, tokens.shape[0]

    def _score(self, model: nn.Module, tokens: torch.Tensor, impl: str, chunk: int,
               train: bool) -> tuple[torch.Tensor, dict]:
        """(mean cross-entropy of the last position and the model's aux terms when training; the summed one and {}
        for validation). plain: the whole logits, read at the last position; else the head at that position only."""
        reduction = "mean" if train else "sum"
        if impl == "plain":
            logits, target, aux = self._last(model, tokens, train)
            return F.cross_entropy(logits, target, reduction=reduction), aux
        out = model(tokens[:, :-1], return_aux=train, head=False)
        h, aux = out if train else (out, {})
        return head_loss(model, h[:, -1], tokens[:, -1], impl, chunk, reduction=reduction), aux
