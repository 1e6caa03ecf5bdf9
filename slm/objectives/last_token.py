"""Predict only the token after each window (arXiv 2512.20877's protocol): a batch (B, T + 1) is B windows
of T tokens and their next tokens; the loss is the cross-entropy of the last position's logits. Works for
every network kind: a transformer's logits are read at its last position, a window model (linear, mlp)
gives that position only.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from slm.objectives.base import OBJECTIVES, Objective, ObjectiveError, with_aux


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
        logits, target, aux = self._last(model, tokens, True)
        return with_aux(F.cross_entropy(logits, target), aux)

    def nll(self, model: nn.Module, tokens: torch.Tensor, seed: int | None = None) -> tuple[torch.Tensor, int]:
        logits, target, _ = self._last(model, tokens, False)
        return F.cross_entropy(logits, target, reduction="sum"), target.numel()
